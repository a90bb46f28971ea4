"""The diff: minimal, ordered, in place, and never touching what the director does not own."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, strategies as st

from director.core.model import (
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.ownership import Ownership
from director.core.plan import apply_ops_to_table, build_plan, plan_service
from director.core.services import Op, OpKind, VirtualService
from director.dataplane.fake import FakeIpvs
from director.engine.reconcile import Reconciler

OWN = Ownership((ipaddress.ip_network("198.51.100.0/24"),), (range(100, 200),))
WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
FOREIGN = ServiceKey.inet(Protocol.TCP, "10.9.9.9", 80)
A, B, C = (RealServer(f"192.0.2.{i}", 8080) for i in (11, 12, 13))


def vs(key: ServiceKey, *dests: RealServer, scheduler: str = "rr") -> VirtualService:
    return VirtualService.build(key, ServiceConfig(scheduler), dests, origin="static/web")


def kinds(ops: list[Op] | tuple[Op, ...]) -> list[str]:
    return [op.kind.value for op in ops]


def test_identical_tables_need_no_operation() -> None:
    table = {WEB: vs(WEB, A, B)}
    assert build_plan(table, dict(table), OWN).empty


def test_new_service_is_added_before_its_real_servers() -> None:
    plan = build_plan({WEB: vs(WEB, A, B)}, {}, OWN)
    assert kinds(plan.ops) == ["add-service", "add-dest", "add-dest"]
    assert all(op.origin == "static/web" for op in plan.ops)


def test_scheduler_and_weight_changes_are_made_in_place() -> None:
    heavier = RealServer(A.address, A.port, weight=5)
    plan = build_plan({WEB: vs(WEB, heavier, B, scheduler="sh")}, {WEB: vs(WEB, A, B)}, OWN)
    assert kinds(plan.ops) == ["set-service", "set-dest"]
    assert plan.ops[0].config == ServiceConfig("sh")
    assert plan.ops[1].dest == heavier


def test_forwarding_change_is_in_place_too() -> None:
    dr = RealServer(A.address, A.port, forwarding=Forwarding.DR)
    assert kinds(plan_service(WEB, vs(WEB, dr), vs(WEB, A))) == ["set-dest"]


def test_only_the_difference_in_real_servers_is_sent() -> None:
    ops = plan_service(WEB, vs(WEB, B, C), vs(WEB, A, B))
    assert [(op.kind, op.dest) for op in ops] == [(OpKind.DEL_DEST, A), (OpKind.ADD_DEST, C)]


def test_removed_service_is_one_delete_not_one_per_real_server() -> None:
    plan = build_plan({}, {WEB: vs(WEB, A, B, C)}, OWN)
    assert kinds(plan.ops) == ["del-service"]


def test_foreign_services_are_reported_and_left_alone() -> None:
    plan = build_plan({}, {FOREIGN: vs(FOREIGN, A), WEB: vs(WEB, A)}, OWN)
    assert plan.foreign == (FOREIGN,)
    assert [op.key for op in plan.ops] == [WEB]


def test_desired_services_outside_the_owned_ranges_are_refused() -> None:
    plan = build_plan({FOREIGN: vs(FOREIGN, A)}, {}, OWN)
    assert plan.empty
    assert plan.refused[0][0] == FOREIGN
    assert "outside the owned ranges" in plan.refused[0][1]


def test_fwmark_ownership_is_by_mark_range() -> None:
    from director.core.model import Family

    assert OWN.owns(ServiceKey.mark(Family.INET, 150))
    assert not OWN.owns(ServiceKey.mark(Family.INET, 200))


def test_cache_tracks_the_kernel_without_reading_it() -> None:
    fake = FakeIpvs()
    cache: dict[ServiceKey, VirtualService] = {}
    ops = [*plan_service(WEB, vs(WEB, A, B), None), Op(OpKind.ADD_DEST, WEB, dest=A)]
    result = fake.apply(ops)
    assert [e.errno for e in result.errors] == ["EEXIST"]
    apply_ops_to_table(cache, ops, set(result.failed))
    assert cache == fake.read().services


def test_reconciler_second_sync_writes_nothing() -> None:
    fake = FakeIpvs()
    reconciler = Reconciler(fake, OWN)
    desired = {WEB: vs(WEB, A, B)}
    assert reconciler.full_sync(desired).result.applied == 3
    calls = fake.calls
    report = reconciler.full_sync(desired)
    assert report.plan.empty
    assert fake.calls == calls  # no apply at all


def test_a_resync_that_finds_no_drift_keeps_one_copy_of_the_table() -> None:
    """The read-back of a resync is kept only where the kernel differs from the cache: a
    10,000-service director no longer holds a second copy of its table after a minute."""
    fake = FakeIpvs()
    reconciler = Reconciler(fake, OWN)
    other = ServiceKey.inet(Protocol.TCP, "198.51.100.11", 80)
    desired = {WEB: vs(WEB, A, B, C), other: vs(other, A, B, scheduler="sh")}
    reconciler.full_sync(desired)
    before = dict(reconciler.actual)
    assert reconciler.full_sync(desired).plan.empty
    assert all(reconciler.actual[key] is before[key] for key in desired)
    assert {id(key) for key in reconciler.actual} == {id(key) for key in before}, "keys too"
    # Drift: another tool changes a weight. The kernel's version is read, and repaired.
    fake.apply([Op(OpKind.SET_DEST, WEB, dest=RealServer(B.address, B.port, weight=5))])
    report = reconciler.full_sync(desired)
    assert kinds(report.plan.ops) == ["set-dest"]
    assert reconciler.actual[WEB] == desired[WEB] == fake.read().services[WEB]
    assert reconciler.actual[other] is before[other]
    # Equal as a mapping but in another order than the kernel's list: the kernel's order is
    # what a hashing scheduler works from, so the read is kept.
    kernel_order = list(fake.read().services[other].real_servers)
    stale = VirtualService(
        other, before[other].config, dict(reversed(list(before[other].real_servers.items())))
    )
    reconciler.actual[other] = stale
    reconciler.observe()
    assert reconciler.actual[other] is not stale
    assert list(reconciler.actual[other].real_servers) == kernel_order


def test_reconciler_one_real_server_change_is_one_operation() -> None:
    fake = FakeIpvs()
    reconciler = Reconciler(fake, OWN)
    table = {
        ServiceKey.inet(Protocol.TCP, "198.51.100.1", port): vs(
            ServiceKey.inet(Protocol.TCP, "198.51.100.1", port), A, B
        )
        for port in range(1, 500)
    }
    reconciler.full_sync(table)
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 77)
    report = reconciler.sync_service(key, vs(key, A, RealServer(B.address, B.port, weight=9)))
    assert kinds(report.plan.ops) == ["set-dest"]
    assert fake.read().services[key].real_servers[B.key].weight == 9


def test_dry_run_changes_nothing() -> None:
    fake = FakeIpvs()
    report = Reconciler(fake, OWN, dry_run=True).full_sync({WEB: vs(WEB, A)})
    assert len(report.plan.ops) == 2
    assert fake.read().services == {}


def _hashing(scheduler: str, *addresses: str) -> VirtualService:
    return VirtualService.build(
        WEB, ServiceConfig(scheduler), [RealServer(a, 8080) for a in addresses]
    )


def test_a_hashing_service_ends_in_the_same_order_whatever_the_history() -> None:
    """sh, dh and mh choose from a table built in the order of the kernel's list, so
    directors that saw the same real servers come in different orders must end with one
    order. The real servers already in place at the list's tail stay."""
    every = [f"10.1.0.{n}" for n in (1, 2, 3, 10, 20)]
    histories = [every, list(reversed(every)), [every[3], every[0], every[4], every[1], every[2]]]
    finals = []
    for history in histories:
        ipvs = FakeIpvs()
        reconciler = Reconciler(ipvs, OWN)
        for count in range(1, len(history) + 1):  # one real server at a time, as scale-ups
            reconciler.full_sync({WEB: _hashing("mh", *history[:count])})
        finals.append(list(ipvs.read().services[WEB].real_servers))
    assert finals == [sorted((a, 8080) for a in every)] * 3  # by address text: .1 .10 .2
    settled = _hashing("mh", *reversed(every))  # the desired table's order does not matter
    assert reconciler.full_sync({WEB: settled}).plan.empty
    assert reconciler.full_sync({WEB: settled}, reread=False).plan.empty  # nor the cache's
    assert reconciler.sync_service(WEB, settled).plan.empty


