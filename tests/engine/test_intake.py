"""Events taken in by the loop: one slice change touches only its Service; an API outage or
a 410 changes nothing in the kernel and the watches resume; a stopping director does not
report its own watches closing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from director.core.cluster import resource_name
from director.dataplane.fake import FakeIpvs
from director.engine.events import ObjectChanged, WriteFailed
from director.engine.intake import EVENTS_STEP, Intake
from director.engine.view import LoopStatus
from lab.kubeapi import FakeApiServer, endpoint_slice, service
from lab.wait import eventually
from tests.kubelab import PORTS
from tests.looplab import SLICE_PORTS, start, vs_of


def test_api_outage_and_410_change_nothing_in_the_kernel_then_resume(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs) as runtime:
        api.create("services", service("web", PORTS))
        eventually(lambda: vs_of(ipvs, "198.51.100.0"))
        writes = len(ipvs.applied)
        api.store.compact()  # the next watch resumes from a version the server forgot
        with api.outage():
            eventually(
                lambda: not runtime.controller.health.kubernetes_connected, what="outage seen"
            )
            # The cluster changes while the director cannot see it.
            api.store.patch(
                "nodes",
                "",
                "n1",
                {
                    "metadata": {
                        "labels": {
                            "node.kubernetes.io/exclude-from-external-load-balancers": "true"
                        }
                    }
                },
            )
        assert len(ipvs.applied) == writes, "nothing removed or re-added during the outage"
        eventually(lambda: runtime.controller.health.kubernetes_connected, what="reconnection")
        eventually(lambda: len(vs_of(ipvs, "198.51.100.0").real_servers) == 1, what="catch-up")
        assert len(ipvs.applied) == writes + 1


def test_one_slice_change_touches_only_its_service(api: FakeApiServer, kubeconfig: Path) -> None:
    ipvs = FakeIpvs()
    pod = {"lvs-director.io/backends": "pod"}
    with start(kubeconfig, ipvs, pool="198.51.100.0/27"):
        for i in range(20):
            api.create("services", service(f"s{i}", PORTS, annotations=pod))
            api.create(
                "endpointslices",
                endpoint_slice(
                    f"s{i}", [(f"10.1.{i}.5", "n1", True, False)], SLICE_PORTS, name=f"s{i}-x"
                ),
            )
        eventually(lambda: len(ipvs.read().services) == 20, what="20 virtual services")
        eventually(lambda: all(len(vs.real_servers) == 1 for vs in ipvs.read().services.values()))
        calls, applied = ipvs.calls, len(ipvs.applied)
        api.patch(
            "endpointslices",
            "s7-x",
            {
                "endpoints": [
                    {"addresses": ["10.1.7.5"], "conditions": {"ready": True}},
                    {"addresses": ["10.1.7.6"], "conditions": {"ready": True}},
                ]
            },
        )
        eventually(lambda: len(ipvs.applied) > applied, what="the change")
        new_ops = ipvs.applied[applied:]
        assert [(op.kind.value, op.dest.address if op.dest else None) for op in new_ops] == [
            ("add-dest", "10.1.7.6")
        ]
        assert ipvs.calls == calls + 1, "one apply, for that Service only"


def test_a_stopping_director_does_not_report_its_own_watches_closing(
    api: FakeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping closes the watches: that is no failure, and says nothing at WARNING."""
    runtime = start(kubeconfig, FakeIpvs())
    for watcher in runtime.served.watchers:
        watcher.stop()
    caplog.clear()
    with api.outage():  # the API server goes away under the stopped watches
        for watcher in runtime.served.watchers:
            watcher._thread.join(10)
    runtime.stop()
    assert [w._thread.is_alive() for w in runtime.served.watchers] == [False] * 3
    assert "kube.watch_failed" not in caplog.text


def _changed(cluster: str, n: int) -> ObjectChanged:
    """Watch event n of ``cluster`` (its object: the number, enough to check order)."""
    return ObjectChanged(resource_name(cluster, "endpointslices"), "MODIFIED", n)


def test_one_clusters_burst_does_not_hold_another_clusters_event_behind_all_of_it() -> None:
    """A controller gone wild in cluster a churns thousands of EndpointSlices; cluster b's
    one change, arriving after them, is taken in the very next step, with a's first
    EVENTS_STEP only; a's others follow, in their order, a step at a time, and control
    events (a reload, an API request) never wait."""
    intake = Intake(LoopStatus(), set())
    for n in range(3 * EVENTS_STEP):
        intake.queue.put(_changed("a", n))
    intake.queue.put(_changed("b", 0))
    intake.queue.put(WriteFailed("patch", "services/status", "500", False))
    first = intake.take(0.0)
    assert _changed("b", 0) in first
    assert WriteFailed("patch", "services/status", "500", False) in first
    assert [ev.obj for ev in first if ev.resource == "a/endpointslices"] == list(  # type: ignore[union-attr]
        range(EVENTS_STEP)
    )
    assert intake.holding
    rest = intake.take(5.0) + intake.take(5.0)  # at once: events are held
    assert [ev.obj for ev in rest] == list(range(EVENTS_STEP, 3 * EVENTS_STEP))  # type: ignore[union-attr]
    assert not intake.holding and intake.take(0.0) == []


@given(
    st.lists(
        st.tuples(st.sampled_from(["", "a", "b"]), st.integers(0, 3)), max_size=3 * EVENTS_STEP
    )
)
@settings(max_examples=40, deadline=None)
def test_events_are_taken_in_each_clusters_order_none_lost_and_capped_per_step(
    arrivals: list[tuple[str, int]],
) -> None:
    """Whatever the mix and the moments of arrival (a step now and then between them),
    every event is taken once, each cluster's in the order they came, at most EVENTS_STEP
    of a cluster's in one take."""
    intake = Intake(LoopStatus(), set())
    taken: list[ObjectChanged] = []

    def take() -> None:
        batch = intake.take(0.0)
        counts = [
            sum(1 for ev in batch if ev.resource == resource_name(cluster, "endpointslices"))  # type: ignore[union-attr]
            for cluster in ("", "a", "b")
        ]
        assert max(counts) <= EVENTS_STEP
        taken.extend(batch)  # type: ignore[arg-type]

    for n, (cluster, takes) in enumerate(arrivals):
        intake.queue.put(_changed(cluster, n))
        if takes == 3:  # now and then a step between arrivals
            take()
    while intake.holding or not intake.queue.empty():
        take()
    for cluster in ("", "a", "b"):
        sent = [n for n, (c, _) in enumerate(arrivals) if c == cluster]
        got = [ev.obj for ev in taken if ev.resource == resource_name(cluster, "endpointslices")]
        assert got == sent
