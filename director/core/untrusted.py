"""Total readers of untrusted JSON: whatever value comes in, a value of the wanted type comes
out (never an exception), and repeated short values are kept once. Pure."""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any, TypeVar, cast

from director.core.model import sloppy_address

T = TypeVar("T")
SAID = 3  # refused entries of one field named one by one; the rest are counted


def as_map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def as_text(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def short(text: str) -> str:
    """One copy of a short string the cluster repeats (namespaces, node names, protocols,
    port names, the timestamps of objects made or changed in the same second): 10,000
    Services in one namespace hold one "default", not 10,000."""
    return sys.intern(text) if len(text) <= 63 else text


def shared(value: T) -> T:
    """One copy of an immutable value many objects repeat (a port list, a family tuple);
    bounded, so distinct values from a hostile cluster cannot grow it."""
    return cast(T, _one_copy(value))


@lru_cache(maxsize=4096)
def _one_copy(value: Any) -> Any:
    return value


def as_port(value: object, low: int = 1) -> int | None:
    """An integer port in [low, 65535], or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
        return None
    return value


def canonical_each(
    items: Iterable[object],
    canonical: Callable[[object], str | None],
    refused: Callable[[object], str],
    problems: list[str],
    said: int = SAID,
) -> tuple[str, ...]:
    """Each item's canonical text, once (linear: a Service may list thousands); the items
    with none are named in ``problems``, the first ``said`` each, the rest counted."""
    kept: dict[str, None] = {}
    bad: list[object] = []
    for item in items:
        text = canonical(item)
        if text is None:
            bad.append(item)
        else:
            kept[text] = None
    problems.extend(refused(item) for item in bad[:said])
    if len(bad) > said:
        problems.append(f"{len(bad) - said} more entries refused like the ones before")
    return tuple(kept)


def canonical_cidr(text: object) -> str | None:
    """A CIDR as kube-proxy reads it (sloppy address, surrounding spaces trimmed), or None."""
    if not isinstance(text, str):
        return None
    address, slash, bits = text.strip().partition("/")
    canonical = sloppy_address(address)
    if canonical is None or not slash or not bits.isascii() or not bits.isdigit():
        return None
    prefix = int(bits)
    if prefix > (128 if ":" in canonical else 32):
        return None
    try:
        return str(ipaddress.ip_network(f"{canonical}/{prefix}", strict=False))
    except ValueError:
        return None
