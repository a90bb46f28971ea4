"""A dataclass's attribute docstrings (the string literal under a field), read from its
module's source: the configuration's field descriptions, for the JSON Schema and the docs.

``ast`` and ``inspect`` are loaded when a class's docs are first asked for, not with the
schema: a start reads its file without them."""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ast


@functools.cache
def _module_docs(module: str) -> dict[str, dict[str, str]]:
    """Top-level class name -> {field: docstring} for every class of ``module``."""
    import ast
    import inspect

    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (OSError, TypeError, KeyError):
        return {}
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = _class_docs(node)
    return out


def _class_docs(node: ast.ClassDef) -> dict[str, str]:
    import ast
    import inspect

    docs: dict[str, str] = {}
    for before, after in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(before, ast.AnnAssign)
            and isinstance(before.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[before.target.id] = inspect.cleandoc(after.value.value)
    return docs


def attribute_docs(cls: type) -> dict[str, str]:
    """{field name: its docstring} of ``cls`` (a class defined at a module's top level), with
    those of the classes it inherits fields from."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ in sys.modules and klass is not object:
            out.update(_module_docs(klass.__module__).get(klass.__qualname__, {}))
    return out
