"""The admin API's shapes, each defined once (Octavia's request and response types are the
model): request bodies are validated models here, replies are TypedDicts the views build
(``director.schema.replies``: mypy checks every key), and both give
``/api/v1/openapi.json`` its schemas (:func:`schemas`).

A body the models refuse raises :class:`BodyError` (400) with the reason the client reads.
"""

from __future__ import annotations

import dataclasses
import re
from typing import (
    Annotated,
    Any,  # pydantic reads these on 3.11
)

from pydantic import ConfigDict, TypeAdapter, ValidationError, model_validator
from pydantic.dataclasses import dataclass
from pydantic_core import ArgsKwargs, PydanticCustomError

from director.core.errors import DirectorError
from director.core.model import canonical_address
from director.schema.fields import Rule
from director.schema.replies import REPLIES

BODY = ConfigDict(extra="forbid")
COMPONENTS = "#/components/schemas/{model}"


def problem(reason: str) -> PydanticCustomError:
    """A body refused, in pydantic's terms (it validates the bodies): ``reason`` as written."""
    return PydanticCustomError("config", "{reason}", {"reason": reason, "at": (), "key": False})


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


BODIES: tuple[type, ...] = (DrainRequest, SchedulerChoice, MaintenanceRequest)


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
