"""The OpenAPI 3.0 document of the admin API, served at /api/v1/openapi.json."""

from __future__ import annotations

import copy
from typing import Any

from director.core.model import scheduler_flag_names
from director.schema.api import schemas
from director.web.registry import OPERATIONS

_PROBLEM = {"$ref": "#/components/responses/Problem"}
SCHEMAS = schemas()  # the bodies' and replies' shapes (director.schema.api)


def _ok(schema: str, code: str = "200", text: str = "OK") -> dict[str, Any]:
    return {
        code: {
            "description": text,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
        }
    }


def _errors(*codes: int) -> dict[str, Any]:
    base = {401: "no bearer token", 403: "wrong bearer token"}
    texts = {
        400: "invalid input",
        404: "unknown service or drain",
        409: "conflict with the current state",
        413: "body larger than 64 KiB",
        415: "the body is not application/json",
        503: "the change was not made: the Kubernetes API or the intents file did not take it, "
        "or the control loop did not answer in time",
    }
    out: dict[str, Any] = {}
    for code in (*codes, 401, 403):
        out[str(code)] = {
            "description": texts.get(code) or base[code],
            "content": {
                "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
            },
        }
    out["default"] = _PROBLEM
    return out


_EXAMPLES = {"namespace": "default", "name": "web"}  # path parameters' examples


_CLUSTER = {
    "name": "cluster",
    "in": "query",
    "required": False,
    "description": "The Service's cluster (clusters:); needed only when several clusters "
    "have a Service of that namespace and name.",
    "schema": {"type": "string"},
    "example": "prod",
}


def _parameter(name: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }
    if name in _EXAMPLES:
        out["example"] = _EXAMPLES[name]
    return out


def paths() -> dict[str, Any]:
    """Every documented route's operation (``director.web.registry``), by path."""
    out: dict[str, Any] = {}
    for op in OPERATIONS:
        entry = out.setdefault(op.path, {})
        if op.parameters:
            entry["parameters"] = [_parameter(name) for name in op.parameters]
            if "namespace" in op.parameters:  # a Kubernetes Service: of which cluster
                entry["parameters"].append(_CLUSTER)
        operation: dict[str, Any] = {
            "summary": op.summary,
            "responses": {
                **_ok(op.reply.__name__, op.status, op.status_text),
                **_errors(*op.errors),
            },
        }
        if op.body is not None:
            schema = {"$ref": f"#/components/schemas/{op.body.__name__}"}
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema}},
            }
        entry[op.method] = operation
    return out


def scheduler_choice(schedulers: frozenset[str]) -> dict[str, Any]:
    """SchedulerChoice (the model) once per scheduler this kernel offers, each alternative
    with the flags that scheduler accepts."""
    base = SCHEMAS["SchedulerChoice"]
    alternatives = []
    for name in sorted(schedulers):
        one = copy.deepcopy(base)
        one["properties"]["scheduler"]["enum"] = [name]
        one["properties"]["flags"]["items"]["enum"] = list(scheduler_flag_names(name))
        alternatives.append(one)
    return {"oneOf": alternatives, "example": {"scheduler": "sh", "flags": ["sh-port"]}}


def document(schedulers: frozenset[str]) -> dict[str, Any]:
    schemas = {**SCHEMAS, "SchedulerChoice": scheduler_choice(schedulers)}
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "director admin API",
            "version": "1",
            "description": "IPVS director: virtual services, schedulers, drains, status.",
        },
        "security": [{"bearer": []}],
        "paths": paths(),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                "Problem": {
                    "description": "an error (RFC 9457 problem details)",
                    "content": {
                        "application/problem+json": {
                            "schema": {"$ref": "#/components/schemas/Problem"}
                        }
                    },
                }
            },
            "schemas": schemas,
        },
    }
