"""The rules across the file's objects (MetalLB's ``validation.go`` is the model): each a
named function over what is compiled so far, run in order by :func:`compile_document`; the
first that fails names its line and reason."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from director.core.checks import CheckSpec
from director.core.dests import BGP_SCHEDULER, HASHING_SCHEDULERS, NAT_OVER_BGP, Dests
from director.core.model import (
    Family,
    Forwarding,
    IpProtocol,
    RateLimit,
    RealServer,
    ServiceKey,
    check_flags,
)
from director.core.ownership import Network, Ownership
from director.core.services import Table
from director.schema.clusters import clusters_apart
from director.schema.document import Document, Settings, syn_guard
from director.schema.sections import (
    Defaults,
    GuardSettings,
    HealthSettings,
    KubeSettings,
    OwnershipEntry,
)
from director.schema.static import Refusal

if TYPE_CHECKING:
    from director.core.pools import Pool

# -- the rules across objects ------------------------------------------------------------
Rule = Callable[["_Compiling"], None]


@dataclass(slots=True)
class _Compiling:
    """The document, and what the rules have compiled from it so far."""

    doc: Document
    ownership: Ownership = field(default_factory=Ownership)
    pools: list[Pool] = field(default_factory=list)
    services: Table = field(default_factory=dict)
    static_checks: dict[ServiceKey, CheckSpec | None] = field(default_factory=dict)
    static_snat: set[ServiceKey] = field(default_factory=set)
    static_guard: set[ServiceKey] = field(default_factory=set)
    static_limits: dict[ServiceKey, RateLimit] = field(default_factory=dict)
    static_sorry: dict[ServiceKey, RealServer] = field(default_factory=dict)
    source: str = ""  # the file's path, as given


def owned_ranges(c: _Compiling) -> None:
    entry = c.doc.ownership or OwnershipEntry()
    c.ownership = Ownership(entry.networks, entry.fwmarks)


def pools_apart(c: _Compiling) -> None:
    """Pools compile, their names are unique and their addresses do not overlap."""
    seen: dict[str, int] = {}
    for index, entry in enumerate(c.doc.pools):
        if entry.name in seen:
            raise Refusal(
                ("pools", index, "name"),
                f"pool {entry.name!r} is declared twice (first on line {{first}})",
                ("pools", seen[entry.name]),
            )
        try:
            pool = entry.compile()
        except Refusal as exc:
            raise Refusal(("pools", index, *exc.path), exc.reason) from None
        for other in c.pools:
            for fam, first, last in pool.ranges:
                if any(f == fam and first <= l2 and f2 <= last for f, f2, l2 in other.ranges):
                    raise Refusal(("pools", index, "addresses"), f"overlaps pool {other.name!r}")
        c.pools.append(pool)
        seen[entry.name] = index


def kubernetes_has_pools(c: _Compiling) -> None:
    if c.doc.kubernetes is not None and not c.pools:
        reason = "serving Kubernetes Services needs at least one address pool (pools:)"
        raise Refusal(("kubernetes",), reason)


def pools_and_vips_are_owned(c: _Compiling) -> None:
    """The pools and the NodePort VIPs are the director's own: it owns their addresses."""
    extra: list[Network] = [net for pool in c.pools for net in pool.networks()]
    vips = [vip for kube in _served(c.doc) for vip in kube.nodeport_vips]
    extra += [ipaddress.ip_network(vip) for vip in vips]
    if extra:
        networks = tuple(dict.fromkeys((*c.ownership.networks, *extra)))
        c.ownership = Ownership(networks, c.ownership.fwmarks)


def pools_hold_none_of_the_boxs_addresses(c: _Compiling) -> None:
    """A pool holding an address of the box itself (its VRRP source, a peer, a gateway, its
    BGP router id or session source) would give it to a tenant's Service, which could then
    take the box's own ports (22, the API's)."""
    own: list[tuple[tuple[str | int, ...], str]] = []
    doc = c.doc
    if doc.ha is not None:
        own.append((("ha", "unicast_source"), doc.ha.unicast_source))
        own += [(("ha", "peers", i), peer) for i, peer in enumerate(doc.ha.peers)]
        own += [(("ha", "gateways", i), gw[0]) for i, gw in enumerate(doc.ha.gateways)]
        if doc.ha.conntrackd is not None:
            own += [
                (("ha", "conntrackd", name), getattr(doc.ha.conntrackd, name))
                for name in ("source", "peer")
            ]
    if doc.bgp is not None:
        own.append((("bgp", "router_id"), doc.bgp.router_id))
        for i, peer in enumerate(doc.bgp.peers):
            own.append((("bgp", "peers", i, "address"), peer.address))
            if peer.source is not None:
                own.append((("bgp", "peers", i, "source"), peer.source))
    if doc.api is not None:
        own.append((("api", "listen"), doc.api.host))
    if doc.snat is not None:
        own += [(("snat", "addresses", i), a) for i, a in enumerate(doc.snat.addresses)]
    for index, pool in enumerate(c.pools):
        for where, text in own:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                continue  # a host name, "::" and the like: not an address a pool can hold
            if pool.contains(address) and not address.is_unspecified:
                label = ".".join(
                    str(part) if isinstance(part, str) else f"[{part}]" for part in where
                ).replace(".[", "[")
                raise Refusal(
                    ("pools", index, "addresses"),
                    f"pool {pool.name!r} holds "
                    f"{text}, this box's own address ({label}): a Service would be "
                    "given it, and could take the box's ports",
                )


