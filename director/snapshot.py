"""The observed cluster: Services, EndpointSlices by Service, Nodes. Pure bookkeeping.

Each change reports which Services it touches, so the controller recomputes those and only
those (a Node change touches every Service that balances over nodes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from director.cluster import (
    Json,
    NodeInfo,
    ServiceInfo,
    SliceInfo,
    node_from_json,
    service_from_json,
    slice_from_json,
)

ALL = "*"  # "every Service" in a dirty set


def _ref(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


@dataclass
class Snapshot:
    services: dict[str, ServiceInfo] = field(default_factory=dict)
    slices: dict[str, SliceInfo] = field(default_factory=dict)
    slices_of: dict[str, set[str]] = field(default_factory=dict)  # service -> slice refs
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    listed: set[str] = field(default_factory=set)  # resources listed at least once

    def slices_for(self, service: str) -> list[SliceInfo]:
        return [self.slices[ref] for ref in self.slices_of.get(service, ())]

    # -- changes ---------------------------------------------------------------------
    def apply(self, resource: str, kind: str, obj: Json) -> set[str]:
        """One watch event; the Services it touches."""
        deleted = kind == "DELETED"
        if resource == "services":
            ref = _ref(obj)
            if deleted:
                self.services.pop(ref, None)
            else:
                self.services[ref] = service_from_json(obj)
            return {ref}
        if resource == "endpointslices":
            return self._slice(_ref(obj), None if deleted else slice_from_json(obj))
        if resource == "nodes":
            name = _ref(obj)
            before = self.nodes.get(name)
            if deleted:
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = node_from_json(obj)
            return set() if before == self.nodes.get(name) else {ALL}
        return set()

    def replace(self, resource: str, items: Iterable[Json]) -> set[str]:
        """A fresh list (start, or after 410 Gone): the Services whose inputs changed."""
        self.listed.add(resource)
        dirty: set[str] = set()
        if resource == "services":
            fresh = {_ref(o): service_from_json(o) for o in items}
            for ref in self.services.keys() | fresh.keys():
                if self.services.get(ref) != fresh.get(ref):
                    dirty.add(ref)
            self.services = fresh
        elif resource == "endpointslices":
            fresh_slices = {_ref(o): slice_from_json(o) for o in items}
            for ref in self.slices.keys() - fresh_slices.keys():
                dirty |= self._slice(ref, None)
            for ref, info in fresh_slices.items():
                if self.slices.get(ref) != info:
                    dirty |= self._slice(ref, info)
        elif resource == "nodes":
            fresh_nodes = {_ref(o): node_from_json(o) for o in items}
            if fresh_nodes != self.nodes:
                dirty.add(ALL)
            self.nodes = fresh_nodes
        return dirty

    def _slice(self, ref: str, info: SliceInfo | None) -> set[str]:
        dirty: set[str] = set()
        before = self.slices.pop(ref, None)
        if before is not None and before.service:
            dirty.add(before.service)
            owners = self.slices_of.get(before.service)
            if owners is not None:
                owners.discard(ref)
                if not owners:
                    del self.slices_of[before.service]
        if info is not None:
            self.slices[ref] = info
            if info.service:
                dirty.add(info.service)
                self.slices_of.setdefault(info.service, set()).add(ref)
        return dirty
