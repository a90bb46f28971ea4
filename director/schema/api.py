"""The admin API's shapes, each defined once (Octavia's request and response types are the
model): request bodies are validated models, replies are TypedDicts the views build (mypy
checks every key), and both give ``/api/v1/openapi.json`` its schemas (:func:`schemas`).

A body the models refuse raises :class:`BodyError` (400) with the reason the client reads.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    NotRequired,  # pydantic reads these on 3.11
)

from pydantic import (
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic_core import ArgsKwargs
from typing_extensions import TypedDict

from director.core.errors import DirectorError
from director.core.model import Family, Forwarding, canonical_address
from director.core.services import Stats
from director.schema.fields import Rule, problem

BODY = ConfigDict(extra="forbid")
COMPONENTS = "#/components/schemas/{model}"


class BodyError(DirectorError, ValueError):
    """A request body the API refuses; the message says why."""

    status = 400


def _keys(cls: type, data: Any) -> Any:
    if isinstance(data, ArgsKwargs):
        return data
    if not isinstance(data, dict):
        raise problem("the body must be a JSON object")
    fields = cls.__dataclass_fields__  # type: ignore[attr-defined]
    allowed = sorted(fields)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise problem(f"unknown field(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})")
    required = [
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = sorted(set(required) - set(data))
    if missing:
        raise problem(f"missing field(s) {', '.join(missing)}")
    return data


class Body:
    """A request body: a JSON object of known fields, with every required one."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        return _keys(cls, data)


def read(model: type[Any], data: object) -> Any:
    """``data`` (the parsed JSON) as ``model``; BodyError with the first reason if not."""
    try:
        return TypeAdapter(model).validate_python(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        ctx = error.get("ctx") or {}
        raise BodyError(str(ctx.get("reason", error["msg"]))) from None


def _string(field: str, example: str) -> Rule:
    def check(value: object) -> str:
        if not isinstance(value, str):
            raise problem(f"{field} must be a string like {example!r}")
        return value

    return Rule(check, {"type": "string", "example": example})


def _address(value: object) -> str:
    if not isinstance(value, str):
        raise problem("address must be a string")
    try:
        address = canonical_address(value)
    except ValueError as exc:
        raise problem(str(exc)) from None
    if address.startswith("::ffff:") and "." in address:  # no real server is programmed so
        raise problem(
            f"{address} is an IPv4 address written as IPv6: write {address.removeprefix('::ffff:')}"
        )
    return address


def _port(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise problem("port must be an integer between 1 and 65535")
    return value


def _flags(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise problem("flags must be a list of strings")
    return tuple(value)


# str(ServiceKey): "tcp 198.51.100.10:80", "udp [2001:db8::53]:53", "fwmark 7 ipv4".
SERVICE_PATTERN = r"^((tcp|udp|sctp) [0-9A-Fa-f.:\[\]]+:[0-9]+|fwmark [0-9]+ ipv[46])$"


@dataclass(frozen=True, slots=True, config=BODY)
class DrainRequest(Body):
    """Drain a real server: everywhere, or on one port, or in one virtual service."""

    address: Annotated[
        str,
        Rule(
            _address,
            {
                "anyOf": [
                    {"type": "string", "format": "ipv4"},
                    {"type": "string", "format": "ipv6"},
                ],
                "example": "192.0.2.11",
            },
        ),
    ]
    port: Annotated[
        int | None,
        Rule(_port, {"type": "integer", "minimum": 1, "maximum": 65535, "nullable": True}),
    ] = None
    service: Annotated[
        str | None,
        Rule(
            lambda v: None if v is None else _string("service", "tcp 198.51.100.1:80")(v),
            {
                "type": "string",
                "nullable": True,
                "maxLength": 64,
                "pattern": SERVICE_PATTERN,
                "example": "tcp 198.51.100.10:80",
            },
        ),
    ] = None


@dataclass(frozen=True, slots=True, config=BODY)
class SchedulerChoice(Body):
    """The scheduler of a virtual service, and its flags (``sh-port``, ``mh-fallback``...)."""

    scheduler: Annotated[str, _string("scheduler", "sh")]
    flags: Annotated[
        tuple[str, ...], Rule(_flags, {"type": "array", "items": {"type": "string"}})
    ] = ()


REASON_PATTERN = r"^[ -~]{1,200}$"


def _reason(value: object) -> str:
    if not isinstance(value, str) or re.fullmatch(REASON_PATTERN[1:-1], value) is None:
        raise problem("reason must be 1 to 200 printable ASCII characters")
    return value


@dataclass(frozen=True, slots=True, config=BODY)
class MaintenanceRequest(Body):
    """Take this director out: withdraw every BGP route, keep IPVS (connections drain
    through the other directors). Kept across restarts until undone."""

    reason: Annotated[
        str,
        Rule(
            _reason,
            {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
                "pattern": REASON_PATTERN,
                "example": "kernel upgrade",
            },
        ),
    ]


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
    state: Annotated[str, one_of(("active", "draining", "unhealthy"))]
    active_connections: NotRequired[int]
    inactive_connections: NotRequired[int]
    counters: NotRequired[Counters]


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


class Kubernetes(TypedDict):
    configured: bool
    connected: bool
    disconnected_since: str | None


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


BODIES: tuple[type, ...] = (DrainRequest, SchedulerChoice, MaintenanceRequest)
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


def schemas() -> dict[str, Any]:
    """Every body and reply as an OpenAPI 3.0 schema, by name (with their parts)."""
    out: dict[str, Any] = {}
    for kind in (*BODIES, *REPLIES):
        schema = TypeAdapter(kind).json_schema(ref_template=COMPONENTS, mode="validation")
        for name, part in schema.pop("$defs", {}).items():
            out[name] = _openapi30(part)
        out[kind.__name__] = _openapi30(schema)
    return out


def _openapi30(schema: Any) -> Any:
    """JSON Schema 2020-12 as OpenAPI 3.0 reads it: ``nullable`` for ``anyOf [X, null]``,
    ``enum`` for ``const``, no titles."""
    if isinstance(schema, list):
        return [_openapi30(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _openapi30(v) for k, v in schema.items() if k != "title"}
    options = out.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        out.pop("anyOf")
        out.update(rest[0] if len(rest) == 1 else {"anyOf": rest})
        out["nullable"] = True
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if out.get("additionalProperties") is True:
        out.pop("additionalProperties")
    return out
