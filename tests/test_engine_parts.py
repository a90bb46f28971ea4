"""The control loop's named parts, each on its own with the fakes (no Runtime, no threads
but the outbox's): typed events, the health gate, draining, source filtering, the reporter,
and the read model the API serves from without the loop's lock."""

from __future__ import annotations

import gc
import ipaddress
import json
import os
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from director.core.checks import CheckSpec, Target
from director.core.cluster import service_from_json
from director.core.firewall import FakeFirewall
from director.core.intents import AddDrain, Drain
from director.core.model import Forwarding, IpProtocol, RealServer, ServiceConfig, ServiceKey
from director.core.ownership import Ownership
from director.core.plan import build_plan
from director.core.services import VirtualService
from director.core.translate import Problem
from director.dataplane.fake import FakeIpvs
from director.dataplane.memory import give_back_free_memory
from director.engine.announcer import VipAnnouncer
from director.engine.draining import Draining
from director.engine.events import (
    IntentPosted,
    LeaderChanged,
    Listed,
    ObjectChanged,
    Reply,
    TargetChecked,
    VrrpChanged,
    WatchState,
    WriteFailed,
    from_watch,
)
from director.engine.health_gate import HealthGate
from director.engine.loop import Controller
from director.engine.outbox import Outbox
from director.engine.reporter import Reporter
from director.engine.source_filter import SourceFilter
from director.engine.table import Programmed
from director.engine.view import Layered, LoopStatus
from director.schema.config import HealthSettings, parse_config
from director.web.app import create_app
from lab.kubeapi import service
from lab.wait import Clock, eventually

TCP = ServiceKey.inet(IpProtocol.TCP, "198.51.100.10", 80)
UDP = ServiceKey.inet(IpProtocol.UDP, "198.51.100.10", 53)
OWN = Ownership((ipaddress.ip_network("198.51.100.0/24"),))
A, B = ("192.0.2.1", 8080), ("192.0.2.2", 8080)


def vs(key: ServiceKey, *dests: tuple[str, int], weight: int = 1) -> VirtualService:
    servers = {d: RealServer(d[0], d[1], weight, Forwarding.NAT) for d in dests}
    return VirtualService(key, ServiceConfig("rr"), servers, "static/web")


# -- events -----------------------------------------------------------------------------
def test_every_watcher_triple_becomes_its_typed_event() -> None:
    target = Target("192.0.2.1", 80, CheckSpec())
    assert from_watch("health", "DOWN", target) == TargetChecked(target, up=False)
    assert from_watch("vrrp", "MASTER", None) == VrrpChanged("MASTER")
    assert from_watch("lease", "LEADER", None) == LeaderChanged(True)
    lost = WatchState("nodes", connected=False, reason="timed out")
    assert from_watch("nodes", "DISCONNECTED", "timed out") == lost
    assert from_watch("services", "RELIST", ("a", "b")) == Listed("services", ["a", "b"])
    assert from_watch("services", "ADDED", "svc") == ObjectChanged("services", "ADDED", "svc")


# -- the health gate ------------------------------------------------------------------------
def test_a_shared_target_is_checked_once_and_dropped_with_its_last_user() -> None:
    gate = HealthGate(HealthSettings())
    calls: list[tuple[set[Target], set[Target]]] = []
    gate.on_targets = lambda add, remove: calls.append((add, remove))
    target = Target(*A, CheckSpec())
    other = ServiceKey.inet(IpProtocol.TCP, "198.51.100.11", 80)
    gate.set_checks(TCP, {A: (target,)})
    gate.set_checks(other, {A: (target,)})
    assert calls == [({target}, set())]  # one check for both virtual services
    gate.forget(TCP)
    assert calls == [({target}, set())]  # still used by the other one
    gate.forget(other)
    assert calls == [({target}, set()), (set(), {target})]


def test_a_failing_real_server_is_quiesced_and_all_failing_are_kept_with_one_alarm() -> None:
    gate = HealthGate(HealthSettings())
    ta, tb = Target(*A, CheckSpec()), Target(*B, CheckSpec())
    gate.set_checks(TCP, {A: (ta,), B: (tb,)})
    assert gate.observe(ta, up=False) == {TCP}
    out, alarm = gate.apply(TCP, vs(TCP, A, B))
    assert (out.real_servers[A].weight, out.real_servers[B].weight, alarm) == (0, 1, False)
    gate.observe(tb, up=False)
    out, alarm = gate.apply(TCP, vs(TCP, A, B))
    assert alarm and all(rs.weight == 1 for rs in out.real_servers.values())  # kept
    assert gate.apply(TCP, vs(TCP, A, B))[1] is False  # said once
    assert gate.failing() == {TCP: frozenset({A, B})}


