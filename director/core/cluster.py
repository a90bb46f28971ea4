"""The slice of the Kubernetes API objects the director reads, as small frozen values. Pure.

The source hands over the API server's JSON; ``director.core.cluster_parse`` keeps only what
translation needs, so 10,000 Services and their EndpointSlices fit in a few tens of
megabytes, and everything downstream is plain typed data with no client objects in it.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

PREFIX = "lvs-director.io/"

Json = Mapping[str, Any]
NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ServicePort:
    """One port of a Kubernetes Service, as the director reads it."""

    name: str
    protocol: str  # TCP | UDP | SCTP
    port: int
    node_port: int  # 0 when none
    target_port: int | str


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """A Kubernetes Service, as much of it as the director uses."""

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
    cluster: str = ""  # the cluster's name (clusters:); "" for the one cluster (kubernetes:)
    # [cluster/]namespace/name, made once (interned, so its slices share it): every table
    # keyed by Service shares the one string.
    ref: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", service_ref(self.cluster, self.namespace, self.name))


def service_ref(cluster: str, namespace: str, name: str) -> str:
    """A Service's reference: ``namespace/name``, or ``cluster/namespace/name`` where the
    director serves several clusters (interned: one string per Service)."""
    text = f"{cluster}/{namespace}/{name}" if cluster else f"{namespace}/{name}"
    return sys.intern(text)


def resource_name(cluster: str, kind: str) -> str:
    """A watched resource's name: ``services``, or ``prod/services`` for a named cluster."""
    return f"{cluster}/{kind}" if cluster else kind


def split_resource(resource: str) -> tuple[str, str]:
    """(cluster, kind) of a watched resource's name ("" for the one cluster's)."""
    cluster, _, kind = resource.rpartition("/")
    return cluster, kind


def split_ref(ref: str) -> tuple[str, str, str]:
    """(cluster, namespace, name) of a Service's reference ("" for the one cluster's)."""
    parts = ref.split("/", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    namespace, _, name = ref.partition("/")
    return "", namespace, name


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
    service: str  # the owning Service's ref ([cluster/]namespace/name; "" when unlabelled)
    address_type: str  # IPv4 | IPv6 | FQDN
    ports: tuple[tuple[str, str, int], ...]  # (name, protocol, port)
    packed: bytes = b""  # the addresses, 4 bytes each (IPv4) or 16 (IPv6), canonical
    conditions: bytes = b""  # READY | SERVING | TERMINATING, one per address
    nodes: tuple[str | None, ...] = ()  # one per address; () when no endpoint names one
    # endpoints.kubernetes.io/last-change-trigger-time: when the change that made this
    # version happened (network programming latency starts there).
    trigger_time: str | None = None
    problems: tuple[str, ...] = ()
    cluster: str = ""  # as ServiceInfo's

    @property
    def ref(self) -> str:
        if self.cluster:
            return f"{self.cluster}/{self.namespace}/{self.name}"
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
    """A Kubernetes Node: its addresses and whether it may take traffic."""

    name: str
    internal_ips: tuple[str, ...]
    ready: bool
    excluded: bool  # labelled exclude-from-external-load-balancers
    deleting: bool
    problems: tuple[str, ...] = ()
    cluster: str = ""  # as ServiceInfo's

    @property
    def usable(self) -> bool:
        return self.ready and not self.excluded and not self.deleting
