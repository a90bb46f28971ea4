"""The API server's JSON -> the values of ``director.core.cluster``. Pure.

This is where the cluster's input enters, and nothing from it is trusted: the parsers are
total (any JSON in, a value out, never an exception). Addresses come out canonical (the API
server's sloppy forms, like ``10.0.0.01``, read as kube-proxy reads them); ports, families
and timeouts are range-checked. Whatever is dropped is named in the value's ``problems``, so
the controller can say so (a Warning Event, a log line, a metric) and serve the rest.
"""

from __future__ import annotations

import datetime as dt
import re
import socket
from collections.abc import Iterable, Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import TypeVar

from director.core.cluster import (
    NO_LABELS,
    PREFIX,
    READY,
    SERVING,
    TERMINATING,
    Json,
    NodeInfo,
    ServiceInfo,
    ServicePort,
    SliceInfo,
    service_ref,
)
from director.core.model import shown, sloppy_address
from director.core.untrusted import (
    as_list,
    as_map,
    as_port,
    as_text,
    canonical_cidr,
    canonical_each,
    shared,
    short,
)

# MetalLB's Service annotations, kept so that an operator coming from MetalLB can let the
# director honour them (kubernetes.metallb_annotations).
METALLB_PREFIXES = ("metallb.io/", "metallb.universe.tf/")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TRIGGER_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"
# Source ranges one Service may list (cloud providers allow a few hundred: AWS 60 rules a
# security group by default, Azure 1,000 a Service). More is refused as a whole: each is a
# set element the filter holds, and a 1.5 MB Service can list 40,000.
MAX_SOURCE_RANGES = 1000
# Ports one Service may list: each is a virtual service in the kernel (with its real servers),
# so a Service of 5,000 ports would be 5,000 virtual services. More is refused as a whole
# (with an Event): nothing is programmed for it until it lists fewer.
MAX_PORTS = 1000
# The legacy way to give loadBalancerSourceRanges (kube honours it when the field is empty).
SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"
EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"

T = TypeVar("T")
_IANA_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?")
_PROTOCOLS = ("TCP", "UDP", "SCTP")
MAX_AFFINITY = 86400  # kube-apiserver's bound on sessionAffinityConfig.clientIP.timeoutSeconds
DEFAULT_AFFINITY = 10800


@lru_cache(maxsize=4096)
def _annotation_map(items: tuple[tuple[str, str], ...]) -> Mapping[str, str]:
    """The annotations the director reads, one mapping per distinct set (most Services
    carry the same few); read-only, since Services share it."""
    return MappingProxyType(dict(items))


def _meta(obj: Json) -> Json:
    return as_map(obj.get("metadata"))


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
    raw: Iterable[object] = as_list(spec.get("loadBalancerSourceRanges"))
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
    return canonical_each(
        raw,
        canonical_cidr,
        lambda item: (
            f"{where}: {shown(item)} is not a CIDR; ignored (the VIP stays restricted "
            "to the valid ranges)"
        ),
        problems,
    )


def _service_port(p: Json, index: int, problems: list[str]) -> ServicePort | None:
    name = as_text(p.get("name"))
    protocol = as_text(p.get("protocol"), "TCP")
    port = as_port(p.get("port"))
    where = f"spec.ports[{index}]"
    if protocol not in _PROTOCOLS:
        problems.append(f"{where}: protocol {shown(protocol)} is not TCP, UDP or SCTP; ignored")
        return None
    if port is None:
        problems.append(f"{where}: port {shown(p.get('port'))} is not 1-65535; ignored")
        return None
    node_port = as_port(p.get("nodePort") or 0, low=0)
    if node_port is None:
        problems.append(f"{where}: nodePort {shown(p.get('nodePort'))} is not 1-65535; ignored")
        node_port = 0
    target = p.get("targetPort")
    target_port: int | str = port
    if target is not None:
        numeric = as_port(target)
        if numeric is not None:
            target_port = numeric
        elif isinstance(target, str) and _IANA_NAME.fullmatch(target):
            target_port = target
        else:
            problems.append(
                f"{where}: targetPort {shown(target)} is neither a port nor a "
                "port name; the port number is used"
            )
    return shared(ServicePort(short(name), protocol, port, node_port, target_port))