def test_remove_on_failure_takes_the_real_server_out() -> None:
    gate = HealthGate(HealthSettings(on_failure="remove"))
    ta = Target(*A, CheckSpec())
    gate.set_checks(TCP, {A: (ta,)})
    gate.observe(ta, up=False)
    out, _ = gate.apply(TCP, vs(TCP, A, B))
    assert set(out.real_servers) == {B}


# -- draining --------------------------------------------------------------------------------
def test_a_removed_real_server_drains_until_its_connections_end() -> None:
    ipvs, clock = FakeIpvs(), Clock()
    drains = Draining(ipvs, clock, timeout=60)
    actual = vs(TCP, A, B)
    ipvs.apply(build_plan({TCP: actual}, {}, OWN).ops)  # what the kernel holds
    ipvs.set_connections(TCP, B, active=3, inactive=0)
    out = drains.apply(TCP, vs(TCP, A), actual, frozenset())
    assert out.real_servers[B].weight == 0 and drains.waiting == {TCP: {B: 160.0}}
    ipvs.set_connections(TCP, B, active=0, inactive=0)
    out = drains.apply(TCP, vs(TCP, A), actual, frozenset())
    assert set(out.real_servers) == {A} and drains.waiting == {}


def test_a_drain_ends_at_its_timeout_and_udp_does_not_drain() -> None:
    ipvs, clock = FakeIpvs(), Clock()
    drains = Draining(ipvs, clock, timeout=5)
    drains.waiting[TCP] = {B: clock.now + 5}
    clock.now += 5
    assert set(drains.apply(TCP, vs(TCP, A), vs(TCP, A, B), frozenset()).real_servers) == {A}
    # A terminating UDP endpoint goes at once: there is no connection to finish.
    out = drains.apply(UDP, vs(UDP, A, B), vs(UDP, A, B), frozenset({(UDP, B)}))
    assert set(out.real_servers) == {A} and drains.waiting == {}


def test_nothing_to_drain_leaves_the_service_as_it_is_and_asks_the_kernel_nothing() -> None:
    """A first start (nothing in the kernel), and a resync that finds the same real servers
    in any order, drain nothing: the desired service goes through as it is, with no
    connection count read. The shortcut that skips the work must still see a real server the
    kernel holds and the service no longer has (drained), and UDP's (removed at once)."""

    class Unread(FakeIpvs):
        def read_dest_states(self, key: ServiceKey) -> Any:
            raise AssertionError("the kernel's connections were read")

    drains = Draining(Unread(), Clock(), timeout=60)
    wanted = vs(TCP, A, B)
    assert drains.apply(TCP, wanted, None, frozenset()) is wanted
    assert drains.apply(TCP, wanted, vs(TCP, B, A), frozenset()) is wanted  # any order
    assert drains.apply(UDP, vs(UDP, A), vs(UDP, A, B), frozenset()).real_servers == {
        A: vs(UDP, A).real_servers[A]
    }  # UDP: removed at once, not drained
    # Removed from what the kernel holds: drained (weight 0), so the kernel is asked.
    with pytest.raises(AssertionError, match="connections were read"):
        drains.apply(TCP, vs(TCP, A), wanted, frozenset())


# -- source filtering ----------------------------------------------------------------------------
def test_a_refused_ruleset_holds_back_and_is_tried_again_after_five_seconds() -> None:
    firewall, clock, status = FakeFirewall(), Clock(), LoopStatus()
    sf = SourceFilter(firewall, status, clock, dry_run=False)
    sf.want("default/web", {TCP: ("203.0.113.0/24",)})
    firewall.fail = "Could not process rule"
    assert sf.enforce() == {TCP}  # not in force: closed, not open
    failed = sf.ledger.get("nftables")
    assert failed is not None and failed.failures == 1 and failed.kind == "refused"
    assert "Could not process rule" in (status.last_error or "")
    firewall.fail = None
    assert sf.enforce() == {TCP} and firewall.applies == 0  # not yet due
    clock.now += 5
    assert sf.enforce() == set() and firewall.rules == {TCP: ("203.0.113.0/24",)}
    sf.want("default/web", {})
    assert sf.enforce() == set() and firewall.rules == {}


