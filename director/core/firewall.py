"""Source filtering of virtual services (``spec.loadBalancerSourceRanges``): the nftables
ruleset (rendered here, pure), the adapter Protocol, and a stateful fake.

IPVS takes a packet for a virtual service at the input hook (priority 98). The director's own
table, ``inet director``, hooks input earlier (priority -10): a packet to a restricted
``VIP . protocol . port`` is looked up in a verdict map that jumps to that service's chain,
which accepts the allowed sources and counts and drops the rest. Every forwarding mode (nat,
dr, tun) is covered, and the nodes' kube-proxy never has to see the client at all.

Full NAT (``forwarding: fullnat``) lives in the same table: a packet to a full-NAT
``VIP . protocol . port`` is marked at prerouting (``SNAT_MARK``), IPVS masquerades it to a
real server, and at postrouting a marked packet leaves from the box's SNAT address (with
``net.ipv4.vs.conntrack=1``, conntrack undoes it on the reply before IPVS sees it). The real
servers reply to the director whatever their routes.

The SYN guard (``guard.syn``) lives there too: a SYN to a guarded ``VIP . tcp . port`` is
left untracked at prerouting (priority raw), and at input (priority -5, after the source
filter, before IPVS) nftables' ``synproxy`` answers it with a SYN cookie and drops it. Only
a client whose ACK carries a valid cookie gets further: synproxy then opens the connection
to the VIP from the box's own stack (IPVS schedules it at local output, and conntrack's
sequence adjustment joins the two halves), so spoofed SYNs never reach IPVS's connection
table or a real server's accept queue. It needs IPVS's connections tracked
(``net.ipv4.vs.conntrack=1``) and ``nf_conntrack_tcp_loose=0`` (the cookie's ACK must be
"invalid", not picked up), and it works for nat and fullnat only: by dr or tun the real
server's SYN-ACK never comes back through the box. For full NAT, the connection synproxy
opens is marked at output as the client's packets are at prerouting, so it leaves from the
SNAT address too.

Limits per service (``RateLimit``) live in the service's chain too: a TCP SYN over the
client's rate (one dynamic set per service, an element per client address carrying its own
token bucket) or over the service's (a named limit object, which outlives rule changes) is
counted and dropped, never reset. For a SYN-guarded service the service's rate counts the
handshakes synproxy would complete (the cookie ACKs, which a client sends again until one
passes) rather than SYNs, so a spoofed flood cannot use up the rate of the real clients;
the client's rate counts SYNs before synproxy answers them in every case.

The whole table is brought to the desired state in one ``nft -f`` transaction (all or
nothing: a ruleset nft refuses leaves the old one in force). No other table is ever touched.
Each service's drop counter is a named counter object that outlives rule changes, so the
dropped-packets metric does not reset when an allowed range changes. Each distinct list of
allowed ranges is one named interval set, shared by the services that allow the same
sources: the script grows with the number of ranges once, not once per port.

The table is owned state: ``fingerprint`` reads back what it holds (counters aside), and
the loop compares that with what it held right after the director's last write, so a
``flush ruleset`` (``systemctl reload nftables``) is found and repaired.
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from director.core.model import Family, IpProtocol, RateLimit, ServiceKey, plain_network
from director.core.owned import Failure, Refused, Transient

TABLE = "director"
FAMILY = "inet"
CHAIN_PREFIX = "svc"
COUNTER_PREFIX = "drop"
SET_PREFIX = "src"
SNAT_MARK = 0x00400000  # the packet mark bit full-NAT traffic carries from prerouting
SNAT_CHAINS, SNAT_SETS = ("fullnat_mark", "fullnat_out", "fullnat_snat"), ("fullnat4", "fullnat6")
GUARD_CHAINS, GUARD_SETS = ("guard_raw", "guard_in"), ("guard4", "guard6")
SNAT_OBJECTS = (*SNAT_CHAINS, *SNAT_SETS)
GUARD_OBJECTS = (*GUARD_CHAINS, *GUARD_SETS)
GUARD_COUNTER = "guard_dropped"  # packets to a guarded service neither cookie nor connection
METER_PREFIX, RATE_PREFIX, OVER_PREFIX = "client", "rate", "over"  # a service's limits
METER_SIZE = 65536  # client addresses a service's meter tracks at once (then: not limited)
METER_TIMEOUT = 60  # seconds a client's bucket is kept after its last SYN
SYN = "tcp flags & (fin | syn | rst | ack) == syn"  # a connection's first packet


@dataclass(frozen=True, slots=True)
class SynGuard:
    """What the box's SYN cookies offer a client: the real servers' MSS (IPv4; IPv6 gets 20
    less) and window scale (a client that is told another scale than the real server uses
    gets its windows wrong)."""

    mss: int = 1460
    wscale: int = 7


Restrictions = Mapping[ServiceKey, tuple[str, ...]]
Limits = Mapping[ServiceKey, RateLimit]
T = TypeVar("T")


class FirewallError(Refused):
    """nft refused a ruleset (its own words in the message). One that could not be run at
    all raises ``Transient``."""

    status = 503


class Firewall(Protocol):
    """What the engine needs of the packet filter."""

    def apply(
        self,
        restrictions: Restrictions,
        snat: frozenset[ServiceKey] = frozenset(),
        guard: frozenset[ServiceKey] = frozenset(),
        limits: Limits | None = None,
    ) -> None:
        """Make ``restrictions`` the whole set of filtered services, ``snat`` the whole set
        of full-NAT ones, ``guard`` the whole set of SYN-guarded ones, ``limits`` the whole
        set of limited ones. Raises FirewallError (the previous rules stay in force)."""
        ...

    def dropped(self) -> dict[ServiceKey, int]:
        """Packets dropped per filtered service since its filter was first made."""
        ...

    def limited(self) -> dict[ServiceKey, tuple[int, int]]:
        """Connection attempts dropped per limited service since its limit was first made:
        (over a client's rate, over the service's)."""
        ...

    def guard_dropped(self) -> int:
        """Packets the SYN guard dropped (neither a valid cookie nor part of a connection)
        since it was first made (0 without it)."""
        ...

    def in_use(self) -> bool:
        """Does the director's table hold filters (a previous run's, say)?"""
        ...

    def fingerprint(self) -> str:
        """A digest of everything the director's table holds but its counters' values ("":
        no table): it changes whenever anyone changes the table. Raises Transient when
        the table cannot be read."""
        ...


def counts(read: Callable[[], dict[ServiceKey, T]]) -> dict[ServiceKey, T]:
    """One of the firewall's counter reads (``dropped``, ``limited``) for a page or a
    scrape: none when nft fails (that is logged where the table is applied)."""
    try:
        return read()
    except Failure:
        return {}


def object_name(prefix: str, key: ServiceKey) -> str:
    """A stable nft identifier for ``key``'s chain or counter (letters, digits, _)."""
    assert key.protocol is not None
    address = key.address.replace(".", "_").replace(":", "_")
    family = "4" if key.family is Family.INET else "6"
    return f"{prefix}{family}_{key.protocol.label}_{address}_{key.port}"


