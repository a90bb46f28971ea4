"""The director's configuration file: one typed validation gate.

Every error names the file, the line, the field (``services[2].real_servers[0].weight``)
and the reason; nothing partially valid is ever returned.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from director.core.checks import CheckSpec, parse_check
from director.core.errors import DirectorError
from director.core.ipam import Pool, PoolError
from director.core.model import (
    CONFIGURABLE_FORWARDING,
    KNOWN_SCHEDULERS,
    Family,
    Forwarding,
    Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
    Table,
    VirtualService,
    canonical_address,
    check_flags,
    shown,
)
from director.core.plan import Network, Ownership

DEFAULT_CLASS = "lvs-director.io/ipvs"
MAX_WEIGHT = 65535
MAX_THRESHOLD = 2**31 - 1
MAX_PERSISTENCE = 31 * 24 * 3600


class ConfigError(DirectorError, ValueError):
    status = 400

    def __init__(self, source: str, line: int, where: str, reason: str) -> None:
        self.source, self.line, self.where, self.reason = source, line, where, reason
        location = f"{source}:{line}" if line else source
        super().__init__(f"{location}: {where + ': ' if where else ''}{reason}")


@dataclass(frozen=True, slots=True)
class Defaults:
    scheduler: str = "wlc"
    forwarding: Forwarding = Forwarding.NAT
    weight: int = 1


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """The ``kubernetes:`` section: which Services this director serves, and how."""

    kubeconfig: str | None = None  # None: in-cluster config
    load_balancer_class: str = DEFAULT_CLASS
    default_class: bool = False  # also serve LoadBalancer Services with no class
    nodeport_vips: tuple[str, ...] = ()  # one per family at most
    backends: str = "nodeport"  # nodeport | pod
    resync_seconds: int = 60
    drain_timeout_seconds: int = 30
    identity: str = field(default_factory=socket.gethostname)
    lease_namespace: str = "lvs-director"  # where deploy/kubernetes/rbac.yaml grants leases
    lease_name: str = "lvs-director"
    lease_seconds: int = 15


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """The ``api:`` section: the admin API and status page."""

    host: str = "127.0.0.1"
    port: int = 9180
    token_file: str = ""
    tls_cert: str | None = None
    tls_key: str | None = None
    intents_file: str = "/var/lib/director/intents.json"
    # What answers without the token: health (/healthz, /readyz), metrics, status_page.
    public: tuple[str, ...] = ("health", "metrics", "status_page")


@dataclass(frozen=True, slots=True)
class HaSettings:
    """The ``ha:`` section: this director's half of a keepalived VRRP pair."""

    interface: str  # VRRP adverts and the VIPs
    router_id: str
    priority: int
    unicast_source: str
    peers: tuple[str, ...]
    virtual_router_id: int = 51
    advert_int: float = 0.1  # seconds (VRRPv3: centiseconds)
    preempt_delay: int = 30  # seconds a returning box waits (its connection table syncs)
    nopreempt: bool = False
    track_interfaces: tuple[str, ...] = ()
    sync_interface: str | None = None  # the IPVS connection sync daemon's interface
    sync_id: int = 0
    gateways: tuple[tuple[str, int, str], ...] = ()  # (address, prefix, interface): LVS-NAT
    inline_vips: int = 20  # in virtual_ipaddress; the rest go to virtual_ipaddress_excluded
    config_file: str = "/etc/keepalived/keepalived.conf"
    pid_file: str = "/run/keepalived.pid"
    fifo: str = "/run/director/keepalived.fifo"
    keepalived: str = "keepalived"  # the binary
    netns: str | None = None  # keepalived's network namespace (`ip netns` name), if not ours
    # keepalived's VRRP process at this real-time priority (SCHED_RR; 0: ordinary): a box
    # whose CPU is taken by busy processes still sends its adverts on time.
    realtime_priority: int = 50


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """The ``health:`` section: active checks of every real server."""

    spec: CheckSpec = field(default_factory=CheckSpec)
    enabled: bool = True  # check: none turns the default check off (annotations may still ask)
    on_failure: str = "quiesce"  # quiesce (weight 0) | remove
    all_down: str = "keep"  # keep | remove


