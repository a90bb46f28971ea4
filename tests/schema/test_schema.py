"""One schema per shape: the configuration file's JSON Schema is published and follows the
code; the fast and the precise YAML readers agree; the API's shapes make its OpenAPI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from director.schema import yamldoc
from director.schema.config import ConfigError, json_schema, json_schema_text, parse_config

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "config.schema.json"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def test_the_published_json_schema_is_the_one_the_director_applies() -> None:
    assert PUBLISHED.read_text() == json_schema_text(), (
        "docs/config.schema.json is stale: run `director schema > docs/config.schema.json`"
    )
    out = subprocess.run(
        [sys.executable, "-m", "director.cli.main", "schema"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert json.loads(out.stdout) == json_schema()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes_the_json_schema_and_the_director(example: Path) -> None:
    jsonschema.Draft202012Validator(json_schema()).validate(yaml.safe_load(example.read_text()))
    assert parse_config(example.read_text(), str(example))  # and the director takes it


@pytest.mark.parametrize(
    ("where", "snippet"),
    [
        ("top", "colour: blue\n"),
        ("service", "services:\n  - {address: 198.51.100.1, port: 80, colour: blue}\n"),
        (
            "real server",
            "services:\n  - {address: 198.51.100.1, port: 80,"
            " real_servers: [{address: 192.0.2.1, colour: blue}]}\n",
        ),
        ("health", "health: {colour: blue}\n"),
    ],
)
def test_an_unknown_key_is_refused_by_the_schema_and_the_director(where: str, snippet: str) -> None:
    text = "ownership: {networks: [198.51.100.0/24]}\n" + snippet
    with pytest.raises(jsonschema.ValidationError, match="colour"):
        jsonschema.Draft202012Validator(json_schema()).validate(yaml.safe_load(text))
    with pytest.raises(ConfigError, match=r"colour: unknown key \(allowed: "):
        parse_config(text, "x.yaml")


def test_anchors_and_aliases_read_precisely_give_what_the_plain_file_gives() -> None:
    plain = (
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services:\n"
        "  - {address: 198.51.100.1, port: 80, real_servers: [192.0.2.1:80, 192.0.2.2:80]}\n"
        "  - {address: 198.51.100.2, port: 80, real_servers: [192.0.2.1:80, 192.0.2.2:80]}\n"
    )
    aliased = (
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services:\n"
        "  - {address: 198.51.100.1, port: 80, real_servers: &pool [192.0.2.1:80, 192.0.2.2:80]}\n"
        "  - {address: 198.51.100.2, port: 80, real_servers: *pool}\n"
    )
    assert yamldoc.fast(plain) is not None, "a plain file takes the fast reader"
    assert yamldoc.fast(aliased) is None, "anchors take the precise reader"
    assert parse_config(aliased, "a.yaml").services == parse_config(plain, "p.yaml").services


def test_an_error_in_a_file_read_fast_still_names_its_line() -> None:
    text = (
        "ownership: {networks: [198.51.100.0/24]}\nservices:\n"
        + "".join(f"  - {{address: 198.51.100.{i}, port: 80}}\n" for i in range(1, 200))
        + "  - {address: 198.51.100.200, port: 80, weight: 3}\n"
    )
    assert yamldoc.fast(text) is not None
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "big.yaml")
    assert str(caught.value).startswith("big.yaml:202: services[199].weight: unknown key")


def test_a_rapidyaml_parse_error_prints_nothing_but_ours(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"^bad.yaml:3: not valid YAML"):
        parse_config("ownership:\n  networks: [198.51.100.0/24\n", "bad.yaml")
    assert capfd.readouterr().err == ""


# -- the two readers agree ----------------------------------------------------------------
WORDS = [
    "true",
    "false",
    "True",
    "yes",
    "no",
    "on",
    "null",
    "~",
    "1.5",
    "1e3",
    "-0",
    "007",
    "0x1F",
    ".inf",
    "2001:db8::1",
    "10.0.0.1:80",
    "[::1]:80",
    "a b",
    "x#y",
    "tcp",
    "",
]
scalars = st.one_of(
    st.sampled_from(WORDS),
    st.text(alphabet="abcXYZ019 .:-_/[]{},'\"#", max_size=12),
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.none(),
)
documents = st.dictionaries(
    st.text(alphabet="abcxyz_", min_size=1, max_size=8),
    st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.text(alphabet="abcxyz_", min_size=1, max_size=6), inner, max_size=4
            )
        ),
        max_leaves=12,
    ),
    min_size=1,
    max_size=5,
)


def _canon(value: Any) -> Any:
    """What the schema's fields make of a value: numbers by value, true/false as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        return int(value, 10)
    if isinstance(value, list):
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents, st.sampled_from([None, True, False]), st.integers(2, 6))
def test_the_fast_reader_gives_what_the_precise_one_gives(
    data: dict[str, Any], flow: bool | None, indent: int
) -> None:
    text = yaml.safe_dump(data, default_flow_style=flow, indent=indent, width=60)
    fast = yamldoc.fast(text)
    precise, _lines = yamldoc.precise(text)
    if fast is not None:  # the fast reader may decline; it may never differ
        assert _canon(fast) == _canon(precise), text


# -- the long form of a real server, read without a call per key, reads as the rules do ----
ADDRESSES = [
    "10.1.0.1",
    "010.1.0.1",
    "10.1.0",
    "2001:db8::1",
    "2001:DB8:0::1",
    "fe80::1%eth0",
    "::ffff:10.1.0.1",
    "x",
    "",
]
numbers = st.one_of(
    st.integers(-3, 70_000), st.sampled_from([65535, 65536, "80", "0x10", True, 1.5, None])
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ADDRESSES), numbers, numbers)
def test_a_real_server_in_the_long_form_reads_as_the_rules_read_it(
    address: str, port: object, weight: object
) -> None:
    """`{address, port, weight}` (what most files write, tens of thousands of times) is read
    on a short path; the same entry with one more key takes the rules' path. The two give
    the same real server, or refuse it with the same reason on the same line."""

    def load(extra: str) -> str:
        entry = json.dumps({"address": address, "port": port, "weight": weight})[:-1]
        service = "{address: 10.9.0.1, port: 80, real_servers: [" + entry + extra + "}]}"
        text = f"ownership: {{networks: [10.0.0.0/8]}}\nservices:\n  - {service}\n"
        try:
            settings = parse_config(text, "f.yaml")
        except ConfigError as exc:
            return str(exc)
        return repr([vs.real_servers for vs in settings.services.values()])

    assert load("") == load(', "upper_threshold": 0')
