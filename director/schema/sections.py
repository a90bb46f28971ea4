"""The sections of the configuration file: the settings the director runs on as they are.

Each key is defined once, with its type, bounds and default (``director.schema.fields``
holds the value types); the file's own objects (services, pools) are in
:mod:`director.schema.static`, the pair's (``ha:``) in :mod:`director.schema.ha`.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import field
from typing import Annotated, NamedTuple

from director.core.checks import CheckSpec, parse_check
from director.core.model import (
    CONFIGURABLE_FORWARDING,
    KNOWN_SCHEDULERS,
    MAX_WEIGHT,
    Family,
    Forwarding,
    plain_network,
)
from director.core.ownership import Network
from director.schema.fields import (
    ADDRESS,
    DNS_LABEL,
    FILE_PATH,
    FLAG,
    LISTEN,
    QUALIFIED_RE,
    TEXT,
    Listen,
    Rule,
    below,
    digits,
    integer,
    list_of,
    matching,
    one_of,
    problem,
    scalar,
    seconds,
)
from director.schema.sections_base import Problem, after, section

DEFAULT_CLASS = "lvs-director.io/ipvs"
# A field's docstring is its description: in the JSON Schema, and in docs/configuration.md,
# which is made from the schema (`make docs`). Read when the schema is printed
# (config.json_schema), not at every start.


SCHEDULER = one_of(*KNOWN_SCHEDULERS)
_FORWARDING = one_of(*(f.label for f in CONFIGURABLE_FORWARDING))
FORWARDING = Rule(
    lambda v: v if isinstance(v, Forwarding) else Forwarding[_FORWARDING(v).upper()],
    _FORWARDING.schema,
)
WEIGHT = integer(0, MAX_WEIGHT)


class Section:
    """A section of the file (each is made by :func:`~director.schema.sections_base.section`:
    its keys are checked against its fields, each field by its rule)."""

    __slots__ = ()


@section
class Defaults(Section):
    """``defaults:``: what a static service or real server does not say."""

    scheduler: Annotated[str, SCHEDULER] = "wlc"
    """Scheduler of a static service that names none, and of a Kubernetes Service without the
    annotation (over BGP: mh with mh-port and mh-fallback instead)."""
    forwarding: Annotated[Forwarding, FORWARDING] = Forwarding.NAT
    """Forwarding of a real server when neither it nor its service names one: nat (the director
    is the real servers' gateway), fullnat (nat, and the real servers see the box's snat
    address, so they need nothing; a whole service's), dr (same L2 segment, the VIP on the
    real server's lo) or tun (IPIP)."""
    weight: Annotated[int, WEIGHT] = 1
    """Weight of a real server written as ADDRESS:PORT, and of each node or pod of a Kubernetes
    Service (with externalTrafficPolicy Local: per ready local pod)."""


def _vips(value: object, what: str = "nodeport_vip") -> tuple[str, ...]:
    """One address or a list of them, at most one per family."""
    many = isinstance(value, (list, tuple))
    vips: list[str] = []
    for index, item in enumerate(value if isinstance(value, (list, tuple)) else [value]):
        at = (index,) if many else ()
        try:
            vip = ADDRESS(item)
        except Problem as exc:
            raise below(exc, *at) from None
        if any(Family.of(v) is Family.of(vip) for v in vips):
            raise problem(f"at most one {what} per address family", at)
        vips.append(vip)
    return tuple(vips)


_ONE_OR_TWO = {"oneOf": [ADDRESS.schema, {"type": "array", "items": ADDRESS.schema, "maxItems": 2}]}
MAX_SNAT = 64  # addresses in snat.addresses
_ONE_OR_MANY = {
    "oneOf": [ADDRESS.schema, {"type": "array", "items": ADDRESS.schema, "maxItems": MAX_SNAT}]
}


def _snat_addresses(value: object) -> tuple[str, ...]:
    """One address or a list of them (any number per family, each once)."""
    many = isinstance(value, (list, tuple))
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) > MAX_SNAT:
        raise problem(f"at most {MAX_SNAT} snat addresses")
    out: list[str] = []
    for index, item in enumerate(items):
        at = (index,) if many else ()
        try:
            address = ADDRESS(item)
        except Problem as exc:
            raise below(exc, *at) from None
        if address in out:
            raise problem(f"{address} is listed twice", at)
        out.append(address)
    return tuple(out)


def _port_range(value: object) -> tuple[int, int]:
    low_text, dash, high_text = scalar(value).partition("-")
    try:
        low, high = int(low_text), int(high_text)
    except ValueError:
        raise problem("a port range like 20000-59999") from None
    if not dash or not 1 <= low <= high <= 65535:
        raise problem("a port range like 20000-59999 (1-65535, the low end first)")
    return low, high