def clean_ranges(key: ServiceKey, ranges: Iterable[str]) -> list[str]:
    """The ranges of ``key``'s family as canonical networks, overlaps and neighbours merged
    (what an interval set holds); anything else is dropped. O(n log n)."""
    want = 6 if key.family is Family.INET6 else 4
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for text in dict.fromkeys(ranges):
        try:
            net = plain_network(text, strict=False)
        except ValueError:
            continue
        if net.version == want:
            nets.append(net)
    return [str(net) for net in ipaddress.collapse_addresses(nets)]  # type: ignore[type-var]


def set_name(family: Family, ranges: list[str]) -> str:
    """The named set that holds ``ranges`` (one per distinct list and family)."""
    digest = hashlib.sha256(" ".join(ranges).encode()).hexdigest()[:16]
    return f"{SET_PREFIX}{'4' if family is Family.INET else '6'}_{digest}"


def render_nft(
    restrictions: Restrictions,
    existing: Iterable[str] = (),
    snat: frozenset[ServiceKey] = frozenset(),
    snat_to: Mapping[Family, tuple[str, ...]] | None = None,
    snat_ports: tuple[int, int] | None = None,
    *,
    guard: frozenset[ServiceKey] = frozenset(),
    syn_guard: SynGuard | None = None,
    limits: Limits | None = None,
) -> str:
    """The ``nft -f`` script that makes table ``inet director`` hold exactly
    ``restrictions``, full NAT for ``snat`` (from the addresses ``snat_to`` gives per
    family, in turn when several; none: no full NAT at all), the SYN guard for ``guard``
    (with ``syn_guard``'s options; None: no guard at all) and ``limits``; ``existing``:
    names of chains, sets, counters and limits the table holds now (the obsolete ones are
    deleted in the same transaction). Linear in the number of services and ranges."""
    t = f"{FAMILY} {TABLE}"
    existing = list(existing)
    lines = [
        f"add table {t}",
        f"add map {t} services4 {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}",
        f"add map {t} services6 {{ type ipv6_addr . inet_proto . inet_service : verdict ; }}",
        f"add chain {t} input {{ type filter hook input priority -10 ; policy accept ; }}",
        f"flush chain {t} input",
        f"add rule {t} input meta nfproto ipv4 ip daddr . meta l4proto . th dport vmap @services4",
        f"add rule {t} input meta nfproto ipv6 ip6 daddr . meta l4proto . th dport vmap @services6",
        f"flush map {t} services4",
        f"flush map {t} services6",
    ]
    guarded = guarded_keys(guard) if syn_guard is not None else frozenset()
    limited = {k: (limits or {})[k] for k in limited_keys(limits or {}, restrictions)}
    wanted: set[str] = set()
    sets: dict[str, list[str]] = {}
    for key in sorted(k for k in {*restrictions, *limited} if not k.fwmark and k.protocol):
        assert key.protocol is not None
        chain = object_name(CHAIN_PREFIX, key)
        wanted.add(chain)
        lines += [f"add chain {t} {chain}", f"flush chain {t} {chain}"]
        ranges = clean_ranges(key, restrictions[key]) if key in restrictions else None
        if ranges is not None:
            lines += _filter_lines(t, key, ranges, sets, wanted)
        if key in limited:
            lines += _limit_lines(t, key, limited[key], key in guarded, wanted)
        if ranges is None or ranges:
            lines.append(f"add rule {t} {chain} accept")  # open to none: the drop alone
        where = "services4" if key.family is Family.INET else "services6"
        lines.append(
            f"add element {t} {where} {{ {key.address} . {key.protocol.label} . {key.port} : "
            f"goto {chain} }}"
        )
    to = snat_to or {}
    marked = frozenset(k for k in snat if to.get(k.family))  # none of its family: held back
    if guarded:  # before full NAT's chains: they name its sets
        wanted.update((*GUARD_OBJECTS, GUARD_COUNTER))
        lines += _guard_lines(t, guarded, syn_guard or SynGuard())
    if marked:  # no full-NAT service: none of its objects either
        wanted.update(SNAT_OBJECTS)
        lines += _snat_lines(t, marked, to, snat_ports, guarded)
    gone = sorted(set(existing) - wanted)
    # Full NAT's and the guard's chains first (they name their sets), then their sets.
    lines += [f"delete chain {t} {n}" for n in (*SNAT_CHAINS, *GUARD_CHAINS) if n in gone]
    lines += [f"delete set {t} {n}" for n in (*SNAT_SETS, *GUARD_SETS) if n in gone]
    if GUARD_COUNTER in gone:
        lines.append(f"delete counter {t} {GUARD_COUNTER}")
    # Chains first (their rules name the sets, counters and limits), then those.
    for prefix, kind in (
        (CHAIN_PREFIX, "chain"),
        (SET_PREFIX, "set"),
        (METER_PREFIX, "set"),
        (COUNTER_PREFIX, "counter"),
        (OVER_PREFIX, "counter"),
        (RATE_PREFIX, "limit"),
    ):
        lines += [f"delete {kind} {t} {name}" for name in gone if name.startswith(prefix)]
    return "\n".join(lines) + "\n"


