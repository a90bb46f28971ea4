"""Reading the configuration file again after an edit (a reload), at the cost of the edit.

A 5,000-service file takes most of a second to parse and validate, and a reload that changes
one weight should not pay that. The file's ``services:`` section (block style) is cut into
its list items, by text; everything else stays one piece. When everything outside the items
is the same text as in the file read before, only the items whose text is new are parsed -
as a small document made of everything else and those items, so that they are validated
against the same ownership, defaults, pools and health settings - and the others keep what
they parsed to. Any doubt (a different outside, a new item that does not parse on its own, a
name or address declared twice) and the whole file is parsed as at start, so a fault is
reported exactly as ``director check`` reports it, with its line. So is a file that is not
plain YAML: an anchor in one item used by an alias in another (or a tag, a merge key) ties
items together, and an item whose text did not change may still mean something new.

The memory lives in the process: a start parses the file whole (nothing parsed is kept on
disk).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from director.core.checks import CheckSpec
from director.core.model import RateLimit, RealServer, ServiceKey
from director.core.services import Table, VirtualService
from director.schema.config import ConfigError, Settings, parse_config, read_config

_SECTION = re.compile(r"services:[ \t]*(?:#[^\n]*)?\r?(?:\n|$)")
_CONTENT = re.compile(r"\n( *)(?=[^ \t\r\n#])")  # the next line with a value
_ITEM_MARK = "\0items\0"
# What ties one part of a YAML file to another, or changes how a value reads: an anchor
# (&name), an alias (*name), a tag (!tag) or a merge key (<<), where YAML would see one (at
# the start of a value or a flow item). Also found inside quoted strings and comments:
# such a file is only parsed whole, never wrongly.
_NOT_PLAIN = re.compile(r"(?:^|[\s\[{,:?-])[&*!]\S|<<")


def _not_plain(text: str) -> bool:
    """``_NOT_PLAIN`` is in the text. Most files hold none of its characters, and looking
    for each of them is a scan in C, far cheaper than the pattern's own search."""
    if "&" not in text and "*" not in text and "!" not in text and "<<" not in text:
        return False
    return _NOT_PLAIN.search(text) is not None


class _Check(Enum):
    UNCHECKED = "no health_check line"


_UNCHECKED = _Check.UNCHECKED  # a service without a health_check line: the section's default

# a service, its check (or _UNCHECKED), and whether it is full NAT
# the service, its check, full NAT, guarded, its rates, its sorry server
Parsed = tuple[VirtualService, object, bool, bool, RateLimit | None, RealServer | None]