@dataclass(frozen=True, slots=True)
class Settings:
    source: str = "<defaults>"
    ownership: Ownership = field(default_factory=Ownership)
    defaults: Defaults = field(default_factory=Defaults)
    services: Table = field(default_factory=dict)
    kubernetes: KubeSettings | None = None
    pools: tuple[Pool, ...] = ()
    api: ApiSettings | None = None
    ha: HaSettings | None = None
    health: HealthSettings | None = None
    # Static services' own health check ("none" or a check), by service key.
    static_checks: dict[ServiceKey, CheckSpec | None] = field(default_factory=dict)


class _Node:
    """A YAML node with its path in the document, for precise errors."""

    def __init__(self, node: yaml.Node, where: str, source: str) -> None:
        self.node, self.where, self.source = node, where, source

    @property
    def line(self) -> int:
        return int(self.node.start_mark.line) + 1

    def fail(self, reason: str) -> ConfigError:
        return ConfigError(self.source, self.line, self.where, reason)

    def child(self, node: yaml.Node, suffix: str) -> _Node:
        return _Node(
            node, f"{self.where}{suffix}" if self.where else suffix.lstrip("."), self.source
        )

    def mapping(self, allowed: set[str], required: set[str] = frozenset()) -> dict[str, _Node]:  # type: ignore[assignment]
        if not isinstance(self.node, yaml.MappingNode):
            raise self.fail("must be a mapping of keys to values")
        out: dict[str, _Node] = {}
        for key_node, value_node in self.node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise _Node(key_node, self.where, self.source).fail("keys must be strings")
            label = key if key.isprintable() else shown(key)  # errors are one line
            if key in out:
                raise self.child(key_node, f".{label}").fail(
                    f"duplicate key (first given on line {out[key].line})"
                )
            if key not in allowed:
                raise self.child(key_node, f".{label}").fail(
                    f"unknown key (allowed: {', '.join(sorted(allowed))})"
                )
            out[key] = self.child(value_node, f".{key}")
        missing = sorted(required - out.keys())
        if missing:
            raise self.fail(f"missing required key {missing[0]!r}")
        return out

    def items(self) -> Iterator[_Node]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.fail("must be a list")
        for index, item in enumerate(self.node.value):
            yield self.child(item, f"[{index}]")

    def scalar(self) -> str:
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.fail("must be a single value, not a list or mapping")
        return str(self.node.value)

    def text(self, choices: tuple[str, ...] | None = None) -> str:
        value = self.scalar()
        if choices is not None and value not in choices:
            raise self.fail(f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    def integer(self, low: int, high: int) -> int:
        value = self.scalar()
        try:
            number = int(value, 10)
        except ValueError:
            raise self.fail(
                f"must be an integer between {low} and {high} (got {value!r})"
            ) from None
        if not low <= number <= high:
            raise self.fail(f"must be an integer between {low} and {high} (got {number})")
        return number

    def address(self) -> str:
        try:
            return canonical_address(self.scalar())
        except ValueError as exc:
            raise self.fail(str(exc)) from None


MAX_DEPTH = 32  # the schema nests 5 deep; anything deeper is a mistake or an attack


def load_config(path: str | Path) -> Settings:
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(source, 0, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(source, line, "", "not UTF-8 text") from None
    return parse_config(text, source)


def _compose(text: str, source: str) -> yaml.Node | None:
    """The YAML node tree, or a ConfigError naming the line (never a traceback)."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else 0
        raise ConfigError(source, line, "", f"not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:  # a reader error: a character YAML does not allow
        mark = getattr(exc, "position", None)
        line = text[:mark].count("\n") + 1 if isinstance(mark, int) else 0
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(source, line, "", f"not valid YAML: {first}") from None
    except RecursionError:
        raise ConfigError(source, 0, "", "not valid YAML: nested far too deeply") from None


def _check_depth(node: yaml.Node, source: str) -> None:
    """Refuse absurd nesting (each node once: aliases cannot make the walk explode)."""
    stack = [(node, 1)]
    seen: set[int] = set()
    while stack:
        item, depth = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if depth > MAX_DEPTH:
            raise ConfigError(
                source, item.start_mark.line + 1, "", f"nested deeper than {MAX_DEPTH} levels"
            )
        if isinstance(item, yaml.MappingNode):
            stack.extend((child, depth + 1) for pair in item.value for child in pair)
        elif isinstance(item, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in item.value)


def parse_config(text: str, source: str = "<config>") -> Settings:
    root = _compose(text, source)
    if root is None:
        return Settings(source=source)
    _check_depth(root, source)
    top = _Node(root, "", source).mapping(
        {"ownership", "defaults", "services", "kubernetes", "pools", "api", "ha", "health"}
    )
    health = _health(top["health"]) if "health" in top else None
    ownership = _ownership(top["ownership"]) if "ownership" in top else Ownership()
    pools = _pools(top["pools"]) if "pools" in top else ()
    kube = _kubernetes(top["kubernetes"]) if "kubernetes" in top else None
    if kube is not None and not pools:
        raise top["kubernetes"].fail(
            "serving Kubernetes Services needs at least one address pool (pools:)"
        )
    # The pools and the NodePort VIPs are the director's own: it owns their addresses.
    extra: list[Network] = [net for pool in pools for net in pool.networks()]
    extra += [ipaddress.ip_network(vip) for vip in (kube.nodeport_vips if kube else ())]
    if extra:
        ownership = Ownership(
            tuple(dict.fromkeys((*ownership.networks, *extra))), ownership.fwmarks
        )
    defaults = _defaults(top["defaults"]) if "defaults" in top else Defaults()
    services: Table = {}
    lines: dict[object, int] = {}
    for item in top["services"].items() if "services" in top else ():
        vs = _service(item, defaults)
        if vs.key in services:
            raise item.fail(f"{vs.key} is declared twice (first on line {lines[vs.key]})")
        if vs.origin != "static" and vs.origin in lines:
            raise item.mapping(SERVICE_KEYS)["name"].fail(
                f"the name {vs.origin.partition('/')[2]!r} is taken (first on line "
                f"{lines[vs.origin]})"
            )
        lines[vs.origin] = item.line
        if not ownership.owns(vs.key):
            raise item.fail(
                f"{vs.key} is outside the owned ranges ({ownership.describe()}); "
                "add its network to ownership.networks (or its mark to ownership.fwmarks)"
            )
        services[vs.key] = vs
        lines[vs.key] = item.line
    api = _api(top["api"]) if "api" in top else None
    ha = _ha(top["ha"]) if "ha" in top else None
    static_checks: dict[ServiceKey, CheckSpec | None] = {}
    for item in top["services"].items() if "services" in top else ():
        fields = item.mapping(SERVICE_KEYS)
        if "health_check" not in fields:
            continue
        key = _service(item, defaults).key
        text = fields["health_check"].scalar()
        if text == "none":
            static_checks[key] = None
            continue
        parsed = parse_check(text, health.spec if health else CheckSpec())
        if isinstance(parsed, str):
            raise fields["health_check"].fail(parsed)
        static_checks[key] = parsed
    return Settings(
        source, ownership, defaults, services, kube, pools, api, ha, health, static_checks
    )


def _health(node: _Node) -> HealthSettings:
    fields = node.mapping(
        {"check", "interval", "timeout", "rise", "fall", "expect", "on_failure", "all_down"}
    )
    base = CheckSpec()
    expect = base.expect
    if "expect" in fields:
        low_text, _, high_text = fields["expect"].scalar().partition("-")
        try:
            low, high = int(low_text), int(high_text or low_text)
        except ValueError:
            raise fields["expect"].fail("an HTTP status or a range like 200-399") from None
        if not 100 <= low <= high <= 599:
            raise fields["expect"].fail("statuses run from 100 to 599, low to high")
        expect = (low, high)
    seconds: dict[str, float] = {}
    for name, default, least, most in (
        ("interval", 2.0, 0.1, 3600.0),
        ("timeout", 1.0, 0.05, 60.0),
    ):
        if name in fields:
            text = fields[name].scalar()
            try:
                value = float(text)
            except ValueError:
                raise fields[name].fail(f"must be seconds (got {text!r})") from None
            if not least <= value <= most:
                raise fields[name].fail(f"must be between {least:g} and {most:g} seconds")
            seconds[name] = value
        else:
            seconds[name] = default
    if seconds["timeout"] > seconds["interval"]:
        raise fields.get("timeout", node).fail("the timeout must not exceed the interval")
    spec = CheckSpec(
        "tcp",
        base.path,
        expect,
        seconds["interval"],
        seconds["timeout"],
        fields["rise"].integer(1, 100) if "rise" in fields else base.rise,
        fields["fall"].integer(1, 100) if "fall" in fields else base.fall,
    )
    enabled = True
    if "check" in fields:
        text = fields["check"].scalar()
        if text == "none":
            enabled = False
        else:
            parsed = parse_check(text, spec)
            if isinstance(parsed, str):
                raise fields["check"].fail(parsed)
            spec = parsed
    return HealthSettings(
        spec,
        enabled,
        fields["on_failure"].text(("quiesce", "remove")) if "on_failure" in fields else "quiesce",
        fields["all_down"].text(("keep", "remove")) if "all_down" in fields else "keep",
    )


_IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,14}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_PATH = re.compile(r"/[A-Za-z0-9_./@+-]*")


def _ifname(node: _Node) -> str:
    name = node.scalar()
    if not _IFNAME.fullmatch(name):
        raise node.fail(f"{name!r} is not an interface name (letters, digits, _.@-; 15 at most)")
    return name


def _path(node: _Node) -> str:
    path = node.scalar()
    if not _PATH.fullmatch(path):
        raise node.fail(f"{path!r} must be an absolute path without spaces or quotes")
    return path


def _ha(node: _Node) -> HaSettings:
    fields = node.mapping(
        {
            "interface", "router_id", "priority", "unicast_source", "peers",
            "virtual_router_id", "advert_int", "preempt_delay", "nopreempt",
            "track_interfaces", "sync_interface", "sync_id", "gateways", "inline_vips",
            "config_file", "pid_file", "fifo", "keepalived", "netns", "realtime_priority",
        },
        {"interface", "router_id", "priority", "unicast_source", "peers"},
    )  # fmt: skip
    router_id = fields["router_id"].scalar()
    if not _NAME.fullmatch(router_id):
        raise fields["router_id"].fail("letters, digits and _.- only (63 at most)")
    source = fields["unicast_source"].address()
    peers = tuple(item.address() for item in fields["peers"].items())
    if not peers:
        raise fields["peers"].fail("a pair needs its peer's address")
    for peer, item in zip(peers, fields["peers"].items(), strict=True):
        if Family.of(peer) is not Family.of(source):
            raise item.fail("peers must be of the unicast_source's address family")
    advert = 0.1
    if "advert_int" in fields:
        text = fields["advert_int"].scalar()
        try:
            advert = round(float(text), 2)
        except ValueError:
            raise fields["advert_int"].fail(f"must be seconds, like 0.1 (got {text!r})") from None
        if not 0.01 <= advert <= 40.95:
            raise fields["advert_int"].fail("must be between 0.01 and 40.95 seconds (VRRPv3)")
    gateways = []
    for item in fields["gateways"].items() if "gateways" in fields else ():
        gw = item.mapping({"address", "interface"}, {"address", "interface"})
        text = gw["address"].scalar()
        try:
            iface = ipaddress.ip_interface(text)
        except ValueError:
            raise gw["address"].fail(f"{text!r} is not ADDRESS/PREFIX") from None
        gateways.append((str(iface.ip), iface.network.prefixlen, _ifname(gw["interface"])))

    def text_of(name: str, default: str) -> str:
        return _path(fields[name]) if name in fields else default

    base = HaSettings("x", "x", 1, "0.0.0.0", ())
    return HaSettings(
        interface=_ifname(fields["interface"]),
        router_id=router_id,
        priority=fields["priority"].integer(1, 254),
        unicast_source=source,
        peers=peers,
        virtual_router_id=(
            fields["virtual_router_id"].integer(1, 255) if "virtual_router_id" in fields else 51
        ),
        advert_int=advert,
        preempt_delay=(
            fields["preempt_delay"].integer(0, 1000) if "preempt_delay" in fields else 30
        ),
        nopreempt=(
            fields["nopreempt"].text(("true", "false")) == "true"
            if "nopreempt" in fields
            else False
        ),
        track_interfaces=tuple(
            _ifname(i)
            for i in (fields["track_interfaces"].items() if "track_interfaces" in fields else ())
        ),
        sync_interface=_ifname(fields["sync_interface"]) if "sync_interface" in fields else None,
        sync_id=fields["sync_id"].integer(0, 255) if "sync_id" in fields else 0,
        gateways=tuple(gateways),
        inline_vips=fields["inline_vips"].integer(0, 1000) if "inline_vips" in fields else 20,
        config_file=text_of("config_file", base.config_file),
        pid_file=text_of("pid_file", base.pid_file),
        fifo=text_of("fifo", base.fifo),
        keepalived=text_of("keepalived", base.keepalived),
        netns=_ifname(fields["netns"]) if "netns" in fields else None,
        realtime_priority=(
            fields["realtime_priority"].integer(0, 99)
            if "realtime_priority" in fields
            else base.realtime_priority
        ),
    )


def _api(node: _Node) -> ApiSettings:
    fields = node.mapping(
        {"listen", "token_file", "tls_cert", "tls_key", "intents_file", "public"},
        {"token_file"},
    )
    base = ApiSettings()
    host, port = base.host, base.port
    if "listen" in fields:
        text = fields["listen"].scalar()
        raw_host, _, port_text = text.rpartition(":")
        raw_host = raw_host.strip("[]")
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:  # 0: any free port
            raise fields["listen"].fail(f"{text!r} is not ADDRESS:PORT (e.g. 127.0.0.1:9180)")
        try:
            host = canonical_address(raw_host)
        except ValueError as exc:
            raise fields["listen"].fail(str(exc)) from None
        port = int(port_text)
    cert = _path(fields["tls_cert"]) if "tls_cert" in fields else None
    key = _path(fields["tls_key"]) if "tls_key" in fields else None
    if (cert is None) != (key is None):
        where = fields["tls_cert"] if cert is not None else fields["tls_key"]
        raise where.fail("TLS needs both tls_cert and tls_key")
    public = base.public
    if "public" in fields:
        public = tuple(item.text(base.public) for item in fields["public"].items())
    return ApiSettings(
        host=host,
        port=port,
        token_file=_path(fields["token_file"]),
        tls_cert=cert,
        tls_key=key,
        intents_file=(
            _path(fields["intents_file"]) if "intents_file" in fields else base.intents_file
        ),
        public=public,
    )


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_QUALIFIED = re.compile(
    r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


def _pools(node: _Node) -> tuple[Pool, ...]:
    pools: list[Pool] = []
    seen: dict[str, int] = {}
    for item in node.items():
        fields = item.mapping(
            {"name", "addresses", "auto_assign", "all_addresses"}, {"name", "addresses"}
        )
        name = fields["name"].scalar()
        if not _DNS_LABEL.fullmatch(name):
            raise fields["name"].fail("a pool name is a DNS label (lowercase letters, digits, -)")
        if name in seen:
            raise fields["name"].fail(
                f"pool {name!r} is declared twice (first on line {seen[name]})"
            )
        auto = (
            fields["auto_assign"].text(("true", "false")) == "true"
            if "auto_assign" in fields
            else True
        )
        every = (
            fields["all_addresses"].text(("true", "false")) == "true"
            if "all_addresses" in fields
            else False
        )
        entries = [entry.scalar() for entry in fields["addresses"].items()]
        try:
            pool = Pool.parse(name, entries, auto, every)
        except PoolError as exc:
            raise fields["addresses"].fail(str(exc)) from None
        for other in pools:
            for fam, first, last in pool.ranges:
                if any(f == fam and first <= l2 and f2 <= last for f, f2, l2 in other.ranges):
                    raise fields["addresses"].fail(f"overlaps pool {other.name!r}")
        pools.append(pool)
        seen[name] = item.line
    return tuple(pools)


def _kubernetes(node: _Node) -> KubeSettings:
    fields = node.mapping(
        {
            "kubeconfig",
            "load_balancer_class",
            "default_class",
            "nodeport_vip",
            "backends",
            "resync_seconds",
            "drain_timeout_seconds",
            "identity",
            "lease_namespace",
            "lease_name",
            "lease_seconds",
        }
    )
    base = KubeSettings()
    vips: list[str] = []
    if "nodeport_vip" in fields:
        vip_node = fields["nodeport_vip"]
        items = (
            list(vip_node.items()) if isinstance(vip_node.node, yaml.SequenceNode) else [vip_node]
        )
        for item in items:
            vip = item.address()
            if any(Family.of(v) is Family.of(vip) for v in vips):
                raise item.fail("at most one nodeport_vip per address family")
            vips.append(vip)
    klass = (
        fields["load_balancer_class"].scalar()
        if "load_balancer_class" in fields
        else base.load_balancer_class
    )
    if not _QUALIFIED.fullmatch(klass):
        raise fields["load_balancer_class"].fail("must be a label-style name like example.com/lb")
    for name in ("lease_namespace", "lease_name"):
        if name in fields and not _DNS_LABEL.fullmatch(fields[name].scalar()):
            raise fields[name].fail("must be a DNS label (lowercase letters, digits, -)")
    return KubeSettings(
        kubeconfig=fields["kubeconfig"].scalar() if "kubeconfig" in fields else None,
        load_balancer_class=klass,
        default_class=(
            fields["default_class"].text(("true", "false")) == "true"
            if "default_class" in fields
            else False
        ),
        nodeport_vips=tuple(vips),
        backends=fields["backends"].text(("nodeport", "pod"))
        if "backends" in fields
        else "nodeport",
        resync_seconds=fields["resync_seconds"].integer(1, 86400)
        if "resync_seconds" in fields
        else 60,
        drain_timeout_seconds=(
            fields["drain_timeout_seconds"].integer(0, 86400)
            if "drain_timeout_seconds" in fields
            else 30
        ),
        identity=fields["identity"].scalar() if "identity" in fields else base.identity,
        lease_namespace=fields["lease_namespace"].scalar()
        if "lease_namespace" in fields
        else base.lease_namespace,
        lease_name=fields["lease_name"].scalar() if "lease_name" in fields else base.lease_name,
        lease_seconds=fields["lease_seconds"].integer(2, 3600) if "lease_seconds" in fields else 15,
    )


def _ownership(node: _Node) -> Ownership:
    fields = node.mapping({"networks", "fwmarks"})
    networks: list[Network] = []
    for item in fields["networks"].items() if "networks" in fields else ():
        try:
            networks.append(ipaddress.ip_network(item.scalar(), strict=True))
        except ValueError as exc:
            raise item.fail(f"not a network in CIDR form: {exc}") from None
    marks: list[range] = []
    for item in fields["fwmarks"].items() if "fwmarks" in fields else ():
        low_text, _, high_text = item.scalar().partition("-")
        try:
            low = int(low_text)
            high = int(high_text) if high_text else low
        except ValueError:
            raise item.fail("must be a mark or a range of marks like 100-199") from None
        if not 1 <= low <= high <= 0xFFFFFFFF:
            raise item.fail("marks must be between 1 and 4294967295, low to high")
        marks.append(range(low, high + 1))
    return Ownership(tuple(networks), tuple(marks))


def _scheduler(node: _Node) -> str:
    return node.text(KNOWN_SCHEDULERS)


def _forwarding(node: _Node) -> Forwarding:
    labels = tuple(f.label for f in CONFIGURABLE_FORWARDING)
    return Forwarding[node.text(labels).upper()]


def _defaults(node: _Node) -> Defaults:
    fields = node.mapping({"scheduler", "forwarding", "weight"})
    base = Defaults()
    return Defaults(
        _scheduler(fields["scheduler"]) if "scheduler" in fields else base.scheduler,
        _forwarding(fields["forwarding"]) if "forwarding" in fields else base.forwarding,
        fields["weight"].integer(0, MAX_WEIGHT) if "weight" in fields else base.weight,
    )


SERVICE_KEYS = {
    "name",
    "address",
    "port",
    "protocol",
    "fwmark",
    "family",
    "scheduler",
    "flags",
    "persistence",
    "netmask",
    "forwarding",
    "real_servers",
    "health_check",
}
REAL_SERVER_KEYS = {
    "address",
    "port",
    "weight",
    "forwarding",
    "upper_threshold",
    "lower_threshold",
}


def _service(node: _Node, defaults: Defaults) -> VirtualService:
    fields = node.mapping(SERVICE_KEYS)
    name = ""
    if "name" in fields:
        name = fields["name"].scalar()
        if not _NAME.fullmatch(name):
            raise fields["name"].fail(
                f"{shown(name)} is not a service name (letters, digits and _.-, 63 at most; "
                "the API addresses it as /api/v1/static/NAME)"
            )
    if "fwmark" in fields:
        for clash in ("address", "port", "protocol"):
            if clash in fields:
                raise fields[clash].fail("a firewall-mark service has no address, port or protocol")
        family = (
            Family.INET6
            if "family" in fields and fields["family"].text(("ipv4", "ipv6")) == "ipv6"
            else Family.INET
        )
        key = ServiceKey.mark(family, fields["fwmark"].integer(1, 0xFFFFFFFF))
    else:
        if "address" not in fields:
            raise node.fail("a service needs an address and port, or a fwmark")
        if "family" in fields:
            raise fields["family"].fail("family is implied by the address (use it with fwmark)")
        address = fields["address"].address()
        if "port" not in fields:
            raise node.fail("missing required key 'port'")
        protocol = Protocol.TCP
        if "protocol" in fields:
            protocol = Protocol[fields["protocol"].text(("tcp", "udp", "sctp")).upper()]
        key = ServiceKey.inet(protocol, address, fields["port"].integer(1, 65535))
    scheduler = _scheduler(fields["scheduler"]) if "scheduler" in fields else defaults.scheduler
    flags = frozenset(
        item.scalar() for item in (fields["flags"].items() if "flags" in fields else ())
    )
    persistence = (
        fields["persistence"].integer(0, MAX_PERSISTENCE) if "persistence" in fields else 0
    )
    try:  # canonical names: what the kernel reads back (flag-1 with sh is sh-fallback)
        flags = check_flags(scheduler, flags, key.protocol)
    except ValueError as exc:
        raise fields["flags"].fail(str(exc)) from None
    netmask = key.family.max_prefix
    if "netmask" in fields:
        netmask = fields["netmask"].integer(1, key.family.max_prefix)
    forwarding = (
        _forwarding(fields["forwarding"]) if "forwarding" in fields else defaults.forwarding
    )
    real_servers: dict[tuple[str, int], RealServer] = {}
    lines: dict[tuple[str, int], int] = {}
    for item in fields["real_servers"].items() if "real_servers" in fields else ():
        rs = _real_server(item, key, forwarding, defaults.weight)
        if rs.key in real_servers:
            raise item.fail(f"real server declared twice (first on line {lines[rs.key]})")
        real_servers[rs.key] = rs
        lines[rs.key] = item.line
    config = ServiceConfig(scheduler, flags, persistence, netmask)
    return VirtualService(key, config, real_servers, f"static/{name}" if name else "static")


def _split_endpoint(node: _Node) -> tuple[str, int]:
    text = node.scalar()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":")
    if not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise node.fail(
            f"{text!r} is not ADDRESS:PORT (IPv6 as [ADDRESS]:PORT), "
            "or a mapping with address and port"
        )
    try:
        return canonical_address(host), int(port_text)
    except ValueError as exc:
        raise node.fail(str(exc)) from None


def _real_server(node: _Node, key: ServiceKey, forwarding: Forwarding, weight: int) -> RealServer:
    if isinstance(node.node, yaml.ScalarNode):
        address, port = _split_endpoint(node)
        upper = lower = 0
    else:
        fields = node.mapping(REAL_SERVER_KEYS, {"address"})
        address = fields["address"].address()
        port = fields["port"].integer(0, 65535) if "port" in fields else key.port
        if "weight" in fields:
            weight = fields["weight"].integer(0, MAX_WEIGHT)
        if "forwarding" in fields:
            forwarding = _forwarding(fields["forwarding"])
        upper = (
            fields["upper_threshold"].integer(0, MAX_THRESHOLD)
            if "upper_threshold" in fields
            else 0
        )
        lower = (
            fields["lower_threshold"].integer(0, MAX_THRESHOLD)
            if "lower_threshold" in fields
            else 0
        )
        if lower > upper:
            raise fields["lower_threshold"].fail(
                f"lower_threshold ({lower}) needs an upper_threshold at least as large "
                f"(got {upper})"
            )
    if port == 0 and not key.fwmark:
        raise node.fail("a real server of an address:port service needs a port")
    if Family.of(address) is not key.family and forwarding is not Forwarding.TUN:
        raise node.fail(
            f"real server {address} is {Family.of(address).label} but the service is "
            f"{key.family.label}; mixing families only works with forwarding: tun"
        )
    return RealServer(address, port, weight, forwarding, upper, lower)
