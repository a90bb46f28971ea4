"""Request bodies: bounded (also when chunked), nested at most ``MAX_DEPTH`` deep, their
strings without control characters, their fields known; anything else is a 4xx with why."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from flask import request
from werkzeug.exceptions import HTTPException

from director.core.model import IpProtocol, UdpOnly, check_flags, shown
from director.schema.api import SchedulerChoice, read
from director.web.errors import Problem
from director.web.front import MAX_BODY

T = TypeVar("T")

MAX_DEPTH = 16  # JSON nesting: no request of this API needs more than 3


def _depth(value: Any, limit: int) -> bool:
    """Is ``value`` nested at most ``limit`` deep (iteratively: no recursion to exhaust)?"""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def _clean_text(value: Any) -> bool:
    """No control characters or lone surrogates in any string of ``value`` (keys too)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isprintable() and any(ord(c) < 32 or ord(c) == 127 for c in item):
                return False
            try:
                item.encode()
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def parse_body(raw: bytes) -> Any:
    """The request's JSON, or Problem(400) saying what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem(400, "the body is not UTF-8 text") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise Problem(400, f"the key {shown(str(exc))} is given twice in one object") from None
    except RecursionError:
        raise Problem(400, f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise Problem(400, f"the body is not valid JSON ({str(exc).splitlines()[0]})") from None
    if not _depth(data, MAX_DEPTH):
        raise Problem(400, f"the body is nested deeper than {MAX_DEPTH} levels")
    if not _clean_text(data):
        raise Problem(400, "strings must be text without control characters or lone surrogates")
    return data


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (a second one would silently win:
    a proxy and the director could read one body two ways)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def body(model: type[T]) -> T:
    """The request's JSON object read as ``model`` (director.schema.api): known fields
    only, every required one, each value valid; Problem or BodyError saying why not."""
    kind = (request.mimetype or "").lower()
    if kind != "application/json":
        got = shown(kind) if kind else "no content type"
        raise Problem(415, f"send application/json (got {got})")
    length = request.content_length
    if length is not None and length > MAX_BODY:
        raise Problem(413, f"the request body is larger than {MAX_BODY} bytes")
    return read(model, parse_body(read_body()))  # type: ignore[no-any-return]


def read_body() -> bytes:
    """The whole body, never more than MAX_BODY (a chunked body has no length)."""
    pieces: list[bytes] = []
    total = 0
    try:
        while total <= MAX_BODY:
            piece = request.stream.read(MAX_BODY + 1 - total)
            if not piece:
                break
            pieces.append(piece)
            total += len(piece)
    except HTTPException as exc:  # werkzeug's own limit (MAX_CONTENT_LENGTH)
        if exc.code == 413:
            total = MAX_BODY + 1
        else:
            raise Problem(exc.code or 400, exc.description or "unreadable body") from None
    if total > MAX_BODY:
        raise Problem(413, f"the request body is larger than {MAX_BODY} bytes")
    return b"".join(pieces)


def scheduler_choice(
    choice: SchedulerChoice, protocols: frozenset[IpProtocol | None], offered: frozenset[str]
) -> tuple[str, frozenset[str]]:
    """The body's scheduler and canonical flags, for services of ``protocols``."""
    names = sorted(offered)
    if choice.scheduler not in names:
        raise Problem(
            400, f"unknown scheduler {shown(choice.scheduler)}; allowed: {', '.join(names)}"
        )
    udp_only = bool(protocols) and protocols <= {IpProtocol.UDP}
    protocol = IpProtocol.UDP if udp_only else IpProtocol.TCP
    try:
        return choice.scheduler, check_flags(choice.scheduler, choice.flags, protocol)
    except UdpOnly as exc:  # valid flags, but not for what this service is
        raise Problem(409, f"{exc}; this service is not UDP-only") from None
    except ValueError as exc:
        raise Problem(400, f"invalid flags: {exc}") from None
