"""``bgp:``: this director's BGP speaker (FRR), its peers, and how FRR is reached.

The director renders FRR's configuration from this section and the VIPs it decides to
announce (:mod:`director.adapters.frr.announce`); every value here ends up in that file, so each is
checked as strictly as the file's syntax needs (addresses canonical, numbers bounded,
passwords without spaces or quotes).
"""

from __future__ import annotations

from typing import Annotated

from director.core.model import Family
from director.schema.fields import (
    ADDRESS,
    FILE_PATH,
    FLAG,
    IFNAME,
    NAME_RE,
    integer,
    matching,
    problem,
)
from director.schema.sections import Section
from director.schema.sections_base import after, section

ASN = integer(1, 4294967295)


def up_to(top: int) -> str:
    """A regular expression for the whole numbers 0 to ``top`` without leading zeros: for
    each digit of ``top`` that can be lower, ``top``'s digits before it, a lower one, any
    after; then every shorter number."""
    digits = str(top)
    alternatives = [digits]
    for at, digit in enumerate(digits):
        low = 1 if at == 0 else 0
        if int(digit) - 1 >= low:
            rest = len(digits) - at - 1
            tail = rf"\d{{{rest}}}" if rest else ""
            alternatives.append(f"{digits[:at]}[{low}-{int(digit) - 1}]{tail}")
    if len(digits) > 1:
        alternatives.append(rf"[1-9]\d{{0,{len(digits) - 2}}}")
    alternatives.append("0")
    return f"(?:{'|'.join(alternatives)})"


# A community as FRR writes it: AA:NN (each 0-65535), or a well-known name.
# 0 to 65535: each half of a community is 16 bits (vtysh --dryrun passes 70000, bgpd not).
_HALF = r"(?:6553[0-5]|655[0-2]\d|65[0-4]\d\d|6[0-4]\d{3}|[1-5]\d{4}|\d{1,4})"
COMMUNITY_RE = rf"({_HALF}:{_HALF}|no-export|no-advertise|local-AS|blackhole|graceful-shutdown)"
COMMUNITY = matching(
    COMMUNITY_RE,
    lambda got: (
        f"{got!r} is not a community (AA:NN with each half 0 to 65535, or no-export, "
        "no-advertise, local-AS, blackhole, graceful-shutdown)"
    ),
)
# A large community (RFC 8092): GLOBAL:LOCAL1:LOCAL2, each part 32 bits.
_WORD = up_to(4294967295)
LARGE_COMMUNITY_RE = rf"{_WORD}:{_WORD}:{_WORD}"
LARGE_COMMUNITY = matching(
    LARGE_COMMUNITY_RE,
    lambda got: (
        f"{got!r} is not a large community (GLOBAL:LOCAL1:LOCAL2, each part 0 to 4294967295)"
    ),
)
# FRR reads the password as one word: printable, no spaces, no quotes, no '!' (a comment).
PASSWORD = matching(
    r"[A-Za-z0-9_.,:;+=/@%^*()\[\]{}<>~-]{1,80}",
    lambda _: "1 to 80 printable characters, without spaces, quotes or '!'",
)


@section
class PeerEntry(Section):
    """One of ``bgp.peers``: an upstream router."""

    address: Annotated[str, ADDRESS]
    """The router's address."""
    asn: Annotated[int, ASN]
    """The router's AS number."""
    port: Annotated[int, integer(1, 65535)] = 179
    """The router's BGP port."""
    password: Annotated[str | None, PASSWORD] = None  # TCP MD5
    """TCP MD5 password of the session, one word (redacted in support bundles; FRR's file is
    mode 0640)."""
    source: Annotated[str | None, ADDRESS] = None  # update-source (this box's address)
    """This box's address the session starts from (update-source), of the peer's family."""
    multihop: Annotated[int, integer(0, 255)] = 0  # ebgp-multihop TTL; 0: directly connected
    """ebgp-multihop TTL for a router that is not directly connected (0: directly connected)."""
    keepalive: Annotated[int, integer(1, 65535)] = 1  # seconds
    """Seconds between BGP keepalives."""
    hold: Annotated[int, integer(3, 65535)] = 3  # seconds (3 keepalives at least)
    """BGP hold time in seconds: at least three keepalives."""
    bfd: Annotated[bool, FLAG] = True
    """Run BFD on the session (FRR's bfdd): a dead director leaves the routers' next hops in
    under a second."""
    bfd_interval_ms: Annotated[int, integer(10, 60000)] = 300  # both directions
    """BFD transmit and receive interval in milliseconds; a failure is detected after interval x
    multiplier."""
    bfd_multiplier: Annotated[int, integer(2, 255)] = 3
    """BFD packets missed before the session is declared down."""

    @after
    def _timers(self) -> PeerEntry:
        if self.hold < 3 * self.keepalive:
            raise problem(
                f"hold ({self.hold}) must be at least 3 keepalives ({3 * self.keepalive})",
                ("hold",),
            )
        if self.source is not None and Family.of(self.source) is not Family.of(self.address):
            raise problem("the source must be of the peer's address family", ("source",))
        return self


@section
class BgpSettings(Section):
    """``bgp:``: announce the VIPs of ``announce: bgp`` pools to these peers."""

    asn: Annotated[int, ASN]
    """Required: this director's AS number (the directors may share one)."""
    router_id: Annotated[str, ADDRESS]  # an IPv4 address (BGP's router id)
    """Required: the BGP router id, an IPv4 address of this box."""
    peers: tuple[PeerEntry, ...] = ()
    """Required: the routers the VIPs are announced to."""
    hostname: Annotated[str | None, matching(NAME_RE, lambda _: "letters, digits and _.-")] = None
    """FRR's hostname line (default: none)."""
    config_file: Annotated[str, FILE_PATH] = "/etc/frr/frr.conf"
    """The file FRR boots from: the director owns it and writes it without routes, which it
    sends once its first sync is applied."""
    pathspace: Annotated[str | None, IFNAME] = None  # FRR's -N (a namespace's own daemons)
    """FRR's -N pathspace, when FRR runs per network namespace."""
    vtysh: Annotated[str, FILE_PATH] = "vtysh"
    """The vtysh binary."""
    reload: Annotated[str, FILE_PATH] = "/usr/lib/frr/frr-reload.py"
    """FRR's frr-reload.py."""
    # Seconds between asking FRR how its sessions are (status, metrics); 0: never.
    poll_seconds: Annotated[int, integer(0, 3600)] = 5
    """Seconds between asking FRR about its sessions and looking at the VIPs on lo (0: never)."""
    # On stop: seconds between withdrawing every route and stopping, for the routers to
    # move the flows (connections already here carry on through the other directors).
    leave_seconds: Annotated[int, integer(0, 300)] = 2
    """On stop: seconds between withdrawing every route and stopping, for the routers to move
    the flows."""

    @after
    def _valid(self) -> BgpSettings:
        if Family.of(self.router_id) is not Family.INET:
            raise problem("a BGP router id is an IPv4 address", ("router_id",))
        if not self.peers:
            raise problem("announcing over BGP needs at least one peer", ("peers",))
        seen: dict[str, int] = {}
        for index, peer in enumerate(self.peers):
            if peer.address in seen:
                first = f"first at peers[{seen[peer.address]}]"
                raise problem(
                    f"peer {peer.address} is listed twice ({first})", ("peers", index, "address")
                )
            seen[peer.address] = index
        return self
