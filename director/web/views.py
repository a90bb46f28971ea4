"""The JSON the admin API answers with, built from the loop's view and the kernel's table."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from director.core.cluster import split_ref
from director.core.firewall import counts
from director.core.intents import Drain
from director.core.model import Forwarding, IpProtocol, ServiceKey
from director.core.services import KernelTable, VirtualService, static_name
from director.engine.view import STATIC, LoopView
from director.schema import replies
from director.web.context import ApiContext


def origin(text: str) -> dict[str, str]:
    name = static_name(text)
    if name is not None:
        return {"kind": STATIC, "name": name}
    ref, _, port = text.partition(":")
    cluster, namespace, name = split_ref(ref)
    out = {"kind": "kubernetes", "namespace": namespace, "name": name, "port_name": port}
    if cluster:  # where the director serves several clusters
        out["cluster"] = cluster
    return out


def iso(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def services(ctx: ApiContext, keys: list[ServiceKey] | None = None) -> list[replies.VirtualService]:
    """Every virtual service (or those of ``keys``) as programmed, with its counters."""
    kernel = ctx.counters() if keys is None else ctx.read_some(keys)
    view = ctx.loop.view
    desired: Mapping[ServiceKey, VirtualService] = view.desired
    if keys is not None:
        desired = {k: desired[k] for k in keys if k in desired}
    drains = tuple(view.intents.drains.values())
    limited = _limited(ctx, view)
    return [
        service(
            key,
            desired[key],
            kernel,
            source=_scheduler_source(view, key, desired[key]),
            view=view,
            drains=drains,
            full_nat=_full_nat(ctx, view, key),
            syn_guard=_syn_guard(ctx, view, key),
            limits=limited.get(key),
        )
        for key in sorted(desired, key=str)
    ]


def _limited(ctx: ApiContext, view: LoopView) -> dict[ServiceKey, replies.Limits]:
    """The rate limits in force and what each dropped (nft's counters; none when nft cannot
    be read: the limits are still said)."""
    if not view.limits:
        return {}
    firewall = ctx.loop.firewall
    dropped = counts(firewall.limited) if firewall is not None else {}
    out: dict[ServiceKey, replies.Limits] = {}
    for key, limit in view.limits.items():
        client, service = dropped.get(key, (0, 0))
        out[key] = {
            "client_rate": limit.client,
            "service_rate": limit.service,
            "dropped_over_client_rate": client,
            "dropped_over_service_rate": service,
        }
    return out


def _full_nat(ctx: ApiContext, view: LoopView, key: ServiceKey) -> bool:
    """Whether ``key`` is full NAT (IPVS masquerades it, nftables SNATs it): the kernel
    reads its real servers back as nat."""
    ref = view.owner.get(key, "")
    if ref == STATIC:
        return key in ctx.loop.settings.static_snat
    opts = view.options.get(ref)
    return opts is not None and opts.forwarding is Forwarding.FULLNAT


def _syn_guard(ctx: ApiContext, view: LoopView, key: ServiceKey) -> bool:
    """Whether the box answers ``key``'s SYNs with cookies (guard.syn, and the Service's
    annotation or the static service's syn_guard)."""
    ref = view.owner.get(key, "")
    if ref == STATIC:
        return key in ctx.loop.settings.static_guard
    opts = view.options.get(ref)
    return opts is not None and opts.syn_guard and key.protocol is IpProtocol.TCP


def _scheduler_source(view: LoopView, key: ServiceKey, vs: VirtualService) -> str:
    ref = view.owner.get(key, "")
    if ref == STATIC:
        return "api" if vs.origin.partition("/")[2] in view.intents.schedulers else "config"
    opts = view.options.get(ref)
    return opts.scheduler_source if opts else "default"


def service(
    key: ServiceKey,
    vs: VirtualService,
    kernel: KernelTable,
    *,
    source: str,
    view: LoopView,
    drains: tuple[Drain, ...],
    full_nat: bool = False,
    syn_guard: bool = False,
    limits: replies.Limits | None = None,
) -> replies.VirtualService:
    draining = view.draining.get(key, frozenset())
    unhealthy = view.unhealthy.get(key, frozenset())
    dests: list[replies.RealServer] = []
    for dkey, rs in vs.real_servers.items():
        state = kernel.dest_state.get((key, dkey))
        admin = any(d.matches(key, rs) for d in drains)
        dest: replies.RealServer = {
            "address": rs.address,
            "port": rs.port,
            "weight": rs.weight,
            "forwarding": "fullnat" if full_nat else rs.forwarding.label,
            "state": "sorry"
            if view.sorry.get(key) == dkey
            else "unhealthy"
            if dkey in unhealthy
            else ("draining" if (dkey in draining or admin) else "active"),
            "active_connections": state.active_connections if state else 0,
            "inactive_connections": state.inactive_connections if state else 0,
            "counters": replies.counters(state.stats if state else None),
        }
        if rs.upper_threshold:
            dest["max_connections"] = rs.upper_threshold
        dests.append(dest)
    programmed = kernel.services.get(key)
    out: replies.VirtualService = {
        "service": str(key),
        "family": key.family.label,
        "protocol": key.protocol.label if key.protocol else None,
        "address": key.address or None,
        "port": key.port or None,
        "fwmark": key.fwmark or None,
        "origin": origin(vs.origin),
        "scheduler": vs.config.scheduler,
        "scheduler_source": source,
        "flags": sorted(vs.config.flags),
        "persistence": vs.config.persistence,
        "programmed": programmed is not None and programmed == vs,
        "syn_guard": syn_guard,
        "counters": replies.counters(kernel.service_stats.get(key)),
        "real_servers": dests,
    }
    if limits is not None:
        out["limits"] = limits
    return out


