"""The configuration's field descriptions, read from the docstrings under each field: every
field of the schema says what it is for."""

from __future__ import annotations


def test_every_field_of_the_schema_says_what_it_is_for() -> None:
    from director.schema.config import json_schema

    schema = json_schema()
    silent = [
        f"{name}.{field}"
        for name, node in schema["$defs"].items()
        for field, prop in node.get("properties", {}).items()
        if len(prop.get("description", "")) < 10
    ]
    assert silent == []
