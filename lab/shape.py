"""The size rules of the layers issue, checked on the source (run by ``make lint``).

- no function or method in ``director/`` longer than 80 lines;
- the loop module (``director/engine/loop.py``) under 300 lines;
- no import circle among the modules of ``director/`` (imports made for type checking
  only count too: they are the same knot to a reader);
- the web and the adapters import from the engine only its door: ``engine.events``,
  ``engine.view`` and ``engine.ports`` (an allow-list: a new engine module is closed to them
  until it is named here);
- no module in ``director/`` over 400 lines;
- the core carries none of the kernel's wire format: no ``struct`` import and no IPVS or
  netlink constant (``SVC_F_*``, ``IP_VS_*``, ``IPVS_*``, ``NLM*``, ``NLA*``) under
  ``director/core/`` (flag bits are ``director.dataplane.flags``, packing the codec's);
- ``tests/`` mirrors ``director/``: each module ``director/<package>/<m>.py`` has
  ``tests/<package>/test_<m>.py``, or is named in ``UNMIRRORED`` with the test file that
  covers it today (which must exist); that list only shrinks too; and each folder of
  ``tests/`` is a package (``tests/web/test_bgp.py`` and ``tests/adapters/test_bgp.py`` are
  two modules, not one name pytest imports twice);
- no class with more than 15 instance attributes (fields of a dataclass or NamedTuple,
  annotated names in the class body, ``self.x = ...`` in its methods, and what only
  forwards to another object: a property whose body returns ``self.part.x``, and a
  descriptor built in the class body such as ``x = property(attrgetter("part.x"))``).

Records whose fields are the keys of a document someone else defines are exempt, by name
and with the document they mirror: splitting them would make their fields stop matching
that document one for one. Everything else, above all a class with behaviour, keeps to 15.

The three size caps (a function's lines, a module's lines, a class's attributes) are smoke
detectors, not targets: they are printed as warnings and never fail lint (a file is as long
as its one idea; issue 72). The rest are rules: an import circle, the engine's door, the
core's wire format and the tests' mirror fail it.

    python -m lab.shape            # prints each finding; exit 1 if a rule is broken
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "director"
MAX_FUNCTION_LINES = 80
MAX_LOOP_LINES = 300
MAX_ATTRIBUTES = 15
MAX_MODULE_LINES = 400
# Modules whose tests are one file for several modules, on purpose: the test file that
# covers each, and why it is not split. The list only shrinks.
UNMIRRORED: dict[str, tuple[str, str]] = {
    # The conformance suite runs each test on the fake and on the kernel alike (the fake
    # must never be kinder than the kernel): one file per implementation would let them
    # drift apart.
    "director/dataplane/fake.py": (
        "tests/dataplane/test_conformance.py",
        "one suite for both implementations: the fake's half",
    ),
    "director/dataplane/interface.py": (
        "tests/dataplane/test_conformance.py",
        "the Protocol the one suite holds both implementations to",
    ),
    "director/dataplane/kernel.py": (
        "tests/dataplane/test_conformance.py",
        "one suite for both implementations: the kernel's half (lab VM)",
    ),
}
KERNEL_FORMAT = re.compile(r"(SVC_F_|IP_VS_|IPVS_|NLM|NLA)[A-Z0-9_]*")

MIRRORS = {
    "director/schema/ha.py:HaSettings": (
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


def _depth(node: ast.AST) -> int:
    """How deep ``node`` reaches into ``self`` (``self.a.b``: 2; anything else: 0)."""
    depth = 0
    while isinstance(node, ast.Attribute):
        node, depth = node.value, depth + 1
    return depth if isinstance(node, ast.Name) and node.id == "self" else 0


def _forwards(node: ast.FunctionDef) -> bool:
    """A property whose whole body returns what another object holds: ``self.a.b``, or
    ``self.a.b if self.a else None`` (nothing computed: no call)."""
    if not any(ast.unparse(d) == "property" for d in node.decorator_list):
        return False
    body = [n for n in node.body if not isinstance(n, ast.Expr)]  # a docstring aside
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return False
    inside = list(ast.walk(body[0].value))
    if any(isinstance(n, ast.Call) for n in inside):
        return False
    return any(_depth(n) >= 2 for n in inside)


def attributes(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    record = _record(cls)
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation):
                continue
            # In a plain class, ``x: T = make(...)`` is a descriptor: a forwarding property
            # is still one of the class's attributes to whoever reads it.
            names.add(node.target.id)
        elif not record and isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.FunctionDef) and _forwards(node):
            names.add(node.name)
    for sub in ast.walk(cls):
        if isinstance(sub, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for target in targets:
                for item in ast.walk(target):
                    if (
                        isinstance(item, ast.Attribute)
                        and isinstance(item.value, ast.Name)
                        and item.value.id == "self"
                    ):
                        names.add(item.attr)
    return names


ENGINE_DOOR = frozenset({"director.engine.events", "director.engine.view", "director.engine.ports"})
BEHIND_THE_DOOR = ("director/web/", "director/adapters/")


def _engine_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """The engine modules a module imports (``from director.engine import x`` names x)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            base = node.module
            names = [(node.lineno, base)]
            if base == "director.engine":
                names = [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        else:
            continue
        for line, name in names:
            if name == "director.engine" or name.startswith("director.engine."):
                yield line, name


def _imports(root: Path) -> dict[str, set[str]]:
    """Each module of the tree and the modules of the tree it imports."""
    modules: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        modules[name] = found
    return {name: {d for d in deps if d in modules and d != name} for name, deps in modules.items()}


def circles(root: Path = ROOT) -> list[list[str]]:
    """The import circles (strongly connected groups of two or more modules), each sorted."""
    graph = _imports(root)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            group = []
            while True:
                item = stack.pop()
                group.append(item)
                if item == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return sorted(found)


def _kernel_format(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Where a module imports ``struct`` or names an IPVS or netlink constant."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names]
            for name in names:
                if name == "struct" or KERNEL_FORMAT.fullmatch(name.rpartition(".")[2]):
                    yield node.lineno, name
        elif isinstance(node, ast.Name) and KERNEL_FORMAT.fullmatch(node.id):
            yield node.lineno, node.id


def _module_size(where: str, text: str) -> Iterator[str]:
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        yield f"{where}: {lines} lines (400 at most)"


def mirror(root: Path = ROOT) -> Iterator[str]:
    """Each module of ``root`` without its mirrored test module, unless listed; each listed
    module that has one now, or whose named test file is gone."""
    tests = root.parent / "tests"
    if not tests.is_dir():
        return
    for folder in sorted({tests, *(test.parent for test in tests.rglob("test_*.py"))}):
        if not (folder / "__init__.py").exists():  # pytest would import its files by name alone
            where = (folder / "__init__.py").relative_to(root.parent).as_posix()
            yield f"{where}: missing (each tests folder is a package: names may repeat)"
    for path in sorted(root.rglob("*.py")):
        if path.name in {"__init__.py", "__main__.py"}:
            continue
        where = path.relative_to(root.parent).as_posix()
        inside = path.relative_to(root).parent
        own = tests / inside / f"test_{path.name}"
        mirrored = own.relative_to(root.parent).as_posix()
        listed = UNMIRRORED.get(where)
        if own.exists() and listed is not None:
            yield f"{where}: has {mirrored}: take it out of UNMIRRORED"
        elif not own.exists() and listed is None:
            yield f"{where}: no {mirrored} (tests mirror director/)"
        elif listed is not None and not (root.parent / listed[0]).exists():
            yield f"{where}: UNMIRRORED names {listed[0]}, which is not there"


def findings(root: Path = ROOT) -> Iterator[str]:
    yield from mirror(root)
    for group in circles(root):
        yield f"import circle: {' -> '.join(group)}"
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root.parent).as_posix()
        text = path.read_text()
        yield from _module_size(where, text)
        if where.startswith("director/core/"):
            for line, name in _kernel_format(ast.parse(text, where)):
                yield f"{where}:{line}: {name} is the kernel's wire format (not the core's)"
        if where.startswith(BEHIND_THE_DOOR):
            for line, name in _engine_imports(ast.parse(text, where)):
                if name not in ENGINE_DOOR:
                    yield f"{where}:{line}: imports {name} (the engine's door: events, view, ports)"
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


# what a size cap says (a warning), as opposed to a broken rule
SIZE = re.compile(
    r"\d+ lines \(\d+ at most\)|\d+ lines \(the loop stays under 300\)|has \d+ instance attributes"
)


LAB = ROOT.parent / "lab"


def main() -> int:
    # lab/ is test support the tests import: no import circle there either (issue 72)
    found = [*findings(), *(f"import circle: {' -> '.join(g)}" for g in circles(LAB))]
    broken = [line for line in found if not SIZE.search(line)]
    for line in found:
        print(line if line in broken else f"warning: {line}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