def _families(spec: Json, problems: list[str]) -> tuple[int, ...]:
    families: list[int] = []
    for text in as_list(spec.get("ipFamilies")) or ["IPv4"]:
        version = {"IPv4": 4, "IPv6": 6}.get(text) if isinstance(text, str) else None
        if version is None:
            problems.append(f"spec.ipFamilies: {shown(text)} is not IPv4 or IPv6; ignored")
        elif version not in families:
            families.append(version)
    return shared(tuple(families) or (4,))


def _affinity(spec: Json, problems: list[str]) -> int | None:
    if spec.get("sessionAffinity") != "ClientIP":
        return None
    config = as_map(as_map(spec.get("sessionAffinityConfig")).get("clientIP"))
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
    ingress = as_list(as_map(status.get("loadBalancer")).get("ingress"))
    entries = (as_map(item).get("ip") for item in ingress)
    return canonical_each(
        (raw for raw in entries if raw is not None and raw != ""),
        sloppy_address,
        lambda raw: f"status.loadBalancer.ingress: {shown(raw)} is not an IP address; not kept",
        problems,
    )


def service_from_json(obj: Json, cluster: str = "") -> ServiceInfo:
    meta, spec = _meta(obj), as_map(obj.get("spec"))
    status = as_map(obj.get("status"))
    problems: list[str] = []
    all_annotations = as_map(meta.get("annotations"))
    annotations = _annotation_map(
        tuple(
            (k, v)
            for k, v in all_annotations.items()
            if isinstance(k, str)
            and k.startswith((PREFIX, *METALLB_PREFIXES))
            and isinstance(v, str)
        )
    )
    listed = as_list(spec.get("ports"))
    if len(listed) > MAX_PORTS:  # refused before any is read: nothing programmed
        problems.append(
            f"spec.ports: {len(listed)} ports, more than the {MAX_PORTS} a Service may list "
            "here; none is served until it lists fewer"
        )
        listed = []
    ports = shared(
        tuple(
            port
            for index, p in enumerate(listed)
            if (port := _service_port(as_map(p), index, problems)) is not None
        )
    )
    klass = spec.get("loadBalancerClass")
    lb_ip = spec.get("loadBalancerIP")
    health_port = as_port(spec.get("healthCheckNodePort") or 0, low=0)
    before = len(problems)
    status_ips = _status_ips(status, problems)
    stale = len(problems) > before
    if health_port is None:
        problems.append(
            f"spec.healthCheckNodePort {shown(spec.get('healthCheckNodePort'))} is "
            "not 1-65535; ignored"
        )
    return ServiceInfo(
        namespace=short(as_text(meta.get("namespace"))),
        name=as_text(meta.get("name")),
        uid=as_text(meta.get("uid")),
        type=short(as_text(spec.get("type"), "ClusterIP")),
        load_balancer_class=short(klass) if isinstance(klass, str) else None,
        annotations=annotations,
        ports=ports,
        ip_families=_families(spec, problems),
        external_traffic_policy=short(as_text(spec.get("externalTrafficPolicy"), "Cluster")),
        affinity_timeout=_affinity(spec, problems),
        load_balancer_ip=lb_ip if isinstance(lb_ip, str) and lb_ip else None,
        status_ips=status_ips,
        health_check_node_port=health_port or 0,
        created=short(as_text(meta.get("creationTimestamp"))),  # Services made at once share it
        source_ranges=_source_ranges(spec, all_annotations, problems),
        allocate_node_ports=spec.get("allocateLoadBalancerNodePorts") is not False,
        problems=tuple(problems),
        stale_status=stale,
        labels=_labels(meta) if spec.get("type") == "LoadBalancer" else NO_LABELS,
        cluster=cluster,
    )


def _labels(meta: Json) -> Mapping[str, str]:
    """The Service's labels (text keys and values only), read-only."""
    found = {
        k: v
        for k, v in as_map(meta.get("labels")).items()
        if isinstance(k, str) and isinstance(v, str)
    }
    return MappingProxyType(found) if found else NO_LABELS


