"""The methods Python writes for each dataclass, kept compiled between starts, as its bytecode is.

Making a dataclass writes its methods (``__init__``, ``__repr__``, ``__eq__``, a frozen one's
``__setattr__`` and ``__delattr__``, ``__hash__``) as source text and compiles that text
(``dataclasses`` calls ``exec`` on it). A ``director run`` loads 77 dataclasses: some 400
texts, whose compiling was 21 ms of the 90 ms its imports took natively (host, bytecode
cached), a fifth of them in every start. Python keeps each module's bytecode in
``__pycache__``; nothing keeps these. So the ``director`` command does the same for them:
the first start compiles them and keeps them beside the package's bytecode (a marshal file
in ``director/__pycache__``, or under ``sys.pycache_prefix``), and later starts take each
text's code from there. The whole text is the key, compared in full: a dataclass that
changed (an upgrade) is compiled again, and the file grows by it.

- Nothing is written where Python would not write bytecode (``PYTHONDONTWRITEBYTECODE``,
  ``-B``, a folder that is not writable); a file that cannot be read, is cut short or is
  another Python's is as good as none.
- Only ``dataclasses``' own ``exec`` is taken over (the module finds ``exec`` by its global
  name), and given back once the command's imports are done (``keep``): nothing else of the
  process compiles or runs otherwise. A Python whose ``dataclasses`` compiles otherwise is
  not sped up, and loses nothing.

- Where the command cannot write beside its bytecode (the role's unit: ``ProtectSystem=strict``
  leaves the release read-only), the installer writes the file once, as root, with every
  dataclass of every module: ``python -m director.cli.classcode`` (``warm``).

Light: ``marshal``, ``os`` and ``sys`` (and ``dataclasses``, which every command loads anyway).

``dataclasses`` imports ``inspect`` (with ``ast``, ``dis`` and ``tokenize``: 5-8 ms natively,
a tenth of a second of a first start under the lab's emulation) for one use: a dataclass
written without a docstring is given one made from its signature. So ``install`` imports it
with a stand-in for ``inspect`` (:class:`InspectOnUse`) that imports the real module the first
time ``dataclasses`` uses it, and is nobody else's: any other ``import inspect`` loads the real
module. The director's dataclasses have docstrings, so a first start sends its table without
``inspect`` loaded (``tests/cli/test_early.py`` holds what is loaded at the send).
"""

from __future__ import annotations

import builtins
import contextlib
import marshal
import os
import sys
from types import CodeType, ModuleType

FORMAT = "director-dataclass-code-1"
LIMIT = 4096  # texts kept at most: beyond, only what this process used (old versions' go)

_codes: dict[str, CodeType] = {}  # text -> its code, from the file and compiled since
_used: set[str] = set()
_path: list[str] = []  # the file, while installed
_figures = {"taken": 0, "compiled": 0}


