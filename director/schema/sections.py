"""The sections of the configuration file: the settings the director runs on as they are.

Each key is defined once, with its type, bounds and default (``director.schema.fields``
holds the value types); the file's own objects (services, pools) are in
:mod:`director.schema.static`.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Annotated, Any, NamedTuple

from pydantic import ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import PydanticCustomError

from director.core.checks import CheckSpec, parse_check
from director.core.model import (
    CONFIGURABLE_FORWARDING,
    KNOWN_SCHEDULERS,
    MAX_WEIGHT,
    Family,
    Forwarding,
    plain_network,
)
from director.schema.fields import (
    ADDRESS,
    DNS_LABEL,
    FILE_PATH,
    FLAG,
    IFNAME,
    LISTEN,
    NAME_RE,
    QUALIFIED_RE,
    TEXT,
    Keys,
    Listen,
    Rule,
    below,
    check_keys,
    integer,
    keys_of,
    list_of,
    matching,
    one_of,
    problem,
    scalar,
    seconds,
)

DEFAULT_CLASS = "lvs-director.io/ipvs"
# A field's docstring is its description: in the JSON Schema, and in docs/configuration.md,
# which is made from the schema (`make docs`). Read when the schema is printed
# (config._FileSchema), not at every start (pydantic's use_attribute_docstrings).
SECTION = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


SCHEDULER = one_of(*KNOWN_SCHEDULERS)
_FORWARDING = one_of(*(f.label for f in CONFIGURABLE_FORWARDING))
FORWARDING = Rule(
    lambda v: v if isinstance(v, Forwarding) else Forwarding[_FORWARDING(v).upper()],
    _FORWARDING.schema,
)
WEIGHT = integer(0, MAX_WEIGHT)


class Section:
    """Checks a file mapping's keys against the dataclass's fields (Python calls pass)."""

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        return keys_of(cls, data)


@dataclass(frozen=True, slots=True, config=SECTION)
class Defaults(Section):
    """``defaults:``: what a static service or real server does not say."""

    scheduler: Annotated[str, SCHEDULER] = "wlc"
    """Scheduler of a static service that names none, and of a Kubernetes Service without the
    annotation (over BGP: mh with mh-port instead)."""
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
        except PydanticCustomError as exc:
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
        except PydanticCustomError as exc:
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


@dataclass(frozen=True, slots=True, config=SECTION)
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


@dataclass(frozen=True, slots=True, config=SECTION)
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
    nodeport_vips: Annotated[tuple[str, ...], Rule(_vips, _ONE_OR_TWO)] = Field(
        default=(), alias="nodeport_vip"
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
    identity: Annotated[str, TEXT] = Field(  # the host name if not given
        default_factory=socket.gethostname, json_schema_extra={"default": None}
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


@dataclass(frozen=True, slots=True, config=SECTION)
class ApiSettings(Section):
    """``api:``: the admin API and status page."""

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

    @model_validator(mode="after")
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
    except PydanticCustomError as exc:
        raise below(exc, "interface") from None
    return str(iface.ip), iface.network.prefixlen, name


_GATEWAY = {
    "type": "object",
    "required": ["address", "interface"],
    "properties": {"address": {"examples": ["192.0.2.1/24"]}, "interface": IFNAME.schema},
}


@dataclass(frozen=True, slots=True, config=SECTION)
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

    @model_validator(mode="after")
    def _family(self) -> ConntrackdSettings:
        if Family.of(self.peer) is not Family.of(self.source):
            raise problem("the peer must be of the source's address family", ("peer",))
        if self.peer == self.source:
            raise problem("the peer is the other box, not this one", ("peer",))
        return self


@dataclass(frozen=True, slots=True, config=SECTION)
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
    # whose CPU is taken by busy processes still sends its adverts on time.
    realtime_priority: Annotated[int, integer(0, 99)] = 50
    """keepalived's VRRP process runs at this real-time priority (vrrp_rt_priority; 0: ordinary
    scheduling), so adverts leave on time on a busy box."""
    # keepalived gives up mastership (the box's priority drops to the least) once the
    # director's control loop has not stepped for this long (0: never). Needs preemption:
    # with nopreempt the peer never takes over from a lower-priority master.
    alive_seconds: Annotated[int, integer(0, 3600)] = 30
    """keepalived gives up mastership once the director's control loop has not stepped for this
    long (0: never; no effect with nopreempt)."""
    conntrackd: ConntrackdSettings | None = None
    """conntrackd beside keepalived (full NAT's connections kept across a failover); unset:
    full-NAT connections break when the VIPs move."""

    @model_validator(mode="after")
    def _peers(self) -> HaSettings:
        if self.sync_group is not None and not ipaddress.ip_address(self.sync_group).is_multicast:
            raise problem(
                "the kernel's sync daemon sends to a multicast group (224.0.0.0/4 or "
                "ff00::/8); unicast is not offered",
                ("sync_group",),
            )
        if not self.peers:
            raise problem("a pair needs its peer's address", ("peers",))
        for index, peer in enumerate(self.peers):
            if Family.of(peer) is not Family.of(self.unicast_source):
                raise problem(
                    "peers must be of the unicast_source's address family", ("peers", index)
                )
        return self


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


@dataclass(frozen=True, slots=True, config=SECTION)
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

    @model_validator(mode="after")
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
