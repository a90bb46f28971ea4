"""The director's configuration file: one schema, one validation gate.

The file is read as plain data (:mod:`director.schema.yamldoc`), validated against one
schema (:class:`Document`: the sections and the file's own objects, each key defined once),
then checked by a list of named rules across objects (MetalLB's ``validation.go`` is the
model), and compiled to :class:`Settings`. The same schema is published as JSON Schema
(``director schema``; ``docs/config.schema.json``).

Every error names the file, the line, the field (``services[2].real_servers[0].weight``)
and the reason; nothing partially valid is ever returned.
"""

from __future__ import annotations

import gc
import json
from typing import TYPE_CHECKING, Any

from director.core.model import Forwarding
from director.schema import yamldoc
from director.schema.docstrings import attribute_docs
from director.schema.document import ConfigError, Document, Settings, read_document
from director.schema.fields import Listen, Path
from director.schema.rules import compile_document
from director.schema.sections import (
    DEFAULT_CLASS,
    ApiSettings,
    Defaults,
    HealthSettings,
    KubeSettings,
    Statuses,
)
from director.schema.sections_base import Invalid, Problem, load_later
from director.schema.static import Refusal, forget_addresses

if TYPE_CHECKING:
    from os import PathLike

__all__ = [
    "DEFAULT_CLASS",
    "ApiSettings",
    "ConfigError",
    "Defaults",
    "HealthSettings",
    "KubeSettings",
    "Settings",
    "json_schema",
    "load_config",
    "parse_config",
]


def json_schema() -> dict[str, Any]:
    """The configuration file's JSON Schema (draft 2020-12), from the one schema (made by
    pydantic, which only this command and the admin API load)."""
    from pydantic import TypeAdapter

    load_later(Document)  # pydantic reads the annotations: every section they name
    out = TypeAdapter(Document).json_schema(mode="validation", schema_generator=_file_schema())
    _one_line(out)
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["title"] = "director configuration file"
    return out


def _file_schema() -> type[Any]:
    """pydantic's JSON Schema maker, with defaults written as the file writes them
    (``listen: 127.0.0.1:9180``, not a pair), and each field's docstring as its description
    (read from the source here, when the schema is printed, not at every start)."""
    from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
    from pydantic_core import core_schema

    class FileSchema(GenerateJsonSchema):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._docs: list[dict[str, str]] = []

        def dataclass_schema(self, schema: core_schema.DataclassSchema) -> JsonSchemaValue:
            self._docs.append(attribute_docs(schema["cls"]))
            try:
                return super().dataclass_schema(schema)
            finally:
                self._docs.pop()

        def dataclass_field_schema(self, schema: core_schema.DataclassField) -> JsonSchemaValue:
            out = super().dataclass_field_schema(schema)
            doc = self._docs[-1].get(schema["name"]) if self._docs else None
            return {**out, "description": doc} if doc and "description" not in out else out

        def encode_default(self, dft: Any) -> Any:
            if isinstance(dft, Listen):
                return f"[{dft.host}]:{dft.port}" if ":" in dft.host else f"{dft.host}:{dft.port}"
            if isinstance(dft, Forwarding):
                return dft.label
            if isinstance(dft, Statuses):
                return f"{dft.low}-{dft.high}"
            return super().encode_default(dft)

    return FileSchema


def _one_line(node: object) -> None:
    """Descriptions (the fields' docstrings, wrapped in the source) as one line each."""
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())
        for value in node.values():
            _one_line(value)
    elif isinstance(node, list):
        for value in node:
            _one_line(value)


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def load_config(path: str | PathLike[str]) -> Settings:
    return parse_config(*read_config(path))


def read_config(path: str | PathLike[str]) -> tuple[str, str]:
    """The file's text and its name for messages (ConfigError: unreadable, not UTF-8)."""
    source = str(path)
    try:
        with open(path, "rb") as handle:  # not pathlib: a check loads it for nothing else
            raw = handle.read()
    except OSError as exc:
        raise ConfigError(source, 0, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(source, line, "", "not UTF-8 text") from None
    return text, source


def parse_config(text: str, source: str = "<config>") -> Settings:
    """The settings of ``text``, or the ConfigError of its first fault (in file order)."""
    collecting = gc.isenabled()
    gc.disable()  # a big file makes a million objects and no cycle: 20% of the time saved
    try:
        return _parse(text, source)
    finally:
        forget_addresses()
        if collecting:
            gc.enable()


def _parse(text: str, source: str) -> Settings:
    try:  # without every part's line: they are read (again) only to name a fault's place
        data = yamldoc.read(text)
    except yamldoc.YamlError:
        data, _ = _precise(text, source)  # raises, with the line
    if data is None:
        return Settings(source=source)
    try:
        return compile_document(read_document(data), source)
    except (Invalid, Refusal, Problem) as exc:
        _, lines = _precise(text, source)
        raise _located(exc, lines, source) from None


def line_of(source: str, where: str) -> int:
    """The line of a field (``api.listen``) in the file ``source``; 0 if it cannot be read
    or does not name it (a default)."""
    try:
        with open(source, encoding="utf-8") as handle:
            _, lines = yamldoc.precise(handle.read())
    except (OSError, ValueError, yamldoc.YamlError):
        return 0
    path = tuple(where.split("."))
    return lines.keys.get(path) or lines.values.get(path, 0)


def _precise(text: str, source: str) -> tuple[object, yamldoc.Lines]:
    try:
        return yamldoc.precise(text)
    except yamldoc.YamlError as exc:
        raise ConfigError(source, exc.line, _where(exc.where), exc.reason) from None


def _where(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _located(exc: Exception, lines: yamldoc.Lines, source: str) -> ConfigError:
    """The ConfigError of the first fault in the file (by line) that ``exc`` reports, with
    the others it reports (a field's faults are all found at once; a rule across objects
    stops at its first)."""
    faults: list[tuple[Path, str, bool]] = []
    if isinstance(exc, Invalid):
        faults.extend(exc.faults)
    elif isinstance(exc, Refusal):
        first = lines.of(exc.first) if exc.first is not None else 0
        faults.append((exc.path, exc.reason.replace("{first}", str(first)), False))
    elif isinstance(exc, Problem):  # a rule refusing a whole section
        faults.append((exc.at, exc.reason, exc.key))
    found: dict[tuple[int, str], ConfigError] = {}
    for path, reason, key in faults:
        line, where = lines.of(path, key), _where(path)
        found.setdefault((line, where), ConfigError(source, line, where, reason))
    head, *rest = (found[k] for k in sorted(found))
    return ConfigError(head.source, head.line, head.where, head.reason, tuple(rest))
