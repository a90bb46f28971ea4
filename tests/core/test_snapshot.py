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