def _filter_lines(
    t: str, key: ServiceKey, ranges: list[str], sets: dict[str, list[str]], wanted: set[str]
) -> list[str]:
    """The source filter in ``key``'s chain: a source outside its ``ranges`` (as
    ``clean_ranges`` gives them) is counted and dropped (each distinct list one set, in
    ``sets``)."""
    chain, counter = object_name(CHAIN_PREFIX, key), object_name(COUNTER_PREFIX, key)
    wanted.add(counter)
    v4 = key.family is Family.INET
    name = set_name(key.family, ranges) if ranges else None
    lines = []
    if name is not None and name not in sets:
        sets[name] = ranges
        kind = "ipv4_addr" if v4 else "ipv6_addr"
        lines += [
            f"add set {t} {name} {{ type {kind} ; flags interval ; }}",
            f"flush set {t} {name}",
            f"add element {t} {name} {{ {', '.join(ranges)} }}",
        ]
    lines.append(f"add counter {t} {counter}")
    outside = ""
    if name is not None:
        wanted.add(name)
        outside = f"{'ip' if v4 else 'ip6'} saddr != @{name} "
    lines.append(f'add rule {t} {chain} {outside}counter name "{counter}" drop')
    return lines


def limited_keys(limits: Limits, restrictions: Restrictions) -> list[ServiceKey]:
    """The services whose limits go into the table: TCP with an address and a port and a
    limit, not closed to every source (then nothing passes to be limited)."""
    return [
        key
        for key, limit in limits.items()
        if limit
        and key.protocol is IpProtocol.TCP
        and not key.fwmark
        and (key not in restrictions or clean_ranges(key, restrictions[key]))
    ]