def _digest(item: str) -> bytes:
    """What an item is remembered by: its text's digest (16 bytes where the text of a
    5,000-service file's items held 3.3 MB for life)."""
    return hashlib.blake2b(item.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Split:
    """A file cut into its ``services:`` items and the rest."""

    outside: str  # the file with the services items replaced by one mark
    items: tuple[str, ...]  # each item's text, comments and blank lines after it included


def split(text: str) -> Split | None:
    """The file cut into the ``services:`` items and the rest; None when it has no such
    section in block style (one line ``services:``, then ``- `` items). Searches, not a
    loop over lines: a 5,000-service file has 75,000 of them."""
    found = [m for m in map(_section_at(text), _line_starts(text, "services:")) if m]
    if len(found) != 1:
        return None
    section = found[0]
    first = _CONTENT.search(text, section.end() - 1)
    if first is None:
        return Split(text[: section.end()] + _ITEM_MARK, ())
    head = first.start() + 1
    indent = len(first.group(1))
    item = "\n" + " " * indent + "- "
    if not text.startswith(item[1:], head):
        return None  # a flow list, or not a list: the whole file is parsed
    after = _ends(indent).search(text, head)
    end = after.start() + 1 if after is not None else len(text)
    starts = [head]
    while (at := text.find(item, starts[-1], end)) >= 0:
        starts.append(at + 1)
    bounds = zip(starts, [*starts[1:], end], strict=True)
    return Split(text[:head] + _ITEM_MARK + text[end:], tuple(text[a:b] for a, b in bounds))


def _line_starts(text: str, word: str) -> list[int]:
    """Where ``word`` begins a line."""
    out, at = [], text.find(word)
    while at >= 0:
        if at == 0 or text[at - 1] == "\n":
            out.append(at)
        at = text.find(word, at + 1)
    return out


def _section_at(text: str) -> Callable[[int], re.Match[str] | None]:
    return lambda at: _SECTION.match(text, at)


@functools.cache
def _ends(indent: int) -> re.Pattern[str]:
    """The line after the section: not blank, not a comment, not indented deeper than the
    items and not an item (the next top-level key, in a valid file)."""
    return re.compile(rf"\n(?= {{0,{indent}}}[^ \t\r\n#])(?! {{{indent}}}- )")


class Reparser:
    """Parses one file again and again, remembering what each services item parsed to."""

    def __init__(self) -> None:
        self._outside: str | None = None
        self._settings: Settings | None = None
        self._items: dict[bytes, Parsed] = {}  # by each item's _digest
        self.reused = 0  # items the last parse took from the one before (a figure for logs)
        self._lock = threading.Lock()  # one load at a time

    def load(self, path: str | Path) -> Settings:
        """The file's settings (only the services items that changed since the last load
        are parsed again)."""
        with self._lock:
            text, source = read_config(path)
            return self._parse(text, source)

    def parse(self, text: str, source: str) -> Settings:
        with self._lock:
            return self._parse(text, source)

    def _parse(self, text: str, source: str) -> Settings:
        self.reused = 0
        parts = split(text) if not _not_plain(text) else None
        if parts is not None and parts.outside == self._outside:
            quick = self._incremental(parts, source)
            if quick is not None:
                return quick
        settings = parse_config(text, source)
        self._remember(parts, settings)
        return settings

    def _remember(self, parts: Split | None, settings: Settings) -> None:
        self._outside, self._settings, self._items = None, None, {}
        if parts is None or len(parts.items) != len(settings.services):
            return  # not cut as the parser read it: no reuse
        self._outside, self._settings = parts.outside, settings
        checks = settings.static_checks
        for text, (key, vs) in zip(parts.items, settings.services.items(), strict=True):
            self._items[_digest(text)] = (
                vs,
                checks.get(key, _UNCHECKED),
                key in settings.static_snat,
                key in settings.static_guard,
                settings.static_limits.get(key),
                settings.static_sorry.get(key),
            )

    def _incremental(self, parts: Split, source: str) -> Settings | None:
        if not parts.items:
            return None  # an empty section: the parser says what it makes of it
        known = self._items
        digests = [_digest(item) for item in parts.items]
        fresh = list(
            dict.fromkeys(
                item
                for item, digest in zip(parts.items, digests, strict=True)
                if digest not in known
            )
        )
        parsed: dict[bytes, Parsed] = {}
        if fresh:
            try:
                small = parse_config(parts.outside.replace(_ITEM_MARK, "".join(fresh)), source)
            except ConfigError:
                return None  # parsed whole, the file names its fault with the right line
            if len(small.services) != len(fresh):
                return None
            for text, (key, vs) in zip(fresh, small.services.items(), strict=True):
                parsed[_digest(text)] = (
                    vs,
                    small.static_checks.get(key, _UNCHECKED),
                    key in small.static_snat,
                    key in small.static_guard,
                    small.static_limits.get(key),
                    small.static_sorry.get(key),
                )
        services: Table = {}
        checks: dict[ServiceKey, CheckSpec | None] = {}
        snat: set[ServiceKey] = set()
        guarded: set[ServiceKey] = set()
        limits: dict[ServiceKey, RateLimit] = {}
        sorry: dict[ServiceKey, RealServer] = {}
        names: set[str] = set()
        for digest in digests:
            vs, check, full, guard, limit, server = parsed.get(digest) or known[digest]
            if server is not None:
                sorry[vs.key] = server
            if full:
                snat.add(vs.key)
            if guard:
                guarded.add(vs.key)
            if limit is not None:
                limits[vs.key] = limit
            if vs.key in services or (vs.origin != "static" and vs.origin in names):
                return None  # declared twice: the whole file says where
            services[vs.key] = vs
            names.add(vs.origin)
            if check is not _UNCHECKED:
                checks[vs.key] = check  # type: ignore[assignment]
        assert self._settings is not None
        settings = dataclasses.replace(
            self._settings,
            source=source,
            services=services,
            static_checks=checks,
            static_snat=frozenset(snat),
            static_guard=frozenset(guarded),
            static_limits=limits,
            static_sorry=sorry,
        )
        self._items = {digest: parsed.get(digest) or known[digest] for digest in digests}
        self._settings = settings
        self.reused = len(parts.items) - len(fresh)
        return settings
