"""What ``director check`` (and ``director run``'s log) notes of a valid file: settings that
work but may not do what their author meant."""

from __future__ import annotations

import ipaddress

from director.core.dests import HASHING_SCHEDULERS
from director.core.model import Family, format_endpoint
from director.schema.document import Settings


def bgp_notes(settings: Settings) -> list[str]:
    """What ``director check`` and ``director run`` say about static services announced
    over BGP that name a scheduler which does not hash: a flow moved by ECMP to another
    director meets another choice of real server there, and breaks."""
    pools = settings.bgp_pools
    out = []
    for key, vs in settings.services.items():
        if key.fwmark or vs.config.scheduler in HASHING_SCHEDULERS:
            continue
        if any(p.contains(ipaddress.ip_address(key.address)) for p in pools):
            out.append(
                f"{vs.origin or key}: scheduler {vs.config.scheduler} on an address announced "
                "over BGP: connections break whenever the routers' ECMP moves a flow to another "
                "director (mh, the default there, keeps them)"
            )
    return out


# The source ports nf_nat picks from when snat.ports is unset (a client's own port is kept
# where it is free; otherwise one above the privileged ones).
KERNEL_SNAT_PORTS = (1024, 65535)


def snat_notes(settings: Settings) -> list[str]:
    """What ``director check`` and ``director run`` say when the SNAT addresses cannot carry
    the connections the real servers' upper thresholds allow: each SNAT address gives a real
    server address and port as many connections at once as it has source ports, and a
    connection beyond them is dropped, whatever IPVS would still have scheduled. A real
    server without a threshold (unbounded) or without full NAT is not counted."""
    if settings.snat is None:
        return []
    low, high = settings.snat.ports or KERNEL_SNAT_PORTS
    ports = high - low + 1
    addresses: dict[Family, int] = {}
    for address in settings.snat.addresses:
        family = Family.of(address)
        addresses[family] = addresses.get(family, 0) + 1
    allowed: dict[tuple[str, int, str], int] = {}  # real server, protocol: thresholds' sum
    unbounded: set[tuple[str, int, str]] = set()
    families: dict[tuple[str, int, str], Family] = {}
    for key in settings.static_snat:
        vs = settings.services.get(key)
        if vs is None or key.protocol is None:
            continue
        for rs in vs.real_servers.values():
            end = (rs.address, rs.port, key.protocol.label)
            families[end] = key.family
            allowed[end] = allowed.get(end, 0) + rs.upper_threshold
            if not rs.upper_threshold:
                unbounded.add(end)
    out = []
    for end in sorted(set(allowed) - unbounded):
        count = addresses.get(families[end], 0)
        capacity = count * ports
        if allowed[end] > capacity:
            out.append(
                f"real server {format_endpoint(end[0], end[1])}/{end[2]}: its upper_threshold "
                f"lets full NAT send it {allowed[end]} connections at once, but the snat "
                f"addresses carry {capacity} to it ({count} address(es) x {ports} source "
                "ports): the rest are dropped (director_conntrack_insert_failed_total); add "
                "snat addresses or widen snat.ports"
            )
    return out
