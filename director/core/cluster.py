"""The slice of the Kubernetes API objects the director reads, as small frozen values. Pure.

The source hands over the API server's JSON; these parsers keep only what translation needs,
so 10,000 Services and their EndpointSlices fit in a few tens of megabytes, and everything
downstream is plain typed data with no client objects in it.

This is where the cluster's input enters, and nothing from it is trusted: the parsers are
total (any JSON in, a value out, never an exception). Addresses come out canonical (the API
server's sloppy forms, like ``10.0.0.01``, read as kube-proxy reads them); ports, families
and timeouts are range-checked. Whatever is dropped is named in the value's ``problems``, so
the controller can say so (a Warning Event, a log line, a metric) and serve the rest.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import socket
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar, cast

from director.core.model import shown, sloppy_address

PREFIX = "lvs-director.io/"
# MetalLB's Service annotations, kept so that an operator coming from MetalLB can let the
# director honour them (kubernetes.metallb_annotations).
METALLB_PREFIXES = ("metallb.io/", "metallb.universe.tf/")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TRIGGER_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"
# Source ranges one Service may list (cloud providers allow a few hundred: AWS 60 rules a
# security group by default, Azure 1,000 a Service). More is refused as a whole: each is a
# set element the filter holds, and a 1.5 MB Service can list 40,000.
MAX_SOURCE_RANGES = 1000
SAID = 3  # refused entries of one field named one by one; the rest are counted
# The legacy way to give loadBalancerSourceRanges (kube honours it when the field is empty).
SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"
EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"

Json = Mapping[str, Any]
T = TypeVar("T")
NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    protocol: str  # TCP | UDP | SCTP
    port: int
    node_port: int  # 0 when none
    target_port: int | str


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    namespace: str
    name: str
    uid: str
    type: str
    load_balancer_class: str | None
    annotations: Mapping[str, str]  # only lvs-director.io/* and MetalLB's ones
    ports: tuple[ServicePort, ...]
    ip_families: tuple[int, ...]  # 4, 6 in the Service's order
    external_traffic_policy: str  # Cluster | Local
    affinity_timeout: int | None  # ClientIP affinity timeout; None: no affinity
    load_balancer_ip: str | None  # deprecated spec.loadBalancerIP
    status_ips: tuple[str, ...]
    health_check_node_port: int
    created: str
    # spec.loadBalancerSourceRanges (canonical CIDRs); None: no restriction.
    source_ranges: tuple[str, ...] | None = None
    allocate_node_ports: bool = True
    problems: tuple[str, ...] = ()  # what was dropped from the object, and why
    # status.loadBalancer.ingress held something that is not an address: rewrite it.
    stale_status: bool = False
    # metadata.labels of a LoadBalancer Service (a pool's allocate_to selects by them)
    labels: Mapping[str, str] = field(default_factory=lambda: NO_LABELS)
    # namespace/name, made once (interned, so its slices share it): every table keyed by
    # Service shares the one string.
    ref: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", sys.intern(f"{self.namespace}/{self.name}"))


class Endpoint(NamedTuple):
    """One address of an endpoint (an endpoint with several gives one each: they are
    fungible, and each is a real server)."""

    address: str
    ready: bool
    serving: bool
    terminating: bool
    node: str | None


READY, SERVING, TERMINATING = 1, 2, 4  # an endpoint's conditions, as bits of one byte


@dataclass(frozen=True, slots=True)
class SliceInfo:
    """An EndpointSlice, its endpoints kept as columns (a packed address, a byte of
    conditions and a node each): 100,000 endpoints cost ~2 MB, where as objects they cost
    ~18 MB and their addresses as text ~7 MB more."""

    namespace: str
    name: str
    service: str  # namespace/name of the owning Service ("" when unlabelled)
    address_type: str  # IPv4 | IPv6 | FQDN
    ports: tuple[tuple[str, str, int], ...]  # (name, protocol, port)
    packed: bytes = b""  # the addresses, 4 bytes each (IPv4) or 16 (IPv6), canonical
    conditions: bytes = b""  # READY | SERVING | TERMINATING, one per address
    nodes: tuple[str | None, ...] = ()  # one per address; () when no endpoint names one
    # endpoints.kubernetes.io/last-change-trigger-time: when the change that made this
    # version happened (network programming latency starts there).
    trigger_time: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def addresses(self) -> tuple[str, ...]:
        """The addresses' text, in order."""
        if self.address_type == "IPv6":
            family, size = socket.AF_INET6, 16
        else:
            family, size = socket.AF_INET, 4
        raw = self.packed
        return tuple(
            socket.inet_ntop(family, raw[at : at + size]) for at in range(0, len(raw), size)
        )

    @property
    def endpoints(self) -> Iterator[Endpoint]:
        addresses = self.addresses
        nodes = self.nodes or (None,) * len(addresses)
        for address, bits, node in zip(addresses, self.conditions, nodes, strict=True):
            yield Endpoint(
                address, bool(bits & READY), bool(bits & SERVING), bool(bits & TERMINATING), node
            )


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    internal_ips: tuple[str, ...]
    ready: bool
    excluded: bool  # labelled exclude-from-external-load-balancers
    deleting: bool
    problems: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return self.ready and not self.excluded and not self.deleting


