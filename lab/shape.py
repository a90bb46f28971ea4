"""The size rules of the layers issue, checked on the source (run by ``make lint``).

- no function or method in ``director/`` longer than 80 lines;
- the loop module (``director/engine/loop.py``) under 300 lines;
- no class with more than 15 instance attributes (fields of a dataclass or NamedTuple,
  annotated names in the class body, and ``self.x = ...`` in its methods).

Records whose fields are the keys of a document someone else defines are exempt, by name
and with the document they mirror: splitting them would make their fields stop matching
that document one for one. Everything else, above all a class with behaviour, keeps to 15.

    python -m lab.shape            # prints each finding; exit 1 if there is one
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "director"
MAX_FUNCTION_LINES = 80
MAX_LOOP_LINES = 300
MAX_ATTRIBUTES = 15

MIRRORS = {
    "director/schema/sections.py:HaSettings": (
        "the config file's ha: section (one field per documented key)"
    ),
    "director/core/cluster.py:ServiceInfo": (
        "a Kubernetes Service's spec and status (one field per field read)"
    ),
}


def _record(cls: ast.ClassDef) -> bool:
    """A dataclass, NamedTuple, TypedDict or config section: every annotated name is a field."""
    marks = [ast.unparse(d) for d in cls.decorator_list] + [ast.unparse(b) for b in cls.bases]
    return any(
        word in mark
        for mark in marks
        for word in ("dataclass", "NamedTuple", "TypedDict", "Section")
    )


def attributes(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    record = _record(cls)
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation):
                continue
            # In a plain class, ``x: T = make(...)`` is a descriptor (a property), not a field.
            if record or not isinstance(node.value, ast.Call):
                names.add(node.target.id)
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for item in ast.walk(target):
                    if (
                        isinstance(item, ast.Attribute)
                        and isinstance(item.value, ast.Name)
                        and item.value.id == "self"
                    ):
                        names.add(item.attr)
    return names


def findings(root: Path = ROOT) -> Iterator[str]:
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root.parent).as_posix()
        text = path.read_text()
        if where == "director/engine/loop.py" and len(text.splitlines()) >= MAX_LOOP_LINES:
            yield f"{where}: {len(text.splitlines())} lines (the loop stays under 300)"
        for node in ast.walk(ast.parse(text, where)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    yield f"{where}:{node.lineno}: {node.name} is {length} lines (80 at most)"
            elif isinstance(node, ast.ClassDef):
                count = len(attributes(node))
                if count > MAX_ATTRIBUTES and f"{where}:{node.name}" not in MIRRORS:
                    yield (
                        f"{where}:{node.lineno}: {node.name} has {count} instance "
                        "attributes (15 at most)"
                    )


def main() -> int:
    found = list(findings())
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