_PORT_RANGE = {"type": "string", "pattern": r"^[0-9]{1,5}-[0-9]{1,5}$", "examples": ["20000-59999"]}


@section
class SnatSettings(Section):
    """``snat:``: the source address of full-NAT traffic (``forwarding: fullnat``)."""

    addresses: Annotated[tuple[str, ...], Rule(_snat_addresses, _ONE_OR_MANY)]
    """Required: this box's own address, or a list (one or more per family), that full-NAT
    connections leave for the real servers from: the real servers see it as the client and
    reply to it, so they need a route to it and none to the clients (an address on their own
    network needs nothing at all). Each director has its own; in a pair with ha.conntrackd,
    floating addresses both share (among ha.gateways), so connections survive a failover.
    Several of a family: each new connection takes the next in turn; one address carries
    about 64,000 connections at once to each real server address and port (or as many as
    snat.ports holds), so a busy real server wants more than one."""
    ports: Annotated[tuple[int, int] | None, Rule(_port_range, _PORT_RANGE)] = None
    """The source ports full-NAT connections leave from, as LOW-HIGH (default: the kernel's
    choice, the client's own port where it is free, else one of 1024-65535). One address
    carries at most this many connections at once to each real server address and port; a
    connection that finds none free is dropped and counted
    (director_conntrack_insert_failed)."""


SYN_GUARD_MODES = ("auto", "on", "off")
_SYN_GUARD = one_of(*SYN_GUARD_MODES)
# YAML 1.1 reads a bare on/off as a boolean: taken as the word it was
SYN_GUARD = Rule(
    lambda v: ("on" if v else "off") if isinstance(v, bool) else _SYN_GUARD(v), _SYN_GUARD.schema
)


@section
class GuardSettings(Section):
    """``guard:``: how the box defends itself and the real servers behind it."""

    syn: Annotated[str, SYN_GUARD] = "auto"
    """SYN flood defence of TCP services forwarded by nat or fullnat: the box answers each
    SYN itself with a SYN cookie (nftables synproxy), and only a client whose ACK returns a
    valid cookie reaches IPVS and a real server: spoofed SYNs fill neither IPVS's connection
    table nor a real server's accept queue. auto: on for a box on its own (no ha:, no bgp:);
    off in a pair or a BGP fleet, where a guarded connection's handshake state is this box's
    alone and a takeover would break it. on: guard there too, accepting that. off: guard
    nothing. With the guard, every IPVS connection is tracked by conntrack
    (net.ipv4.vs.conntrack=1, nf_conntrack_tcp_loose=0; the role sets both and sizes
    nf_conntrack_max). dr and tun cannot be guarded (the real servers answer the clients
    directly; let them use their own syncookies). A Service opts out with the annotation
    lvs-director.io/syn-guard: "off", a static service with syn_guard: false."""
    mss: Annotated[int, integer(536, 9000)] = 1460
    """The MSS the box's SYN cookie answer offers clients (IPv6: 20 less): the real servers'
    own (their interface's MTU less 40)."""
    wscale: Annotated[int, integer(0, 14)] = 7
    """The window scale the box's SYN cookie answer offers clients: the real servers' own
    (Linux uses 7 with its default buffer sizes); another value gives the clients the wrong
    windows."""


