"""The admin API's replies: TypedDicts the views build (mypy checks every key), documented
in ``/api/v1/openapi.json`` with the bodies (``director.schema.api.schemas``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    NotRequired,  # pydantic reads these on 3.11
)

from pydantic import Field, WithJsonSchema
from typing_extensions import TypedDict

from director.core.model import Family, Forwarding
from director.core.services import Stats

# -- replies ------------------------------------------------------------------------------
# The counters of a virtual service or real server: core.model.Stats's fields, as they are.
STATS_FIELDS = tuple(Stats.__dataclass_fields__)
if TYPE_CHECKING:
    Counters = dict[str, int]
else:
    Counters = TypedDict("Counters", {name: Annotated[int, Field(ge=0)] for name in STATS_FIELDS})


def counters(stats: Stats | None) -> Counters:
    """The counters' reply (zeros for a service the kernel does not hold)."""
    stats = stats or _ZERO
    return {name: getattr(stats, name) for name in STATS_FIELDS}


_ZERO = Stats()


def one_of(values: Iterable[str]) -> WithJsonSchema:
    """A string reply field that takes one of ``values`` (documented; the view builds it)."""
    return WithJsonSchema({"type": "string", "enum": list(values)})


class Problem(TypedDict):
    type: NotRequired[str]
    title: str
    status: int
    detail: str


class RealServer(TypedDict):
    address: str
    port: int
    weight: int
    forwarding: Annotated[str, one_of(f.label for f in Forwarding)]
    # sorry: the sorry server, in the real servers' place while none of them is up
    state: Annotated[str, one_of(("active", "draining", "unhealthy", "sorry"))]
    active_connections: NotRequired[int]
    inactive_connections: NotRequired[int]
    counters: NotRequired[Counters]
    # IPVS's upper threshold: past it the real server gets no new connections (0: none)
    max_connections: NotRequired[int]


class Limits(TypedDict):
    """A service's rate limits in force (new TCP connections a second; 0: none) and the
    connection attempts they dropped since they were first made."""

    client_rate: int
    service_rate: int
    dropped_over_client_rate: int
    dropped_over_service_rate: int


class VirtualService(TypedDict):
    service: Annotated[str, WithJsonSchema({"type": "string", "example": "tcp 198.51.100.10:80"})]
    family: NotRequired[Annotated[str, one_of(f.label for f in Family)]]
    protocol: NotRequired[str | None]
    address: NotRequired[str | None]
    port: NotRequired[int | None]
    fwmark: NotRequired[int | None]
    origin: dict[str, str]
    scheduler: str
    scheduler_source: Annotated[str, one_of(("default", "annotation", "api", "config"))]
    flags: NotRequired[list[str]]
    persistence: NotRequired[int]
    programmed: NotRequired[bool]
    # the box answers its SYNs with cookies (guard.syn)
    syn_guard: NotRequired[bool]
    # present when it has rate limits in force
    limits: NotRequired[Limits]
    counters: NotRequired[Counters]
    real_servers: list[RealServer]


class ServiceList(TypedDict):
    items: list[VirtualService]


class KubernetesService(TypedDict):
    service: str
    virtual_services: list[VirtualService]


class SchedulerResult(TypedDict):
    service: str
    scheduler: NotRequired[str]
    flags: NotRequired[list[str]]
    source: str
    stored_in: NotRequired[str]


class DrainPlace(TypedDict):
    service: str
    weight: int
    active_connections: int
    inactive_connections: int


class Drain(TypedDict):
    id: str
    address: str
    port: NotRequired[int | None]
    service: NotRequired[str | None]
    id_text: NotRequired[str]
    done: NotRequired[bool]
    real_servers: NotRequired[list[DrainPlace]]


class DrainList(TypedDict):
    items: list[Drain]


class Undrained(TypedDict):
    id: str
    undrained: bool


class ClusterState(TypedDict):
    """One of several clusters served (``clusters:``)."""

    connected: bool  # every watch of its API is connected
    leader: bool  # this director holds its status Lease


class Kubernetes(TypedDict):
    configured: bool
    connected: bool
    disconnected_since: str | None
    clusters: NotRequired[dict[str, ClusterState]]  # by name, where several are served


class Status(TypedDict):
    role: Annotated[str, one_of(("MASTER", "BACKUP", "FAULT", "standalone"))]
    ready: bool
    dry_run: NotRequired[bool]
    kubernetes: Kubernetes
    leader: bool
    lease_refused: NotRequired[str | None]  # why the API server refuses the status Lease
    last_sync: NotRequired[str | None]
    last_sync_seconds: NotRequired[float]
    last_error: NotRequired[str | None]
    failed_operations: NotRequired[int]
    counts: dict[str, int]
    bgp: NotRequired[Bgp]
    owned: NotRequired[list[Owned]]  # every resource the director writes, read back


class Owned(TypedDict):
    """One resource the director writes outside its process, as its keeper last read it
    back."""

    resource: str
    in_sync: bool
    repairs: int  # drift found and put right
    failures: int  # writes and read-backs that failed (retried)
    last_error: str | None  # while out of sync: why
    kind: str | None  # of the last failure: transient (retried with backoff) or refused
    since: str | None  # out of sync since (ISO 8601)


class BgpRoute(TypedDict):
    vip: str
    pool: str
    announced: bool
    reason: str


class BgpPeer(TypedDict):
    address: str
    asn: int
    state: str
    uptime_seconds: float
    prefixes_sent: int
    bfd: str


class Bgp(TypedDict):
    configured: bool
    maintenance: str | None  # why every route is withdrawn, if it is
    announced: int
    withdrawn: int
    routes: list[BgpRoute]
    peers: list[BgpPeer]


class PlannedOp(TypedDict):
    op: str
    service: str
    detail: str
    origin: str


class Plan(TypedDict):
    ops: list[PlannedOp]
    foreign: list[str]
    refused: list[dict[str, Any]]


REPLIES: tuple[type, ...] = (
    Problem,
    VirtualService,
    ServiceList,
    KubernetesService,
    SchedulerResult,
    Drain,
    DrainList,
    Undrained,
    Status,
    Plan,
    Bgp,
)
