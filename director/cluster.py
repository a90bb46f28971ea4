"""The slice of the Kubernetes API objects the director reads, as small frozen values. Pure.

The source hands over the API server's JSON; these parsers keep only what translation needs,
so 10,000 Services and their EndpointSlices fit in a few tens of megabytes, and everything
downstream is plain typed data with no client objects in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "lvs-director.io/"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TRIGGER_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"
EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"

Json = Mapping[str, Any]


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
    annotations: Mapping[str, str]  # only lvs-director.io/* ones
    ports: tuple[ServicePort, ...]
    ip_families: tuple[int, ...]  # 4, 6 in the Service's order
    external_traffic_policy: str  # Cluster | Local
    affinity_timeout: int | None  # ClientIP affinity timeout; None: no affinity
    load_balancer_ip: str | None  # deprecated spec.loadBalancerIP
    status_ips: tuple[str, ...]
    health_check_node_port: int
    created: str

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[str, ...]
    ready: bool
    serving: bool
    terminating: bool
    node: str | None


@dataclass(frozen=True, slots=True)
class SliceInfo:
    namespace: str
    name: str
    service: str  # namespace/name of the owning Service ("" when unlabelled)
    address_type: str  # IPv4 | IPv6 | FQDN
    ports: tuple[tuple[str, str, int], ...]  # (name, protocol, port)
    endpoints: tuple[Endpoint, ...]
    # endpoints.kubernetes.io/last-change-trigger-time: when the change that made this
    # version happened (network programming latency starts there).
    trigger_time: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    internal_ips: tuple[str, ...]
    ready: bool
    excluded: bool  # labelled exclude-from-external-load-balancers
    deleting: bool

    @property
    def usable(self) -> bool:
        return self.ready and not self.excluded and not self.deleting


def _meta(obj: Json) -> Json:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def service_from_json(obj: Json) -> ServiceInfo:
    meta, spec = _meta(obj), obj.get("spec") or {}
    status = obj.get("status") or {}
    annotations = {
        k: str(v) for k, v in (meta.get("annotations") or {}).items() if k.startswith(PREFIX)
    }
    ports = tuple(
        ServicePort(
            str(p.get("name") or ""),
            str(p.get("protocol") or "TCP"),
            int(p.get("port") or 0),
            int(p.get("nodePort") or 0),
            p.get("targetPort") if p.get("targetPort") is not None else int(p.get("port") or 0),
        )
        for p in spec.get("ports") or ()
    )
    families = tuple(4 if f == "IPv4" else 6 for f in spec.get("ipFamilies") or ("IPv4",))
    affinity = None
    if spec.get("sessionAffinity") == "ClientIP":
        config = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
        affinity = int(config.get("timeoutSeconds") or 10800)
    ingress = ((status.get("loadBalancer") or {}).get("ingress")) or ()
    return ServiceInfo(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        type=str(spec.get("type") or "ClusterIP"),
        load_balancer_class=spec.get("loadBalancerClass"),
        annotations=annotations,
        ports=ports,
        ip_families=families,
        external_traffic_policy=str(spec.get("externalTrafficPolicy") or "Cluster"),
        affinity_timeout=affinity,
        load_balancer_ip=spec.get("loadBalancerIP") or None,
        status_ips=tuple(str(i["ip"]) for i in ingress if isinstance(i, Mapping) and i.get("ip")),
        health_check_node_port=int(spec.get("healthCheckNodePort") or 0),
        created=str(meta.get("creationTimestamp") or ""),
    )


def slice_from_json(obj: Json) -> SliceInfo:
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "")
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    endpoints = []
    for ep in obj.get("endpoints") or ():
        cond = ep.get("conditions") or {}
        ready = cond.get("ready")
        ready = True if ready is None else bool(ready)  # unset means ready (API contract)
        serving = cond.get("serving")
        endpoints.append(
            Endpoint(
                tuple(str(a) for a in ep.get("addresses") or ()),
                ready,
                ready if serving is None else bool(serving),
                bool(cond.get("terminating")),
                ep.get("nodeName"),
            )
        )
    return SliceInfo(
        namespace=namespace,
        name=str(meta.get("name") or ""),
        service=f"{namespace}/{service}" if service else "",
        address_type=str(obj.get("addressType") or "IPv4"),
        ports=tuple(
            (str(p.get("name") or ""), str(p.get("protocol") or "TCP"), int(p.get("port") or 0))
            for p in obj.get("ports") or ()
        ),
        endpoints=tuple(endpoints),
        trigger_time=(meta.get("annotations") or {}).get(TRIGGER_ANNOTATION),
    )


def node_from_json(obj: Json) -> NodeInfo:
    meta = _meta(obj)
    status = obj.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return NodeInfo(
        name=str(meta.get("name") or ""),
        internal_ips=tuple(
            str(a["address"])
            for a in status.get("addresses") or ()
            if a.get("type") == "InternalIP" and a.get("address")
        ),
        ready=ready,
        excluded=EXCLUDE_LABEL in (meta.get("labels") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
    )
