"""The reconciler: the desired table against the kernel's, only the difference sent, what
the director does not own left alone, and a cached copy of the kernel's table that follows
what the kernel accepted (not what was asked), so a refused change is planned again."""

from __future__ import annotations

from director.core.model import Forwarding, IpProtocol, RealServer, ServiceConfig, ServiceKey
from director.core.services import Op, OpKind, VirtualService
from director.dataplane.fake import FakeIpvs
from director.engine.reconcile import Reconciler
from tests.enginelab import OWN, TCP, UDP, A, B, vs

FOREIGN = ServiceKey.inet(IpProtocol.TCP, "203.0.113.7", 80)


def test_a_full_sync_sends_only_the_difference_and_leaves_foreign_services_alone() -> None:
    ipvs = FakeIpvs()
    ipvs.apply([Op(OpKind.ADD_SERVICE, FOREIGN, config=ServiceConfig("wlc"))])
    reconciler = Reconciler(ipvs, OWN)
    desired = {TCP: vs(TCP, A, B), UDP: vs(UDP, A)}
    first = reconciler.full_sync(desired)
    assert first.result.ok and first.plan.foreign == (FOREIGN,)
    sent = len(ipvs.applied)
    desired[TCP] = vs(TCP, A, B, weight=3)
    second = reconciler.full_sync(desired)
    assert [op.kind for op in second.plan.ops] == [OpKind.SET_DEST, OpKind.SET_DEST]
    assert len(ipvs.applied) == sent + 2
    assert FOREIGN in ipvs.read().services, "not ours: never touched"


def test_an_unchanged_resync_keeps_the_cached_objects_and_sends_nothing() -> None:
    ipvs = FakeIpvs()
    reconciler = Reconciler(ipvs, OWN)
    desired = {TCP: vs(TCP, A, B)}
    reconciler.full_sync(desired, keep_plan=False)
    cached = reconciler.actual[TCP]
    report = reconciler.full_sync(desired, keep_plan=False)
    assert report.result.requested == 0
    assert reconciler.actual[TCP] is cached, "nothing read is kept when nothing drifted"


def test_a_change_the_kernel_refuses_is_not_cached_and_is_planned_again() -> None:
    ipvs = FakeIpvs(schedulers={"rr"})
    reconciler = Reconciler(ipvs, OWN)
    wanted = VirtualService(TCP, ServiceConfig("sh"), {A: RealServer(*A, 1, Forwarding.NAT)}, "x")
    report = reconciler.sync_service(TCP, wanted)
    assert not report.result.ok
    assert TCP not in reconciler.actual, "the cache holds what the kernel holds"
    again = reconciler.sync_service(TCP, wanted)
    assert again.plan.ops and again.plan.ops[0].kind == OpKind.ADD_SERVICE


def test_a_service_outside_the_owned_ranges_is_refused_with_the_reason() -> None:
    reconciler = Reconciler(FakeIpvs(), OWN)
    report = reconciler.sync_service(FOREIGN, vs(FOREIGN, A))
    ((key, reason),) = report.plan.refused
    assert key == FOREIGN and "outside the owned ranges (198.51.100.0/24)" in reason
    assert not report.plan.ops


def test_a_dry_run_counts_what_it_would_send_and_sends_nothing() -> None:
    ipvs = FakeIpvs()
    report = Reconciler(ipvs, OWN, dry_run=True).full_sync({TCP: vs(TCP, A, B)})
    assert report.result.requested == 3 and ipvs.applied == [] and ipvs.calls == 0


def test_a_first_sync_in_chunks_caches_each_service_as_the_kernel_then_lists_it() -> None:
    """600 services of 10 real servers (two chunks), each listed out of the kernel's order
    (10.0.0.2 before 10.0.0.10), but one: the cache holds each in the kernel's order (a
    resync finds nothing to send), and the one already in that order as the very object."""
    ipvs = FakeIpvs()
    reconciler = Reconciler(ipvs, OWN)
    keys = [ServiceKey.inet(IpProtocol.TCP, "198.51.100.10", port) for port in range(1000, 1600)]
    desired = {key: vs(key, *((f"10.0.0.{i}", 80) for i in range(2, 12))) for key in keys}
    in_order = vs(keys[0], ("10.0.0.1", 80), ("10.0.0.10", 80))
    desired[keys[0]] = in_order
    report = reconciler.full_sync(desired, keep_plan=False)
    assert report.result.ok and report.result.requested == 599 * 11 + 3
    kernel = ipvs.read().services
    for key in keys:
        assert list(reconciler.actual[key].real_servers) == list(kernel[key].real_servers)
        assert reconciler.actual[key] == desired[key]
    assert list(kernel[keys[1]].real_servers)[:3] == [
        ("10.0.0.10", 80),
        ("10.0.0.11", 80),
        ("10.0.0.2", 80),
    ]
    assert reconciler.actual[keys[0]] is in_order
    again = reconciler.full_sync(desired, keep_plan=False)
    assert again.result.requested == 0


def test_an_added_service_the_kernel_cannot_schedule_is_refused_whole_and_the_rest_go_on() -> None:
    ipvs = FakeIpvs(schedulers={"rr"})
    reconciler = Reconciler(ipvs, OWN)
    lc = VirtualService(TCP, ServiceConfig("lc"), vs(TCP, A, B).real_servers, "static/lc")
    report = reconciler.full_sync({TCP: lc, UDP: vs(UDP, A)}, keep_plan=False)
    assert [(e.op.kind, e.errno) for e in report.result.errors] == [
        (OpKind.ADD_SERVICE, "ENOENT"),
        (OpKind.ADD_DEST, "ESRCH"),
        (OpKind.ADD_DEST, "ESRCH"),
    ]
    assert set(ipvs.read().services) == {UDP} and set(reconciler.actual) == {UDP}