def drains(ctx: ApiContext) -> list[replies.Drain]:
    """Each drain with where it applies and the connections left. One pass over the
    table (real servers indexed by address) and one counters read."""
    view = ctx.loop.view
    items = list(view.intents.drains.values())
    by_address: dict[str, list[tuple[ServiceKey, Any]]] = {}
    wanted = {d.address for d in items}
    for key, vs in view.desired.items():
        for rs in vs.real_servers.values():
            if rs.address in wanted:
                by_address.setdefault(rs.address, []).append((key, rs))
    places = {
        drain.id: [(k, r) for k, r in by_address.get(drain.address, ()) if drain.matches(k, r)]
        for drain in items
    }
    keys = {key for rows in places.values() for key, _rs in rows}
    # A few services: their connection counts now. Many: one whole read (cached 1 s).
    kernel = ctx.read_some(sorted(keys, key=str)) if len(keys) <= 64 else ctx.counters()
    out: list[replies.Drain] = []
    for drain in items:
        rows: list[replies.DrainPlace] = []
        for key, rs in places[drain.id]:
            state = kernel.dest_state.get((key, rs.key))
            rows.append(
                {
                    "service": str(key),
                    "weight": rs.weight,
                    "active_connections": state.active_connections if state else 0,
                    "inactive_connections": state.inactive_connections if state else 0,
                }
            )
        out.append(
            {
                "id": drain.ident,
                "address": drain.address,
                "port": drain.port,
                "service": drain.service,
                "real_servers": rows,
                "done": all(r["active_connections"] == 0 for r in rows),
            }
        )
    return out


def status(ctx: ApiContext) -> replies.Status:
    view = ctx.loop.view
    h = view.status
    counts = {
        "virtual_services": len(view.desired),
        "real_servers": view.real_servers,
        "kubernetes_services": len(view.produced),
        "drains": len(view.intents.drains),
    }
    out: replies.Status = {
        "role": view.status.vrrp_state or "standalone",
        "ready": h.synced,
        "dry_run": ctx.loop.dry_run,
        "kubernetes": _kubernetes(ctx, view),
        "leader": view.status.leader,
        "lease_refused": view.lease_refused,
        "last_sync": iso(h.last_sync),
        "last_sync_seconds": round(h.last_sync_seconds, 4),
        "last_error": h.last_error,
        "failed_operations": h.failed_ops,
        "counts": counts,
        "owned": [
            {
                "resource": o.resource,
                "in_sync": o.in_sync,
                "repairs": o.repairs,
                "failures": o.failures,
                "last_error": o.last_error,
                "kind": o.kind,
                "since": iso(o.since),
            }
            for o in ctx.loop.view.status.owned.snapshot().values()
        ],
    }
    if ctx.loop.settings.bgp is not None:
        out["bgp"] = bgp(ctx)
    return out


def bgp(ctx: ApiContext) -> replies.Bgp:
    addressing = ctx.loop.view.addressing
    routes = sorted(addressing.routes.values(), key=lambda r: r.vip)
    announced = sum(1 for r in routes if r.announced)
    return {
        "configured": ctx.loop.settings.bgp is not None,
        "maintenance": addressing.maintenance,
        "announced": announced,
        "withdrawn": len(routes) - announced,
        "routes": [
            {"vip": r.vip, "pool": r.pool, "announced": r.announced, "reason": r.reason}
            for r in routes
        ],
        "peers": [
            {
                "address": p.address,
                "asn": p.asn,
                "state": p.state,
                "uptime_seconds": round(p.uptime_seconds, 1),
                "prefixes_sent": p.prefixes_sent,
                "bfd": p.bfd,
            }
            for p in ctx.peers()
        ],
    }


def _kubernetes(ctx: ApiContext, view: LoopView) -> replies.Kubernetes:
    h = view.status
    out: replies.Kubernetes = {
        "configured": ctx.loop.settings.in_cluster,
        "connected": h.kubernetes_connected,
        "disconnected_since": iso(h.disconnected_since),
    }
    named = [k.cluster for k in ctx.loop.settings.served if k.cluster]
    if named:
        connected = h.clusters_connected()
        out["clusters"] = {
            name: {"connected": connected.get(name, False), "leader": h.leaders.get(name, False)}
            for name in named
        }
    return out
