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
    forwarding: Annotated[Forwarding, FORWARDING] = Forwarding.NAT
    weight: Annotated[int, WEIGHT] = 1


def _vips(value: object) -> tuple[str, ...]:
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
            raise problem("at most one nodeport_vip per address family", at)
        vips.append(vip)
    return tuple(vips)


_ONE_OR_TWO = {"oneOf": [ADDRESS.schema, {"type": "array", "items": ADDRESS.schema, "maxItems": 2}]}


@dataclass(frozen=True, slots=True, config=SECTION)
class KubeSettings(Section):
    """``kubernetes:``: which Services this director serves, and how."""

    kubeconfig: Annotated[str | None, TEXT] = None  # None: in-cluster config
    load_balancer_class: Annotated[
        str, matching(QUALIFIED_RE, lambda _: "must be a label-style name like example.com/lb")
    ] = DEFAULT_CLASS
    default_class: Annotated[bool, FLAG] = False  # also serve LoadBalancer Services with no class
    nodeport_vips: Annotated[tuple[str, ...], Rule(_vips, _ONE_OR_TWO)] = Field(
        default=(), alias="nodeport_vip"
    )
    backends: Annotated[str, one_of("nodeport", "pod")] = "nodeport"
    resync_seconds: Annotated[int, integer(1, 86400)] = 60
    drain_timeout_seconds: Annotated[int, integer(0, 86400)] = 30
    identity: Annotated[str, TEXT] = Field(  # the host name if not given
        default_factory=socket.gethostname, json_schema_extra={"default": None}
    )
    lease_namespace: Annotated[str, DNS_LABEL] = "lvs-director"  # rbac.yaml grants leases here
    lease_name: Annotated[str, DNS_LABEL] = "lvs-director"
    lease_seconds: Annotated[int, integer(2, 3600)] = 15
    # MetalLB's Service annotations (metallb.io/loadBalancerIPs, address-pool,
    # allow-shared-ip, and the metallb.universe.tf/ forms) where ours are absent.
    metallb_annotations: Annotated[bool, FLAG] = False


@dataclass(frozen=True, slots=True, config=SECTION)
class ApiSettings(Section):
    """``api:``: the admin API and status page."""

    token_file: Annotated[str, FILE_PATH]
    listen: Annotated[Listen, LISTEN] = Listen("127.0.0.1", 9180)
    tls_cert: Annotated[str | None, FILE_PATH] = None
    tls_key: Annotated[str | None, FILE_PATH] = None
    intents_file: Annotated[str, FILE_PATH] = "/var/lib/director/intents.json"
    # What answers without the token: health (/healthz, /readyz), metrics, status_page (the
    # status page's data, which holds the last error; the page itself asks for the token).
    public: Annotated[tuple[str, ...], list_of(one_of("health", "metrics", "status_page"))] = (
        "health",
        "metrics",
    )

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
class HaSettings(Section):
    """``ha:``: this director's half of a keepalived VRRP pair."""

    interface: Annotated[str, IFNAME]  # VRRP adverts and the VIPs
    router_id: Annotated[
        str, matching(NAME_RE, lambda _: "letters, digits and _.- only (63 at most)")
    ]
    priority: Annotated[int, integer(1, 254)]
    unicast_source: Annotated[str, ADDRESS]
    peers: Annotated[tuple[str, ...], list_of(ADDRESS)]
    virtual_router_id: Annotated[int, integer(1, 255)] = 51
    advert_int: Annotated[  # seconds (VRRPv3 counts centiseconds)
        float,
        seconds(0.01, 40.95, ", like 0.1", "must be between 0.01 and 40.95 seconds (VRRPv3)", 2),
    ] = 0.1
    preempt_delay: Annotated[int, integer(0, 1000)] = 30  # a returning box waits (conn sync)
    nopreempt: Annotated[bool, FLAG] = False
    track_interfaces: Annotated[tuple[str, ...], list_of(IFNAME)] = ()
    sync_interface: Annotated[str | None, IFNAME] = None  # the IPVS sync daemon's interface
    sync_id: Annotated[int, integer(0, 255)] = 0
    # The sync daemon's multicast group and UDP port (the kernel's defaults: 224.0.0.81 or
    # ff02::81, port 8848); the kernel sends its sync messages to a multicast group only.
    sync_group: Annotated[str | None, ADDRESS] = None
    sync_port: Annotated[int | None, integer(1, 65535)] = None
    # (address, prefix, interface): the real servers' gateway in LVS-NAT
    gateways: Annotated[tuple[tuple[str, int, str], ...], list_of(Rule(_gateway, _GATEWAY))] = ()
    inline_vips: Annotated[int, integer(0, 1000)] = 20  # the rest: virtual_ipaddress_excluded
    config_file: Annotated[str, FILE_PATH] = "/etc/keepalived/keepalived.conf"
    pid_file: Annotated[str, FILE_PATH] = "/run/keepalived.pid"
    fifo: Annotated[str, FILE_PATH] = "/run/director/keepalived.fifo"
    keepalived: Annotated[str, FILE_PATH] = "keepalived"  # the binary
    netns: Annotated[str | None, IFNAME] = None  # keepalived's network namespace, if not ours
    # keepalived's VRRP process at this real-time priority (SCHED_RR; 0: ordinary): a box
    # whose CPU is taken by busy processes still sends its adverts on time.
    realtime_priority: Annotated[int, integer(0, 99)] = 50
    # keepalived gives up mastership (the box's priority drops to the least) once the
    # director's control loop has not stepped for this long (0: never). Needs preemption:
    # with nopreempt the peer never takes over from a lower-priority master.
    alive_seconds: Annotated[int, integer(0, 3600)] = 30

    @model_validator(mode="after")
    def _peers(self) -> HaSettings:
        if self.sync_group is not None and not ipaddress.ip_address(self.sync_group).is_multicast:
            raise problem("the kernel's sync daemon sends to a multicast group (224.0.0.0/4 or "
                          "ff00::/8); unicast is not offered", ("sync_group",))  # fmt: skip
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
    interval: Annotated[float, seconds(0.1, 3600.0, "", "must be between 0.1 and 3600 seconds")] = (
        2.0
    )
    timeout: Annotated[float, seconds(0.05, 60.0, "", "must be between 0.05 and 60 seconds")] = 1.0
    rise: Annotated[int, integer(1, 100)] = 2
    fall: Annotated[int, integer(1, 100)] = 3
    expect: Annotated[
        tuple[int, int],
        Rule(_expect, {"type": "string", "examples": ["200", "200-399"]}),
    ] = Statuses(200, 399)
    on_failure: Annotated[str, one_of("quiesce", "remove")] = (
        "quiesce"  # remove: weight 0 is not enough
    )
    all_down: Annotated[str, one_of("keep", "remove")] = "keep"

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
