"""IPVS's table as values: virtual services, what the kernel reads back, and changes. Pure.

Equality of a virtual service means "same configuration": counters live in separate types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from director.core.dests import Dests
from director.core.model import DestKey, RealServer, ServiceConfig, ServiceKey, format_endpoint


def static_name(origin: str) -> str | None:
    """The name of one of the configuration's own services from its origin (``static/web``
    -> ``web``; ``static`` -> ""), or None: it is a Kubernetes Service's. A Kubernetes
    origin always ends in ``:port`` (``ns/name:port``, ``cluster/ns/name:port``) and a static
    name never holds ``:`` or ``/``, so a namespace or a cluster named ``static`` is never
    taken for the file's own."""
    if origin == "static":
        return ""
    head, slash, name = origin.partition("/")
    if head == "static" and slash and ":" not in name and "/" not in name:
        return name
    return None


@dataclass(frozen=True, slots=True)
class VirtualService:
    """A virtual service: its key, its configuration and its real servers."""

    key: ServiceKey
    config: ServiceConfig
    # Given as any mapping (or nothing), kept as Dests: compact, and compared fast.
    real_servers: Mapping[DestKey, RealServer] = field(default_factory=dict)
    # Where it came from ("static/web", "default/shop:http"); not part of its identity.
    origin: str = field(default="", compare=False)

    __hash__ = None  # type: ignore[assignment]  # holds a mapping

    def __post_init__(self) -> None:
        if type(self.real_servers) is not Dests:
            object.__setattr__(self, "real_servers", Dests.of(self.real_servers))

    @classmethod
    def build(
        cls,
        key: ServiceKey,
        config: ServiceConfig,
        real_servers: Iterable[RealServer] = (),
        origin: str = "",
    ) -> VirtualService:
        return cls(key, config, Dests(real_servers), origin)


Table = dict[ServiceKey, VirtualService]


@dataclass(frozen=True, slots=True)
class Stats:
    """Kernel counters of a virtual service or real server (64-bit variants)."""

    connections: int = 0
    packets_in: int = 0
    packets_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    cps: int = 0
    pps_in: int = 0
    pps_out: int = 0
    bps_in: int = 0
    bps_out: int = 0


@dataclass(frozen=True, slots=True)
class DestState:
    """A real server's connection counts and statistics, as the kernel reports them."""

    active_connections: int = 0
    inactive_connections: int = 0
    persistent_connections: int = 0
    stats: Stats = field(default_factory=Stats)


def read_back(
    key: ServiceKey,
    config: ServiceConfig,
    dests: Mapping[DestKey, RealServer],
    known: Mapping[ServiceKey, VirtualService] | None,
) -> VirtualService:
    """A virtual service as read from the kernel: ``known``'s own object (its key too) where
    it holds just this (the configuration, and the real servers in the same order: the
    hashing schedulers depend on it), else a new one. A read that finds no drift so makes
    nothing that outlives it."""
    cached = known.get(key) if known else None
    if (
        cached is not None
        and cached.config == config
        and Dests.of(cached.real_servers).same_order(dests)
    ):
        return cached
    return VirtualService(key, config, dests)


@dataclass(slots=True)
class KernelTable:
    """Everything read back from IPVS: configuration and, when asked for, counters."""

    services: Table = field(default_factory=dict)
    service_stats: dict[ServiceKey, Stats] = field(default_factory=dict)
    dest_state: dict[tuple[ServiceKey, DestKey], DestState] = field(default_factory=dict)


class OpKind(Enum):
    __hash__ = object.__hash__  # members are singletons; Enum's __hash__ is Python code

    ADD_SERVICE = "add-service"
    SET_SERVICE = "set-service"
    DEL_SERVICE = "del-service"
    ADD_DEST = "add-dest"
    SET_DEST = "set-dest"
    DEL_DEST = "del-dest"


class Op(NamedTuple):
    """One IPVS change. ``config`` is set for service adds/sets, ``dest`` for dest ops.

    A NamedTuple, not a dataclass: a full sync of 10,000 services creates 110,000 of them,
    and tuple construction costs half of a frozen dataclass's.
    """

    kind: OpKind
    key: ServiceKey
    config: ServiceConfig | None = None
    dest: RealServer | None = None
    origin: str = ""

    def describe(self) -> str:
        symbol = {"add": "+", "set": "~", "del": "-"}[self.kind.value[:3]]
        if self.dest is None:
            detail = f" {self.config.describe()}" if self.config is not None else ""
            return f"{symbol} service {self.key}{detail}"
        detail = (
            self.dest.describe()
            if self.kind is not OpKind.DEL_DEST
            else (format_endpoint(self.dest.address, self.dest.port))
        )
        return f"{symbol} real server {detail} in {self.key}"