def test_putting_a_hashing_service_in_order_moves_only_what_it_must() -> None:
    # the kernel holds 10.1.0.2 then 10.1.0.3 (head first): a new 10.1.0.1 goes to the head
    actual = _hashing("sh", "10.1.0.3")
    actual = VirtualService(
        WEB,
        actual.config,
        {("10.1.0.2", 8080): RealServer("10.1.0.2", 8080), **actual.real_servers},
    )
    ops = plan_service(WEB, _hashing("sh", "10.1.0.1", "10.1.0.2", "10.1.0.3"), actual)
    assert [op.describe() for op in ops] == [
        f"+ real server 10.1.0.1:8080 weight=1 forwarding=nat in {WEB}"
    ]
    # a new 10.1.0.4 belongs at the tail: everything before it is added again after it
    ops = plan_service(WEB, _hashing("sh", "10.1.0.2", "10.1.0.3", "10.1.0.4"), actual)
    assert [op.describe().split(" weight")[0] for op in ops] == [
        f"- real server 10.1.0.2:8080 in {WEB}",
        f"- real server 10.1.0.3:8080 in {WEB}",
        "+ real server 10.1.0.4:8080",
        "+ real server 10.1.0.3:8080",
        "+ real server 10.1.0.2:8080",
    ]
    # other schedulers: order is not the kernel's business, nothing moves
    wlc = VirtualService(WEB, ServiceConfig("wlc"), actual.real_servers)
    assert plan_service(WEB, _hashing("wlc", "10.1.0.3", "10.1.0.2"), wlc) == []


