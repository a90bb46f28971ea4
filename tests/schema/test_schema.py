"""One schema per shape: the configuration file's JSON Schema is published and follows the
code; the fast and the precise YAML readers agree; the API's shapes make its OpenAPI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import given, settings, strategies as st

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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ADDRESSES), numbers, numbers), min_size=1, max_size=4))
def test_lists_of_long_form_real_servers_read_as_the_rules_read_them(
    servers: list[tuple[str, object, object]],
) -> None:
    """Two services share a list of real servers in the long form, each on its own line:
    read in one loop per list, with each address read once per file, they give the same
    real servers, or the same refusal naming the same item and line, as the rules reading
    them item by item; and a file read again reads the same (nothing kept from the last)."""

    def load(extra: str) -> str:
        items = "".join(
            "      - "
            + json.dumps({"address": address, "port": port, "weight": weight})[:-1]
            + extra
            + "}\n"
            for address, port, weight in servers
        )
        text = "ownership: {networks: [10.0.0.0/8]}\nservices:\n" + "".join(
            f"  - address: 10.9.0.{n}\n    port: 80\n    real_servers:\n{items}" for n in (1, 2)
        )
        try:
            settings = parse_config(text, "f.yaml")
        except ConfigError as exc:
            return str(exc)
        return repr([vs.real_servers for vs in settings.services.values()])

    first = load("")
    assert first == load(', "upper_threshold": 0') == load("")