# -- the reporter ---------------------------------------------------------------------------------
class Writer:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.status: list[tuple[str, tuple[str, ...]]] = []

    def patch_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        self.status.append((f"{namespace}/{name}", ips))

    def event(
        self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
    ) -> None:
        self.events.append((f"{namespace}/{name}", reason, message))


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


# -- the outbox: writes never wait on each other (issue 17, weakness 3) ---------------------------
class Refusing(Writer):
    """An API server that refuses Events in one namespace (being deleted: 403) and is
    briefly unable to take ``flaky``'s status (500 twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.flaky_failures = 2
        self.attempts: list[str] = []
        self.release = threading.Event()
        self.release.set()

    def patch_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        from director.adapters.kube import KubeError

        self.release.wait(5)
        self.attempts.append(f"status {name}")
        if name == "flaky" and self.flaky_failures:
            self.flaky_failures -= 1
            raise KubeError(500, "InternalError", "etcd leader changed")
        super().patch_status(namespace, name, ips)

    def event(
        self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
    ) -> None:
        from director.adapters.kube import KubeError

        self.release.wait(5)
        self.attempts.append(f"event {name}")
        if namespace == "terminating":
            raise KubeError(
                403,
                "Forbidden",
                f"unable to create new content in namespace "
                f"{namespace} because it is being terminated",
            )
        super().event(namespace, name, uid, kind=kind, reason=reason, message=message)


def test_a_refused_event_does_not_hold_back_a_later_status_write() -> None:
    writer, failures = Refusing(), []
    outbox = Outbox(writer, failures.append)
    try:
        outbox.put(
            ("event", "terminating/old", "Refused", "x"),
            lambda: writer.event(
                "terminating", "old", "u1", kind="Warning", reason="Refused", message="x"
            ),
        )
        outbox.put(
            ("status", "default/new"),
            lambda: writer.patch_status("default", "new", ("198.51.100.1",)),
        )
        eventually(outbox.idle, timeout=5, what="both writes settled")
        assert writer.status == [("default/new", ("198.51.100.1",))]
        assert writer.attempts.count("event old") == 1, "a 403 is not retried"
        assert failures == [WriteFailed("create", "events", "403", dropped=True)]
    finally:
        outbox.close()


def test_a_failing_write_is_retried_on_its_own_while_the_others_go_ahead() -> None:
    writer, failures = Refusing(), []
    outbox = Outbox(writer, failures.append)
    try:
        outbox.put(
            ("status", "default/flaky"),
            lambda: writer.patch_status("default", "flaky", ("198.51.100.2",)),
        )
        eventually(lambda: failures, timeout=5, what="the first failure")
        for name in ("a", "b", "c"):
            outbox.put(
                ("status", f"default/{name}"), lambda n=name: writer.patch_status("default", n, ())
            )
        eventually(outbox.idle, timeout=10, what="every write done")
        assert writer.attempts[:4] == ["status flaky", "status a", "status b", "status c"]
        assert writer.attempts.count("status flaky") == 3  # two 500s, then written
        assert writer.status[-1] == ("default/flaky", ("198.51.100.2",))
        assert failures == [WriteFailed("patch", "services/status", "500", dropped=False)] * 2
    finally:
        outbox.close()


def test_an_event_write_that_hangs_does_not_hold_back_status() -> None:
    """An admission webhook on Events that accepts and never answers held every new
    Service's status for as long as each hanging write took: status has a thread of its own."""
    hang = threading.Event()
    writer = Refusing()

    def hanging_event() -> None:
        hang.wait(30)  # the webhook's timeout
        writer.event("default", "e1", "u", kind="Normal", reason="R", message="m")

    outbox = Outbox(writer)
    try:
        outbox.put(("event", "default/e1", "R", "m"), hanging_event)
        eventually(lambda: not outbox._queues[1], what="the Event write under way")
        for name in ("first", "second"):
            outbox.put(
                ("status", f"default/{name}"), lambda n=name: writer.patch_status("default", n, ())
            )
        eventually(lambda: len(writer.status) == 2, timeout=5, what="status written")
        assert writer.attempts == ["status first", "status second"], "the Event still hangs"
        hang.set()
        eventually(outbox.idle, timeout=5, what="the Event written once it answered")
        assert writer.attempts[-1] == "event e1"
    finally:
        hang.set()
        outbox.close()


