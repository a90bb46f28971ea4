"""The desired table each view reads: every published view stays what the table was when it
was published, whatever the table becomes after (only what changed is copied)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from director.core.model import IpProtocol, ServiceKey
from director.core.services import VirtualService
from director.engine.table import Programmed
from director.engine.view import Layered
from tests.enginelab import A, vs

KEYS = [ServiceKey.inet(IpProtocol.TCP, "198.51.100.10", port) for port in range(1, 301)]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    start=st.integers(0, 300),
    steps=st.lists(
        st.lists(st.tuples(st.integers(0, 299), st.booleans(), st.integers(1, 3)), max_size=40),
        max_size=30,
    ),
)
def test_every_published_view_of_the_desired_table_stays_what_the_table_was(
    start: int, steps: list[list[tuple[int, bool, int]]]
) -> None:
    """The view shares one copy of the table between steps and carries each step's
    changes: whatever is put, replaced or dropped, every view reads as the table did when
    it was published, and keeps doing so after later steps."""
    table = Programmed(())
    for key in KEYS[:start]:
        table.put(key, vs(key, A), "default/web")
    view = Layered(dict(table.desired))
    table.changed.clear()
    published: list[tuple[Layered[ServiceKey, VirtualService], dict[Any, Any]]] = []
    for changes in steps:
        for index, keep, weight in changes:
            key = KEYS[index]
            if keep:
                table.put(key, vs(key, A, weight=weight), "default/web")
            else:
                table.drop(key)
        view = view.then(table.desired, table.changed)
        table.changed.clear()
        published.append((view, dict(table.desired)))
    for view, then in published:
        assert len(view) == len(then)
        assert sorted(view) == sorted(then) and len(set(view)) == len(then)
        assert dict(view.items()) == then
        for key in KEYS:
            assert (key in view) == (key in then)
            assert view.get(key) == then.get(key)
    if all(keep for changes in steps for _, keep, _ in changes):  # nothing dropped:
        assert list(view) == list(table.desired)  # the table's own order


def test_a_view_lists_keys_added_in_one_step_in_the_order_they_were_put() -> None:
    """Fifty Services added in one step (fewer than a rebase takes): the view lists them as
    the table does, whatever the process's hash seed (a set of changed keys did not)."""
    table = Programmed(())
    view = Layered(dict(table.desired))
    for key in reversed(KEYS[:50]):
        table.put(key, vs(key, A), "default/web")
    view = view.then(table.desired, table.changed)
    assert list(view) == list(table.desired) == list(reversed(KEYS[:50]))
