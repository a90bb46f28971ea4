"""The Controller's parts seen as its own attributes (what the runtime, the web and the
tests read), without the Controller keeping a copy of each."""

from __future__ import annotations

from operator import attrgetter
from typing import Any


def read(path: str) -> Any:
    """A part's attribute, read as the Controller's own."""
    return property(attrgetter(path))


def hook(part: str, name: str) -> Any:
    """A part's callback, set and read as the Controller's own."""
    get = attrgetter(part)
    return property(
        lambda self: getattr(get(self), name), lambda self, value: setattr(get(self), name, value)
    )