_IANA_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?")
_PROTOCOLS = ("TCP", "UDP", "SCTP")
MAX_AFFINITY = 86400  # kube-apiserver's bound on sessionAffinityConfig.clientIP.timeoutSeconds
DEFAULT_AFFINITY = 10800


def _map(value: object) -> Json:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _text(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _short(text: str) -> str:
    """One copy of a short string the cluster repeats (namespaces, node names, protocols,
    port names, the timestamps of objects made or changed in the same second): 10,000
    Services in one namespace hold one "default", not 10,000."""
    return sys.intern(text) if len(text) <= 63 else text


def _shared(value: T) -> T:
    """One copy of an immutable value many objects repeat (a port list, a family tuple);
    bounded, so distinct values from a hostile cluster cannot grow it."""
    return cast(T, _one_copy(value))


@lru_cache(maxsize=4096)
def _one_copy(value: Any) -> Any:
    return value


@lru_cache(maxsize=4096)
def _annotation_map(items: tuple[tuple[str, str], ...]) -> Mapping[str, str]:
    """The annotations the director reads, one mapping per distinct set (most Services
    carry the same few); read-only, since Services share it."""
    return MappingProxyType(dict(items))


def _port(value: object, low: int = 1) -> int | None:
    """An integer port in [low, 65535], or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
        return None
    return value


def _meta(obj: Json) -> Json:
    return _map(obj.get("metadata"))


def _canonical(
    items: Iterable[object],
    canonical: Callable[[object], str | None],
    refused: Callable[[object], str],
    problems: list[str],
) -> tuple[str, ...]:
    """Each item's canonical text, once (linear: a Service may list thousands); the items
    with none are named in ``problems``, the first ``SAID`` each, the rest counted."""
    kept: dict[str, None] = {}
    bad: list[object] = []
    for item in items:
        text = canonical(item)
        if text is None:
            bad.append(item)
        else:
            kept[text] = None
    problems.extend(refused(item) for item in bad[:SAID])
    if len(bad) > SAID:
        problems.append(f"{len(bad) - SAID} more entries refused like the ones before")
    return tuple(kept)


def canonical_cidr(text: object) -> str | None:
    """A CIDR as kube-proxy reads it (sloppy address, surrounding spaces trimmed), or None."""
    if not isinstance(text, str):
        return None
    address, slash, bits = text.strip().partition("/")
    canonical = sloppy_address(address)
    if canonical is None or not slash or not bits.isascii() or not bits.isdigit():
        return None
    prefix = int(bits)
    if prefix > (128 if ":" in canonical else 32):
        return None
    try:
        return str(ipaddress.ip_network(f"{canonical}/{prefix}", strict=False))
    except ValueError:
        return None


def trigger_time(value: object) -> str | None:
    """An EndpointSlice's last-change-trigger-time as kube writes it (RFC 3339 with its
    zone), or None: anyone can write the annotation, and a time with no zone is no point in
    time (it would be compared with the clock's)."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if when.tzinfo is not None else None


def _source_ranges(spec: Json, annotations: Json, problems: list[str]) -> tuple[str, ...] | None:
    raw: Iterable[object] = _list(spec.get("loadBalancerSourceRanges"))
    where = "spec.loadBalancerSourceRanges"
    if not raw and isinstance(annotations.get(SOURCE_RANGES_ANNOTATION), str):
        raw = [p for p in str(annotations[SOURCE_RANGES_ANNOTATION]).split(",") if p.strip()]
        where = SOURCE_RANGES_ANNOTATION
    raw = list(raw)
    if not raw:
        return None
    if len(raw) > MAX_SOURCE_RANGES:  # refused before any is read: closed, not open
        problems.append(
            f"{where}: {len(raw)} ranges, more than the {MAX_SOURCE_RANGES} a Service may "
            "list here; its addresses refuse every source until it lists fewer (merge "
            "neighbouring ranges into wider ones)"
        )
        return ()
    return _canonical(
        raw,
        canonical_cidr,
        lambda item: (
            f"{where}: {shown(item)} is not a CIDR; ignored (the VIP stays restricted "
            "to the valid ranges)"
        ),
        problems,
    )


def _service_port(p: Json, index: int, problems: list[str]) -> ServicePort | None:
    name = _text(p.get("name"))
    protocol = _text(p.get("protocol"), "TCP")
    port = _port(p.get("port"))
    where = f"spec.ports[{index}]"
    if protocol not in _PROTOCOLS:
        problems.append(f"{where}: protocol {shown(protocol)} is not TCP, UDP or SCTP; ignored")
        return None
    if port is None:
        problems.append(f"{where}: port {shown(p.get('port'))} is not 1-65535; ignored")
        return None
    node_port = _port(p.get("nodePort") or 0, low=0)
    if node_port is None:
        problems.append(f"{where}: nodePort {shown(p.get('nodePort'))} is not 1-65535; ignored")
        node_port = 0
    target = p.get("targetPort")
    target_port: int | str = port
    if target is not None:
        numeric = _port(target)
        if numeric is not None:
            target_port = numeric
        elif isinstance(target, str) and _IANA_NAME.fullmatch(target):
            target_port = target
        else:
            problems.append(
                f"{where}: targetPort {shown(target)} is neither a port nor a "
                "port name; the port number is used"
            )
    return _shared(ServicePort(_short(name), protocol, port, node_port, target_port))


def _families(spec: Json, problems: list[str]) -> tuple[int, ...]:
    families: list[int] = []
    for text in _list(spec.get("ipFamilies")) or ["IPv4"]:
        version = {"IPv4": 4, "IPv6": 6}.get(text) if isinstance(text, str) else None
        if version is None:
            problems.append(f"spec.ipFamilies: {shown(text)} is not IPv4 or IPv6; ignored")
        elif version not in families:
            families.append(version)
    return _shared(tuple(families) or (4,))


def _affinity(spec: Json, problems: list[str]) -> int | None:
    if spec.get("sessionAffinity") != "ClientIP":
        return None
    config = _map(_map(spec.get("sessionAffinityConfig")).get("clientIP"))
    timeout = config.get("timeoutSeconds")
    if timeout is None:
        return DEFAULT_AFFINITY
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 < timeout <= MAX_AFFINITY:
        problems.append(
            f"sessionAffinityConfig.clientIP.timeoutSeconds {shown(timeout)} is not "
            f"1-{MAX_AFFINITY}; {DEFAULT_AFFINITY} is used"
        )
        return DEFAULT_AFFINITY
    return timeout


def _status_ips(status: Json, problems: list[str]) -> tuple[str, ...]:
    """The addresses in status, canonical; refused entries are named in ``problems``."""
    ingress = _list(_map(status.get("loadBalancer")).get("ingress"))
    entries = (_map(item).get("ip") for item in ingress)
    return _canonical(
        (raw for raw in entries if raw is not None and raw != ""),
        sloppy_address,
        lambda raw: f"status.loadBalancer.ingress: {shown(raw)} is not an IP address; not kept",
        problems,
    )


def service_from_json(obj: Json) -> ServiceInfo:
    meta, spec = _meta(obj), _map(obj.get("spec"))
    status = _map(obj.get("status"))
    problems: list[str] = []
    all_annotations = _map(meta.get("annotations"))
    annotations = _annotation_map(
        tuple(
            (k, v)
            for k, v in all_annotations.items()
            if isinstance(k, str)
            and k.startswith((PREFIX, *METALLB_PREFIXES))
            and isinstance(v, str)
        )
    )
    ports = _shared(
        tuple(
            port
            for index, p in enumerate(_list(spec.get("ports")))
            if (port := _service_port(_map(p), index, problems)) is not None
        )
    )
    klass = spec.get("loadBalancerClass")
    lb_ip = spec.get("loadBalancerIP")
    health_port = _port(spec.get("healthCheckNodePort") or 0, low=0)
    before = len(problems)
    status_ips = _status_ips(status, problems)
    stale = len(problems) > before
    if health_port is None:
        problems.append(
            f"spec.healthCheckNodePort {shown(spec.get('healthCheckNodePort'))} is "
            "not 1-65535; ignored"
        )
    return ServiceInfo(
        namespace=_short(_text(meta.get("namespace"))),
        name=_text(meta.get("name")),
        uid=_text(meta.get("uid")),
        type=_short(_text(spec.get("type"), "ClusterIP")),
        load_balancer_class=_short(klass) if isinstance(klass, str) else None,
        annotations=annotations,
        ports=ports,
        ip_families=_families(spec, problems),
        external_traffic_policy=_short(_text(spec.get("externalTrafficPolicy"), "Cluster")),
        affinity_timeout=_affinity(spec, problems),
        load_balancer_ip=lb_ip if isinstance(lb_ip, str) and lb_ip else None,
        status_ips=status_ips,
        health_check_node_port=health_port or 0,
        created=_short(_text(meta.get("creationTimestamp"))),  # Services made at once share it
        source_ranges=_source_ranges(spec, all_annotations, problems),
        allocate_node_ports=spec.get("allocateLoadBalancerNodePorts") is not False,
        problems=tuple(problems),
        stale_status=stale,
        labels=_labels(meta) if spec.get("type") == "LoadBalancer" else NO_LABELS,
    )


def _labels(meta: Json) -> Mapping[str, str]:
    """The Service's labels (text keys and values only), read-only."""
    found = {
        k: v
        for k, v in _map(meta.get("labels")).items()
        if isinstance(k, str) and isinstance(v, str)
    }
    return MappingProxyType(found) if found else NO_LABELS


def _endpoint(
    ep: Json, index: int, family: str, problems: list[str]
) -> tuple[tuple[str, ...], int, str | None]:
    """An endpoint's addresses, its conditions as bits, and its node."""
    cond = _map(ep.get("conditions"))
    ready = cond.get("ready")
    ready = True if ready is None else ready is True  # unset means ready (API contract)
    serving = cond.get("serving")
    serving = ready if serving is None else serving is True

    def of_family(raw: object) -> str | None:
        address = sloppy_address(raw)
        return address if address is not None and (":" in address) == (family == "IPv6") else None

    addresses = _canonical(
        _list(ep.get("addresses")),
        of_family,
        lambda raw: f"endpoints[{index}]: {shown(raw)} is not an {family} address; ignored",
        problems,
    )
    bits = (READY if ready else 0) | (SERVING if serving else 0)
    bits |= TERMINATING if cond.get("terminating") is True else 0
    node = ep.get("nodeName")
    return addresses, bits, _short(node) if isinstance(node, str) and node else None


def _packed(addresses: list[str], family: str) -> bytes:
    """Canonical addresses of one family, packed (4 or 16 bytes each)."""
    kind = socket.AF_INET6 if family == "IPv6" else socket.AF_INET
    return b"".join(socket.inet_pton(kind, a) for a in addresses)


def slice_from_json(obj: Json) -> SliceInfo:
    meta = _meta(obj)
    namespace = _short(_text(meta.get("namespace")))
    service = _map(meta.get("labels")).get(SERVICE_NAME_LABEL)
    family = _short(_text(obj.get("addressType"), "IPv4"))
    problems: list[str] = []
    addresses: list[str] = []
    conditions = bytearray()
    nodes: list[str | None] = []
    if family in ("IPv4", "IPv6"):
        for index, ep in enumerate(_list(obj.get("endpoints"))):
            found, bits, node = _endpoint(_map(ep), index, family, problems)
            addresses.extend(found)
            conditions.extend(bytes((bits,)) * len(found))
            nodes.extend((node,) * len(found))
    ports: list[tuple[str, str, int]] = []
    for index, raw in enumerate(_list(obj.get("ports"))):
        p = _map(raw)
        port = _port(p.get("port"))
        if port is None:
            if p.get("port") is not None:
                problems.append(f"ports[{index}]: {shown(p.get('port'))} is not 1-65535; ignored")
            continue
        ports.append((_short(_text(p.get("name"))), _short(_text(p.get("protocol"), "TCP")), port))
    trigger = _map(meta.get("annotations")).get(TRIGGER_ANNOTATION)
    name = _text(meta.get("name"))
    return SliceInfo(
        namespace=namespace,
        name=name,
        # interned, as the Service's ref is: 10,000 slices do not each hold a copy of it
        service=sys.intern(f"{namespace}/{service}")
        if isinstance(service, str) and service
        else "",
        address_type=family,
        ports=_shared(tuple(ports)),
        packed=_packed(addresses, family),
        conditions=bytes(conditions),
        nodes=tuple(nodes) if any(nodes) else (),
        trigger_time=trigger_time(trigger),
        problems=tuple(f"EndpointSlice {name}: {p}" for p in problems),
    )


def node_from_json(obj: Json) -> NodeInfo:
    meta = _meta(obj)
    status = _map(obj.get("status"))
    ready = any(
        _map(c).get("type") == "Ready" and _map(c).get("status") == "True"
        for c in _list(status.get("conditions"))
    )
    problems: list[str] = []
    internal = _canonical(
        (
            entry.get("address")
            for entry in map(_map, _list(status.get("addresses")))
            if entry.get("type") == "InternalIP" and entry.get("address")
        ),
        sloppy_address,
        lambda raw: f"InternalIP {shown(raw)} is not an IP address; ignored",
        problems,
    )
    return NodeInfo(
        name=_text(meta.get("name")),
        internal_ips=internal,
        ready=ready,
        excluded=EXCLUDE_LABEL in _map(meta.get("labels")),
        deleting=bool(meta.get("deletionTimestamp")),
        problems=tuple(problems),
    )
