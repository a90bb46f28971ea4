"""Clusters that come and go by reload (issue 37, item 5): a cluster added to ``clusters:``
is served from the reload on (its writer handed in, made before the loop took the file;
its watches started once the loop has it); a cluster removed is forgotten whole: its
Services leave the kernel as any deleted Service does, their addresses are released with
them, its queued writes are given up. The other clusters are not touched, but for the pools
they may draw from, which a cluster's arrival or departure can change."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from director.core.cluster import split_resource
from director.core.ipam import Allocator
from director.core.ownership import Ownership
from director.engine.events import Event
from director.engine.intake import Intake, required_resources, served_clusters
from director.engine.outbox import Outbox
from director.engine.ports import ClusterWriter
from director.engine.reporter import Reporter
from director.engine.translator import Translator, build_policies, given_pools
from director.logs import event
from director.schema.config import KubeSettings, Settings

log = logging.getLogger("director.controller")


def entries(settings: Settings) -> dict[str, KubeSettings]:
    return {kube.cluster: kube for kube in settings.clusters}


def reloadable(old: Settings, new: Settings) -> bool:
    """Only whole clusters come and go on a reload, and a cluster's pools change: a cluster
    in both files is otherwise unchanged (its kubeconfig, class, Lease and the rest are
    wired into parts made for it), and the one-cluster ``kubernetes:`` is not among them.
    A pool taken from a cluster whose Services hold addresses in it is refused by
    ``pools_kept``, with the pool's name."""
    if old.kubernetes is not None or new.kubernetes is not None:
        return False
    before, after = entries(old), entries(new)
    return all(
        _but_pools(before[name]) == _but_pools(after[name]) for name in before.keys() & after.keys()
    )


def _but_pools(kube: KubeSettings) -> object:
    return dataclasses.replace(cast(Any, kube), pools=())


def ownership_follows(old: Settings, new: Settings) -> bool:
    """The owned ranges differ by the NodePort VIPs of clusters only (a cluster that comes
    brings its VIP into them, one that goes takes it)."""
    vips = {
        ipaddress.ip_network(vip)
        for settings in (old, new)
        for kube in settings.clusters
        for vip in kube.nodeport_vips
    }

    def rest(owned: Ownership) -> tuple[object, ...]:
        return tuple(n for n in owned.networks if n not in vips), owned.fwmarks

    return rest(old.ownership) == rest(new.ownership)


def owned_through(old: Ownership, new: Ownership) -> Ownership:
    """What the director owns once a reload changed its clusters: both files' ranges until
    a restart, so that a removed cluster's NodePort services are still its own to delete."""
    return Ownership(tuple(dict.fromkeys((*old.networks, *new.networks))), new.fwmarks)


def changed(old: Settings, new: Settings) -> tuple[list[str], list[str]]:
    """The clusters ``new`` adds and those it removes, by name."""
    before, after = entries(old), entries(new)
    return sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())


def pools_kept(old: Settings, new: Settings, allocator: Allocator) -> str | None:
    """Why ``new`` cannot be taken on a reload (None: it can): a cluster still served would
    lose a pool its Services hold addresses in (a cluster that lists no pools draws from
    those no cluster lists, so another's listing one takes it away). Moving live addresses
    is a restart's to do, as taking one from a Service is."""
    before = {kube.cluster: given_pools(old, kube) for kube in old.clusters}
    for kube in new.clusters:
        was, now = before.get(kube.cluster), given_pools(new, kube)
        if was is None or now is None:
            continue
        for pool in (p for p in new.pools if p.name in was - now):
            held = [ref for ref in allocator.holders_in(pool) if ref.startswith(f"{kube.cluster}/")]
            if held:
                return (
                    f"cluster {kube.cluster!r} would lose pool {pool.name!r}, where its "
                    f"Services hold addresses ({', '.join(held[:3])}"
                    f"{', ...' if len(held) > 3 else ''}); restart to move them"
                )
    return None


def apply(
    old: Settings,
    new: Settings,
    writers: Mapping[str, ClusterWriter],
    *,
    intake: Intake,
    reporter: Reporter,
    translator: Translator,
    post: Callable[[Event], None],
    dry_run: bool,
) -> tuple[set[str], str]:
    """Take ``new``'s clusters (the loop's thread): the Services to program again (those of
    the clusters removed, and of any whose pools changed), and what was done, for the reply
    and the log (empty: no cluster came or went)."""
    added, removed = changed(old, new)
    snapshot = intake.snapshot
    dirty: set[str] = set()
    for name in removed:
        held = [svc for svc in snapshot.services.values() if svc.cluster == name]
        gone = snapshot.drop(name)
        dirty |= gone
        reporter.remove(name, held)
        connected = intake.status.connected
        for resource in [r for r in connected if split_resource(r)[0] == name]:
            del connected[resource]
        event(
            log,
            "cluster.removed",
            cluster=name,
            services=len(gone),
            effect="its Services leave the kernel as deleted Services do, their "
            "addresses are released with them and taken back from their status",
        )
    if added and not old.in_cluster:  # a box that served none: no unnamed cluster to lead
        reporter.remove("")
    for name in added:
        writer = writers.get(name)
        reporter.add(
            name, None if writer is None or dry_run else Outbox(writer, post, cluster=name)
        )
        event(log, "cluster.added", cluster=name)
    before, policy = translator.policies, translator.policy
    translator.policies = {
        **build_policies(new, policy.schedulers, translator.box),
        policy.cluster: policy,
    }
    for name, now in translator.policies.items():
        if name in before and name not in added and before[name] != now:
            dirty |= snapshot.every(name)  # its pools changed: its Services looked at again
    intake.required = required_resources(new)
    intake.clusters = served_clusters(new)
    parts = [f"clusters added: {', '.join(added)}"] if added else []
    parts += [f"clusters removed: {', '.join(removed)}"] if removed else []
    return dirty, "; ".join(parts)
