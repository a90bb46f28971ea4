"""A YAML file as plain data (mappings, lists and text), with the line of every part: the one
reader of the configuration file (PyYAML's composer, its C parser where it is built).

Every scalar is kept as its text (``"80"``, ``"true"``, ``"inf"``): the schema's fields give
each its value, so no YAML 1.1 rule turns a password into a number. It takes everything YAML
allows, refuses duplicate keys and absurd nesting, and records the line of every key and
value, so every fault is reported with its line.
"""

from __future__ import annotations

import re
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
    """The plain data and the line of every part; YamlError if it is not plain YAML."""
    root = _compose(text, untagged=True)
    lines = Lines({}, {})
    if root is None:
        return None, lines
    return _plain(root, (), lines, 1), lines


def _loader(yaml: ModuleType) -> type:
    """PyYAML's safe loader, its C parser where it was built with libyaml (Debian's is)."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # type: ignore[no-any-return]


_UNTAGGED: dict[type, type] = {}


def _untagged(yaml: ModuleType) -> type:
    """The safe loader without implicit tags for scalars: every scalar is kept as its text,
    so YAML 1.1's patterns (numbers, booleans, timestamps), tried on each scalar, are never
    needed (they were half of composing a big file)."""
    base = _loader(yaml)
    made = _UNTAGGED.get(base)
    if made is None:
        scalar = yaml.ScalarNode

        def resolve(self: object, kind: type, value: object, implicit: object) -> str:
            if kind is scalar:
                return "tag:yaml.org,2002:str"
            return base.resolve(self, kind, value, implicit)  # type: ignore[attr-defined,no-any-return]

        made = _UNTAGGED[base] = type("Untagged", (base,), {"resolve": resolve})
    return made


def _compose(text: str, *, untagged: bool = False) -> yaml.Node | None:
    """The YAML node tree, or a YamlError naming the line (never a traceback)."""
    import yaml

    try:
        return yaml.compose(text, Loader=_untagged(yaml) if untagged else _loader(yaml))
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


def _plain(node: yaml.Node, path: Path, lines: Lines, depth: int) -> object:
    """The node as plain data, the line of each part in ``lines``; absurd nesting refused
    before it is walked further (``MAX_DEPTH``), and aliases that expand past
    ``MAX_VALUES``."""
    import yaml

    lines.values[path] = node.start_mark.line + 1
    if depth > MAX_DEPTH:
        raise YamlError(lines.values[path], (), f"nested deeper than {MAX_DEPTH} levels")
    lines.count += 1
    if lines.count > MAX_VALUES:
        raise YamlError(lines.values[path], (), f"aliases expand to over {MAX_VALUES} values")
    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    if isinstance(node, yaml.SequenceNode):
        return [
            _plain(item, (*path, index), lines, depth + 1) for index, item in enumerate(node.value)
        ]
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
        out[key] = _plain(value_node, (*path, key), lines, depth + 1)
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
