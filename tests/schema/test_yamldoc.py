"""The two YAML readers: the fast one (rapidyaml) gives what the precise one gives, anchors
and aliases included; an error in a file read fast still names its line; rapidyaml's own
messages never reach the terminal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from director.schema import yamldoc
from director.schema.config import ConfigError, parse_config


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


def test_rapidyaml_loads_without_leaving_a_stand_in_for_its_deprecation_helper() -> None:
    """The fast reader is loaded without rapidyaml's ``deprecation`` import (a stand-in
    while it loads): afterwards the real module is still the one any import gets, and a
    process that had loaded it first keeps it."""
    script = (
        "import sys\n"
        "from director.schema import yamldoc\n"
        "assert yamldoc.ryml is not None and 'deprecation' not in sys.modules\n"
        "assert yamldoc.fast('a: [1, 2]\\n') == {'a': [1, 2]}\n"
        "import deprecation\n"
        "assert hasattr(deprecation, 'DeprecatedWarning'), 'the real module'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first = "import deprecation, sys\nfrom director.schema import yamldoc\n"
    first += "assert sys.modules['deprecation'] is deprecation and yamldoc.ryml is not None\n"
    done = subprocess.run(
        [sys.executable, "-c", first], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_big_file_is_read_into_a_tree_allocated_once(tmp_path: Path) -> None:
    """rapidyaml's tree is sized from the text before the parse: left to grow by doubling,
    a 5,000-service file's tree was copied 14 times into 14% more than its nodes. The
    estimate is never under what the parse makes of the files operators write, and a big
    table's is within 5% of it."""
    from lab.bench_config import write_tables

    ryml = yamldoc.ryml
    assert ryml is not None
    table, _ = write_tables(2000, tmp_path)
    files = [table, *sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))]
    for path in files:
        raw = path.read_bytes()
        made = ryml.parse_in_arena(raw).size()
        assert made <= yamldoc.nodes_in(raw), path.name
    raw = table.read_bytes()
    assert yamldoc.nodes_in(raw) <= 1.05 * ryml.parse_in_arena(raw).size()


def test_a_file_whose_nodes_are_under_counted_reads_the_same() -> None:
    """JSON's own spelling (no space after a colon) counts few nodes: the tree grows from
    the estimate, as it did from nothing, and the data is the same."""
    services = [
        {"address": f"10.0.0.{i}", "port": 80, "real_servers": [f"10.1.0.{i}:80"]}
        for i in range(1, 60)
    ]
    text = json.dumps({"services": services}, separators=(",", ":")) + "\n"
    assert yamldoc.ryml is not None
    assert yamldoc.nodes_in(text.encode()) < yamldoc.ryml.parse_in_arena(text.encode()).size()
    assert yamldoc.fast(text) == {"services": services}
