"""A YAML file as plain data (mappings, lists and text), with the line of every part.

Two readers give the same plain data, up to the form of a scalar: the precise reader keeps
every scalar as its text (``"80"``, ``"true"``); the fast one gives JSON's numbers and
booleans (``80``, ``True``). The schema's fields take both and give the same value.

- The fast reader (rapidyaml, C++) takes plain files: printable ASCII, no anchors, aliases,
  tags, escapes, directives or complex keys, one document whose top is a mapping. It reads a
  5,000-service file in a tenth of a second and keeps no line numbers.
- The precise reader (PyYAML's composer) takes everything YAML allows, refuses duplicate
  keys and absurd nesting, and records the line of every key and value. A file that is not
  plain, or that the schema refuses, is read again by it: errors name their line.

The two agree on every file the fast reader takes (``tests/test_properties.py`` holds them
to it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from director.core.model import shown

if TYPE_CHECKING:
    import yaml

Path = tuple[str | int, ...]
MAX_DEPTH = 32  # the schema nests 5 deep; anything deeper is a mistake or an attack

# What the fast reader takes: printable ASCII and newlines, without the characters that
# start anchors (&), aliases (*), tags (!), directives (%), escapes (\\), complex keys (?)
# or tabs. Anything else is the precise reader's.
_PLAIN = bytes(c for c in range(0x20, 0x7F) if chr(c) not in "&*!%\\?") + b"\n"
_NULL = re.compile(r"[\[:,]\s*null\s*[,\]}\n]")  # null, ~ or nothing: text in the precise
_FLOW_LIST = re.compile(rb"\[[^\]]*")  # a flow list's text, to its first ]


def _import_ryml() -> ModuleType | None:
    """rapidyaml (a dependency; without it every file takes the precise reader), without
    the module its wrapper loads only to mark its old names deprecated: ``deprecation``
    brings ``packaging`` and ``datetime``, which nothing else of a check or a static box
    needs. Those old names are not used here; the stand-in is gone once ryml is loaded."""
    if "deprecation" in sys.modules:
        stand_in = None
    else:
        stand_in = ModuleType("deprecation")
        stand_in.deprecated = lambda **_: lambda fn: fn  # type: ignore[attr-defined]
        sys.modules["deprecation"] = stand_in
    try:
        import ryml as module
    except ImportError:  # pragma: no cover - exercised only on a broken install
        return None
    finally:
        if stand_in is not None and sys.modules.get("deprecation") is stand_in:
            del sys.modules["deprecation"]
    loaded: ModuleType = module
    return loaded


ryml = _import_ryml()

_STDERR = threading.Lock()


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


def fast(text: str) -> object | None:
    """The plain data of a plain file, or None: the precise reader must read it.

    Numbers and true/false arrive as JSON made them (the fields take both forms and give
    the same value); a float keeps its text."""
    raw = text.encode()
    if ryml is None or raw.translate(None, _PLAIN) or raw.startswith((b"---", b"...")):
        return None
    if b"\n---" in raw or b"\n..." in raw:
        return None
    try:
        with _quiet_stderr():  # rapidyaml prints its own parse errors to stderr
            tree = ryml.Tree()
            tree.reserve(nodes_in(raw))
            ryml.parse_in_arena(raw, tree)
            root = tree.root_id()
            if not tree.is_map(root):
                return None
            emitted = ryml.emit_json_malloc(tree, root)
            del tree  # 40 MB at 5,000 services: gone before the data is made
        if "null" in emitted and _NULL.search(emitted):
            return None
        data: object = json.loads(
            emitted, parse_float=str, parse_constant=_refuse, object_pairs_hook=_unique
        )
        return data
    except (_NotPlain, ValueError, RecursionError, MemoryError, RuntimeError):
        return None
    except Exception as exc:  # rapidyaml's own exception classes
        if type(exc).__module__.startswith("ryml"):
            return None
        raise


def nodes_in(raw: bytes) -> int:
    """How many nodes rapidyaml makes of a plain file, near enough to allocate its tree once.

    Left to grow, the tree doubles as it fills: a 5,000-service file (230,000 nodes) was
    copied 14 times into a tree of 262,144, and the parse took half as many page faults
    again as the nodes need. Each node is the top, a key's value (``key: `` or ``key:`` at
    the end of a line), a block list's item (``- ``) or a flow list's (one more than its
    commas); text that only looks like one (a comment, a flow mapping in a flow list) counts
    too, so the figure is rarely under. Under, the tree grows from it as it did; 3% more
    is allowed for that."""
    counted = raw.count(b": ") + raw.count(b":\n") + raw.count(b"- ") + raw.count(b"-\n")
    lists: list[bytes] = _FLOW_LIST.findall(raw)
    counted += sum(1 + part.count(b",") for part in lists)
    return counted + counted // 32 + 16


def precise(text: str) -> tuple[object, Lines]:
    """The plain data and the line of every part; YamlError if it is not plain YAML."""
    root = _compose(text)
    lines = Lines({}, {})
    if root is None:
        return None, lines
    _check_depth(root)
    return _plain(root, (), lines), lines


class _NotPlain(ValueError):
    pass


def _refuse(_: str) -> object:
    raise _NotPlain


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NotPlain  # a duplicate key: the precise reader names both lines
    return out


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """fd 2 to /dev/null for the length of one parse (the error is reported by us)."""
    with _STDERR:
        saved = os.dup(2)
        try:
            with open(os.devnull, "wb") as sink:
                os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _compose(text: str) -> yaml.Node | None:
    """The YAML node tree, or a YamlError naming the line (never a traceback)."""
    import yaml  # here: a plain file never needs it

    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else 0
        raise YamlError(line, (), f"not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:  # a reader error: a character YAML does not allow
        mark = getattr(exc, "position", None)
        line = text[:mark].count("\n") + 1 if isinstance(mark, int) else 0
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise YamlError(line, (), f"not valid YAML: {first}") from None
    except RecursionError:
        raise YamlError(0, (), "not valid YAML: nested far too deeply") from None


def _check_depth(node: yaml.Node) -> None:
    """Refuse absurd nesting (each node once: aliases cannot make the walk explode)."""
    import yaml

    stack = [(node, 1)]
    seen: set[int] = set()
    while stack:
        item, depth = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if depth > MAX_DEPTH:
            raise YamlError(item.start_mark.line + 1, (), f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, yaml.MappingNode):
            stack.extend((child, depth + 1) for pair in item.value for child in pair)
        elif isinstance(item, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in item.value)


def _plain(node: yaml.Node, path: Path, lines: Lines) -> object:
    import yaml

    lines.values[path] = node.start_mark.line + 1
    lines.count += 1
    if lines.count > MAX_VALUES:
        raise YamlError(lines.values[path], (), f"aliases expand to over {MAX_VALUES} values")
    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, (*path, index), lines) for index, item in enumerate(node.value)]
    out: dict[str, object] = {}
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str):
            raise YamlError(key_node.start_mark.line + 1, path, "keys must be strings")
        label = key if key.isprintable() else shown(key)  # errors are one line
        line = key_node.start_mark.line + 1
        if key in out:
            first = lines.keys[(*path, key)]
            raise YamlError(line, (*path, label), f"duplicate key (first given on line {first})")
        lines.keys[(*path, key)] = line
        out[key] = _plain(value_node, (*path, key), lines)
    return out


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
        with _quiet_stderr():
            documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
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