def test_a_server_answering_429_is_asked_once_per_backoff_step_not_once_per_event() -> None:
    """5,000 distinct Events (a tenant value in each message) against a server answering
    429: the Events queue waits as a whole, so the attempts are a handful, not thousands;
    no more than MAX_EVENTS wait, the oldest giving way; the status queue goes on."""
    from director.adapters.kube import KubeError
    from director.engine.outbox import MAX_EVENTS

    attempts: list[str] = []

    class Busy(Writer):
        def event(
            self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
        ) -> None:
            attempts.append(message)
            raise KubeError(429, "TooManyRequests", "slow down")

    writer, failures = Busy(), []
    outbox = Outbox(writer, failures.append)
    try:
        for i in range(5000):
            outbox.put(
                ("event", f"default/s{i}", "Bad", f"tenant value {i}"),
                lambda i=i: writer.event(
                    "default",
                    f"s{i}",
                    "u",
                    kind="Warning",
                    reason="Bad",
                    message=f"tenant value {i}",
                ),
            )
        outbox.put(("status", "default/web"), lambda: writer.patch_status("default", "web", ()))
        eventually(lambda: writer.status, timeout=5, what="the status written all the same")
        time.sleep(3)
        assert 1 <= len(attempts) <= 12, f"{len(attempts)} attempts in 3 s"
        overflowed = [f for f in failures if f.code == "overflow"]
        assert len(overflowed) == 5000 - MAX_EVENTS and outbox.dropped == len(overflowed)
        assert len(outbox._events) == MAX_EVENTS
    finally:
        outbox.close()


def test_an_event_not_written_in_time_is_dropped_as_stale() -> None:
    from director.engine.outbox import EVENT_MAX_AGE

    now = [1000.0]

    class Down(Writer):
        def event(
            self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
        ) -> None:
            raise ConnectionRefusedError("no API server")

    writer, failures = Down(), []
    outbox = Outbox(writer, failures.append, clock=lambda: now[0])
    try:
        outbox.put(
            ("event", "default/web", "R", "m"),
            lambda: writer.event("default", "web", "u", kind="Normal", reason="R", message="m"),
        )
        eventually(lambda: failures, timeout=5, what="the first failure")
        now[0] += EVENT_MAX_AGE + 1  # the API server is back hours later: nothing stale sent
        with outbox._cv:
            outbox._cv.notify()
        eventually(outbox.idle, timeout=5, what="the stale Event dropped")
        assert failures[-1] == WriteFailed("create", "events", "stale", dropped=True)
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


# -- the read model -------------------------------------------------------------------------------
def test_the_api_answers_from_the_view_while_the_loop_holds_its_lock() -> None:
    settings = parse_config(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80,"
        " real_servers: [192.0.2.1:8080]}]\n",
        "static.yaml",
    )
    controller = Controller(FakeIpvs(), settings)
    stop = threading.Event()
    loop = threading.Thread(target=controller.run, args=(stop, 0.05), daemon=True)
    loop.start()
    try:
        eventually(lambda: controller.health.synced, what="the first sync")
        client = create_app(controller.door(), "t0ken-for-the-admin-api").test_client()
        auth = {"Authorization": "Bearer t0ken-for-the-admin-api"}
        before = controller.exports.view.version
        answers: list[Any] = []
        with controller.lock:  # the loop is busy: it cannot step
            reader = threading.Thread(
                target=lambda: answers.append(client.get("/api/v1/status", headers=auth))
            )
            reader.start()
            reader.join(5)
            assert answers, "the API waited for the loop's lock"
        assert answers[0].get_json()["counts"]["virtual_services"] == 1
        # An intent is answered once the view shows it.
        reply = controller.submit_intent(AddDrain(Drain("192.0.2.1", None, None)))
        assert reply.ok and controller.exports.view.version > before
        assert len(controller.exports.view.intents.drains) == 1
    finally:
        stop.set()
        loop.join(5)


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


# A static service of two real servers, each checked.
CHECKED = (
    "ownership: {networks: [198.51.100.0/24]}\n"
    "health: {check: tcp}\n"
    "services: [{name: web, address: 198.51.100.10, port: 80, health_check: tcp,"
    " real_servers: [192.0.2.1:8080, 192.0.2.2:8080]}]\n"
)