def test_an_mh_real_server_added_quiesced_takes_its_place_in_the_table_first() -> None:
    """mh keeps a quiesced real server's place in its table (the kernel keeps its last
    weight above 0): one added at weight 0 is added at its peers' weight, then set to 0, so
    its table is the one of a director that saw it live."""
    down = RealServer("10.1.0.2", 8080, weight=0)
    desired = VirtualService.build(
        WEB, ServiceConfig("mh"), [RealServer("10.1.0.1", 8080, 3), down]
    )
    ops = plan_service(WEB, desired, None)
    assert [op.describe().split(" forwarding")[0] for op in ops] == [
        f"+ service {WEB} scheduler=mh",
        "+ real server 10.1.0.2:8080 weight=3",
        "~ real server 10.1.0.2:8080 weight=0",
        "+ real server 10.1.0.1:8080 weight=3",
    ]
    fake = FakeIpvs()
    Reconciler(fake, OWN).full_sync({WEB: desired})
    assert fake.read().services[WEB] == desired  # and it ends quiesced
    # sh builds its table from the weights as they are: nothing to keep
    sh = VirtualService(WEB, ServiceConfig("sh"), desired.real_servers)
    assert [op.kind for op in plan_service(WEB, sh, None)][1:] == [OpKind.ADD_DEST] * 2


