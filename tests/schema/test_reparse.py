"""Reading the file again at the cost of the edit (issue 18, reload): whatever the edit, the
reader must give what a full read gives - the same settings, or the same error with the
same line. Hypothesis makes the files and the edits."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from director.schema.config import ConfigError, Settings, parse_config
from director.schema.reparse import Reparser, split

HEAD = """# the director's file
ownership:
  networks: [198.51.100.0/24, "2001:db8::/64"]
defaults: {scheduler: rr}
health: {check: tcp, interval: 2}
pools:
  - {name: p, addresses: [198.51.100.128/28]}
"""
TAIL = "api: {listen: 127.0.0.1:9180, token_file: /nonexistent}\n"


def item(i: int, style: int, weight: int = 1, check: str | None = None) -> str:
    """A services item in one of the shapes operators write."""
    name, address = f"s{i}", f"198.51.100.{i % 100 + 1}"
    line = f"  - name: {name}\n    address: {address}\n    port: {80 + i // 100}\n"
    if style == 0:
        line += f"    real_servers:\n      - {{address: 192.0.2.1, port: 80, weight: {weight}}}\n"
    elif style == 1:
        line += f"    real_servers: [192.0.2.1:80, 192.0.2.2:80]\n    # weight {weight}\n"
    else:
        line = (
            f"  - {{name: {name}, address: {address}, port: {80 + i // 100}, protocol: udp,\n"
            f"     real_servers: ['192.0.2.3:53']}}\n\n"
        )
    if check is not None and style != 2:
        line += f"    health_check: {check}\n"
    return line


def read(text: str) -> Settings | str:
    try:
        return parse_config(text, "director.yaml")
    except ConfigError as exc:
        return str(exc)


def again(reader: Reparser, text: str) -> Settings | str:
    try:
        return reader.parse(text, "director.yaml")
    except ConfigError as exc:
        return str(exc)


ITEMS = st.lists(
    st.tuples(
        st.integers(0, 299),
        st.integers(0, 2),
        st.integers(0, 3),
        st.sampled_from([None, "none", "http /healthz", "tcp"]),
    ),
    min_size=1,
    max_size=12,
    unique_by=lambda t: t[0],
)

EDITS = st.sampled_from(
    [
        "weight",
        "drop",
        "duplicate",
        "insert",
        "swap",
        "comment",
        "outside",
        "break",
        "same address",
        "same name",
        "none",
    ]
)


def edit(items: list[str], kind: str, at: int) -> tuple[list[str], str, str]:
    """(items, head, tail) after one edit of the kind an operator makes."""
    items = list(items)
    at %= len(items)
    head, tail = HEAD, TAIL
    if kind == "weight":
        items[at] = re.sub(r"weight: (\d+)", lambda m: f"weight: {int(m[1]) + 7}", items[at])
    elif kind == "drop":
        del items[at]
    elif kind == "duplicate":
        items.insert(at, items[at])  # the same name twice: refused, with both lines
    elif kind == "insert":
        items.insert(at, item(300 + at, at % 3))
    elif kind == "swap" and len(items) > 1:
        items[0], items[-1] = items[-1], items[0]
    elif kind == "comment":
        items[at] = items[at] + "  # a note\n"
    elif kind == "outside":
        head = HEAD.replace("scheduler: rr", "scheduler: wlc")
    elif kind == "break":
        items[at] = items[at].replace("port: ", "port: -", 1)
    elif kind == "same name":  # another VIP under a name already taken
        items.insert(
            at, re.sub(r"address: 198\.51\.100\.\d+", "address: 198.51.100.250", items[at], count=1)
        )
    elif kind == "same address":
        items.insert(at, items[at].replace("name: s", "name: twin", 1))  # same VIP and port
    return items, head, tail


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ITEMS, edits=st.lists(st.tuples(EDITS, st.integers(0, 50)), min_size=1, max_size=4))
def test_reading_again_gives_what_a_full_read_gives(rows: list[Any], edits: list[Any]) -> None:
    items = [item(*row) for row in rows]
    text = HEAD + "services:\n" + "".join(items) + TAIL
    reader = Reparser()
    assert again(reader, text) == read(text)
    for kind, at in edits:
        if not items:
            break
        items, head, tail = edit(items, kind, at)
        text = head + "services:\n" + "".join(items) + tail
        assert again(reader, text) == read(text), kind


def test_a_weight_change_parses_one_item_and_reuses_the_rest() -> None:
    items = [item(i, i % 3) for i in range(200)]
    reader = Reparser()
    first = reader.parse(HEAD + "services:\n" + "".join(items) + TAIL, "f")
    items[7] = item(7, 7 % 3, 9)
    second = reader.parse(HEAD + "services:\n" + "".join(items) + TAIL, "f")
    assert reader.reused == 199
    same = [k for k in first.services if first.services[k] is second.services[k]]
    assert len(same) == 199, "the unchanged services are the objects read before"
    assert second == parse_config(HEAD + "services:\n" + "".join(items) + TAIL, "f")


def test_full_nat_services_read_again_are_the_full_reads_own() -> None:
    """Which static services are full NAT is read per item, reused with it, and equal to
    what a full read finds (a service turned fullnat, another left as it was)."""
    head = (
        "ownership: {networks: [198.51.100.0/24, 10.0.0.0/8]}\n"
        "snat: {addresses: 10.0.0.254}\nservices:\n"
    )

    def entry(i: int, forwarding: str) -> str:
        return (
            f"  - {{name: s{i}, address: 198.51.100.{i}, port: 80, "
            f"forwarding: {forwarding}, real_servers: [10.0.0.{i}:80]}}\n"
        )

    reader = Reparser()
    rows = [entry(i, "fullnat" if i == 1 else "nat") for i in range(1, 6)]
    first = reader.parse(head + "".join(rows), "f")
    assert [k.address for k in first.static_snat] == ["198.51.100.1"]
    rows[3] = entry(4, "fullnat")
    second = reader.parse(head + "".join(rows), "f")
    assert reader.reused == 4
    assert second == parse_config(head + "".join(rows), "f")
    assert sorted(k.address for k in second.static_snat) == ["198.51.100.1", "198.51.100.4"]


def test_an_error_in_an_edited_item_names_the_line_a_full_read_names() -> None:
    items = [item(i, 0) for i in range(20)]
    reader = Reparser()
    reader.parse(HEAD + "services:\n" + "".join(items) + TAIL, "f")
    items[12] = items[12].replace("weight: 1", "weight: -1")
    text = HEAD + "services:\n" + "".join(items) + TAIL
    with pytest.raises(ConfigError) as caught:
        reader.parse(text, "f")
    line = text.splitlines().index(next(x for x in text.splitlines() if "weight: -1" in x)) + 1
    assert caught.value.line == line and "services[12].real_servers[0].weight" in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "services: []\n",
        "services: [{name: a, address: 198.51.100.1, port: 80, real_servers: [192.0.2.1:80]}]\n",
        "ownership: {networks: [198.51.100.0/24]}\nservices:\n",
        "# no services\nownership: {networks: [198.51.100.0/24]}\n",
        "ownership: {networks: [198.51.100.0/24]}\nservices:\n  name: a\n",
    ],
)
def test_files_it_cannot_cut_are_read_whole(text: str) -> None:
    parts = split(text)
    assert parts is None or not parts.items
    reader = Reparser()
    assert again(reader, text) == read(text)
    assert again(reader, text) == read(text)


def test_an_alias_to_another_items_anchor_is_read_as_a_full_read_reads_it() -> None:
    """An anchor in one item, used by an alias in another: editing the anchor changes both,
    though the second item's text did not change. Such a file is read whole."""
    first = (
        HEAD
        + """services:
  - name: a
    address: 198.51.100.1
    port: 80
    real_servers: [{address: 192.0.2.1, port: 80, weight: &w 9}]
  - name: b
    address: 198.51.100.2
    port: 80
    real_servers: [{address: 192.0.2.1, port: 80, weight: *w}]
"""
    )
    reader = Reparser()
    reader.parse(first, "director.yaml")
    edited = reader.parse(first.replace("&w 9", "&w 5"), "director.yaml")
    weights = {
        vs.origin: [rs.weight for rs in vs.real_servers.values()] for vs in edited.services.values()
    }
    assert weights == {"static/a": [5], "static/b": [5]}
    assert reader.reused == 0


@given(st.text(alphabet="&*!<>[]{},:?- \t\na#\"'", max_size=40))
def test_a_file_is_cut_into_items_only_where_the_pattern_finds_nothing_that_ties_them(
    text: str,
) -> None:
    """The quick look for anchors, aliases, tags and merge keys (a scan for their characters
    before the pattern's search) decides as the pattern alone does, on any text."""
    from director.schema.reparse import _NOT_PLAIN, _not_plain

    assert _not_plain(text) == (_NOT_PLAIN.search(text) is not None)