def limit_names(key: ServiceKey, limit: RateLimit) -> tuple[str, str, str]:
    """``key``'s meter set, service limit object and over-limit counters' stem (``_client``,
    ``_service``). The meter and the limit are named by their rate: one changed is a new
    object (nft keeps a limit's rate in its rules, not in the set), the counters keep
    counting."""
    return (
        f"{object_name(METER_PREFIX, key)}_{limit.client}",
        f"{object_name(RATE_PREFIX, key)}_{limit.service}",
        object_name(OVER_PREFIX, key),
    )


def _limit_lines(
    t: str, key: ServiceKey, limit: RateLimit, guarded: bool, wanted: set[str]
) -> list[str]:
    """``key``'s limits in its chain: a client's SYNs over its rate, then the service's new
    connections over its rate (SYNs; the cookie ACKs when guarded), counted and dropped."""
    chain = object_name(CHAIN_PREFIX, key)
    meter, rate, over = limit_names(key, limit)
    lines = [f"add counter {t} {over}_client", f"add counter {t} {over}_service"]
    wanted.update((f"{over}_client", f"{over}_service"))
    if limit.client:
        wanted.add(meter)
        v4 = key.family is Family.INET
        lines += [
            f"add set {t} {meter} {{ type {'ipv4_addr' if v4 else 'ipv6_addr'} ; "
            f"size {METER_SIZE} ; flags dynamic,timeout ; timeout {METER_TIMEOUT}s ; }}",
            f"add rule {t} {chain} {SYN} update @{meter} {{ {'ip' if v4 else 'ip6'} saddr "
            f"limit rate over {limit.client}/second burst {limit.client} packets }} "
            f'counter name "{over}_client" drop',
        ]
    if limit.service:
        wanted.add(rate)
        # synproxy completes a guarded handshake on its ACK (invalid: no entry yet)
        first = "ct state invalid,untracked tcp flags & (fin | syn | rst | ack) == ack"
        lines += [
            f"add limit {t} {rate} {{ rate over {limit.service}/second burst "
            f"{limit.service} packets ; }}",
            f'add rule {t} {chain} {first if guarded else SYN} limit name "{rate}" '
            f'counter name "{over}_service" drop',
        ]
    return lines


