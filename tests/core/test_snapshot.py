"""The observed cluster's bookkeeping under any order of changes (hypothesis): a Service's
slices are exactly those labelled for it, however slices come, move and go."""

from __future__ import annotations

from hypothesis import given, strategies as st


@given(
    st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from(["", "a", "b"]), st.booleans()), max_size=60
    )
)
def test_a_services_slices_are_the_ones_labelled_for_it_through_any_changes(
    changes: list[tuple[int, str, bool]],
) -> None:
    """However slices come, move between Services and go (few, or more than a tuple holds),
    a Service's slices are exactly those the snapshot holds labelled with its name."""
    from director.core.cluster import SliceInfo
    from director.core.snapshot import Snapshot

    snap = Snapshot()
    everyone_to_a = [(i, "a", False) for i in range(12)]  # more than a tuple holds
    for index, owner, deleted in everyone_to_a + changes:
        ref = f"default/s{index}"
        info = SliceInfo("default", f"s{index}", f"default/{owner}" if owner else "", "IPv4", ())
        snap.apply("DELETED" if deleted else "MODIFIED", info)
        for name in ("a", "b"):
            held = {r for r, sl in snap.slices.items() if sl.service == f"default/{name}"}
            assert {f"{s.namespace}/{s.name}" for s in snap.slices_for(f"default/{name}")} == held
            assert len(snap.slices_for(f"default/{name}")) == len(held)
        assert ref not in snap.slices if deleted else snap.slices[ref] == info


def test_one_clusters_relist_and_nodes_touch_only_its_own_services() -> None:
    """Several clusters (issue 37): a relist of one cluster's Services, slices or Nodes
    replaces that cluster's alone, and a Node change makes only its Services dirty."""
    from director.core.cluster_parse import node_from_json, service_from_json, slice_from_json
    from director.core.snapshot import Snapshot
    from lab.kubeapi import endpoint_slice, node, service as made_service

    def service(name: str, ports: list[tuple[str, str, int]]) -> dict[str, object]:
        return _in_default(made_service(name, ports))

    snap = Snapshot()
    for cluster in ("a", "b"):
        svc = service_from_json(service("web", [("http", "TCP", 80)]), cluster=cluster)
        assert svc.ref == f"{cluster}/default/web"
        snap.replace(f"{cluster}/services", [svc])
        made = endpoint_slice("web", [("10.0.0.1", "n1", True, False)], [("http", "TCP", 8080)])
        one = slice_from_json(_in_default(made), cluster)
        assert one.service == svc.ref
        snap.replace(f"{cluster}/endpointslices", [one])
        snap.replace(f"{cluster}/nodes", [node_from_json(node("n1", "10.1.0.1"), cluster)])
    assert set(snap.services) == {"a/default/web", "b/default/web"}
    assert len(snap.slices_for("a/default/web")) == len(snap.slices_for("b/default/web")) == 1

    # a 410 relist of a's Services that no longer holds web: b's web stays
    assert snap.replace("a/services", []) == {"a/default/web"}
    assert set(snap.services) == {"b/default/web"}
    assert snap.replace("a/endpointslices", []) == {"a/default/web"}
    assert snap.slices_for("b/default/web") and not snap.slices_for("a/default/web")

    # a Node of b going NotReady: b's Services only, and a's Nodes are untouched
    snap.replace("a/services", [service_from_json(service("api", [("h", "TCP", 80)]), "a")])
    down = node_from_json(node("n1", "10.1.0.1", ready=False), "b")
    assert snap.apply("MODIFIED", down) == {"b/default/web"}
    assert snap.nodes_of("a")["n1"].ready and not snap.nodes_of("b")["n1"].ready
    assert snap.replace("b/nodes", []) == {"b/default/web"}
    assert "n1" in snap.nodes_of("a") and snap.nodes_of("b") == {}
    assert snap.listed >= {"a/services", "b/services", "a/nodes", "b/nodes"}


def _in_default(obj: dict[str, object]) -> dict[str, object]:
    """The object as the API server lists it: in a namespace."""
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    meta["namespace"] = "default"
    return obj


@given(
    before=st.sets(st.integers(0, 9), max_size=10),
    listed=st.dictionaries(st.integers(0, 9), st.integers(0, 2), max_size=10),
    events=st.lists(
        st.tuples(st.integers(0, 9), st.integers(0, 2), st.booleans(), st.integers(0, 12)),
        max_size=12,
    ),
    budget=st.integers(1, 4),
)
def test_a_relist_taken_in_parts_ends_as_the_list_then_the_watch_events(
    before: set[int], listed: dict[int, int], events: list[tuple[int, int, bool, int]], budget: int
) -> None:
    """However a relist is cut into steps, and wherever watch events (newer than the list)
    fall among them, the Services end as the list made them, then each event applied: the
    list never brings back an older copy, and what neither holds is gone."""
    from dataclasses import replace

    from director.core.cluster_parse import service_from_json
    from director.core.snapshot import Snapshot
    from lab.kubeapi import service as made

    def svc(i: int, version: int) -> object:
        base = service_from_json(_in_default(made(f"s{i}", [("http", "TCP", 80)])), "c")
        return replace(base, uid=f"v{version}")

    snap = Snapshot()
    snap.replace("c/services", [svc(i, 9) for i in before])
    snap.begin("c/services", [svc(i, v) for i, v in listed.items()])
    expected = {f"c/default/s{i}": f"v{v}" for i, v in listed.items()}
    steps = 0
    pending = sorted(events, key=lambda e: e[3])
    while snap.relisting or pending:
        while pending and pending[0][3] <= steps:
            i, version, deleted, _ = pending.pop(0)
            snap.apply("DELETED" if deleted else "MODIFIED", svc(i, version))  # type: ignore[arg-type]
            if deleted:
                expected.pop(f"c/default/s{i}", None)
            else:
                expected[f"c/default/s{i}"] = f"v{version}"
        if snap.relisting:
            snap.advance(budget)
        steps += 1
    assert {ref: s.uid for ref, s in snap.services.items()} == expected
    assert "c/services" in snap.listed