def default_path() -> str:
    """Where Python keeps this package's bytecode, and this Python's name for it."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = os.path.join(package, "__pycache__")
    if sys.pycache_prefix:
        folder = os.path.join(sys.pycache_prefix, package.lstrip(os.sep))
    tag = sys.implementation.cache_tag or "none"
    optimized = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    return os.path.join(folder, f"dataclass-code.{tag}{optimized}.marshal")


def _magic() -> bytes:
    return bytes(sys.modules["_frozen_importlib_external"].MAGIC_NUMBER)


def _read(path: str) -> dict[str, CodeType]:
    """The texts and codes kept at ``path`` (empty: none, unreadable, or not this Python's)."""
    try:
        with open(path, "rb") as handle:
            kept = marshal.loads(handle.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if (
        not isinstance(kept, tuple)
        or len(kept) != 3
        or kept[0] != FORMAT
        or kept[1] != _magic()
        or not isinstance(kept[2], dict)
    ):
        return {}
    return kept[2]


def _exec(
    source: str | CodeType,
    scope: dict[str, object] | None = None,
    names: dict[str, object] | None = None,
    /,
) -> None:
    """``exec`` as ``dataclasses`` calls it: a text's code taken from what was kept, or
    compiled (as ``exec`` compiles a text: no ``__future__`` flags, ``<string>``)."""
    if isinstance(source, str):
        code = _codes.get(source)
        if type(code) is not CodeType:
            code = _codes[source] = compile(source, "<string>", "exec", dont_inherit=True)
            _figures["compiled"] += 1
        else:
            _figures["taken"] += 1
        _used.add(source)
        source = code
    if scope is None:  # exec's own default: its caller's globals
        scope = sys._getframe(1).f_globals
    builtins.exec(source, scope, names)


class InspectOnUse(ModuleType):
    """What ``dataclasses`` takes for ``inspect`` when ``install`` imports it: the real
    ``inspect``'s attributes, the module imported on the first use."""

    def __getattr__(self, name: str) -> object:
        import inspect  # the real one: this stand-in left sys.modules once dataclasses loaded

        return getattr(inspect, name)


def _import_dataclasses() -> None:
    """``dataclasses`` loaded without ``inspect`` (see above), where neither is yet."""
    if "dataclasses" in sys.modules or "inspect" in sys.modules:
        return
    stand_in = sys.modules["inspect"] = InspectOnUse("inspect")
    try:
        import dataclasses  # noqa: F401
    finally:
        if sys.modules.get("inspect") is stand_in:
            del sys.modules["inspect"]


def install(path: str | None = None) -> None:
    """From now on, until ``keep``, the dataclasses made take their methods' code from the
    file at ``path`` (default: ``default_path()``) where it holds their text."""
    _import_dataclasses()
    import dataclasses

    if _path:
        return
    _path.append(path or default_path())
    _codes.update(_read(_path[0]))
    dataclasses.exec = _exec  # type: ignore[attr-defined]


def keep() -> dict[str, object]:
    """Give ``dataclasses`` its ``exec`` back, and write what was compiled since ``install``
    beside what was kept (where Python writes bytecode); what was done."""
    dataclasses = sys.modules.get("dataclasses")
    if dataclasses is not None and getattr(dataclasses, "exec", None) is _exec:
        del dataclasses.exec
    if not _path:
        return {}
    path = _path.pop()
    figures: dict[str, object] = {**_figures, "kept": 0}
    try:
        if _figures["compiled"] and not sys.dont_write_bytecode:
            figures["kept"] = _write(path)
    finally:
        _codes.clear()
        _used.clear()
        _figures.update(taken=0, compiled=0)
    return figures


def _write(path: str) -> int:
    """Every text kept at ``path`` and compiled here, written whole (a new file renamed over
    the old: a reader sees one or the other); how many (0: nothing written)."""
    merged = {**_read(path), **_codes}
    if len(merged) > LIMIT:
        merged = {text: code for text, code in _codes.items() if text in _used}
    folder = os.path.dirname(path)
    partial = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(folder, exist_ok=True)
        with open(partial, "wb") as handle:
            handle.write(marshal.dumps((FORMAT, _magic(), merged)))
        os.replace(partial, path)
    except OSError:  # read-only, full, or gone: the next start compiles again
        with contextlib.suppress(OSError):
            os.unlink(partial)
        return 0
    return len(merged)


def warm(path: str | None = None) -> dict[str, object]:
    """Import every module of the director with the shim installed, and write the code of all
    their dataclasses to ``path`` (default: ``default_path()``), whatever
    ``PYTHONDONTWRITEBYTECODE`` says (asked for by name); what was done. A module that needs
    a dependency not installed is passed over (``missing`` names the dependencies). What an
    installer runs once, as the owner of the release, after installing it."""
    import importlib
    import pkgutil

    import director

    install(path)
    wanted = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    missing: set[str] = set()
    try:
        for module in pkgutil.walk_packages(director.__path__, "director."):
            if module.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(module.name)
            except ModuleNotFoundError as exc:  # a dependency this box goes without
                if (exc.name or "director").partition(".")[0] == "director":
                    raise
                missing.add(exc.name or "")
    finally:
        written = (_path[0] if _path else "", keep())
        sys.dont_write_bytecode = wanted
    return {**written[1], "missing": ",".join(sorted(missing)) or "-", "path": written[0]}


def main() -> int:
    """``python -m director.cli.classcode``: ``warm``, its figures on one line; 1 when code
    was compiled and could not be written."""
    figures = warm()
    print(" ".join(f"{name}={value}" for name, value in figures.items()))
    return 1 if figures.get("compiled") and not figures.get("kept") else 0


if __name__ == "__main__":
    raise SystemExit(main())