def test_a_full_sync_logs_a_summary_and_a_single_change_logs_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A big first sync is one INFO line with counts per operation (each operation at
    DEBUG), not tens of thousands; an incremental change is still one line per operation."""
    reconciler = Reconciler(FakeIpvs(), OWN)
    other = ServiceKey.inet(Protocol.TCP, "198.51.100.11", 80)
    desired = {key: vs(key, A, B) for key in (WEB, other)}
    caplog.set_level("INFO", logger="director")
    reconciler.full_sync(desired)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["event=ipvs.applied ops=6 failed=0 sends=0 add_dest=4 add_service=2"]
    caplog.clear()
    reconciler.sync_service(WEB, vs(WEB, A, B, C))
    assert [r.getMessage() for r in caplog.records] == [
        f'event=ipvs.change op="+ real server 192.0.2.13:8080 weight=1 forwarding=nat in {WEB}"'
        " origin=static/web",
        "event=ipvs.applied ops=1 failed=0 sends=0",
    ]


def test_the_daemons_full_sync_sends_bounded_chunks_and_ends_where_one_plan_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full sync that keeps no plan (the daemon's: a first sync of 10,000 Services is
    110,000 operations) sends them a few services at a time, never all held at once, and
    leaves the kernel, the cache and the report as the one-plan sync would: removals,
    changes and refusals alike, and an operation the kernel refuses counted, its service
    left as the kernel has it."""
    monkeypatch.setattr("director.engine.reconcile.CHUNK_OPS", 5)
    keys = [ServiceKey.inet(Protocol.TCP, f"198.51.100.{i}", 80) for i in range(20, 32)]
    old = ServiceKey.inet(Protocol.TCP, "198.51.100.99", 80)  # owned, no longer desired
    desired = {key: vs(key, A, B, C) for key in keys}
    desired[keys[3]] = vs(keys[3], A, scheduler="no-such")  # the kernel refuses it
    desired[FOREIGN] = vs(FOREIGN, A)  # not owned: refused, left alone

    def kernel() -> FakeIpvs:
        fake = FakeIpvs(schedulers=("rr", "wlc"))
        fake.apply(
            [
                Op(OpKind.ADD_SERVICE, old, config=ServiceConfig("rr")),
                Op(OpKind.ADD_SERVICE, keys[0], config=ServiceConfig("rr")),
                Op(OpKind.ADD_DEST, keys[0], dest=A),
            ]
        )
        return fake

    whole, chunked = kernel(), kernel()
    sent: list[int] = []
    apply = chunked.apply
    chunked.apply = lambda ops: (sent.append(len(ops)), apply(ops))[1]  # type: ignore[method-assign]
    one = Reconciler(whole, OWN).full_sync(desired)
    reconciler = Reconciler(chunked, OWN)
    report = reconciler.full_sync(desired, keep_plan=False)
    assert len(sent) > 3 and max(sent) <= 5 + 4  # a chunk ends at a whole service
    assert sum(sent) == report.result.requested == len(one.plan.ops) == 45
    assert report.plan.ops == () and report.plan.refused == one.plan.refused
    assert report.result.applied == one.result.applied
    assert [e.describe() for e in report.result.errors] == [e.describe() for e in one.result.errors]
    assert chunked.read().services == whole.read().services
    assert old not in chunked.read().services and keys[3] not in chunked.read().services
    assert reconciler.actual == chunked.read().services  # the cache follows the kernel
    assert reconciler.full_sync(desired, keep_plan=False).result.requested == 2  # retried


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["192.0.2.1", "192.0.2.10", "192.0.2.9", "2001:db8::1", "10.0.0.2"]),
            st.integers(0, 3),
            st.integers(0, 3),
        ),
        max_size=12,
    ),
    st.sampled_from(["rr", "wlc", "sh", "mh"]),
)
def test_a_new_service_gets_the_real_servers_an_empty_one_would_in_the_same_order(
    servers: list[tuple[str, int, int]], scheduler: str
) -> None:
    """A first sync's path for a service the kernel lacks (its real servers added without a
    lookup each) sends what the general path sends to a service the kernel holds empty:
    the same adds, in the same order, so the kernel's list ends the same."""
    dests = [RealServer(address, 8080 + port, weight) for address, port, weight in servers]
    desired = vs(WEB, *dests, scheduler=scheduler)
    empty = VirtualService(WEB, desired.config, {}, desired.origin)
    new = plan_service(WEB, desired, None)
    assert new[0] == Op(OpKind.ADD_SERVICE, WEB, config=desired.config, origin="static/web")
    assert new[1:] == plan_service(WEB, desired, empty)
    table: dict[ServiceKey, VirtualService] = {}
    apply_ops_to_table(table, new)
    assert table[WEB] == desired
    assert list(table[WEB].real_servers) == sorted(desired.real_servers)
