"""The OpenAPI 3.0 document of the admin API, served at /api/v1/openapi.json."""

from __future__ import annotations

from typing import Any

from director.core.model import scheduler_flag_names
from director.web.registry import OPERATIONS

_PROBLEM = {"$ref": "#/components/responses/Problem"}


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


def _parameter(name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "in": "path", "required": True,
                           "schema": {"type": "string"}}  # fmt: skip
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
        operation: dict[str, Any] = {
            "summary": op.summary,
            "responses": {**_ok(op.reply, op.status, op.status_text), **_errors(*op.errors)},
        }
        if op.body is not None:
            schema = {"$ref": f"#/components/schemas/{op.body}"}
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema}},
            }
        entry[op.method] = operation
    return out

_COUNTERS = {
    "type": "object",
    "properties": {
        name: {"type": "integer", "minimum": 0}
        for name in (
            "connections", "packets_in", "packets_out", "bytes_in", "bytes_out",
            "cps", "pps_in", "pps_out", "bps_in", "bps_out",
        )
    },
}  # fmt: skip

_SCHEMAS: dict[str, Any] = {
    "Problem": {
        "type": "object",
        "required": ["title", "status", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
        },
    },
    "Counters": _COUNTERS,
    "RealServer": {
        "type": "object",
        "required": ["address", "port", "weight", "forwarding", "state"],
        "properties": {
            "address": {"type": "string"},
            "port": {"type": "integer"},
            "weight": {"type": "integer"},
            "forwarding": {"type": "string", "enum": ["nat", "dr", "tun", "local", "bypass"]},
            "state": {"type": "string", "enum": ["active", "draining", "unhealthy"]},
            "active_connections": {"type": "integer"},
            "inactive_connections": {"type": "integer"},
            "counters": {"$ref": "#/components/schemas/Counters"},
        },
    },
    "VirtualService": {
        "type": "object",
        "required": ["service", "scheduler", "scheduler_source", "real_servers", "origin"],
        "properties": {
            "service": {"type": "string", "example": "tcp 198.51.100.10:80"},
            "family": {"type": "string", "enum": ["ipv4", "ipv6"]},
            "protocol": {"type": "string", "nullable": True},
            "address": {"type": "string", "nullable": True},
            "port": {"type": "integer", "nullable": True},
            "fwmark": {"type": "integer", "nullable": True},
            "origin": {"type": "object", "additionalProperties": {"type": "string"}},
            "scheduler": {"type": "string"},
            "scheduler_source": {
                "type": "string",
                "enum": ["default", "annotation", "api", "config"],
            },
            "flags": {"type": "array", "items": {"type": "string"}},
            "persistence": {"type": "integer"},
            "programmed": {"type": "boolean"},
            "counters": {"$ref": "#/components/schemas/Counters"},
            "real_servers": {"type": "array", "items": {"$ref": "#/components/schemas/RealServer"}},
        },
    },
    "ServiceList": {
        "type": "object",
        "required": ["items"],
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/VirtualService"}}
        },
    },
    "KubernetesService": {
        "type": "object",
        "required": ["service", "virtual_services"],
        "properties": {
            "service": {"type": "string"},
            "virtual_services": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/VirtualService"},
            },
        },
    },
    # SchedulerChoice is built per kernel by scheduler_choice().
    "SchedulerResult": {
        "type": "object",
        "required": ["service", "source"],
        "properties": {
            "service": {"type": "string"},
            "scheduler": {"type": "string"},
            "flags": {"type": "array", "items": {"type": "string"}},
            "source": {"type": "string"},
            "stored_in": {"type": "string"},
        },
    },
    "DrainRequest": {
        "type": "object",
        "required": ["address"],
        "additionalProperties": False,
        "properties": {
            "address": {
                "anyOf": [
                    {"type": "string", "format": "ipv4"},
                    {"type": "string", "format": "ipv6"},
                ],
                "example": "192.0.2.11",
            },
            "port": {"type": "integer", "minimum": 1, "maximum": 65535, "nullable": True},
            "service": {
                "type": "string",
                "nullable": True,
                "maxLength": 64,
                # str(ServiceKey): "tcp 198.51.100.10:80", "udp [2001:db8::53]:53",
                # "fwmark 7 ipv4". Text only: the API refuses control characters.
                "pattern": r"^((tcp|udp|sctp) [0-9A-Fa-f.:\[\]]+:[0-9]+|fwmark [0-9]+ ipv[46])$",
                "example": "tcp 198.51.100.10:80",
            },
        },
    },
    "Drain": {
        "type": "object",
        "required": ["id", "address"],
        "properties": {
            "id": {"type": "string"},
            "address": {"type": "string"},
            "port": {"type": "integer", "nullable": True},
            "service": {"type": "string", "nullable": True},
            "id_text": {"type": "string"},
            "done": {"type": "boolean"},
            "real_servers": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "service": {"type": "string"},
                        "weight": {"type": "integer"},
                        "active_connections": {"type": "integer"},
                        "inactive_connections": {"type": "integer"},
                    },
                },
            },
        },
    },
    "DrainList": {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Drain"}}},
    },
    "Undrained": {
        "type": "object",
        "required": ["id", "undrained"],
        "properties": {"id": {"type": "string"}, "undrained": {"type": "boolean"}},
    },
    "Status": {
        "type": "object",
        "required": ["role", "ready", "kubernetes", "leader", "counts"],
        "properties": {
            "role": {"type": "string", "enum": ["MASTER", "BACKUP", "FAULT", "standalone"]},
            "ready": {"type": "boolean"},
            "dry_run": {"type": "boolean"},
            "kubernetes": {
                "type": "object",
                "properties": {
                    "configured": {"type": "boolean"},
                    "connected": {"type": "boolean"},
                    "disconnected_since": {"type": "string", "nullable": True},
                },
            },
            "leader": {"type": "boolean"},
            "last_sync": {"type": "string", "nullable": True},
            "last_sync_seconds": {"type": "number"},
            "last_error": {"type": "string", "nullable": True},
            "failed_operations": {"type": "integer"},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    },
    "Plan": {
        "type": "object",
        "required": ["ops", "foreign", "refused"],
        "properties": {
            "ops": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "op": {"type": "string"},
                        "service": {"type": "string"},
                        "detail": {"type": "string"},
                        "origin": {"type": "string"},
                    },
                },
            },
            "foreign": {"type": "array", "items": {"type": "string"}},
            "refused": {"type": "array", "items": {"type": "object"}},
        },
    },
}


def scheduler_choice(schedulers: frozenset[str]) -> dict[str, Any]:
    """One alternative per scheduler the kernel offers, each with the flags it accepts."""
    alternatives = [
        {
            "type": "object",
            "required": ["scheduler"],
            "additionalProperties": False,
            "properties": {
                "scheduler": {"type": "string", "enum": [name]},
                "flags": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(scheduler_flag_names(name))},
                },
            },
        }
        for name in sorted(schedulers)
    ]
    return {"oneOf": alternatives, "example": {"scheduler": "sh", "flags": ["sh-port"]}}


def document(schedulers: frozenset[str]) -> dict[str, Any]:
    schemas = {**_SCHEMAS, "SchedulerChoice": scheduler_choice(schedulers)}
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
