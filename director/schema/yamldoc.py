"""A YAML file as plain data (mappings, lists and text), with the line of every part: the one
reader of the configuration file (PyYAML's composer, its C parser where it is built).

Every scalar is kept as its text (``"80"``, ``"true"``, ``"inf"``): the schema's fields give
each its value, so no YAML 1.1 rule turns a password into a number. It takes everything YAML
allows, refuses duplicate keys and absurd nesting, and records the line of every key and
value, so every fault is reported with its line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from director.core.model import shown

if TYPE_CHECKING:
    import yaml

Path = tuple[str | int, ...]
MAX_DEPTH = 32  # the schema nests 5 deep; anything deeper is a mistake or an attack


class YamlError(ValueError):
    """The text is not YAML the director reads: at ``line`` (0: unknown), ``where``."""

    def __init__(self, line: int, where: Path, reason: str) -> None:
        super().__init__(reason)
        self.line, self.where, self.reason = line, where, reason


MAX_VALUES = 2_000_000  # aliases may repeat a part; not into a billion laughs


@dataclass(slots=True)
class Lines:
    """The line of each value and of each mapping key, by path."""

    values: dict[Path, int]
    keys: dict[Path, int]
    count: int = 0

    def of(self, path: Path, key: bool = False) -> int:
        """The line of ``path`` (its key's line if ``key``), or of its nearest ancestor."""
        table = self.keys if key else self.values
        while path:
            if path in table:
                return table[path]
            path = path[:-1]
            table = self.values
        return self.values.get((), 0)


def precise(text: str) -> tuple[object, Lines]:
    """The plain data and the line of every part; YamlError if it is not plain YAML.

    Built from PyYAML's event stream (its C parser where built), not from a composed node
    tree: no node object is made per scalar, and no pattern is tried on one (every scalar is
    kept as its text). An alias stands for its anchor's value (the same object, counted
    towards ``MAX_VALUES`` at its full size, and located at the alias's line)."""
    lines = Lines({}, {})
    return _read(text, lines), lines


def read(text: str) -> object:
    """The plain data alone: what ``precise`` gives, without the line of every part (a
    tenth of the memory at 5,000 services, and half the time). A fault is a YamlError
    without its exact place: read the text again with ``precise`` to say where."""
    return _read(text, None)


def _read(text: str, lines: Lines | None) -> object:
    import yaml

    try:
        return _built(yaml.parse(text, Loader=_loader(yaml)), lines, yaml)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else 0
        raise YamlError(line, (), f"not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:  # a reader error: a character YAML does not allow
        mark = getattr(exc, "position", None)
        line = text[:mark].count("\n") + 1 if isinstance(mark, int) else 0
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise YamlError(line, (), f"not valid YAML: {first}") from None


class _Open:
    """A mapping or list being read: where it is, and (a mapping) the key read last."""

    __slots__ = ("anchor", "at", "key", "path", "value")

    def __init__(
        self, value: dict[str, object] | list[object], path: Path, anchor: str | None, at: int
    ) -> None:
        self.value, self.path, self.anchor = value, path, anchor
        self.key: str | None = None
        self.at = at  # values counted before it (its anchor's size is the difference)


class _Builder:
    """Plain data from a document's events: each value placed where the open mapping or list
    on top of the stack wants it, with its line."""

    def __init__(self, lines: Lines | None) -> None:
        self.lines = lines or Lines({}, {})
        self.track = lines is not None  # the line (and so the path) of every part
        self.stack: list[_Open] = []
        self.anchors: dict[str, tuple[object, int]] = {}
        self.root: object = None
        self.documents = 0

    def _path(self) -> Path:
        top = self.stack[-1] if self.stack else None
        if top is None or not self.track:
            return ()
        if isinstance(top.value, list):
            return (*top.path, len(top.value))
        assert top.key is not None
        return (*top.path, top.key)

    def _wants_key(self) -> _Open | None:
        top = self.stack[-1] if self.stack else None
        return top if top is not None and isinstance(top.value, dict) and top.key is None else None

    def _place(self, value: object, line: int, size: int) -> None:
        lines = self.lines
        if self.track:
            lines.values[self._path()] = line
        lines.count += size
        if lines.count > MAX_VALUES:
            raise YamlError(line, (), f"aliases expand to over {MAX_VALUES} values")
        top = self.stack[-1] if self.stack else None
        if top is None:
            self.root = value
        elif isinstance(top.value, list):
            top.value.append(value)
        else:
            assert top.key is not None
            top.value[top.key] = value
            top.key = None

    def _key(self, top: _Open, key: object, line: int) -> None:
        if not isinstance(key, str):
            raise YamlError(line, top.path, "keys must be strings")
        label = key if key.isprintable() else shown(key)  # errors are one line
        assert isinstance(top.value, dict)
        if key in top.value:
            first = self.lines.keys.get((*top.path, key), 0)
            why = f"duplicate key (first given on line {first})"
            raise YamlError(line, (*top.path, label), why)
        if self.track:
            self.lines.keys[(*top.path, key)] = line
        top.key = key

    def scalar(self, value: str, anchor: str | None, line: int) -> None:
        top = self._wants_key()
        if top is not None:
            self._key(top, value, line)
            return
        self._place(value, line, 1)
        if anchor:
            self.anchors[anchor] = (value, 1)

    def alias(self, anchor: str, line: int) -> None:
        if anchor not in self.anchors:
            raise YamlError(line, (), f"not valid YAML: found undefined alias {anchor!r}")
        value, size = self.anchors[anchor]
        top = self._wants_key()
        if top is not None:
            self._key(top, value, line)
            return
        self._place(value, line, size)

    def open(self, made: dict[str, object] | list[object], anchor: str | None, line: int) -> None:
        top = self._wants_key()
        if top is not None:
            raise YamlError(line, top.path, "keys must be strings")
        if len(self.stack) + 1 > MAX_DEPTH:
            raise YamlError(line, (), f"nested deeper than {MAX_DEPTH} levels")
        path = self._path()
        self._place(made, line, 1)
        self.stack.append(_Open(made, path, anchor, self.lines.count))

    def close(self) -> None:
        closed = self.stack.pop()
        if closed.anchor:
            self.anchors[closed.anchor] = (closed.value, self.lines.count - closed.at + 1)

    def document(self, line: int) -> None:
        self.documents += 1
        if self.documents > 1:
            raise YamlError(line, (), "not valid YAML: expected a single document in the stream")


def _built(events: Iterator[object], lines: Lines | None, yaml: ModuleType) -> object:
    """The document's plain data from its events (one document at most)."""
    builder = _Builder(lines)
    for event in events:
        line = event.start_mark.line + 1  # type: ignore[attr-defined]
        if isinstance(event, yaml.ScalarEvent):
            builder.scalar(event.value, event.anchor, line)
        elif isinstance(event, yaml.AliasEvent):
            builder.alias(event.anchor, line)
        elif isinstance(event, yaml.MappingStartEvent):
            builder.open({}, event.anchor, line)
        elif isinstance(event, yaml.SequenceStartEvent):
            builder.open([], event.anchor, line)
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            builder.close()
        elif isinstance(event, yaml.DocumentStartEvent):
            builder.document(line)
    return builder.root


def _loader(yaml: ModuleType) -> type:
    """PyYAML's safe loader, its C parser where it was built with libyaml (Debian's is)."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # type: ignore[no-any-return]


# A key whose value is a secret (not a path to one: token_file and the like are not).
_SECRET_KEY = re.compile(r"(?:password|passwd|secret|token|credential)(?!_?file)", re.I)


# a flag or nothing under a secret's key (``password: ~``): no secret to find in the text
_NOT_SECRET = frozenset({"tag:yaml.org,2002:null", "tag:yaml.org,2002:bool"})


def secret_values(text: str) -> set[str] | None:
    """Every value the file holds under a key that names a secret, however it is spelled in
    YAML (block or flow, quoted keys, a block scalar, the value on the next line, ``? key``,
    an anchor and its alias), one entry per line of it, as written: the nodes are composed,
    never constructed, so a value YAML 1.1 would read as a number (``0x1A2B``, ``12:30:45``,
    ``017``, ``1.``) is found by its key like any other. None when the text is not YAML (its
    secrets cannot be found: the caller leaves it out). Each node is walked once: aliases
    share nodes, and a "billion laughs" file is as small here as it is in the text."""
    import yaml

    try:
        documents = list(
            yaml.compose_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        )
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    found: set[str] = set()
    seen: set[tuple[int, bool]] = set()
    stack: list[tuple[yaml.Node | None, bool]] = [(doc, False) for doc in documents]
    while stack:
        node, secret = stack.pop()
        if node is None or (id(node), secret) in seen:
            continue
        seen.add((id(node), secret))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                named = isinstance(key, yaml.ScalarNode) and bool(_SECRET_KEY.search(key.value))
                stack.append((key, secret))
                stack.append((value, secret or named))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, secret) for item in node.value)
        elif secret and isinstance(node, yaml.ScalarNode) and node.tag not in _NOT_SECRET:
            found.update(line.strip() for line in node.value.splitlines() if line.strip())
    return found
