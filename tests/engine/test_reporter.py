"""The reporter: what a follower keeps, and write failures reaching the metrics."""

from __future__ import annotations

from director.core.cluster_parse import service_from_json
from director.core.options import Problem
from director.dataplane.fake import FakeIpvs
from director.engine.events import WriteFailed
from director.engine.loop import Controller
from director.engine.outbox import Outbox
from director.engine.reporter import Reporter
from director.engine.view import LoopStatus
from director.schema.config import parse_config
from lab.kubeapi import service
from lab.wait import eventually
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


def test_write_failures_reach_the_metrics_through_the_loop() -> None:
    status = LoopStatus()
    reporter = Reporter(None, status, dry_run=False)
    for failed in [WriteFailed("create", "events", "403", True)] * 2 + [
        WriteFailed("patch", "services/status", "unreachable", False)
    ]:
        reporter.absorb(failed)
    assert status.write_errors == {
        ("create", "events", "403"): 2,
        ("patch", "services/status", "unreachable"): 1,
    }
    assert status.copy(synced=True).write_errors is not status.write_errors
    controller = Controller(FakeIpvs(), parse_config("ownership: {networks: [10.0.0.0/8]}\n"))
    controller.post(WriteFailed("patch", "services/status", "500", False))
    controller.step(0.01)
    assert controller.exports.view.status.write_errors == {("patch", "services/status", "500"): 1}