@section
class KubeSettings(Section):
    """``kubernetes:``: which Services this director serves, and how."""

    kubeconfig: Annotated[str | None, TEXT] = None  # None: in-cluster config
    """The kubeconfig the director reads and writes the cluster with (its own identity, see
    deploy/kubernetes/rbac.yaml); unset: the pod's service account."""
    load_balancer_class: Annotated[
        str, matching(QUALIFIED_RE, lambda _: "must be a label-style name like example.com/lb")
    ] = DEFAULT_CLASS
    """The spec.loadBalancerClass of the Services this director implements."""
    default_class: Annotated[bool, FLAG] = False  # also serve LoadBalancer Services with no class
    """Also serve LoadBalancer Services that name no class (the place MetalLB takes)."""
    nodeport_vips: Annotated[tuple[str, ...], Rule(_vips, _ONE_OR_TWO)] = field(
        default=(), metadata={"alias": "nodeport_vip"}
    )
    """An address, or one per family, on which every NodePort Service (and every LoadBalancer
    Service's node ports) is served at its node port, balanced over the nodes."""
    backends: Annotated[str, one_of("nodeport", "pod")] = "nodeport"
    """Where a Service's real servers are: nodeport (each usable node at the node port;
    kube-proxy takes it from there) or pod (each ready endpoint, on a routable pod network).
    Per Service: lvs-director.io/backends."""
    resync_seconds: Annotated[int, integer(1, 86400)] = 60
    """Seconds between full resyncs: the kernel's whole table read back and every drift
    repaired."""
    drain_timeout_seconds: Annotated[int, integer(0, 86400)] = 30
    """Longest wait, in seconds, for a removed real server's active connections; it stays at
    weight 0 meanwhile."""
    identity: Annotated[str, TEXT] = field(  # the host name if not given
        default_factory=socket.gethostname, metadata={"json_schema_extra": {"default": None}}
    )
    """This director's name in the status Lease (default: the host name)."""
    lease_namespace: Annotated[str, DNS_LABEL] = "lvs-director"  # rbac.yaml grants leases here
    """Namespace of the Lease that elects the one director of a pair writing Service status and
    Events (the RBAC grants leases there)."""
    lease_name: Annotated[str, DNS_LABEL] = "lvs-director"
    """Name of that Lease."""
    lease_seconds: Annotated[int, integer(2, 3600)] = 15
    """Lease duration in seconds: a leader that dies is replaced after this long (one that
    stops cleanly gives the Lease up, and the other box takes it within a third of this)."""
    # MetalLB's Service annotations (metallb.io/loadBalancerIPs, address-pool,
    # allow-shared-ip, and the metallb.universe.tf/ forms) where ours are absent.
    metallb_annotations: Annotated[bool, FLAG] = False
    """Honour MetalLB's metallb.io/loadBalancerIPs, address-pool and allow-shared-ip annotations
    (and their metallb.universe.tf/ forms) where a Service has none of ours."""

    @property
    def cluster(self) -> str:
        """The cluster's name in references: "" for ``kubernetes:``, the one cluster."""
        return ""


@section
class ClusterSettings(KubeSettings):
    """One of ``clusters:``: a Kubernetes cluster this director serves beside others (every
    key of ``kubernetes:``, and these). Its Services are ``NAME/namespace/name`` everywhere;
    its watches, its Lease and its writes are its own. One loop serves them all: it resyncs
    at the shortest ``resync_seconds`` and drains for the longest ``drain_timeout_seconds``
    of them."""

    name: Annotated[str, DNS_LABEL] = field(kw_only=True)
    """The cluster's name (a DNS label): in every reference to its Services
    (prod/default/web), in logs, the API and the status page."""
    pools: Annotated[tuple[str, ...], list_of(DNS_LABEL)] = field(default=(), kw_only=True)
    """The pools its Services may draw from (by name), and only those. None listed: the pools
    no cluster lists (shared by every cluster that lists none). A pool listed by one cluster
    is that cluster's alone; an address is never given to two clusters."""
    intake: Annotated[str, one_of("process", "thread")] = field(default="process", kw_only=True)
    """Where the cluster's lists are decoded: process (each list, the first and every relist
    after 410 Gone, by a process made for that list, which sends the director only what
    changed, so that one cluster's relist never holds another's events back) or thread (in
    the director's interpreter). Watch events are decoded in the director either way. A
    cluster a reload adds to a director started with none of its lists in processes has them
    decoded in the director until a restart."""

    @property
    def cluster(self) -> str:
        return self.name


@section
class ApiSettings(Section):
    """``api:``: the admin API, the status page and the Prometheus metrics (without it the
    director keeps no metrics: nothing could read them)."""

    token_file: Annotated[str, FILE_PATH]
    """Required: the file holding the bearer token (one line of at least 16 characters: letters,
    digits and -._~+/=)."""
    listen: Annotated[Listen, LISTEN] = Listen("127.0.0.1", 9180)
    """ADDRESS:PORT ([v6]:PORT) of the admin API, the status page and /metrics."""
    tls_cert: Annotated[str | None, FILE_PATH] = None
    """Certificate (PEM) to serve HTTPS with; needs tls_key."""
    tls_key: Annotated[str | None, FILE_PATH] = None
    """The certificate's private key (PEM); needs tls_cert."""
    intents_file: Annotated[str, FILE_PATH] = "/var/lib/director/intents.json"
    """Where the API's intents are kept across restarts: static services' scheduler overrides,
    drains, maintenance."""
    # What answers without the token: health (/healthz, /readyz), metrics, status_page (the
    # status page's data, which holds the last error; the page itself asks for the token).
    public: Annotated[tuple[str, ...], list_of(one_of("health", "metrics", "status_page"))] = (
        "health",
        "metrics",
    )
    """What answers without the token: health (/healthz, /readyz), metrics, status_page (the
    status page's data, which holds the last error)."""

    @after
    def _tls_pair(self) -> ApiSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            where = "tls_cert" if self.tls_cert is not None else "tls_key"
            raise problem("TLS needs both tls_cert and tls_key", (where,))
        return self

    @property
    def host(self) -> str:
        return self.listen.host

    @property
    def port(self) -> int:
        return self.listen.port


