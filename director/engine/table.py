"""What is programmed, and for whom: the desired table (static services too), the virtual
services each Kubernetes Service produced, the owner of each virtual service, each
Service's translated options. It remembers what changed since the view was published, so
the view copies only that (an EndpointSlice change copies one virtual service, not a table)."""

from __future__ import annotations

from collections.abc import Iterable

from director.core.annotations import Options
from director.core.model import ServiceKey
from director.core.services import Table, VirtualService
from director.engine.view import STATIC


class Programmed:
    def __init__(self, static: Iterable[ServiceKey]) -> None:
        self.desired: Table = {}  # changed through put and drop only: they keep ``changed``
        # Desired keys put or dropped since the view, in the order they were first touched
        # (a dict, not a set: the view lists new keys in the table's order whatever the
        # hash seed; a set's order changed from one process to the next).
        self.changed: dict[ServiceKey, None] = {}
        # A tuple each: a frozenset costs 216 bytes however few keys it holds.
        self.produced: dict[str, tuple[ServiceKey, ...]] = {}
        self.owner: dict[ServiceKey, str] = {key: STATIC for key in static}
        self.options: dict[str, Options] = {}
        # What changed since the view was published besides the desired table.
        self.stale = {"keys", "options", "services", "checks"}

    def put(self, key: ServiceKey, vs: VirtualService, ref: str) -> None:
        self.desired[key] = vs
        if self.owner.get(key) != ref:  # a new owner (or one back after a hold): the view's
            self.owner[key] = ref
            self.stale.add("keys")
        self.changed[key] = None

    def drop(self, key: ServiceKey) -> None:
        self.desired.pop(key, None)
        if self.owner.pop(key, None) is not None:
            self.stale.add("keys")
        self.changed[key] = None

    def refs(self, keys: Iterable[ServiceKey]) -> set[str]:
        """The Services that own ``keys`` (static included)."""
        return {self.owner.get(key, "") for key in keys} - {""}

    def produce(self, ref: str, keys: Iterable[ServiceKey]) -> None:
        """``ref`` now produces ``keys`` (none: it is gone)."""
        ordered = tuple(sorted(set(keys)))
        if ordered != self.produced.get(ref, ()):
            self.stale.add("keys")
        if ordered:
            self.produced[ref] = ordered
        else:
            self.produced.pop(ref, None)

    def without(self, key: ServiceKey) -> None:
        """``key`` is held back: no Service produces it now."""
        self.drop(key)
        self.produced = {
            ref: tuple(k for k in keys if k != key) for ref, keys in self.produced.items()
        }
        self.stale.add("keys")

    def set_options(self, ref: str, options: Options | None) -> None:
        if options is None:
            if self.options.pop(ref, None) is not None:
                self.stale.add("options")
        elif self.options.get(ref) != options:
            self.options[ref] = options
            self.stale.add("options")
