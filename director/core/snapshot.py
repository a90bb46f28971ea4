"""The observed cluster: Services, EndpointSlices by Service, Nodes. Pure bookkeeping.

Each change reports which Services it touches, so the controller recomputes those and only
those (a Node change touches every Service that balances over nodes). Objects arrive
already parsed into the small values of ``director.core.cluster``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from director.core.cluster import NodeInfo, ServiceInfo, SliceInfo, resource_name, split_resource

ALL = "*"  # "every Service" in a dirty set
RELIST_STEP = 1000  # objects of one list taken in per step (each cluster's, in turn)

Info = ServiceInfo | SliceInfo | NodeInfo


@dataclass(slots=True)
class _Relist:
    """A list being taken in: what it still holds, which of its objects it met, and which
    a watch event changed meanwhile (newer than the list's copy)."""

    resource: str
    items: Iterator[Info]
    seen: set[str] = field(default_factory=set)
    newer: set[str] = field(default_factory=set)
    changed: bool = False  # (Nodes) one differed from what the snapshot held

    @property
    def cluster(self) -> str:
        return split_resource(self.resource)[0]

    @property
    def kind(self) -> str:
        return split_resource(self.resource)[1]


def _key(info: Info) -> str:
    return info.name if isinstance(info, NodeInfo) else info.ref


def _resource_of(info: Info) -> str:
    kind = (
        "services"
        if isinstance(info, ServiceInfo)
        else "endpointslices"
        if isinstance(info, SliceInfo)
        else "nodes"
    )
    return resource_name(info.cluster, kind)


@dataclass
class Snapshot:
    """The cluster as the director last saw it: Services, EndpointSlices and Nodes."""

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
    relists: dict[str, _Relist] = field(default_factory=dict)  # lists being taken in

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
        """One watch event; the Services it touches. During a relist of its resource, the
        event is newer than the list: the list's copy of the object is passed over."""
        deleted = kind == "DELETED"
        relist = self.relists.get(_resource_of(info)) if self.relists else None
        if relist is not None:
            relist.newer.add(_key(info))
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
        """A fresh list, all at once: the Services whose inputs changed."""
        self.begin(resource, items)
        dirty: set[str] = set()
        while resource in self.relists:
            dirty |= self.advance(RELIST_STEP)
        return dirty

    def begin(self, resource: str, items: Iterable[Info]) -> None:
        """A fresh list (start, or after 410 Gone) of one resource of one cluster
        (``prod/services``; ``services`` for the one cluster), taken in by :meth:`advance`
        a part at a time: one cluster's 10,000 Services never hold the others' events back
        for a whole pass. Other clusters' objects are not touched; a list of the same
        resource still being taken in is given up for this newer one."""
        self.relists[resource] = _Relist(resource, iter(items))

    @property
    def relisting(self) -> bool:
        return bool(self.relists)

    def advance(self, budget: int) -> set[str]:
        """Take in up to ``budget`` objects of each list under way (each cluster's turn in
        every step); a list taken in whole replaces what its cluster held of the resource,
        and its resource counts as listed. The Services whose inputs changed."""
        dirty: set[str] = set()
        for resource, relist in list(self.relists.items()):
            cluster, kind = relist.cluster, relist.kind
            taken = 0
            for info in itertools.islice(relist.items, budget):
                taken += 1
                key = _key(info)
                if key in relist.newer:
                    continue  # a watch event changed it since the list was made
                relist.seen.add(key)
                if kind == "services" and isinstance(info, ServiceInfo):
                    if self.services.get(key) != info:
                        self.services[key] = info
                        self.services_version += 1
                        dirty.add(key)
                elif kind == "endpointslices" and isinstance(info, SliceInfo):
                    if self.slices.get(key) != info:
                        dirty |= self._slice(key, info)
                elif kind == "nodes" and isinstance(info, NodeInfo):
                    nodes = self.cluster_nodes.setdefault(cluster, {})
                    if nodes.get(key) != info:
                        nodes[key] = info
                        relist.changed = True
            if taken < budget:  # the whole list is in
                dirty |= self._finish(relist)
                del self.relists[resource]
        return dirty

    def _finish(self, relist: _Relist) -> set[str]:
        """What the list no longer holds (nor a watch event brought meanwhile) is gone."""
        cluster, kind, kept = relist.cluster, relist.kind, relist.seen | relist.newer
        dirty: set[str] = set()
        self.listed.add(relist.resource)
        if kind == "services":
            gone = [r for r, s in self.services.items() if s.cluster == cluster and r not in kept]
            for ref in gone:
                del self.services[ref]
            self.services_version += 1
            dirty.update(gone)
        elif kind == "endpointslices":
            gone = [r for r, s in self.slices.items() if s.cluster == cluster and r not in kept]
            for ref in gone:
                dirty |= self._slice(ref, None)
        elif kind == "nodes":
            nodes = self.cluster_nodes.setdefault(cluster, {})
            for name in [n for n in nodes if n not in kept]:
                del nodes[name]
                relist.changed = True
            if relist.changed:
                dirty |= self.every(cluster)
        return dirty

    def drop(self, cluster: str) -> set[str]:
        """Forget everything of ``cluster`` (no longer served): the Services it had."""
        gone = self.every(cluster) - {ALL}
        for ref in gone:
            del self.services[ref]
        self.services_version += 1
        for ref in [r for r, s in self.slices.items() if s.cluster == cluster]:
            self._slice(ref, None)
        self.cluster_nodes.pop(cluster, None)
        self.listed = {r for r in self.listed if split_resource(r)[0] != cluster}
        for resource in [r for r in self.relists if split_resource(r)[0] == cluster]:
            del self.relists[resource]
        return gone

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