def paths_apart(c: _Compiling) -> None:
    """What the director writes (or a daemon it runs writes, unlinks or removes) never names
    what it reads, or another such file: a bgp.config_file that is the configuration file
    itself would be overwritten with FRR's text at the first announcement, and a
    conntrackd socket at api.token_file unlinked."""
    doc = c.doc
    reads: list[tuple[tuple[str | int, ...], str | None]] = [((), c.source)]
    writes: list[tuple[tuple[str | int, ...], str | None]] = []
    if doc.api is not None:
        reads += [
            (("api", name), getattr(doc.api, name))
            for name in ("token_file", "tls_cert", "tls_key")
        ]
        writes.append((("api", "intents_file"), doc.api.intents_file))
    if doc.kubernetes is not None:
        reads.append((("kubernetes", "kubeconfig"), doc.kubernetes.kubeconfig))
    reads += [(("clusters", i, "kubeconfig"), k.kubeconfig) for i, k in enumerate(doc.clusters)]
    if doc.ha is not None:
        reads.append((("ha", "pid_file"), doc.ha.pid_file))
        writes += [(("ha", "config_file"), doc.ha.config_file), (("ha", "fifo"), doc.ha.fifo)]
        if doc.ha.conntrackd is not None:
            ct = doc.ha.conntrackd
            # conntrackd unlinks its socket's path before it binds, and makes and removes
            # its lock file: both are written, as its configuration file is
            writes += [
                (("ha", "conntrackd", name), getattr(ct, name))
                for name in ("config_file", "socket", "lock_file")
            ]
    if doc.bgp is not None:
        writes.append((("bgp", "config_file"), doc.bgp.config_file))
    seen: dict[str, tuple[str | int, ...]] = {}
    for where, path in reads:
        if path:
            seen.setdefault(_normal(path), where)
    for where, path in writes:
        if not path:
            continue
        other = seen.get(_normal(path))
        if other is not None:
            named = ".".join(str(p) for p in other) or "the configuration file itself"
            raise Refusal(
                where,
                f"{path} is also {named}: the director writes this file, and would overwrite it",
            )
        seen[_normal(path)] = where


def _served(doc: Document) -> tuple[KubeSettings, ...]:
    return (doc.kubernetes,) if doc.kubernetes is not None else doc.clusters