def guarded_keys(guard: Iterable[ServiceKey]) -> frozenset[ServiceKey]:
    """The virtual services a SYN guard can cover: TCP, an address and a port."""
    return frozenset(k for k in guard if not k.fwmark and k.protocol is IpProtocol.TCP)


def _elements(keys: Iterable[ServiceKey], family: Family) -> list[str]:
    return [f"{k.address} . tcp . {k.port}" for k in sorted(keys) if k.family is family and k.port]


def _guard_lines(t: str, guard: frozenset[ServiceKey], options: SynGuard) -> list[str]:
    """The SYN guard: SYNs to a guarded service untracked at prerouting, answered with a
    cookie by synproxy at input; what is neither a valid cookie nor part of a connection is
    counted and dropped."""
    lines = [
        f"add set {t} guard4 {{ type ipv4_addr . inet_proto . inet_service ; }}",
        f"add set {t} guard6 {{ type ipv6_addr . inet_proto . inet_service ; }}",
        f"flush set {t} guard4",
        f"flush set {t} guard6",
        f"add counter {t} {GUARD_COUNTER}",
        f"add chain {t} guard_raw {{ type filter hook prerouting priority raw ; policy accept ; }}",
        f"flush chain {t} guard_raw",
        f"add chain {t} guard_in {{ type filter hook input priority -5 ; policy accept ; }}",
        f"flush chain {t} guard_in",
    ]
    for name, match, verb, mss in (
        ("guard4", "ipv4", "ip", options.mss),
        ("guard6", "ipv6", "ip6", options.mss - 20),
    ):
        where = f"meta nfproto {match} {verb} daddr . meta l4proto . th dport @{name}"
        lines += [
            f"add rule {t} guard_raw {where} tcp flags & (fin | syn | rst | ack) == syn notrack",
            f"add rule {t} guard_in {where} ct state invalid,untracked synproxy mss {mss} "
            f"wscale {options.wscale} timestamp sack-perm",
            f'add rule {t} guard_in {where} ct state invalid counter name "{GUARD_COUNTER}" drop',
        ]
    for name, family in (("guard4", Family.INET), ("guard6", Family.INET6)):
        elements = _elements(guard, family)
        if elements:
            lines.append(f"add element {t} {name} {{ {', '.join(elements)} }}")
    return lines


