"""Total readers of untrusted JSON: any value in, a value of the wanted type out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, strategies as st

from director.core.untrusted import (
    SAID,
    as_list,
    as_map,
    as_port,
    as_text,
    canonical_cidr,
    canonical_each,
    shared,
    short,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@given(JSON)
def test_any_json_reads_as_the_type_asked_for(value: Any) -> None:
    assert isinstance(as_map(value), Mapping)
    assert isinstance(as_list(value), list)
    assert isinstance(as_text(value, "x"), str)
    port = as_port(value)
    assert port is None or (type(port) is int and 1 <= port <= 65535)
    cidr = canonical_cidr(value)
    assert cidr is None or "/" in cidr


def test_a_port_is_an_integer_in_range_and_a_boolean_is_not_one() -> None:
    assert [as_port(v) for v in (80, 0, 65536, True, "80", 8.0)] == [
        80,
        None,
        None,
        None,
        None,
        None,
    ]
    assert as_port(0, low=0) == 0


def test_a_cidr_is_read_as_kube_proxy_reads_it() -> None:
    assert canonical_cidr(" 10.0.0.01/8 ") == "10.0.0.0/8"
    assert canonical_cidr("2001:DB8::1/64") == "2001:db8::/64"
    assert [canonical_cidr(v) for v in ("10.0.0.0/33", "10.0.0.0", "10.0.0.0/x", 7)] == [None] * 4


def test_bad_entries_are_named_a_few_and_the_rest_counted() -> None:
    problems: list[str] = []
    kept = canonical_each(
        ["10.0.0.0/8", "10.0.0.0/8", *[f"bad-{i}" for i in range(SAID + 2)], "192.0.2.0/24"],
        canonical_cidr,
        lambda item: f"{item!r} is not a CIDR",
        problems,
    )
    assert kept == ("10.0.0.0/8", "192.0.2.0/24")
    assert problems == [
        *[f"'bad-{i}' is not a CIDR" for i in range(SAID)],
        "2 more entries refused like the ones before",
    ]


def test_repeated_values_are_kept_once() -> None:
    name = "".join(["def", "ault"])  # made at run time: not the literal's object
    assert short(name) is short("default")
    ports = (("http", "TCP", 80),)
    assert shared(tuple(list(ports))) is shared(ports)
    long = "x" * 64 + str(len(name))
    assert short(long) is long  # long text is not interned
