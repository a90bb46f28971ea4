"""The reporter: what a follower keeps, and write failures reaching the metrics."""

from __future__ import annotations

from pathlib import Path

from director.adapters.metrics.collector import Metrics
from director.adapters.metrics.promtext import generate_latest
from director.core.annotations import Problem
from director.core.cluster_parse import service_from_json
from director.dataplane.fake import FakeIpvs
from director.engine.events import WriteFailed
from director.engine.loop import Controller
from director.engine.outbox import Outbox
from director.engine.reporter import Reporter
from director.engine.view import LoopStatus
from director.schema.config import parse_config
from lab.kubeapi import service
from lab.wait import eventually
from tests.engine.test_outbox import Refusing
from tests.enginelab import Writer


def test_a_follower_keeps_its_events_and_the_new_leader_sends_what_is_still_true() -> None:
    writer, status = Writer(), LoopStatus()
    outbox = Outbox(writer)
    try:
        reporter = Reporter(outbox, status, dry_run=False)
        obj = service("web", [("http", "TCP", 80)])
        obj["metadata"]["namespace"] = "default"  # as the API server stores it
        svc = service_from_json(obj)
        reporter.report(svc, "Warning", "AddressRefused", "pool exhausted", "address")
        reporter.report_problems(svc, [Problem("lvs-director.io/pool", "no such pool")])
        reporter.report(svc, "Warning", "AddressRefused", "pool exhausted", "address")
        assert writer.events == [] and status.refused == {"services": 1}
        reporter.report(svc, "Normal", "AddressAssigned", "assigned 198.51.100.1", "address")
        reporter.lead(True)
        eventually(outbox.idle, what="the writes")
        assert sorted(writer.events) == [
            ("default/web", "AddressAssigned", "assigned 198.51.100.1"),  # the address one
            ("default/web", "InvalidAnnotation", "lvs-director.io/pool: no such pool"),
        ]
    finally:
        outbox.close()


def _scrape(controller: Controller) -> str:
    metrics = Metrics()
    metrics.serve(controller.door(), None, lambda: None)
    return generate_latest(metrics.registry).decode()


def test_write_failures_reach_the_metrics_through_the_loop() -> None:
    status = LoopStatus()
    reporter = Reporter(None, status, dry_run=False)
    for failed in [WriteFailed("create", "events", "403", True)] * 2 + [
        WriteFailed("patch", "services/status", "unreachable", False)
    ]:
        reporter.absorb(failed)
    assert status.write_errors == {
        ("", "create", "events", "403"): 2,
        ("", "patch", "services/status", "unreachable"): 1,
    }
    assert status.copy(synced=True).write_errors is not status.write_errors
    controller = Controller(FakeIpvs(), parse_config("ownership: {networks: [10.0.0.0/8]}\n"))
    controller.post(WriteFailed("patch", "services/status", "500", False))
    controller.step(0.01)
    assert controller.parts.exports.view.status.write_errors == {
        ("", "patch", "services/status", "500"): 1
    }
    # one cluster (kubernetes:): the series as they always were, no cluster label
    assert (
        'director_cluster_write_errors_total{code="500",resource="services/status",verb="patch"}'
        " 1.0" in _scrape(controller)
    )


def test_with_several_clusters_write_failures_are_counted_per_cluster(tmp_path: Path) -> None:
    """Which cluster's API server refuses the director's writes (its RBAC, its webhook) is
    what the operator needs to know first."""
    (tmp_path / "a").write_text("")
    (tmp_path / "b").write_text("")
    text = f"""
pools: [{{name: p, addresses: [198.51.100.0/30]}}]
clusters:
  - {{name: a, kubeconfig: {tmp_path / "a"}}}
  - {{name: b, kubeconfig: {tmp_path / "b"}}}
"""
    controller = Controller(FakeIpvs(), parse_config(text), dry_run=False)
    outbox = Outbox(Refusing(), controller.post, cluster="b")
    try:
        outbox.put(
            ("event", "terminating/old", "Refused", "x"),
            lambda: outbox.writer.event(
                "terminating", "old", "u1", kind="Warning", reason="Refused", message="x"
            ),
        )
        eventually(outbox.idle, what="the refused write")
    finally:
        outbox.close()
    controller.step(0.01)
    scrape = _scrape(controller)
    assert (
        'director_cluster_write_errors_total{cluster="b",code="403",resource="events",'
        'verb="create"} 1.0' in scrape
    )
