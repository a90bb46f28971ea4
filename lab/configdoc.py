"""`make docs`: docs/configuration.md, the configuration file's reference, made from the one
schema `director check` applies (each field's description is its docstring there, its
values and default are the schema's own). tests/test_docs.py fails when the page and the
schema differ, so the page cannot fall behind the code.

    python -m lab.configdoc [--out docs/configuration.md]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from director.schema.config import json_schema

OUT = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
# The sections in the order an operator meets them (the file's own order is free).
ORDER = (
    "ownership",
    "defaults",
    "services",
    "pools",
    "snat",
    "guard",
    "kubernetes",
    "clusters",
    "api",
    "ha",
    "health",
    "bgp",
)
HEAD = """\
# Configuration reference

<!-- Made by `make docs` from the schema (director/schema/): edit the fields' docstrings
there, not this page. tests/test_docs.py fails when the two differ. -->

One YAML file, `/etc/director/director.yaml` when the Ansible role installs it. Every section
is optional. `director check --config FILE` validates a file as `director run` would (every
fault with its line and field); `director schema` prints the same schema as JSON Schema
([config.schema.json](config.schema.json)) for an editor's YAML language server. How a running
director takes a changed file (`systemctl reload director`: `services:` in place, whole
clusters added or removed; the rest needs a restart) is in
[Operating](operating.md#configuration); commented examples are in [examples/](../examples/).
"""


def _markdown(text: str) -> str:
    """A docstring's ``code`` as Markdown's `code`; table cells on one line."""
    return re.sub(r"``(.+?)``", r"`\1`", " ".join(text.split())).replace("|", "\\|")


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    return dict(schema["$defs"][ref.rsplit("/", 1)[1]])


def _values(schema: dict[str, Any], prop: dict[str, Any]) -> str:
    """What a field takes, in a few words, from the schema's own constraints."""
    for key in ("anyOf", "oneOf"):
        if key in prop:
            parts = [_values(schema, _resolve(schema, p)) for p in prop[key]]
            return " or ".join(dict.fromkeys(p for p in parts if p and p != "null"))
    prop = _resolve(schema, prop)
    if "enum" in prop:
        return ", ".join(f"`{v}`" for v in prop["enum"])
    kind = prop.get("type")
    if kind == "null":
        return "null"
    if kind == "array":
        item = _values(schema, prop.get("items", {}))
        most = prop.get("maxItems")
        return f"list of {item}" + (f" (at most {most})" if most else "")
    if kind == "object":
        return "mapping"
    if kind in ("integer", "number"):
        low, high = prop.get("minimum"), prop.get("maximum")
        word = "integer" if kind == "integer" else "number"
        return f"{word} {_num(low)}-{_num(high)}" if low is not None and high is not None else word
    if kind == "boolean":
        return "`true`, `false`"
    if kind == "string":
        if "format" in prop:
            form = str(prop["format"])
            return {"ip-address": "IP address", "cidr": "CIDR"}.get(form, form)
        if "examples" in prop:
            return "text, like " + ", ".join(f"`{e}`" for e in prop["examples"])
        return "text"
    return ""


def _num(value: float | int | None) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _default(prop: dict[str, Any], required: bool) -> str:
    if required or prop.get("description", "").startswith("Required:"):
        return "**required**"
    if "default" not in prop or prop["default"] is None:
        return ""
    value = prop["default"]
    if value in ([], ()):
        return "none"
    shown = value if isinstance(value, str) else json.dumps(value)
    return f"`{shown}`"


def _intro(node: dict[str, Any]) -> str:
    """A section's docstring without its own name in front (```ha:``: this director's...``)."""
    text = re.sub(r"^``[\w.]+:?``:\s*", "", " ".join(node.get("description", "").split()))
    return _markdown(text[:1].upper() + text[1:])


def _table(schema: dict[str, Any], node: dict[str, Any], section: str) -> list[str]:
    required = set(node.get("required", ()))
    rows = ["| key | what it is | values | default |", "|---|---|---|---|"]
    for name, prop in node.get("properties", {}).items():
        text = _markdown(prop.get("description", ""))
        values = _values(schema, prop)
        slug = f"{section}{name}".replace(".", "")  # the heading's anchor
        if "$ref" in prop.get("items", {}):  # a list of sections: its own table, below
            values = f"list of mappings ([`{section}.{name}`](#{slug}-a-list))"
        elif _section_ref(prop):  # a section within the section: its own table, below
            values = f"mapping ([`{section}.{name}`](#{slug}))"
        rows.append(f"| `{name}` | {text} | {values} | {_default(prop, name in required)} |")
    return rows


def _section_ref(prop: dict[str, Any]) -> str | None:
    """The $ref of a field that is one section (or null), if it is one."""
    return next((p["$ref"] for p in prop.get("anyOf", ()) if "$ref" in p), None)


def _within(
    schema: dict[str, Any], node: dict[str, Any], section: str
) -> list[tuple[str, dict[str, Any], bool]]:
    """The sections within ``node``'s fields: (where, the section, whether a list of them)."""
    found: list[tuple[str, dict[str, Any], bool]] = []
    for name, field in node.get("properties", {}).items():
        items = field.get("items", {})
        if "$ref" in items:
            found.append((f"{section}.{name}", _resolve(schema, items), True))
        elif (ref := _section_ref(field)) is not None:
            found.append((f"{section}.{name}", _resolve(schema, {"$ref": ref}), False))
    return found


def page() -> str:
    schema = json_schema()
    out = [HEAD]
    nested: list[tuple[str, dict[str, Any], bool]] = []
    for section in ORDER:
        prop = schema["properties"][section]
        listed = "items" in prop or any("items" in p for p in prop.get("anyOf", ()))
        ref = next(
            p["$ref"]
            for p in (prop.get("items"), *prop.get("anyOf", ()), prop)
            if isinstance(p, dict) and "$ref" in p
        )
        node = schema["$defs"][ref.rsplit("/", 1)[1]]
        out.append(f"## `{section}`" + (" (a list)" if listed else "") + "\n")
        out.append(_intro(node) + "\n")
        out.extend(_table(schema, node, section))
        out.append("")
        nested += _within(schema, node, section)
    while nested:  # breadth first: a section's sections, then theirs
        where, node, listed = nested.pop(0)
        out.append(f"## `{where}`" + (" (a list)" if listed else "") + "\n")
        out.append(_intro(node) + "\n")
        out.extend(_table(schema, node, where))
        out.append("")
        nested += _within(schema, node, where)
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.write_text(page())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
