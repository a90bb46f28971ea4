"""The observed cluster: Services, EndpointSlices by Service, Nodes. Pure bookkeeping.

Each change reports which Services it touches, so the controller recomputes those and only
those (a Node change touches every Service that balances over nodes). Objects arrive
already parsed into the small values of ``director.core.cluster``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from director.core.cluster import NodeInfo, ServiceInfo, SliceInfo

ALL = "*"  # "every Service" in a dirty set

Info = ServiceInfo | SliceInfo | NodeInfo


@dataclass
class Snapshot:
    services: dict[str, ServiceInfo] = field(default_factory=dict)
    slices: dict[str, SliceInfo] = field(default_factory=dict)
    # service -> its slices' refs: a tuple while few (a set costs 216 bytes however few it
    # holds), a set beyond (a tenant's thousands of slices must not cost quadratic time)
    slices_of: dict[str, tuple[str, ...] | set[str]] = field(default_factory=dict)
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    listed: set[str] = field(default_factory=set)  # resources listed at least once
    services_version: int = 0  # bumped when ``services`` changes (readers copy it then)

    def slices_for(self, service: str) -> list[SliceInfo]:
        return [self.slices[ref] for ref in self.slices_of.get(service, ())]

    # -- changes ---------------------------------------------------------------------
    def apply(self, kind: str, info: Info) -> set[str]:
        """One watch event; the Services it touches."""
        deleted = kind == "DELETED"
        if isinstance(info, ServiceInfo):
            self.services_version += 1
            if deleted:
                self.services.pop(info.ref, None)
            else:
                self.services[info.ref] = info
            return {info.ref}
        if isinstance(info, SliceInfo):
            return self._slice(info.ref, None if deleted else info)
        before = self.nodes.get(info.name)
        if deleted:
            self.nodes.pop(info.name, None)
        else:
            self.nodes[info.name] = info
        return set() if before == self.nodes.get(info.name) else {ALL}

    def replace(self, resource: str, items: Iterable[Info]) -> set[str]:
        """A fresh list (start, or after 410 Gone): the Services whose inputs changed."""
        self.listed.add(resource)
        dirty: set[str] = set()
        if resource == "services":
            fresh = {i.ref: i for i in items if isinstance(i, ServiceInfo)}
            for ref in self.services.keys() | fresh.keys():
                if self.services.get(ref) != fresh.get(ref):
                    dirty.add(ref)
            self.services = fresh
            self.services_version += 1
        elif resource == "endpointslices":
            fresh_slices = {i.ref: i for i in items if isinstance(i, SliceInfo)}
            for ref in self.slices.keys() - fresh_slices.keys():
                dirty |= self._slice(ref, None)
            for ref, info in fresh_slices.items():
                if self.slices.get(ref) != info:
                    dirty |= self._slice(ref, info)
        elif resource == "nodes":
            fresh_nodes = {i.name: i for i in items if isinstance(i, NodeInfo)}
            if fresh_nodes != self.nodes:
                dirty.add(ALL)
            self.nodes = fresh_nodes
        return dirty

    def _slice(self, ref: str, info: SliceInfo | None) -> set[str]:
        dirty: set[str] = set()
        before = self.slices.pop(ref, None)
        if before is not None and before.service:
            dirty.add(before.service)
            owners = _without(self.slices_of.get(before.service, ()), ref)
            if owners:
                self.slices_of[before.service] = owners
            else:
                self.slices_of.pop(before.service, None)
        if info is not None:
            self.slices[ref] = info
            if info.service:
                dirty.add(info.service)
                self.slices_of[info.service] = _with(self.slices_of.get(info.service, ()), ref)
        return dirty


FEW = 8  # slices of a Service kept in a tuple; beyond, in a set


def _with(refs: tuple[str, ...] | set[str], ref: str) -> tuple[str, ...] | set[str]:
    if isinstance(refs, set):
        refs.add(ref)
        return refs
    if ref in refs:
        return refs
    return (*refs, ref) if len(refs) < FEW else {*refs, ref}


def _without(refs: tuple[str, ...] | set[str], ref: str) -> tuple[str, ...] | set[str]:
    if isinstance(refs, set):
        refs.discard(ref)
        return refs
    return tuple(r for r in refs if r != ref)
