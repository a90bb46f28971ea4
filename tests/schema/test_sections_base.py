"""A section checks itself: from the file's mapping and from Python alike, every field by its
rule, every fault named with its path, the checks across fields after them."""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import typing
from typing import Annotated, Any

import pytest
from hypothesis import given, strategies as st

from director.core.model import Forwarding
from director.schema.document import LATER_SECTIONS, Document, read_document
from director.schema.fields import integer
from director.schema.ha import HaSettings
from director.schema.sections import Defaults, HealthSettings, KubeSettings
from director.schema.sections_base import (
    Fault,
    Invalid,
    from_file,
    is_section,
    mapping_keys,
    section,
)


def faults(exc: pytest.ExceptionInfo[Invalid]) -> set[tuple[str, str]]:
    return {(".".join(map(str, f.path)), f.reason) for f in exc.value.faults}


def test_a_file_mapping_is_checked_field_by_field_and_every_fault_is_named() -> None:
    data = {
        "defaults": {"weight": 70000, "scheduler": "rr"},
        "services": [
            {"address": "198.51.100.1", "port": 99999},
            {"address": "198.51.100.2", "port": 80},
            {"address": "198.51.100.3", "port": 80, "bogus": 1},
        ],
    }
    with pytest.raises(Invalid) as exc:
        read_document(data)
    assert faults(exc) == {
        ("defaults.weight", "must be an integer between 0 and 65535 (got 70000)"),
        ("services.0.port", "must be an integer between 1 and 65535 (got 99999)"),
        ("services.2.bogus", f"unknown key (allowed: {', '.join(sorted(SERVICE_KEYS))})"),
    }
    unknown = next(f for f in exc.value.faults if f.path[-1] == "bogus")
    assert unknown.key, "an unknown key's line is the key's"


SERVICE_KEYS = {
    "name",
    "address",
    "port",
    "protocol",
    "fwmark",
    "family",
    "scheduler",
    "flags",
    "persistence",
    "netmask",
    "forwarding",
    "real_servers",
    "health_check",
    "syn_guard",
    "client_rate",
    "service_rate",
    "sorry_server",
}


def test_what_is_not_a_mapping_or_a_list_is_refused_in_the_operators_words() -> None:
    with pytest.raises(Invalid) as exc:
        read_document({"services": {"address": "198.51.100.1"}, "defaults": ["rr"]})
    assert faults(exc) == {
        ("services", "must be a list"),
        ("defaults", "must be a mapping of keys to values"),
    }
    with pytest.raises(Invalid) as exc:
        read_document({"services": ["198.51.100.1:80"]})
    assert faults(exc) == {("services.0", "must be a mapping of keys to values")}


def test_a_section_made_from_python_gets_the_values_the_file_would_give() -> None:
    from_python = Defaults(scheduler="rr", forwarding="dr", weight="5")
    from_the_file = from_file(Defaults, {"scheduler": "rr", "forwarding": "dr", "weight": "5"})
    assert from_python == from_the_file
    assert from_python.forwarding is Forwarding.DR and from_python.weight == 5
    assert Defaults() == from_file(Defaults, {})  # every default
    with pytest.raises(Invalid) as exc:
        Defaults(weight=-1)
    assert faults(exc) == {("weight", "must be an integer between 0 and 65535 (got -1)")}
    with pytest.raises(Invalid, match="unknown key"):
        Defaults(colour="blue")  # type: ignore[call-arg]


def test_a_required_key_missing_is_named_and_the_alias_is_the_files_key() -> None:
    with pytest.raises(Invalid) as exc:
        from_file(HaSettings, {"interface": "eth0"})
    assert faults(exc) == {("", "missing required key 'peers'")}
    with pytest.raises(Invalid, match="missing required key 'peers'"):
        HaSettings(interface="eth0", router_id="a", priority=100, unicast_source="192.0.2.1")  # type: ignore[call-arg]
    by_file = from_file(KubeSettings, {"nodeport_vip": "198.51.100.250", "identity": "edge1"})
    by_name = KubeSettings(nodeport_vips=("198.51.100.250",), identity="edge1")
    assert by_file == by_name and by_file.nodeport_vips == ("198.51.100.250",)
    with pytest.raises(Invalid, match="unknown key"):
        from_file(KubeSettings, {"nodeport_vips": "198.51.100.250"})  # the file says nodeport_vip


