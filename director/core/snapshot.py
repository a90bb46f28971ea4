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
    # cluster -> its Nodes by name ("": the one cluster of kubernetes:)
    cluster_nodes: dict[str, dict[str, NodeInfo]] = field(default_factory=dict)
    # resources listed at least once ("services", or "prod/services" for a named cluster)
    listed: set[str] = field(default_factory=set)
    services_version: int = 0  # bumped when ``services`` changes (readers copy it then)

    @property
    def nodes(self) -> dict[str, NodeInfo]:
        """The one cluster's Nodes (``kubernetes:``)."""
        return self.nodes_of("")

    def nodes_of(self, cluster: str) -> dict[str, NodeInfo]:
        return self.cluster_nodes.get(cluster) or {}

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
        nodes = self.cluster_nodes.setdefault(info.cluster, {})
        before = nodes.get(info.name)
        if deleted:
            nodes.pop(info.name, None)
        else:
            nodes[info.name] = info
        return set() if before == nodes.get(info.name) else self.every(info.cluster)

    def replace(self, resource: str, items: Iterable[Info]) -> set[str]:
        """A fresh list (start, or after 410 Gone) of one resource of one cluster
        (``prod/services``; ``services`` for the one cluster): the Services whose inputs
        changed. Other clusters' objects are not touched."""
        self.listed.add(resource)
        cluster, _, kind = resource.rpartition("/")
        dirty: set[str] = set()
        if kind == "services":
            fresh = {i.ref: i for i in items if isinstance(i, ServiceInfo)}
            mine = [ref for ref, svc in self.services.items() if svc.cluster == cluster]
            for ref in mine:
                if fresh.get(ref) != self.services[ref]:
                    dirty.add(ref)
                    del self.services[ref]
            for ref, svc in fresh.items():
                if self.services.get(ref) != svc:
                    dirty.add(ref)
                    self.services[ref] = svc
            self.services_version += 1
        elif kind == "endpointslices":
            fresh_slices = {i.ref: i for i in items if isinstance(i, SliceInfo)}
            gone = [
                r for r, s in self.slices.items() if s.cluster == cluster and r not in fresh_slices
            ]
            for ref in gone:
                dirty |= self._slice(ref, None)
            for ref, one in fresh_slices.items():
                if self.slices.get(ref) != one:
                    dirty |= self._slice(ref, one)
        elif kind == "nodes":
            fresh_nodes = {i.name: i for i in items if isinstance(i, NodeInfo)}
            if fresh_nodes != self.nodes_of(cluster):
                dirty |= self.every(cluster)
            self.cluster_nodes[cluster] = fresh_nodes
        return dirty

    def every(self, cluster: str) -> set[str]:
        """Every Service of ``cluster`` (ALL for the one cluster: it has them all)."""
        if not cluster:
            return {ALL}
        return {ref for ref, svc in self.services.items() if svc.cluster == cluster}

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