def _normal(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def services_unique_and_owned(c: _Compiling) -> None:
    defaults = c.doc.defaults or Defaults()
    first: dict[object, int] = {}
    for index, entry in enumerate(c.doc.services):
        here = ("services", index)
        try:
            vs = entry.compile(defaults)
        except Refusal as exc:
            first_path = (*here, *exc.first) if exc.first is not None else None
            raise Refusal((*here, *exc.path), exc.reason, first_path) from None
        if vs.key in c.services:
            reason = f"{vs.key} is declared twice (first on line {{first}})"
            raise Refusal(here, reason, ("services", first[vs.key]))
        if vs.origin != "static" and vs.origin in first:
            reason = f"the name {vs.origin.partition('/')[2]!r} is taken (first on line {{first}})"
            raise Refusal((*here, "name"), reason, ("services", first[vs.origin]))
        if not c.ownership.owns(vs.key):
            raise Refusal(
                here,
                f"{vs.key} is outside the owned ranges "
                f"({c.ownership.describe()}); add its network to ownership.networks "
                "(or its mark to ownership.fwmarks)",
            )
        first[vs.origin] = first[vs.key] = index
        c.services[vs.key] = vs


def bgp_pools_have_peers(c: _Compiling) -> None:
    """A pool announced over BGP needs the speaker (``bgp:``), and its static services a
    forwarding method that lets any director serve the middle of a connection, and, unless
    the entry names its scheduler, Maglev hashing (``mh`` with ``mh-port`` and
    ``mh-fallback``): every director then sends a flow to the same real server, as for
    Kubernetes Services."""
    index = next((i for i, pool in enumerate(c.pools) if pool.announce.bgp), None)
    if index is not None and c.doc.bgp is None:
        raise Refusal(
            ("pools", index, "announce"),
            f"pool {c.pools[index].name!r} is announced "
            "over BGP: add a bgp: section with its peers",
        )
    bgp_pools = [pool for pool in c.pools if pool.announce.bgp]
    defaults = c.doc.defaults or Defaults()
    for index, (key, vs) in enumerate(list(c.services.items())):
        if key.fwmark or not any(p.contains(ipaddress.ip_address(key.address)) for p in bgp_pools):
            continue
        for rs_index, rs in enumerate(vs.real_servers.values()):
            if rs.forwarding is Forwarding.NAT:
                raise Refusal(("services", index, "real_servers", rs_index), NAT_OVER_BGP)
        entry = c.doc.services[index]
        if entry.scheduler is None and defaults.scheduler not in HASHING_SCHEDULERS:
            scheduler, flags = BGP_SCHEDULER
            try:
                chosen = check_flags(scheduler, flags | frozenset(entry.flags), key.protocol)
            except ValueError as exc:
                raise Refusal(("services", index, "flags"), str(exc)) from None
            config = dataclasses.replace(vs.config, scheduler=scheduler, flags=chosen)
            c.services[key] = dataclasses.replace(vs, config=config)


def static_checks_parse(c: _Compiling) -> None:
    health = c.doc.health or HealthSettings()
    for index, (entry, key) in enumerate(zip(c.doc.services, c.services, strict=True)):
        if entry.health_check is None:
            continue
        if entry.health_check == "none":
            c.static_checks[key] = None
            continue
        parsed = health.parse(entry.health_check)
        if isinstance(parsed, str):
            raise Refusal(("services", index, "health_check"), parsed)
        c.static_checks[key] = parsed


def fullnat_has_its_addresses(c: _Compiling) -> None:
    """Full NAT needs the box's SNAT address of the service's family, and is the whole
    service's (its real servers are NAT in IPVS); the SNAT addresses are no service's."""
    doc = c.doc
    defaults = doc.defaults or Defaults()
    if defaults.forwarding is Forwarding.FULLNAT and doc.snat is None:
        raise Refusal(
            ("defaults", "forwarding"),
            "fullnat needs snat.addresses (the box's address the real servers see and reply to)",
        )
    families = {Family.of(a) for a in (doc.snat.addresses if doc.snat else ())}
    for index, entry in enumerate(doc.pools):
        if entry.forwarding is Forwarding.FULLNAT and not families:
            raise Refusal(
                ("pools", index, "forwarding"),
                "fullnat needs snat.addresses (the "
                "box's address the real servers see and reply to)",
            )
        if entry.forwarding is Forwarding.NAT and entry.announce == "bgp":
            raise Refusal(("pools", index, "forwarding"), NAT_OVER_BGP)
    for index, (key, vs) in enumerate(list(c.services.items())):
        modes = Dests.of(vs.real_servers).forwardings()  # no RealServer made per server
        if Forwarding.FULLNAT not in modes:
            continue
        if len(modes) > 1:
            raise Refusal(
                ("services", index, "real_servers"),
                "fullnat is the whole service's: every real server of it, or none",
            )
        if key.fwmark:
            # the firewall marks and SNATs address . protocol . port elements: a mark's
            # packets would be masqueraded with the client's address, the replies bypass
            # the box
            raise Refusal(
                ("services", index),
                "fullnat cannot serve a firewall-mark service (the SNAT rule matches an "
                "address, protocol and port); use nat, dr or tun for it",
            )
        if key.family not in families:
            version = 4 if key.family is Family.INET else 6
            raise Refusal(
                ("services", index), f"fullnat needs an IPv{version} address in snat.addresses"
            )
        servers = {
            dest: rs._replace(forwarding=Forwarding.NAT) for dest, rs in vs.real_servers.items()
        }
        c.services[key] = dataclasses.replace(vs, real_servers=servers)
        c.static_snat.add(key)
    taken = {key.address: f"the address of {vs.origin or key}" for key, vs in c.services.items()}
    for kube in _served(doc):
        taken.update({vip: "a NodePort VIP" for vip in kube.nodeport_vips})
    for index, address in enumerate(doc.snat.addresses if doc.snat else ()):
        if address in taken:
            raise Refusal(
                ("snat", "addresses", index),
                f"{address} is {taken[address]}: an SNAT address is the box's own, no service's",
            )
    snat_floats_with_conntrackd(c)


def snat_floats_with_conntrackd(c: _Compiling) -> None:
    """conntrackd carries a full-NAT connection's SNAT mapping to the peer; the peer can only
    use it if the SNAT address moves there too, with the VIPs: one of ha.gateways."""
    doc = c.doc
    if doc.ha is None or doc.ha.conntrackd is None or doc.snat is None:
        return
    floating = {ipaddress.ip_address(gw[0]) for gw in doc.ha.gateways}
    for index, address in enumerate(doc.snat.addresses):
        if ipaddress.ip_address(address) not in floating:
            raise Refusal(
                ("snat", "addresses", index),
                f"{address} stays on this box when the VIPs move: with ha.conntrackd the SNAT "
                "address must float with them (list it in ha.gateways), or the peer that takes "
                "the connections over has their mappings but not the address they are to",
            )


def static_guard(c: _Compiling) -> None:
    """The static services the box answers SYNs for: TCP, forwarded by nat or fullnat,
    where guard.syn guards, unless syn_guard: false. syn_guard: true where it cannot be is
    refused with its line (nothing would guard the service that asks for it)."""
    doc = c.doc
    guard = doc.guard or GuardSettings()
    active, why = syn_guard(guard.syn, ha=doc.ha is not None, bgp=doc.bgp is not None)
    for index, (entry, key) in enumerate(zip(doc.services, c.services, strict=True)):
        modes = {rs.forwarding for rs in c.services[key].real_servers.values()}
        can = key.protocol is IpProtocol.TCP and not key.fwmark and modes <= {Forwarding.NAT}
        if entry.syn_guard and not can:
            raise Refusal(
                ("services", index, "syn_guard"),
                "only a TCP service forwarded by nat or fullnat can be SYN-guarded (by dr or "
                "tun the real servers answer the clients directly)",
            )
        if entry.syn_guard and not active:
            raise Refusal(("services", index, "syn_guard"), f"nothing is guarded here: {why}")
        if active and can and entry.syn_guard is not False:
            c.static_guard.add(key)


def pools_guard(c: _Compiling) -> None:
    """A pool's ``syn_guard: true`` where it cannot be is refused with its line: on a box
    that guards nothing, or with a forwarding that cannot be guarded (dr, tun)."""
    doc = c.doc
    active, why = syn_guard((doc.guard or GuardSettings()).syn, ha=doc.ha is not None,
                            bgp=doc.bgp is not None)  # fmt: skip
    for index, pool in enumerate(c.pools):
        if not pool.syn_guard:
            continue
        if not active:
            raise Refusal(("pools", index, "syn_guard"), f"nothing is guarded here: {why}")
        if pool.forwarding in (Forwarding.DR, Forwarding.TUN):
            raise Refusal(
                ("pools", index, "syn_guard"),
                f"{pool.forwarding.label} cannot be SYN-guarded (the real servers answer the "
                "clients directly)",
            )


def static_limits(c: _Compiling) -> None:
    """The static services' rates (client_rate, service_rate): TCP services only (a rate
    counts connection attempts, SYNs); one elsewhere is refused with its line."""
    for index, (entry, key) in enumerate(zip(c.doc.services, c.services, strict=True)):
        limit = RateLimit(entry.client_rate, entry.service_rate)
        if not limit:
            continue
        if key.protocol is not IpProtocol.TCP or key.fwmark:
            field_name = "client_rate" if entry.client_rate else "service_rate"
            raise Refusal(
                ("services", index, field_name),
                "a rate counts TCP connection attempts (SYNs): only a TCP service with an "
                "address and a port can have one",
            )
        c.static_limits[key] = limit


def static_sorry(c: _Compiling) -> None:
    """The static services' sorry servers, each a real server of its service (its port, its
    family, not one of its real servers), refused with its line otherwise."""
    default = (c.doc.defaults or Defaults()).forwarding
    for index, (entry, key) in enumerate(zip(c.doc.services, c.services, strict=True)):
        try:
            server = entry.sorry(key, c.services[key], default)
        except Refusal as exc:
            raise Refusal(("services", index, *exc.path), exc.reason) from None
        if server is not None:
            c.static_sorry[key] = server


RULES: tuple[Rule, ...] = (
    owned_ranges,
    pools_apart,
    kubernetes_has_pools,
    clusters_apart,
    pools_and_vips_are_owned,
    pools_hold_none_of_the_boxs_addresses,
    paths_apart,
    services_unique_and_owned,
    bgp_pools_have_peers,
    static_checks_parse,
    fullnat_has_its_addresses,
    static_guard,
    pools_guard,
    static_limits,
    static_sorry,
)


def compile_document(doc: Document, source: str) -> Settings:
    c = _Compiling(doc, source=source)
    for rule in RULES:
        rule(c)
    return Settings(
        source,
        c.ownership,
        doc.defaults or Defaults(),
        c.services,
        doc.kubernetes,
        tuple(c.pools),
        doc.api,
        doc.ha,
        doc.health,
        c.static_checks,
        doc.bgp,
        doc.snat,
        frozenset(c.static_snat),
        doc.clusters,
        doc.guard or GuardSettings(),
        frozenset(c.static_guard),
        dict(c.static_limits),
        dict(c.static_sorry),
    )
