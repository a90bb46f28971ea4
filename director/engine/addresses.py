"""Address keeping: a LoadBalancer Service's addresses from the pools (IPAM, pure), written
to its status by the leader, read back from status by a follower.

The allocator is first handed what status already says, so a restart assigns nothing new
and moves nothing; a follower programs what the leader wrote and tracks it, so that it
allocates consistently should it become the leader.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from director.core.annotations import Options, ipam_request
from director.core.cluster import ServiceInfo
from director.core.ipam import Allocator
from director.core.policy import Policy, node_ports_missing, wants_address
from director.core.pools import Address, Pool
from director.engine.reporter import Reporter
from director.schema.config import Settings


class Addresses:
    def __init__(self, allocator: Allocator, reporter: Reporter) -> None:
        self.allocator, self.reporter = allocator, reporter

    def announced_over_bgp(self, addresses: tuple[str, ...]) -> bool:
        """Is one of ``addresses`` in a pool announced over BGP?"""
        for text in addresses:
            pool = self.allocator.pool_of(ipaddress.ip_address(text))
            if pool is not None and pool.announce.bgp:
                return True
        return False

    def pool_of(self, addresses: tuple[str, ...]) -> Pool | None:
        """The pool of ``addresses`` whose settings its Service gets: the first that gives
        any (forwarding, limits, the guard's switch), else the first (None: no pool)."""
        pools = [self.allocator.pool_of(ipaddress.ip_address(text)) for text in addresses]
        found = [pool for pool in pools if pool is not None]
        return next((pool for pool in found if pool.gives), found[0] if found else None)

    def release(self, ref: str) -> None:
        self.allocator.release(ref)

    def claim(self, ref: str, ips: tuple[str, ...]) -> None:
        """The addresses Service ``ref``'s status names, kept from other Services' fresh
        picks until it is assigned (``Allocator.claim``)."""
        self.allocator.claim(ref, (ipaddress.ip_address(text) for text in ips))

    def held(self, ref: str) -> list[str]:
        return [str(a) for a in self.allocator.held(ref)]

    def keep(
        self, svc: ServiceInfo, policy: Policy, previous: Options | None = None
    ) -> tuple[str, ...]:
        """The Service's addresses now (none when it gets none), with status and Events."""
        ref, reporter = svc.ref, self.reporter
        if not wants_address(svc, policy):
            self.allocator.release(ref)
            return ()
        keep = [ipaddress.ip_address(text) for text in svc.status_ips]  # canonical already
        request, problems = ipam_request(svc, policy.metallb, policy.pools)
        dead = node_ports_missing(svc, policy, previous)  # an address nothing would answer on
        if request is None or dead is not None:
            self.allocator.release(ref)
            why = dead or f"{problems[0].annotation}: {problems[0].message}"
            reporter.report(svc, "Warning", "AddressRefused", why, "address")
            self._clear_status(svc)
            return ()
        if not reporter.leads(svc.cluster):
            if not keep:
                self.allocator.release(ref)
                return ()
            self.allocator.assign(request, keep)
            return tuple(svc.status_ips)
        outcome = self.allocator.assign(request, keep)
        if not outcome.ok:
            reporter.report(svc, "Warning", "AddressRefused", str(outcome.error), "address")
            self._clear_status(svc)
            return ()
        ips = tuple(str(a) for a in outcome.addresses)
        if ips == svc.status_ips:  # the usual case: keep the snapshot's strings, not copies
            ips = svc.status_ips
        message = f"assigned {', '.join(ips)} from pool {outcome.pool}"
        if ips != svc.status_ips or svc.stale_status:
            reporter.write_status(svc, ips)
            reporter.report(svc, "Normal", "AddressAssigned", message, "address")
        else:
            reporter.known(ref, "address", message)
        return ips

    def _clear_status(self, svc: ServiceInfo) -> None:
        """No address: the leader's status must not name one."""
        if self.reporter.leads(svc.cluster) and (svc.status_ips or svc.stale_status):
            self.reporter.write_status(svc, ())


def reserved_addresses(
    settings: Settings, box: Mapping[str, str] | None = None
) -> dict[Address, str]:
    """Addresses the director serves otherwise, or the box's own (``box``: address ->
    interface), which IPAM must never hand to a Service: those in a pool (IPAM refuses any
    other as outside its pools first; a static box of 5,000 services and no pool held half a
    megabyte of them for nothing)."""
    out: dict[Address, str] = {}
    pools = settings.pools
    for text, interface in (box or {}).items() if pools else ():
        address = ipaddress.ip_address(text)
        if any(pool.contains(address) for pool in pools):
            out[address] = f"this box's own address (on {interface})"
    for key, vs in settings.services.items() if pools else ():
        if not key.fwmark:
            address = ipaddress.ip_address(key.address)
            if any(pool.contains(address) for pool in pools):
                out.setdefault(address, f"static service {vs.origin}")
    for kube in settings.served:
        for vip in kube.nodeport_vips:
            owner = f" of cluster {kube.cluster}" if kube.cluster else ""
            out[ipaddress.ip_address(vip)] = f"the NodePort VIP{owner}"
    return out