def test_checks_across_fields_run_once_every_field_is_valid() -> None:
    with pytest.raises(Invalid) as exc:
        from_file(HealthSettings, {"interval": 1, "timeout": 5})
    assert faults(exc) == {("timeout", "the timeout must not exceed the interval")}
    with pytest.raises(Invalid) as exc:  # a field at fault: its reason, not the cross-check's
        from_file(HealthSettings, {"interval": 1, "timeout": "soon"})
    assert [f.path for f in exc.value.faults] == [("timeout",)]
    with pytest.raises(Invalid, match="timeout must not exceed"):
        HealthSettings(interval=1, timeout=5)


def test_a_section_pickles_and_compares_as_a_value() -> None:
    made = read_document(
        {"kubernetes": {"identity": "edge1"}, "services": [{"address": "192.0.2.1", "port": 80}]}
    )
    again = pickle.loads(pickle.dumps(made))
    assert again == made and hash(again.kubernetes) == hash(made.kubernetes)
    with pytest.raises(AttributeError):
        made.services[0].port = 81  # type: ignore[misc]


def test_a_field_the_engine_cannot_check_is_found_at_its_first_use() -> None:
    @section
    class Loose:
        size: int = 1  # neither a Rule nor a section

    with pytest.raises(TypeError, match=r"Loose.size: .* has no Rule"):
        Loose(size=2)

    @section
    class Tight:
        size: Annotated[int, integer(0, 9)] = 1

    assert Tight(size="3").size == 3


_VALUES = st.one_of(
    st.integers(-5, 70000),
    st.sampled_from(["rr", "wlc", "mh", "dr", "nat", "tun", "fullnat", "7", " 7", "", "true"]),
    st.booleans(),
    st.lists(st.integers(0, 3), max_size=2),
    st.none(),
)


@given(st.dictionaries(st.sampled_from(["scheduler", "forwarding", "weight"]), _VALUES))
def test_the_file_and_python_agree_on_every_value(data: dict[str, Any]) -> None:
    """Either both refuse, with the same faults, or both make the same section."""
    outcomes = []
    for make in (lambda: from_file(Defaults, dict(data)), lambda: Defaults(**data)):
        try:
            outcomes.append(("made", make()))
        except Invalid as exc:
            outcomes.append(("refused", {Fault(f.path, f.reason, False) for f in exc.faults}))
    assert outcomes[0] == outcomes[1]


def test_every_section_of_the_document_has_a_check_for_each_field() -> None:
    """A schema edit that adds a field with no rule is found here, not by an operator's
    file: each section reachable from the document reads its fields' checks."""
    seen: set[type] = set()
    pending: list[type] = [Document]
    while pending:
        cls = pending.pop()
        if cls not in seen:
            seen.add(cls)
            assert mapping_keys(cls).every, cls  # reads every field's check, or raises
            pending.extend(_sections_in(cls))
    names = {cls.__name__ for cls in seen}
    assert {"ServiceEntry", "PeerEntry", "ConntrackdSettings", "ExpressionEntry"} <= names


def _sections_in(cls: type) -> list[type]:
    # the sections a file imports only when it has them, named for the hints whatever ran before
    later = {
        name: getattr(importlib.import_module(module), name)
        for name, module in LATER_SECTIONS.items()
    }
    hints = typing.get_type_hints(cls, localns=later)
    return [
        arg
        for f in dataclasses.fields(cls)
        for arg in (hints[f.name], *typing.get_args(hints[f.name]))
        if is_section(arg)
    ]
