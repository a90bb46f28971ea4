"""Reload (SIGHUP): the configuration's own services replaced in place, only the difference
programmed, nothing else touched.

A reload may change the ``services:`` section (and their checks); every other section is
wired into parts made at start (the API's socket, keepalived's file, the pools' allocator,
the cluster's watchers), so a change there is refused as a whole and named: the running
configuration is always one version of the file, never half of two. A new static service
whose address and port, or whose address, a Kubernetes Service already holds is refused
too: at start the file would win, but taking a live address from a Service on a reload
would cut its traffic without warning.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from director.core.model import ServiceKey
from director.engine import clusters
from director.engine.addresses import reserved_addresses
from director.engine.view import STATIC
from director.schema.config import Settings

if TYPE_CHECKING:
    from director.engine.events import Event
    from director.engine.parts import Parts
    from director.engine.ports import ClusterWriter
    from director.engine.programming import Programmer
    from director.engine.view import LoopStatus


class Reloadable(Protocol):
    """What a reload reads and changes of the loop (the Controller is one): the settings,
    and the parts that hold a service's state."""

    settings: Settings
    parts: Parts
    health: LoopStatus
    programmer: Programmer

    def loop_error(self, where: str, exc: BaseException) -> None: ...

    def post(self, ev: Event) -> None: ...


_NONE = object()  # no check line (None is "health_check: none")
RELOADABLE = frozenset(
    {
        "source",
        "services",
        "static_checks",
        "static_snat",
        "static_guard",
        "static_limits",
        "static_sorry",
    }
)
RESTART_ONLY = tuple(f.name for f in dataclasses.fields(Settings) if f.name not in RELOADABLE)


def restart_only(old: Settings, new: Settings) -> list[str]:
    """The sections that differ and take effect only at a restart (``clusters:`` is not one
    while whole clusters only come and go)."""
    return [
        name
        for name in RESTART_ONLY
        if getattr(old, name) != getattr(new, name)
        and not (name == "clusters" and clusters.reloadable(old, new))
        and not (
            name == "ownership"
            and clusters.reloadable(old, new)
            and clusters.ownership_follows(old, new)
        )
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class Difference:
    """The services a reload added, removed and changed."""

    added: frozenset[ServiceKey]
    removed: frozenset[ServiceKey]
    changed: frozenset[ServiceKey]

    def __str__(self) -> str:
        return f"added={len(self.added)} removed={len(self.removed)} changed={len(self.changed)}"


def difference(old: Settings, new: Settings) -> Difference:
    """What a reload changes in the services. A file read again by the Reparser keeps the
    objects of the services it did not change: those cost a pointer comparison each."""
    a, b = old.services, new.services
    changed = _check_changes(old, new)
    if len(a) == len(b):
        same_keys = True
        for (key_a, vs_a), (key_b, vs_b) in zip(a.items(), b.items(), strict=True):
            if key_a is not key_b and key_a != key_b:
                same_keys = False
                break
            if vs_a is not vs_b and vs_a != vs_b:
                changed.add(key_b)
        if same_keys:
            return Difference(frozenset(), frozenset(), frozenset(changed))
    both = a.keys() & b.keys()
    changed = {key for key in both if a[key] != b[key]} | (changed & both)
    return Difference(
        frozenset(b.keys() - a.keys()), frozenset(a.keys() - b.keys()), frozenset(changed)
    )


def _check_changes(old: Settings, new: Settings) -> set[ServiceKey]:
    """The services whose own health check line changed."""
    a, b = old.static_checks, new.static_checks
    if a is b or a == b:
        return set()
    return {key for key in a.keys() | b.keys() if a.get(key, _NONE) != b.get(key, _NONE)}


def conflict(loop: Reloadable, new: Settings, diff: Difference) -> str | None:
    """Why the new services cannot be taken now (None: they can)."""
    for key in sorted(diff.added, key=str):
        holder = loop.parts.table.owner.get(key)
        if holder is not None and holder != STATIC:
            return (
                f"{new.services[key].origin}: {key} is programmed for Service {holder}; "
                "remove it there first (a restart would take it from the Service)"
            )
    allocator = loop.parts.addresses.allocator
    for key in sorted(diff.added, key=str):
        if key.fwmark:
            continue
        address = ipaddress.ip_address(key.address)
        users = allocator.users(address) if address not in allocator.reserved else ()
        if users:
            return (
                f"static service {new.services[key].origin}: address {address} is "
                f"assigned to Service {', '.join(users)}; remove it there first"
            )
    return None


def apply(
    loop: Reloadable, new: Settings, writers: Mapping[str, ClusterWriter] | None = None
) -> tuple[int, str]:
    """Take ``new``'s services and clusters (the loop's thread, holding its lock): (200, what
    changed), (409, why nothing did), or (500, the fault, logged as a loop error). Once the
    first sync is done, the kernel has the change on return. ``writers``: those of the
    clusters ``new`` adds."""
    try:
        return _apply(loop, new, writers or {})
    except Exception as exc:
        loop.loop_error("reload", exc)
        return 500, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def _apply(
    loop: Reloadable, new: Settings, writers: Mapping[str, ClusterWriter]
) -> tuple[int, str]:
    old = loop.settings
    diff = difference(old, new)
    why = conflict(loop, new, diff) or clusters.pools_kept(old, new, loop.parts.addresses.allocator)
    if why is not None:
        return 409, why
    loop.settings = new
    loop.programmer.translator.settings = new
    dirty, came_and_went = clusters.apply(
        old,
        new,
        writers,
        intake=loop.parts.intake,
        reporter=loop.parts.reporter,
        translator=loop.programmer.translator,
        post=loop.post,
        dry_run=loop.parts.syncer.reconciler.dry_run,
    )
    if diff.added or diff.removed or came_and_went:
        loop.parts.addresses.allocator.reserved = reserved_addresses(
            new, loop.programmer.translator.box
        )
    if came_and_went:
        reconciler = loop.parts.syncer.reconciler
        reconciler.ownership = clusters.owned_through(reconciler.ownership, new.ownership)
    table = loop.parts.table
    for key in diff.removed:
        table.drop(key)
        loop.parts.gate.forget(key)
        loop.parts.drains.forget(key)
        if loop.health.first_sync_done:
            loop.parts.syncer.one(key, None, STATIC)
    for key in diff.added:
        table.owner[key] = STATIC
    table.stale |= {"keys", "services", "checks"}
    loop.parts.exports.due = loop.parts.exports.state_due = True
    # nat <-> fullnat, guarded <-> not, a rate or a sorry server changed
    rated = {
        key
        for before, after in (
            (old.static_limits, new.static_limits),
            (old.static_sorry, new.static_sorry),
        )
        for key in before.keys() | after.keys()
        if before.get(key) != after.get(key)
    }
    flipped = (
        (old.static_snat ^ new.static_snat) | (old.static_guard ^ new.static_guard) | rated
    ) & new.services.keys()
    if loop.health.first_sync_done and (diff.added or diff.removed or diff.changed or flipped):
        loop.parts.exports.vips.keys_changed()
        loop.parts.exports.vips.touched(diff.removed)
        loop.programmer.sync_static(diff.added | diff.changed | flipped)
    if dirty and loop.health.first_sync_done:
        loop.programmer.sync(dirty)
    return 200, f"{diff}; {came_and_went}" if came_and_went else str(diff)