def test_a_check_verdict_reaches_the_view_without_any_other_change() -> None:
    controller = Controller(FakeIpvs(), parse_config(CHECKED, "static.yaml"))
    for _ in range(3):
        controller.step(0.01)
    assert controller.exports.view.status.synced and controller.exports.view.unhealthy == {}
    before = controller.exports.view
    (target,) = controller.gate.checks[TCP][A]
    controller.post(TargetChecked(target, up=False))
    controller.step(0.01)
    assert controller.exports.view.unhealthy == {TCP: frozenset({A})}
    assert controller.exports.view.desired[TCP].real_servers[A].weight == 0  # quiesced
    assert before.desired[TCP].real_servers[A].weight == 1  # an older view is unchanged
    controller.post(TargetChecked(target, up=True))
    controller.step(0.01)
    assert controller.exports.view.unhealthy == {}
    assert controller.exports.view.desired[TCP].real_servers[A].weight == 1


def test_the_views_fresh_copy_of_the_table_is_out_of_the_young_generation_after_its_step() -> None:
    """Once a step changes more than ~sqrt(2n) virtual services, the view copies the whole
    desired table. The loop moves that copy to the old generation right after the step, so
    no later event's young collection has to walk it (a 10,000-entry dict at 10,000
    Services)."""
    services = ", ".join(
        f"{{name: web{port}, address: 198.51.100.10, port: {port}, health_check: tcp,"
        " real_servers: [192.0.2.1:8080, 192.0.2.2:8080]}"
        for port in range(1, 101)
    )
    config = CHECKED.split("services:", maxsplit=1)[0] + f"services: [{services}]\n"
    controller = Controller(FakeIpvs(), parse_config(config, "static.yaml"))
    for _ in range(3):
        controller.step(0.01)
    assert len(controller.exports.view.desired) == 100
    target = controller.gate.checks[TCP][A][0]  # checks 192.0.2.1:8080, for all 100
    for up in (False, True, False):
        before = controller.exports.view.desired
        controller.post(TargetChecked(target, up))
        controller.step(0.01)
        desired = controller.exports.view.desired
        assert desired.rebased(before)  # 100 virtual services changed: a fresh copy
        assert {vs.real_servers[A].weight for vs in desired.values()} == {int(up)}
        base = gc.get_referents(desired)[0]
        assert base == dict(controller.table.desired)
        assert any(obj is base for obj in gc.get_objects(generation=2))


def test_the_state_file_follows_the_table_at_most_once_a_second(tmp_path: Any) -> None:
    state, clock = tmp_path / "state.json", Clock()
    settings = parse_config(CHECKED, "static.yaml")
    controller = Controller(FakeIpvs(), settings, state_file=state, clock=clock)

    def weights() -> list[int]:
        (svc,) = json.loads(state.read_text())["services"]
        return [rs["weight"] for rs in svc["real_servers"]]

    for _ in range(3):
        controller.step(0.01)
    assert weights() == [1, 1]
    (target,) = controller.gate.checks[TCP][A]
    controller.post(TargetChecked(target, up=False))
    controller.step(0.01)
    assert controller.exports.view.desired[TCP].real_servers[A].weight == 0
    assert weights() == [1, 1]  # written less than a second ago: not yet
    clock.now += 1.0
    controller.step(0.01)
    assert weights() == [0, 1]  # the loop's next step writes it
    written = state.stat().st_mtime_ns
    clock.now += 5.0
    controller.step(0.01)
    assert state.stat().st_mtime_ns == written  # nothing changed: not written again