def _snat_lines(
    t: str,
    snat: frozenset[ServiceKey],
    snat_to: Mapping[Family, tuple[str, ...]],
    ports: tuple[int, int] | None = None,
    guarded: frozenset[ServiceKey] = frozenset(),
) -> list[str]:
    """Full NAT: mark what is bound for a full-NAT virtual service, SNAT what is marked
    (from ``ports``, LOW-HIGH, when given; several addresses of a family in turn, one per
    new connection: conntrack keeps a connection's choice). ``guarded``: the SYN-guarded
    services, whose handshake's last ACK is "invalid" by design (synproxy takes it)."""
    mark = f"0x{SNAT_MARK:08x}"
    lines = [
        f"add set {t} fullnat4 {{ type ipv4_addr . inet_proto . inet_service ; }}",
        f"add set {t} fullnat6 {{ type ipv6_addr . inet_proto . inet_service ; }}",
        f"flush set {t} fullnat4",
        f"flush set {t} fullnat6",
        f"add chain {t} fullnat_mark {{ type filter hook prerouting priority -150 ; "
        "policy accept ; }",
        f"flush chain {t} fullnat_mark",
        # What the box itself opens to a full-NAT VIP (the SYN guard's connections among
        # it) is marked too, before IPVS schedules it at output.
        f"add chain {t} fullnat_out {{ type filter hook output priority -150 ; policy accept ; }}",
        f"flush chain {t} fullnat_out",
    ]
    # A packet conntrack cannot place (``ct state invalid``: the middle of a connection this
    # box has no entry for, with nf_conntrack_tcp_loose=0, as after a takeover whose entry
    # conntrackd has not written yet) is dropped, not forwarded without its SNAT or answered
    # with a reset by this box's own stack: TCP sends it again, and it then finds its entry.
    for family, match, verb in ((Family.INET, "ipv4", "ip"), (Family.INET6, "ipv6", "ip6")):
        sources = snat_to.get(family)
        if sources:
            lines.append(
                f"add rule {t} fullnat_mark meta nfproto {match} {verb} daddr "
                f"{_one_or_set(sources)} ct state invalid drop"
            )
    # a guarded service's cookie ACK is "invalid" by design: it goes on to synproxy
    spare4, spare6 = (
        (" ip daddr . meta l4proto . th dport != @guard4", " ip6 daddr . meta l4proto . th dport"
         " != @guard6") if guarded else ("", "")
    )  # fmt: skip
    lines += [
        f"add rule {t} fullnat_mark meta nfproto ipv4 ip daddr . meta l4proto . th dport "
        f"@fullnat4{spare4} ct state invalid drop",
        f"add rule {t} fullnat_mark meta nfproto ipv6 ip6 daddr . meta l4proto . th dport "
        f"@fullnat6{spare6} ct state invalid drop",
        f"add rule {t} fullnat_mark meta nfproto ipv4 ip daddr . meta l4proto . th dport "
        f"@fullnat4 meta mark set meta mark | {mark}",
        f"add rule {t} fullnat_mark meta nfproto ipv6 ip6 daddr . meta l4proto . th dport "
        f"@fullnat6 meta mark set meta mark | {mark}",
        f"add rule {t} fullnat_out meta nfproto ipv4 ip daddr . meta l4proto . th dport "
        f"@fullnat4 meta mark set meta mark | {mark}",
        f"add rule {t} fullnat_out meta nfproto ipv6 ip6 daddr . meta l4proto . th dport "
        f"@fullnat6 meta mark set meta mark | {mark}",
        f"add chain {t} fullnat_snat {{ type nat hook postrouting priority srcnat ; "
        "policy accept ; }",
        f"flush chain {t} fullnat_snat",
    ]
    for family, match, verb in ((Family.INET, "ipv4", "ip"), (Family.INET6, "ipv6", "ip6")):
        sources = snat_to.get(family)
        if sources:
            to, l4 = _snat_to(family, sources, ports), ""
            if ports:  # a port mapping needs a transport protocol matched first
                l4 = " meta l4proto { tcp, udp, sctp }"
            lines.append(
                f"add rule {t} fullnat_snat meta nfproto {match} meta mark & {mark} "
                f"== {mark}{l4} snat {verb} to {to}"
            )
    by_set: dict[str, list[str]] = {"fullnat4": [], "fullnat6": []}
    for key in sorted(k for k in snat if not k.fwmark and k.protocol is not None):
        assert key.protocol is not None
        name = "fullnat4" if key.family is Family.INET else "fullnat6"
        by_set[name].append(f"{key.address} . {key.protocol.label} . {key.port}")
    for name, elements in by_set.items():
        if elements:
            lines.append(f"add element {t} {name} {{ {', '.join(elements)} }}")
    return lines


def _one_or_set(addresses: tuple[str, ...]) -> str:
    return addresses[0] if len(addresses) == 1 else f"{{ {', '.join(addresses)} }}"


def _snat_to(family: Family, sources: tuple[str, ...], ports: tuple[int, int] | None) -> str:
    """nft's ``snat to`` argument: one address (``A``, ``A:L-H``, ``[A6]:L-H``), or several
    taken in turn by each new connection (``numgen inc mod N map { 0 : A, 1 : B }``, ``:
    L-H`` after the map)."""
    span = f"{ports[0]}-{ports[1]}" if ports else None
    if len(sources) == 1:
        one = sources[0]
        if span is None:
            return one
        return f"{one}:{span}" if family is Family.INET else f"[{one}]:{span}"
    pairs = ", ".join(f"{i} : {a}" for i, a in enumerate(sources))
    chosen = f"numgen inc mod {len(sources)} map {{ {pairs} }}"
    return chosen if span is None else f"{chosen} : {span}"


