"""The ``ha:`` section: a keepalived pair (VRRP, its peers and gateways, the IPVS sync
daemon), and conntrackd beside it for full NAT."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from director.core.model import Family, plain_network
from director.schema.fields import (
    ADDRESS,
    FILE_PATH,
    FLAG,
    IFNAME,
    NAME_RE,
    Rule,
    below,
    integer,
    list_of,
    matching,
    problem,
    scalar,
    seconds,
)
from director.schema.sections import Section
from director.schema.sections_base import Keys, Problem, after, check_keys, section

_GATEWAY_KEYS = Keys.of({"address": True, "interface": True})


def _gateway(value: object) -> tuple[str, int, str]:
    """``{address: ADDRESS/PREFIX, interface: NAME}`` (from Python: the tuple itself)."""
    if isinstance(value, tuple):
        return value
    fields = check_keys(value, _GATEWAY_KEYS)
    got = scalar(fields["address"])
    try:
        plain_network(got, strict=False)  # no zone: ip_interface takes any text after a %
        iface = ipaddress.ip_interface(got)
    except ValueError:
        raise problem(f"{got!r} is not ADDRESS/PREFIX", ("address",)) from None
    try:
        name = IFNAME(fields["interface"])
    except Problem as exc:
        raise below(exc, "interface") from None
    return str(iface.ip), iface.network.prefixlen, name


_GATEWAY = {
    "type": "object",
    "required": ["address", "interface"],
    "properties": {"address": {"examples": ["192.0.2.1/24"]}, "interface": IFNAME.schema},
}


@section
class ConntrackdSettings(Section):
    """``ha.conntrackd:``: run conntrackd in primary-backup beside keepalived, so full-NAT
    connections survive a failover (the IPVS sync daemon carries IPVS's connections, not
    the SNAT mappings in conntrack)."""

    source: Annotated[str, ADDRESS]
    """Required: this box's address on the link the two conntrackd talk over."""
    peer: Annotated[str, ADDRESS]
    """Required: the other box's address on that link (of source's family)."""
    interface: Annotated[str, IFNAME]
    """Required: the interface of that link."""
    port: Annotated[int, integer(1, 65535)] = 3780
    """The UDP port both conntrackd send to and listen on."""
    config_file: Annotated[str, FILE_PATH] = "/etc/conntrackd/conntrackd.conf"
    """conntrackd's configuration file: the director owns it and writes it."""
    socket: Annotated[str, FILE_PATH] = "/var/run/conntrackd.sock"
    """conntrackd's control socket (keepalived's notify commands talk to it)."""
    lock_file: Annotated[str, FILE_PATH] = "/var/lock/conntrackd.lock"
    """conntrackd's lock file (one daemon per file)."""
    conntrackd: Annotated[str, FILE_PATH] = "/usr/sbin/conntrackd"
    """The conntrackd binary (keepalived's notify commands run it by this path)."""

    @after
    def _family(self) -> ConntrackdSettings:
        if Family.of(self.peer) is not Family.of(self.source):
            raise problem("the peer must be of the source's address family", ("peer",))
        if self.peer == self.source:
            raise problem("the peer is the other box, not this one", ("peer",))
        return self