def _endpoint(
    ep: Json, index: int, family: str, problems: list[str]
) -> tuple[tuple[str, ...], int, str | None]:
    """An endpoint's addresses, its conditions as bits, and its node."""
    cond = as_map(ep.get("conditions"))
    ready = cond.get("ready")
    ready = True if ready is None else ready is True  # unset means ready (API contract)
    serving = cond.get("serving")
    serving = ready if serving is None else serving is True

    def of_family(raw: object) -> str | None:
        address = sloppy_address(raw)
        return address if address is not None and (":" in address) == (family == "IPv6") else None

    addresses = canonical_each(
        as_list(ep.get("addresses")),
        of_family,
        lambda raw: f"endpoints[{index}]: {shown(raw)} is not an {family} address; ignored",
        problems,
    )
    bits = (READY if ready else 0) | (SERVING if serving else 0)
    bits |= TERMINATING if cond.get("terminating") is True else 0
    node = ep.get("nodeName")
    return addresses, bits, short(node) if isinstance(node, str) and node else None


def _packed(addresses: list[str], family: str) -> bytes:
    """Canonical addresses of one family, packed (4 or 16 bytes each)."""
    kind = socket.AF_INET6 if family == "IPv6" else socket.AF_INET
    return b"".join(socket.inet_pton(kind, a) for a in addresses)


def slice_from_json(obj: Json, cluster: str = "") -> SliceInfo:
    meta = _meta(obj)
    namespace = short(as_text(meta.get("namespace")))
    service = as_map(meta.get("labels")).get(SERVICE_NAME_LABEL)
    family = short(as_text(obj.get("addressType"), "IPv4"))
    problems: list[str] = []
    addresses: list[str] = []
    conditions = bytearray()
    nodes: list[str | None] = []
    if family in ("IPv4", "IPv6"):
        for index, ep in enumerate(as_list(obj.get("endpoints"))):
            found, bits, node = _endpoint(as_map(ep), index, family, problems)
            addresses.extend(found)
            conditions.extend(bytes((bits,)) * len(found))
            nodes.extend((node,) * len(found))
    ports: list[tuple[str, str, int]] = []
    for index, raw in enumerate(as_list(obj.get("ports"))):
        p = as_map(raw)
        port = as_port(p.get("port"))
        if port is None:
            if p.get("port") is not None:
                problems.append(f"ports[{index}]: {shown(p.get('port'))} is not 1-65535; ignored")
            continue
        ports.append(
            (short(as_text(p.get("name"))), short(as_text(p.get("protocol"), "TCP")), port)
        )
    trigger = as_map(meta.get("annotations")).get(TRIGGER_ANNOTATION)
    name = as_text(meta.get("name"))
    return SliceInfo(
        namespace=namespace,
        name=name,
        # interned, as the Service's ref is: 10,000 slices do not each hold a copy of it
        service=service_ref(cluster, namespace, service)
        if isinstance(service, str) and service
        else "",
        address_type=family,
        ports=shared(tuple(ports)),
        packed=_packed(addresses, family),
        conditions=bytes(conditions),
        nodes=tuple(nodes) if any(nodes) else (),
        trigger_time=trigger_time(trigger),
        problems=tuple(f"EndpointSlice {name}: {p}" for p in problems),
        cluster=cluster,
    )


def node_from_json(obj: Json, cluster: str = "") -> NodeInfo:
    meta = _meta(obj)
    status = as_map(obj.get("status"))
    ready = any(
        as_map(c).get("type") == "Ready" and as_map(c).get("status") == "True"
        for c in as_list(status.get("conditions"))
    )
    problems: list[str] = []
    internal = canonical_each(
        (
            entry.get("address")
            for entry in map(as_map, as_list(status.get("addresses")))
            if entry.get("type") == "InternalIP" and entry.get("address")
        ),
        sloppy_address,
        lambda raw: f"InternalIP {shown(raw)} is not an IP address; ignored",
        problems,
    )
    return NodeInfo(
        name=as_text(meta.get("name")),
        internal_ips=internal,
        ready=ready,
        excluded=EXCLUDE_LABEL in as_map(meta.get("labels")),
        deleting=bool(meta.get("deletionTimestamp")),
        problems=tuple(problems),
        cluster=cluster,
    )