def test_a_state_file_that_cannot_be_written_never_holds_back_the_step_or_the_vips(
    tmp_path: Any,
) -> None:
    """The state file's folder removed (or the disk full): the write fails, is tried again
    with a backoff, the step goes on (no error step, so no 5 s pause of the loop) and the
    VIP set still reaches keepalived; once the folder is back the file is written. A file
    removed by someone else is written again."""
    folder = tmp_path / "state"
    folder.mkdir()
    state, clock = folder / "state.json", Clock()
    controller = Controller(
        FakeIpvs(), parse_config(CHECKED, "static.yaml"), state_file=state, clock=clock
    )
    told: list[frozenset[str]] = []
    controller.exports.vips.announce = told.append
    folder.rename(tmp_path / "elsewhere")
    (tmp_path / "state").write_text("a file where the folder was")  # ENOTDIR, every try
    for _ in range(3):
        controller.step(0.01)
        clock.now += 1.0
    owned = controller.health.owned.get("state-file")
    assert owned is not None and not owned.in_sync and owned.failures >= 1
    assert controller.health.loop_errors == 0 and controller.pace._failures == 0
    assert told, "the VIP set was handed on all the same"
    (tmp_path / "state").unlink()
    (tmp_path / "elsewhere").rename(folder)
    clock.now += 60.0  # past the backoff
    controller.step(0.01)
    assert (
        json.loads(state.read_text())["services"]
        and controller.health.owned.get("state-file").in_sync
    )  # type: ignore[union-attr]
    state.unlink()  # someone cleans /var/lib up
    clock.now += 10.0
    controller.step(0.01)
    clock.now += 2.0
    controller.step(0.01)
    assert state.exists() and controller.health.owned.get("state-file").repairs == 1  # type: ignore[union-attr]


def test_an_intents_file_removed_behind_the_directors_back_is_written_again(tmp_path: Any) -> None:
    from director.core.intents import SetMaintenance

    path, clock = tmp_path / "intents.json", Clock()
    controller = Controller(
        FakeIpvs(), parse_config(CHECKED, "static.yaml"), intents_file=path, clock=clock
    )
    controller.step(0.01)
    reply = controller.submit_intent(SetMaintenance("kernel upgrade"), timeout=0)
    controller.step(0.01)
    assert reply.ok and json.loads(path.read_text())["maintenance"] == "kernel upgrade"
    path.unlink()
    clock.now += 10.0
    controller.step(0.01)
    assert json.loads(path.read_text())["maintenance"] == "kernel upgrade"
    assert controller.health.owned.get("intents-file").repairs == 1  # type: ignore[union-attr]


def test_an_intent_is_refused_on_its_own() -> None:
    reply = Reply()
    assert not reply.ok
    reply.resolve(409, "already drained")
    reply.resolve(200)  # resolved once
    assert (reply.status, reply.detail, reply.ok) == (409, "already drained", False)
    posted = IntentPosted(AddDrain(Drain("192.0.2.1", None, None)), reply)
    assert posted.reply is reply


def test_a_view_that_cannot_be_published_is_an_error_survived(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = parse_config("ownership: {networks: [198.51.100.0/24]}\n", "static.yaml")
    controller = Controller(FakeIpvs(), settings)
    real = controller.exports.publish
    calls = {"n": 0}

    def flaky(*args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the read model")
        real(*args)

    monkeypatch.setattr(controller.exports, "publish", flaky)
    controller.step(0.01)  # does not raise: counted, shown, and tried again
    assert controller.health.loop_errors == 1
    assert controller.health.last_error == "publish: RuntimeError: a bug in the read model"
    assert not controller.exports.view.status.synced
    controller.step(0.01)
    assert controller.exports.view.status.synced and controller.health.synced


def test_the_vip_set_is_announced_when_it_changes_and_only_then() -> None:
    vips = VipAnnouncer()
    heard: list[frozenset[str]] = []
    vips.update([TCP])  # nobody to tell yet: nothing is lost, it is told once someone listens
    vips.announce = heard.append
    vips.update([TCP, UDP, ServiceKey.mark(TCP.family, 100)])  # a mark has no address
    assert heard == [frozenset({"198.51.100.10"})]
    vips.keys_changed()
    vips.update([TCP])  # same address: keepalived is not reloaded
    assert heard == [frozenset({"198.51.100.10"})]
    vips.keys_changed()
    vips.update([])
    assert heard == [frozenset({"198.51.100.10"}), frozenset()]


# -- memory ---------------------------------------------------------------------------------------
def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_the_heap_freed_after_a_big_sync_goes_back_to_the_system() -> None:
    """What a first sync leaves free in the C heap (between what it keeps) stays in the
    director's RSS until it is given back: 100 MB of freed blocks, one kept at the top."""
    blocks = [bytes(2000) for _ in range(50_000)]  # each from malloc's heap, not mmap
    kept = blocks[-1]
    del blocks
    before = _rss_mb()
    assert give_back_free_memory() is True
    assert before - _rss_mb() > 50, "the freed 100 MB stayed in the process"
    assert len(kept) == 2000