@section
class HaSettings(Section):
    """``ha:``: this director's half of a keepalived VRRP pair."""

    interface: Annotated[str, IFNAME]  # VRRP adverts and the VIPs
    """Required: the interface of the VRRP adverts and of the VIPs."""
    router_id: Annotated[
        str, matching(NAME_RE, lambda _: "letters, digits and _.- only (63 at most)")
    ]
    """Required: keepalived's router_id for this box."""
    priority: Annotated[int, integer(1, 254)]
    """Required: this box's VRRP priority; the higher box of the pair is master."""
    unicast_source: Annotated[str, ADDRESS]
    """Required: this box's address the adverts leave from (VRRP is unicast)."""
    peers: Annotated[tuple[str, ...], list_of(ADDRESS)]
    """Required: the other box's advert address (of unicast_source's family)."""
    virtual_router_id: Annotated[int, integer(1, 255)] = 51
    """VRRP virtual router id: the same on both boxes, unique on the segment."""
    advert_int: Annotated[  # seconds (VRRPv3 counts centiseconds)
        float,
        seconds(0.01, 40.95, ", like 0.1", "must be between 0.01 and 40.95 seconds (VRRPv3)", 2),
    ] = 0.1
    """Seconds between adverts (VRRPv3 counts centiseconds); the backup takes over after about
    three are missed."""
    preempt_delay: Annotated[int, integer(0, 1000)] = 30  # a returning box waits (conn sync)
    """Seconds a returning box waits as backup before it takes the VIPs back (the connection
    sync catches up meanwhile)."""
    nopreempt: Annotated[bool, FLAG] = False
    """Never take the VIPs back from a peer that holds them."""
    track_interfaces: Annotated[tuple[str, ...], list_of(IFNAME)] = ()
    """Interfaces whose loss gives up mastership."""
    sync_interface: Annotated[str | None, IFNAME] = None  # the IPVS sync daemon's interface
    """Interface of the kernel's IPVS connection sync daemon (keepalived starts it), so
    connections survive a failover; unset: no sync."""
    sync_id: Annotated[int, integer(0, 255)] = 0
    """The sync daemon's id: the same on both boxes."""
    # The sync daemon's multicast group and UDP port (the kernel's defaults: 224.0.0.81 or
    # ff02::81, port 8848); the kernel sends its sync messages to a multicast group only.
    sync_group: Annotated[str | None, ADDRESS] = None
    """The sync daemon's multicast group (default: the kernel's 224.0.0.81, or ff02::81); it
    sends to a group only."""
    sync_port: Annotated[int | None, integer(1, 65535)] = None
    """The sync daemon's UDP port (default: the kernel's 8848)."""
    # (address, prefix, interface): the real servers' gateway in LVS-NAT
    gateways: Annotated[tuple[tuple[str, int, str], ...], list_of(Rule(_gateway, _GATEWAY))] = ()
    """Floating gateways the real servers route through in nat mode, as {address:
    ADDRESS/PREFIX, interface: IF}; they move with the VIPs."""
    inline_vips: Annotated[int, integer(0, 1000)] = 20  # the rest: virtual_ipaddress_excluded
    """How many VIPs go in keepalived's virtual_ipaddress (carried in the adverts); the rest go
    in virtual_ipaddress_excluded."""
    config_file: Annotated[str, FILE_PATH] = "/etc/keepalived/keepalived.conf"
    """keepalived's configuration file: the director owns it and rewrites it."""
    pid_file: Annotated[str, FILE_PATH] = "/run/keepalived.pid"
    """keepalived's pid file (a reload signals that process only if it is keepalived)."""
    fifo: Annotated[str, FILE_PATH] = "/run/director/keepalived.fifo"
    """The FIFO keepalived reports VRRP state changes through (an existing regular file there is
    refused, never replaced)."""
    keepalived: Annotated[str, FILE_PATH] = "keepalived"  # the binary
    """The keepalived binary (the director checks each file with keepalived -t)."""
    netns: Annotated[str | None, IFNAME] = None  # keepalived's network namespace, if not ours
    """keepalived's network namespace, if it is not the director's."""
    # keepalived's VRRP process at this real-time priority (SCHED_RR; 0: ordinary): a box
    # whose CPU is taken by busy processes still sends its adverts on time. The director
    # sets it on the process (director.adapters.pair.processes), not keepalived.
    realtime_priority: Annotated[int, integer(0, 99)] = 50
    """keepalived's VRRP process runs at this real-time priority (0: ordinary scheduling), so
    adverts leave on time on a busy box. The director sets it on the process and keeps it
    there (keepalived's own vrrp_rt_priority has its reload kill the process now and then)."""
    # keepalived gives up mastership (the box's priority drops to the least) once the
    # director's control loop has not stepped for this long (0: never). Needs preemption:
    # with nopreempt the peer never takes over from a lower-priority master.
    alive_seconds: Annotated[int, integer(0, 3600)] = 30
    """keepalived gives up mastership once the director's control loop has not stepped for this
    long (0: never; no effect with nopreempt)."""
    conntrackd: ConntrackdSettings | None = None
    """conntrackd beside keepalived (full NAT's connections kept across a failover); unset:
    full-NAT connections break when the VIPs move."""

    @after
    def _peers(self) -> HaSettings:
        if self.sync_group is not None and not ipaddress.ip_address(self.sync_group).is_multicast:
            raise problem(
                "the kernel's sync daemon sends to a multicast group (224.0.0.0/4 or "
                "ff00::/8); unicast is not offered",
                ("sync_group",),
            )
        if not self.peers:
            raise problem("a pair needs its peer's address", ("peers",))
        own = ipaddress.ip_address(self.unicast_source)
        for index, peer in enumerate(self.peers):
            if Family.of(peer) is not Family.of(self.unicast_source):
                raise problem(
                    "peers must be of the unicast_source's address family", ("peers", index)
                )
            if ipaddress.ip_address(peer) == own:
                raise problem(
                    f"{peer} is this box's own unicast_source: a peer is the other box (was "
                    "the other box's file copied without swapping the two?); keepalived "
                    "would send its adverts to itself and both boxes would be MASTER",
                    ("peers", index),
                )
        return self
