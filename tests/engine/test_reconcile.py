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