class Statuses(NamedTuple):
    """HTTP statuses a check accepts, low to high (inclusive)."""

    low: int
    high: int


def _expect(value: object) -> tuple[int, int]:
    if isinstance(value, tuple):
        return Statuses(*value)
    low_text, _, high_text = scalar(value).partition("-")
    try:
        low, high = int(low_text), int(high_text or low_text)
    except ValueError:
        raise problem("an HTTP status or a range like 200-399") from None
    if not 100 <= low <= high <= 599:
        raise problem("statuses run from 100 to 599, low to high")
    return Statuses(low, high)


@section
class HealthSettings(Section):
    """``health:``: active checks of every real server."""

    # tcp, http[:/path], https[:/path]; none turns the default check off (annotations and
    # static services may still ask for one)
    check: Annotated[str, TEXT] = "tcp"
    """The default check of every real server: tcp, http[:/path], https[:/path],
    http[s]://HOST[/path] (HOST sent as Host and SNI), or none (only what annotations and
    static services ask for)."""
    interval: Annotated[float, seconds(0.1, 3600.0, "", "must be between 0.1 and 3600 seconds")] = (
        2.0
    )
    """Seconds between two checks of one real server."""
    timeout: Annotated[float, seconds(0.05, 60.0, "", "must be between 0.05 and 60 seconds")] = 1.0
    """Seconds a check may take; at most the interval."""
    rise: Annotated[int, integer(1, 100)] = 2
    """Successes in a row that bring a real server back."""
    fall: Annotated[int, integer(1, 100)] = 3
    """Failures in a row that take a real server down."""
    expect: Annotated[
        tuple[int, int], Rule(_expect, {"type": "string", "examples": ["200", "200-399"]})
    ] = Statuses(200, 399)
    """HTTP statuses that pass: one (200) or a range (200-399)."""
    on_failure: Annotated[str, one_of("quiesce", "remove")] = (
        "quiesce"  # remove: weight 0 is not enough
    )
    """What a failing real server gets: quiesce (weight 0, open connections finish) or remove
    (removed, then drained)."""
    all_down: Annotated[str, one_of("keep", "remove")] = "keep"
    """When every real server of a service fails: keep them all (and say so loudly) or remove
    them."""

    @after
    def _valid(self) -> HealthSettings:
        if self.timeout > self.interval:
            raise problem("the timeout must not exceed the interval", ("timeout",))
        parsed = self.parse(self.check) if self.enabled else None
        if isinstance(parsed, str):
            raise problem(parsed, ("check",))
        return self

    @property
    def enabled(self) -> bool:
        return self.check != "none"

    def parse(self, check: str) -> CheckSpec | str:
        """``check`` (a config or annotation value) with this section's timings."""
        base = CheckSpec("tcp", "/", self.expect, self.interval, self.timeout, self.rise, self.fall)
        return parse_check(check, base)

    @property
    def spec(self) -> CheckSpec:
        parsed = self.parse(self.check if self.enabled else "tcp")
        if isinstance(parsed, str):  # refused when the section was made
            raise ValueError(parsed)
        return parsed


def _network(value: object) -> Network:
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return value
    try:
        return plain_network(scalar(value), strict=True)
    except ValueError as exc:
        raise problem(f"not a network in CIDR form: {exc}") from None


def _marks(value: object) -> range:
    if isinstance(value, range):
        return value
    low_text, _, high_text = scalar(value).partition("-")
    if not digits(low_text) or (high_text and not digits(high_text)):
        raise problem("must be a mark or a range of marks like 100-199")
    low = int(low_text)
    high = int(high_text) if high_text else low
    if not 1 <= low <= high <= 0xFFFFFFFF:
        raise problem("marks must be between 1 and 4294967295, low to high")
    return range(low, high + 1)


@section
class OwnershipEntry(Section):
    """``ownership:``: what the director may create, change and delete in the kernel."""

    networks: Annotated[
        tuple[Network, ...], list_of(Rule(_network, {"type": "string", "format": "cidr"}))
    ] = ()
    """CIDRs (IPv4, IPv6) whose virtual services the director owns; its pools and NodePort VIPs
    are added. Anything else in the kernel is left alone and reported."""
    fwmarks: Annotated[
        tuple[range, ...], list_of(Rule(_marks, {"type": "string", "examples": ["100-199"]}))
    ] = ()
    """Firewall marks, or ranges like 1000-1999, whose services the director owns."""
