"""The admin API's routes, each declared once: ``documented`` registers a route on its
blueprint and records its OpenAPI operation, from which ``openapi.document`` builds the
paths. A route is its own documentation; the two cannot drift apart."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import Blueprint

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of the admin API: its rule, method, shapes and answers."""

    rule: str  # the Flask rule: /api/v1/services/<namespace>/<name>
    method: str  # get, put, post, delete
    summary: str
    reply: type  # the success answer's shape (director.schema.api)
    errors: tuple[int, ...] = ()  # beside 401 and 403, which every operation has
    body: type | None = None  # the request body's shape (director.schema.api)
    status: str = "200"
    status_text: str = "OK"

    @property
    def path(self) -> str:
        """The OpenAPI path: ``{namespace}`` for ``<namespace>``."""
        return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", self.rule)

    @property
    def parameters(self) -> list[str]:
        return re.findall(r"<(?:\w+:)?(\w+)>", self.rule)


OPERATIONS: list[Operation] = []


def documented(blueprint: Blueprint, operation: Operation) -> Callable[[F], F]:
    def register(view: F) -> F:
        OPERATIONS.append(operation)
        blueprint.add_url_rule(operation.rule, view_func=view, methods=[operation.method.upper()])
        return view

    return register