class FakeFirewall:
    """The filter as data, with nft's rule that a service needs an address and a port, and
    the faults a test injects: nft refusing (``fail``), nft refusing the SYN guard alone
    (``refuse_guard``: a kernel without synproxy), nft not runnable (``unrunnable``), and the
    table flushed by someone else (``flush``)."""

    def __init__(self) -> None:
        self.rules: dict[ServiceKey, tuple[str, ...]] = {}
        self.snat: frozenset[ServiceKey] = frozenset()  # full-NAT services in force
        self.guard: frozenset[ServiceKey] = frozenset()  # SYN-guarded services in force
        self.guard_drops = 0  # what the guard dropped (a test sets it)
        self.limits: dict[ServiceKey, RateLimit] = {}  # limited services in force
        self.over: dict[ServiceKey, tuple[int, int]] = {}  # what limits dropped (a test sets it)
        self.counts: dict[ServiceKey, int] = {}
        self.applies = 0
        self.fail: str | None = None  # set by a test: the next applies are refused
        self.unrunnable: str | None = None  # set by a test: nft cannot be run at all
        self.refuse_guard: str | None = None  # set by a test: a kernel without synproxy
        self.table = False  # the table exists
        self._lock = threading.Lock()

    def _runnable(self) -> None:
        if self.unrunnable is not None:
            raise Transient(f"cannot run nft: {self.unrunnable}")

    def apply(
        self,
        restrictions: Restrictions,
        snat: frozenset[ServiceKey] = frozenset(),
        guard: frozenset[ServiceKey] = frozenset(),
        limits: Limits | None = None,
    ) -> None:
        with self._lock:
            self._runnable()
            if self.fail is not None:
                raise FirewallError(self.fail)
            if self.refuse_guard is not None and guarded_keys(guard):
                raise FirewallError(self.refuse_guard)
            self.applies += 1
            self.table = True
            self.snat = frozenset(k for k in snat if not k.fwmark and k.protocol is not None)
            self.guard = guarded_keys(guard)
            self.rules = {
                key: tuple(clean_ranges(key, ranges))
                for key, ranges in restrictions.items()
                if not key.fwmark and key.protocol is not None
            }
            self.counts = {k: v for k, v in self.counts.items() if k in self.rules}
            self.limits = {k: (limits or {})[k] for k in limited_keys(limits or {}, self.rules)}

    def flush(self) -> None:
        """``nft flush ruleset``, run by someone else: the table is gone."""
        with self._lock:
            self.rules, self.counts, self.table, self.limits = {}, {}, False, {}
            self.snat = self.guard = frozenset()

    def dropped(self) -> dict[ServiceKey, int]:
        with self._lock:
            self._runnable()
            return {key: self.counts.get(key, 0) for key in self.rules}

    def guard_dropped(self) -> int:
        with self._lock:
            self._runnable()
            return self.guard_drops if self.guard else 0

    def limited(self) -> dict[ServiceKey, tuple[int, int]]:
        with self._lock:
            self._runnable()
            return {key: self.over.get(key, (0, 0)) for key in self.limits}

    def in_use(self) -> bool:
        with self._lock:
            return bool(self.rules or self.snat or self.guard or self.limits)

    def fingerprint(self) -> str:
        with self._lock:
            self._runnable()
            if not self.table:
                return ""
            text = repr(
                (
                    sorted((str(k), v) for k, v in self.rules.items()),
                    sorted(str(k) for k in self.snat),
                    sorted(str(k) for k in self.guard),
                    sorted((str(k), v.client, v.service) for k, v in self.limits.items()),
                )
            )
            return hashlib.sha256(text.encode()).hexdigest()

    def admits(self, key: ServiceKey, source: str) -> bool:
        """Would a packet from ``source`` to ``key`` pass? (Counts a drop when not.)"""
        with self._lock:
            ranges = self.rules.get(key)
            if ranges is None:
                return True
            address = ipaddress.ip_address(source)
            if any(address in ipaddress.ip_network(r) for r in ranges):
                return True
            self.counts[key] = self.counts.get(key, 0) + 1
            return False
