"""From what the loop knows to what it programs: one Service (or the configuration's own
services) translated, each virtual service then shaped by the API's intents, the health
gate and the drains, in that order. Refusals and conflicts are reported on the Service."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from director.core.checks import Target
from director.core.cluster import ServiceInfo
from director.core.model import Family, ServiceKey, canonical_address, format_endpoint
from director.core.policy import Policy, Reserved, relevant
from director.core.services import Table, VirtualService
from director.core.translate import translate
from director.engine.draining import Terminating
from director.engine.parts import Parts
from director.engine.view import STATIC
from director.logs import event
from director.schema.config import KubeSettings, Settings

log = logging.getLogger("director.controller")


def build_policy(
    settings: Settings,
    schedulers: frozenset[str],
    kube: KubeSettings | None = None,
    box: Mapping[str, str] | None = None,
) -> Policy:
    """What the settings say about Services in general (``kube``: of that cluster; by
    default the one of ``kubernetes:``; ``box``: this box's own addresses, to interface)."""
    kube = kube or settings.kubernetes or KubeSettings()
    health = settings.health
    syn_guard, syn_guard_off = settings.syn_guard
    return Policy(
        load_balancer_class=kube.load_balancer_class,
        default_class=kube.default_class,
        nodeport_vips=kube.nodeport_vips,
        backends=kube.backends,
        scheduler=settings.defaults.scheduler,
        forwarding=settings.defaults.forwarding,
        weight=settings.defaults.weight or 1,
        schedulers=schedulers,
        check=health.spec if health is not None and health.enabled else None,
        checking=health is not None,
        metallb=kube.metallb_annotations,
        snat=frozenset(Family.of(a) for a in (settings.snat.addresses if settings.snat else ())),
        cluster=kube.cluster,
        pools=given_pools(settings, kube),
        reserved=reserved(settings, box),
        syn_guard=syn_guard,
        syn_guard_off=syn_guard_off,
    )


def reserved(settings: Settings, box: Mapping[str, str] | None = None) -> Reserved:
    """What no endpoint may be (``Reserved``): the box's own addresses (those the file
    names, and ``box``: those its interfaces hold), the static VIPs, the NodePort VIPs and
    every pool's addresses."""
    named: dict[str, str] = {a: f"this box's own address (on {i})" for a, i in (box or {}).items()}
    for address in settings.snat.addresses if settings.snat else ():
        named[address] = "the box's SNAT address"
    ha = settings.ha
    if ha is not None:
        named[ha.unicast_source] = "the box's VRRP source"
        named.update({gw[0]: "a floating gateway of the pair" for gw in ha.gateways})
    if settings.bgp is not None:
        named[settings.bgp.router_id] = "the box's BGP router id"
        named.update({p.source: "the box's BGP source" for p in settings.bgp.peers if p.source})
    if settings.api is not None:
        named[settings.api.host] = "the admin API's address"
    for kube in settings.served:
        named.update({vip: "a NodePort VIP" for vip in kube.nodeport_vips})
    for key, vs in settings.services.items():
        if not key.fwmark:
            named[key.address] = f"the VIP of {vs.origin or key}"
    return Reserved({_canonical(a): why for a, why in named.items()}, tuple(settings.pools))


def _canonical(text: str) -> str:
    try:
        return canonical_address(text)
    except ValueError:  # a host name (api.listen): no endpoint's address is ever one
        return text


def build_policies(
    settings: Settings, schedulers: frozenset[str], box: Mapping[str, str] | None = None
) -> dict[str, Policy]:
    """Each cluster's policy, by name ("": the one cluster of ``kubernetes:``)."""
    return {kube.cluster: build_policy(settings, schedulers, kube, box) for kube in settings.served}


def given_pools(settings: Settings, kube: KubeSettings) -> frozenset[str] | None:
    """The pools a cluster's Services may draw from: those it lists; if it lists none, those
    no cluster lists (None: every pool, for the one cluster of ``kubernetes:``)."""
    if not settings.clusters:
        return None
    listed = getattr(kube, "pools", ())
    if listed:
        return frozenset(listed)
    taken = {name for cluster in settings.clusters for name in cluster.pools}
    return frozenset(pool.name for pool in settings.pools if pool.name not in taken)


class Translator:
    def __init__(self, settings: Settings, policy: Policy, parts: Parts) -> None:
        self.settings, self.policy, self.parts = settings, policy, parts
        # each cluster's (the one cluster's is ``policy``)
        self.policies = {**build_policies(settings, policy.schedulers), policy.cluster: policy}
        self.box: dict[str, str] = {}  # this box's own addresses (to interface), as last read

    def box_changed(self, box: Mapping[str, str]) -> bool:
        """This box's own addresses read anew: the policies follow (no endpoint may be one);
        whether they changed."""
        if dict(box) == self.box:
            return False
        self.box = dict(box)
        schedulers = self.policy.schedulers
        self.policy = build_policy(self.settings, schedulers, box=self.box)
        self.policies = {
            **build_policies(self.settings, schedulers, self.box),
            self.policy.cluster: self.policy,
        }
        return True

    def order(self, refs: Iterable[str]) -> list[str]:
        """Services already holding an address first (restart safety), oldest first. Every
        address their statuses name is claimed first, before any of them is given a fresh
        one (``Allocator.claim``), as at a start."""
        services = self.parts.intake.snapshot.services
        refs = list(refs)
        for ref in refs:
            svc = services.get(ref)
            if svc is not None and svc.status_ips:
                self.parts.addresses.claim(ref, svc.status_ips)

        def rank(ref: str) -> tuple[int, str, str]:
            svc = services.get(ref)
            if svc is None:
                return (2, "", ref)
            return (0 if svc.status_ips else 1, svc.created, ref)

        return sorted(refs, key=rank)

    def service(self, ref: str) -> dict[ServiceKey, VirtualService]:
        """The virtual services Service ``ref`` asks for now (none: it is gone or not ours)."""
        snapshot = self.parts.intake.snapshot
        svc = snapshot.services.get(ref)
        policy = self.policy_of(svc)
        if svc is None or not relevant(svc, policy):
            self.parts.addresses.release(ref)
            self.parts.table.set_options(ref, None)
            self.parts.reporter.forget(ref)
            self.parts.filter.want(ref, {})
            return {}
        previous = self.parts.table.options.get(ref)
        addresses = self.parts.addresses.keep(svc, policy, previous)
        result = translate(
            svc,
            addresses,
            snapshot.slices_for(ref),
            snapshot.nodes_of(svc.cluster),
            policy,
            previous=previous,
            bgp=self.parts.addresses.announced_over_bgp(addresses),
            pool=self.parts.addresses.pool_of(addresses),
        )
        if result.options is not None:
            self.parts.table.set_options(ref, result.options)
        self.parts.reporter.report_problems(svc, result.problems)
        self.parts.filter.want(ref, result.restrictions, result.snat, result.guard, result.limits)
        out: dict[ServiceKey, VirtualService] = {}
        for key, vs in result.services.items():
            holder = self.parts.table.owner.get(key)
            if holder is not None and holder != ref:
                self.parts.reporter.report(
                    svc,
                    "Warning",
                    "VirtualServiceTaken",
                    f"{key} is already programmed for {holder}",
                    f"taken:{key}",
                )
                continue
            self.parts.gate.set_checks(key, result.checks.get(key, {}))
            self.parts.gate.set_sorry(key, result.sorry.get(key))
            out[key] = self.finish(key, vs, ref, result.draining)
        return out

    def policy_of(self, svc: ServiceInfo | None) -> Policy:
        """The policy of the Service's cluster."""
        if svc is None:
            return self.policy
        return self.policies.get(svc.cluster, self.policy)

    def static(self, keys: Iterable[ServiceKey] | None = None) -> Table:
        """The configuration's services (``keys``: these only), with the API's overrides,
        drains and health."""
        out: Table = {}
        settings = self.settings
        # the whole file's, always
        self.parts.filter.want(
            STATIC, {}, settings.static_snat, settings.static_guard, dict(settings.static_limits)
        )
        chosen = (
            settings.services.items()
            if keys is None
            else ((key, settings.services[key]) for key in keys if key in settings.services)
        )
        for key, vs in chosen:
            spec = settings.static_checks.get(key, self.policy.check)  # None: unchecked
            checked = spec is not None and settings.health is not None
            self.parts.gate.set_checks(
                key,
                {dest: (Target(rs.address, rs.port, spec),) for dest, rs in vs.real_servers.items()}
                if checked and spec is not None
                else {},
            )
            self.parts.gate.set_sorry(key, settings.static_sorry.get(key))
            out[key] = self.finish(key, vs, STATIC, frozenset())
        return out

    def finish(
        self, key: ServiceKey, vs: VirtualService, ref: str, terminating: Terminating
    ) -> VirtualService:
        """A virtual service as programmed: the API's intents, health, then drains."""
        gate = self.parts.gate
        checked, alarm = gate.apply(key, self.parts.store.current.apply(key, vs))
        if alarm:
            sorry = gate.sorry.get(key)
            said = (
                "kept"
                if sorry is None
                else f"served by its sorry server {format_endpoint(sorry.address, sorry.port)}"
            )
            done = f"{said}: serving something beats serving nothing" if sorry is None else said
            event(
                log,
                "health.all_down",
                level=logging.ERROR,
                service=key,
                origin=vs.origin,
                action=done,
            )
            svc = self.parts.intake.snapshot.services.get(ref)
            if svc is not None:
                self.parts.reporter.report(
                    svc,
                    "Warning",
                    "AllBackendsDown",
                    f"every real server of {key} fails its health check; {said}",
                    f"all-down:{key}",
                )
        return self.parts.drains.apply(
            key, checked, self.parts.syncer.reconciler.actual.get(key), terminating
        )
