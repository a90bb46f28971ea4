"""One suite, two subjects: the stateful fake (host) and the real kernel (lab VM).

Whatever the fake answers, the kernel must answer too; that is what lets the rest of the
suite trust the fake."""

from __future__ import annotations

from pathlib import Path

import pytest

from director.core.model import (
    KNOWN_SCHEDULERS,
    Family,
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.services import Op, OpKind, VirtualService
from director.dataplane.interface import Ipvs

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
DNS6 = ServiceKey.inet(Protocol.UDP, "2001:db8:100::53", 53)
SCTP = ServiceKey.inet(Protocol.SCTP, "198.51.100.11", 3868)
MARK4 = ServiceKey.mark(Family.INET, 7)
MARK6 = ServiceKey.mark(Family.INET6, 8)
RR = ServiceConfig("rr", netmask=32)
RR6 = ServiceConfig("rr", netmask=128)
A = RealServer("192.0.2.11", 8080)
B = RealServer("192.0.2.12", 8080, weight=3)


def add(key: ServiceKey, config: ServiceConfig = RR) -> Op:
    return Op(OpKind.ADD_SERVICE, key, config=config)


def dest(kind: OpKind, key: ServiceKey, rs: RealServer) -> Op:
    return Op(kind, key, dest=rs)


def errnos(ipvs: Ipvs, *ops: Op) -> list[str]:
    return [e.errno for e in ipvs.apply(ops).errors]


@pytest.mark.parametrize(
    ("key", "config"),
    [(WEB, RR), (DNS6, RR6), (SCTP, RR), (MARK4, RR), (MARK6, RR6)],
    ids=["tcp4", "udp6", "sctp4", "fwmark4", "fwmark6"],
)
def test_added_service_reads_back_identical(
    ipvs: Ipvs, key: ServiceKey, config: ServiceConfig
) -> None:
    assert ipvs.apply([add(key, config)]).ok
    table = ipvs.read().services
    assert list(table) == [key]
    assert table[key].config == config
    assert ipvs.read_service(key) == table[key]


def test_adding_a_service_twice_is_refused_with_eexist(ipvs: Ipvs) -> None:
    assert errnos(ipvs, add(WEB), add(WEB)) == ["EEXIST"]


def test_real_server_on_missing_service_is_refused_with_esrch(ipvs: Ipvs) -> None:
    assert errnos(ipvs, dest(OpKind.ADD_DEST, WEB, A)) == ["ESRCH"]
    assert ipvs.read().services == {}


def test_missing_service_cannot_be_changed_or_deleted(ipvs: Ipvs) -> None:
    assert errnos(ipvs, Op(OpKind.SET_SERVICE, WEB, config=RR), Op(OpKind.DEL_SERVICE, WEB)) == [
        "ESRCH",
        "ESRCH",
    ]


def test_real_server_rules(ipvs: Ipvs) -> None:
    assert errnos(
        ipvs,
        add(WEB),
        dest(OpKind.ADD_DEST, WEB, A),
        dest(OpKind.ADD_DEST, WEB, A),  # duplicate
        dest(OpKind.SET_DEST, WEB, B),  # not there
        dest(OpKind.DEL_DEST, WEB, B),  # not there
        dest(OpKind.ADD_DEST, WEB, RealServer("192.0.2.13", 80, 1, Forwarding.NAT, 10, 20)),
    ) == ["EEXIST", "ENOENT", "ENOENT", "ERANGE"]
    assert list(ipvs.read().services[WEB].real_servers) == [A.key]


def test_mixed_address_families_only_with_tunnelling(ipvs: Ipvs) -> None:
    v4_in_v6_nat = RealServer("192.0.2.11", 53, forwarding=Forwarding.NAT)
    v4_in_v6_tun = RealServer("192.0.2.12", 53, forwarding=Forwarding.TUN)
    assert errnos(
        ipvs,
        add(DNS6, RR6),
        dest(OpKind.ADD_DEST, DNS6, v4_in_v6_nat),
        dest(OpKind.ADD_DEST, DNS6, v4_in_v6_tun),
    ) == ["EINVAL"]
    assert ipvs.read().services[DNS6].real_servers == {v4_in_v6_tun.key: v4_in_v6_tun}


def test_full_nat_never_reaches_ipvs_as_a_forwarding_method(ipvs: Ipvs) -> None:
    """fullnat is the director's (NAT plus its SNAT rule): a real server carrying it is
    refused before sending, alone, on both subjects."""
    full = RealServer("192.0.2.14", 80, forwarding=Forwarding.FULLNAT)
    result = ipvs.apply(
        [add(WEB, RR), dest(OpKind.ADD_DEST, WEB, full), dest(OpKind.ADD_DEST, WEB, A)]
    )
    assert [e.errno for e in result.errors] == ["EINVAL"]
    assert "fullnat is the director's mode" in result.errors[0].message
    assert list(ipvs.read().services[WEB].real_servers) == [A.key]


def test_changes_in_place_keep_the_other_real_servers(ipvs: Ipvs) -> None:
    assert ipvs.apply([add(WEB), dest(OpKind.ADD_DEST, WEB, A), dest(OpKind.ADD_DEST, WEB, B)]).ok
    sh = ServiceConfig("sh", frozenset({"sh-port", "sh-fallback"}), persistence=300, netmask=24)
    heavier = RealServer(A.address, A.port, 7, Forwarding.DR, 100, 50)
    assert ipvs.apply(
        [Op(OpKind.SET_SERVICE, WEB, config=sh), dest(OpKind.SET_DEST, WEB, heavier)]
    ).ok
    vs = ipvs.read().services[WEB]
    assert vs.config == sh
    assert vs.real_servers == {A.key: heavier, B.key: B}


def test_ipv6_persistence_netmask_is_a_prefix_length(ipvs: Ipvs) -> None:
    config = ServiceConfig("wlc", persistence=60, netmask=64)
    assert ipvs.apply([add(DNS6, config)]).ok
    assert ipvs.read().services[DNS6].config == config


def test_deleting_a_service_deletes_its_real_servers(ipvs: Ipvs) -> None:
    assert ipvs.apply(
        [add(WEB), dest(OpKind.ADD_DEST, WEB, A), Op(OpKind.DEL_SERVICE, WEB), add(WEB)]
    ).ok
    assert ipvs.read().services[WEB].real_servers == {}


def test_every_offered_scheduler_can_be_used(ipvs: Ipvs) -> None:
    offered = sorted(ipvs.schedulers())
    assert {"rr", "wrr", "lc", "wlc", "sh", "sed", "nq", "mh"} <= set(offered)
    keys = [ServiceKey.inet(Protocol.TCP, "198.51.100.10", 1000 + i) for i in range(len(offered))]
    result = ipvs.apply([add(k, ServiceConfig(s)) for k, s in zip(keys, offered, strict=True)])
    assert result.ok, [e.describe() for e in result.errors]
    table = ipvs.read().services
    assert [table[k].config.scheduler for k in keys] == offered


def test_a_scheduler_the_kernel_lacks_is_refused_by_name(ipvs: Ipvs) -> None:
    missing = next(s for s in ("twos", "nosuch") if s not in ipvs.schedulers())
    result = ipvs.apply([add(WEB, ServiceConfig(missing)), dest(OpKind.ADD_DEST, WEB, A)])
    assert [e.errno for e in result.errors] == ["ENOENT", "ESRCH"]
    assert f"scheduler {missing!r} is not available" in result.errors[0].message
    assert ipvs.read().services == {}


def test_a_large_batch_applies_and_attributes_each_failure(ipvs: Ipvs) -> None:
    ops: list[Op] = []
    keys = [
        ServiceKey.inet(Protocol.TCP, f"198.51.100.{1 + i // 200}", 1 + i % 200) for i in range(600)
    ]
    for key in keys:
        ops.append(add(key))
        ops.extend(dest(OpKind.ADD_DEST, key, RealServer(f"192.0.2.{d + 1}", 80)) for d in range(5))
    ops.insert(1000, add(keys[0]))  # one duplicate, deep inside a batch
    result = ipvs.apply(ops)
    assert [(e.op, e.errno) for e in result.errors] == [(ops[1000], "EEXIST")]
    assert result.applied == len(ops) - 1
    if result.sends:  # the kernel adapter batches: 3,601 requests in a handful of sends
        assert result.sends <= 10
    table = ipvs.read().services
    assert len(table) == 600
    assert sum(len(vs.real_servers) for vs in table.values()) == 3000


def test_a_service_with_thousands_of_real_servers_reads_back_whole(ipvs: Ipvs) -> None:
    """Its real servers arrive over many datagrams (the kernel's are at most 32 KiB)."""
    servers = [RealServer(f"198.18.{i // 250}.{1 + i % 250}", 8080) for i in range(3000)]
    assert ipvs.apply([add(WEB), *(dest(OpKind.ADD_DEST, WEB, rs) for rs in servers)]).ok
    for table in (ipvs.read(), ipvs.read(stats=True)):
        assert dict(table.services[WEB].real_servers) == {rs.key: rs for rs in servers}
    assert len(ipvs.read(stats=True).dest_state) == 3000
    counters = ipvs.read_counters()
    assert [counters.dest_key(d) for d in counters.dests(0)] == list(
        ipvs.read().services[WEB].real_servers
    )
    vs = ipvs.read_service(WEB)
    assert vs is not None and len(vs.real_servers) == 3000
    assert len(ipvs.read_dest_states(WEB)) == 3000


@pytest.mark.kernel
def test_an_ipvs_socket_costs_the_process_little_memory(netns: str) -> None:
    """The director holds two (the loop's, and the API's and metrics' reader); each once
    cost 8 MiB of resident receive buffer."""
    from director.dataplane.kernel import KernelIpvs

    def resident_kib() -> int:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0])

    first = KernelIpvs(netns=netns)  # what the first one imports and starts is not the figure
    before = resident_kib()
    more = [KernelIpvs(netns=netns) for _ in range(4)]
    try:
        grown = resident_kib() - before
        assert grown < 2048, f"four IPVS sockets took {grown} KiB"
        assert all(ipvs.read().services == {} for ipvs in (first, *more))
    finally:
        for ipvs in (first, *more):
            ipvs.close()


@pytest.mark.kernel
def test_resyncs_and_counter_reads_see_the_whole_table_every_time(netns: str) -> None:
    """Every read is whole and fresh: a periodic resync of an unchanged table finds nothing
    to do, each scrape's counter read and each read as objects holds every real server,
    read after read. What the reads leave behind in the process is a figure of `make
    bench` (``read_growth_kib``), not a bound here: it depends on the machine's allocator
    (a 3 MiB bound measured +4.6 MiB on a slow 2-core machine)."""
    import ipaddress

    from director.core.ownership import Ownership
    from director.dataplane.kernel import KernelIpvs
    from director.engine.reconcile import Reconciler
    from lab.reads import read_growth

    desired = {}
    for i in range(2000):
        key = ServiceKey.inet(Protocol.TCP, f"198.18.{i // 250}.{1 + i % 250}", 80)
        servers = [
            RealServer(f"198.19.{j // 250}.{1 + j % 250}", 8080)
            for j in range(i * 10 % 60000, i * 10 % 60000 + 10)
        ]
        desired[key] = VirtualService.build(key, RR, servers, origin=f"default/s{i}:http")
    ipvs = KernelIpvs(netns=netns)
    try:
        reconciler = Reconciler(ipvs, Ownership((ipaddress.ip_network("198.18.0.0/16"),), ()))
        assert reconciler.full_sync(desired, reread=False).result.ok
        for _ in range(2):
            counters = ipvs.read_counters()  # a scrape's read
            assert sum(len(counters.dests(i)) for i in range(len(counters))) == 20_000
            del counters
        growth = read_growth(reconciler, ipvs, desired)  # resyncs and reads, asserted whole
    finally:
        ipvs.close()
    print(f"2,000 services x 10: what reads left behind (KiB, a figure): {growth}")


def test_read_with_stats_reports_each_real_server(ipvs: Ipvs) -> None:
    assert ipvs.apply([add(WEB), dest(OpKind.ADD_DEST, WEB, A)]).ok
    table = ipvs.read(stats=True)
    assert table.dest_state[(WEB, A.key)].active_connections == 0
    assert WEB in table.service_stats


def test_counters_read_in_columns_agree_with_the_table_read(ipvs: Ipvs) -> None:
    """What a scrape formats: every service and real server the table holds, in the same
    order, with the same weights and connection counts; IPv6, firewall marks and a
    tunnelled real server of the other family included."""
    tunnel = RealServer("2001:db8::9", 0, 2, Forwarding.TUN)
    assert ipvs.apply(
        [
            add(WEB),
            dest(OpKind.ADD_DEST, WEB, A),
            dest(OpKind.ADD_DEST, WEB, B),
            add(DNS6, RR6),
            dest(OpKind.ADD_DEST, DNS6, RealServer("2001:db8::53", 53, 0)),
            add(MARK4),
            dest(OpKind.ADD_DEST, MARK4, tunnel),
            add(SCTP),
        ]
    ).ok
    table = ipvs.read(stats=True)
    counters = ipvs.read_counters()
    assert counters.services == list(table.services)
    columns = counters.table()
    for key, vs in table.services.items():
        service, dests = columns[key]
        assert service == {
            name: getattr(table.service_stats[key], name)
            for name in ("connections", "packets_in", "packets_out", "bytes_in", "bytes_out")
        }
        assert list(dests) == list(vs.real_servers)
        for dkey, rs in vs.real_servers.items():
            state = table.dest_state[(key, dkey)]
            figures = dests[dkey]
            assert (figures["weight"], figures["active"], figures["inactive"]) == (
                rs.weight,
                state.active_connections,
                state.inactive_connections,
            )
            assert figures["family"] == Family.of(rs.address)
    assert list(columns[SCTP][1]) == []


def test_every_known_scheduler_is_known_to_the_model() -> None:
    assert {
        "rr",
        "wrr",
        "lc",
        "wlc",
        "lblc",
        "lblcr",
        "dh",
        "sh",
        "sed",
        "nq",
        "mh",
        "fo",
        "ovf",
    } <= set(KNOWN_SCHEDULERS)


@pytest.mark.parametrize(
    ("scheduler", "sent", "read_back"),
    [
        ("sh", {"flag-1", "flag-2"}, {"sh-fallback", "sh-port"}),
        ("mh", {"flag-1"}, {"mh-fallback"}),
        ("mh", {"mh-port", "flag-2"}, {"mh-port"}),
        ("rr", {"flag-1", "flag-3"}, {"flag-1", "flag-3"}),
        ("sh", {"flag-3"}, {"flag-3"}),
    ],
)
def test_flags_read_back_by_the_kernels_names(
    ipvs: Ipvs, scheduler: str, sent: set[str], read_back: set[str]
) -> None:
    """The kernel keeps bits, not names: what is read back is named by the scheduler. The
    fake must answer the same, or the director would resend the flags forever."""
    config = ServiceConfig(scheduler, frozenset(sent))
    assert ipvs.apply([add(WEB, config)]).ok
    assert ipvs.read().services[WEB].config.flags == read_back
    assert ipvs.apply([Op(OpKind.SET_SERVICE, WEB, config=config)]).ok
    assert ipvs.read_service(WEB).config.flags == read_back  # type: ignore[union-attr]


def test_flags_with_no_bit_are_refused_before_sending(ipvs: Ipvs) -> None:
    result = ipvs.apply(
        [add(WEB, ServiceConfig("rr", frozenset({"sh-port"}))), dest(OpKind.ADD_DEST, WEB, A)]
    )
    assert [e.errno for e in result.errors] == ["EINVAL", "ESRCH"]
    assert "'sh-port' is not valid with scheduler 'rr'" in result.errors[0].message
    assert ipvs.read().services == {}


def test_the_list_holds_real_servers_newest_first_and_a_change_keeps_the_place(ipvs: Ipvs) -> None:
    """The kernel adds a real server at the head of the service's list and reads the list
    back in order; a change in place keeps the position, a delete and add moves it to the
    head. The hashing schedulers (sh, dh, mh) build their tables in this order."""
    c = RealServer("192.0.2.13", 8080)
    mh = ServiceConfig("mh", frozenset({"mh-port"}))
    assert ipvs.apply([add(WEB, mh), *(dest(OpKind.ADD_DEST, WEB, rs) for rs in (A, B, c))]).ok
    assert list(ipvs.read().services[WEB].real_servers) == [c.key, B.key, A.key]
    assert ipvs.apply([dest(OpKind.SET_DEST, WEB, B._replace(weight=0))]).ok
    assert list(ipvs.read().services[WEB].real_servers) == [c.key, B.key, A.key]
    assert ipvs.apply([dest(OpKind.DEL_DEST, WEB, A), dest(OpKind.ADD_DEST, WEB, A)]).ok
    assert list(ipvs.read().services[WEB].real_servers) == [A.key, c.key, B.key]
    assert list(ipvs.read_service(WEB).real_servers) == [A.key, c.key, B.key]  # type: ignore[union-attr]


def test_a_read_given_the_callers_table_returns_its_objects_where_nothing_changed(
    ipvs: Ipvs,
) -> None:
    """A resync reads with its cache as ``known``: a service the kernel holds just as the
    cache has it comes back as the cache's own object (nothing read lives on); one changed
    behind the director's back (a weight, the real servers' order the hashing schedulers
    follow, a service added or deleted) comes back as the kernel holds it."""
    a6 = RealServer("2001:db8:200::11", 53)
    assert ipvs.apply(
        [
            add(WEB),
            dest(OpKind.ADD_DEST, WEB, A),
            dest(OpKind.ADD_DEST, WEB, B),
            add(DNS6, RR6),
            dest(OpKind.ADD_DEST, DNS6, a6),
            add(MARK4),
        ]
    ).ok
    known = ipvs.read().services
    again = ipvs.read(known=known).services
    assert again == known
    assert all(again[key] is known[key] for key in known), "every service is the caller's"

    reordered = VirtualService(WEB, RR, [A, B])  # the same real servers, the other order
    assert list(known[WEB].real_servers) == [B.key, A.key] and reordered == known[WEB]
    assert ipvs.read(known={**known, WEB: reordered}).services[WEB] is not reordered

    assert ipvs.apply(
        [dest(OpKind.SET_DEST, WEB, B._replace(weight=9)), Op(OpKind.DEL_SERVICE, MARK4), add(SCTP)]
    ).ok
    after = ipvs.read(known=known).services
    assert set(after) == {WEB, DNS6, SCTP}
    assert after[DNS6] is known[DNS6]
    assert after[WEB] is not known[WEB] and after[WEB].real_servers[B.key].weight == 9
    assert after == ipvs.read().services


@pytest.mark.kernel
def test_a_real_server_changed_with_ipvsadm_after_marked_reads_is_seen_and_repaired(
    netns: str,
) -> None:
    """A resync takes a service's real servers as read before when the kernel's reply
    carries the same mark (``director.dataplane.replies``). A weight and an upper threshold
    changed behind the director's back with ``ipvsadm``, after two resyncs that marked every
    reply, are read back as the kernel now holds them, and the next resync puts them back."""
    import ipaddress
    import subprocess

    from director.core.ownership import Ownership
    from director.dataplane.kernel import KernelIpvs
    from director.engine.reconcile import Reconciler

    desired = {WEB: VirtualService(WEB, RR, {rs.key: rs for rs in (A, B)})}
    ipvs = KernelIpvs(netns=netns)
    try:
        reconciler = Reconciler(ipvs, Ownership((ipaddress.ip_network("198.51.100.0/24"),), ()))
        assert reconciler.full_sync(desired, reread=False).result.ok
        for _ in range(2):  # the first read marks each reply, the second takes them as read
            assert reconciler.full_sync(desired).result.requested == 0
        edit = ["ipvsadm", "-e", "-t", "198.51.100.10:80", "-r", "192.0.2.11:8080", "-m"]
        subprocess.run(["ip", "netns", "exec", netns, *edit, "-w", "7", "-x", "50"], check=True)
        seen = ipvs.read(known=reconciler.actual).services[WEB].real_servers[A.key]
        assert (seen.weight, seen.upper_threshold) == (7, 50)
        repaired = reconciler.full_sync(desired)
        assert repaired.result.ok and repaired.result.requested == 1
        assert ipvs.read().services[WEB].real_servers[A.key] == A
    finally:
        ipvs.close()


def _elsewhere(ipvs: Ipvs) -> Ipvs:
    """Another process's handle on the same table (``ipvsadm``'s, say): its changes reach
    the subject only through what the subject reads."""
    from director.dataplane.fake import FakeIpvs
    from director.dataplane.kernel import KernelIpvs

    if isinstance(ipvs, FakeIpvs):
        return ipvs.elsewhere()
    assert isinstance(ipvs, KernelIpvs)
    return KernelIpvs(netns=ipvs.netns)


def test_a_big_tables_changes_made_elsewhere_are_read_back_at_once_or_within_the_parts(
    ipvs: Ipvs,
) -> None:
    """Past ``SHARE`` services a resync skips the real servers of a service the kernel's
    text shows unchanged (``director.dataplane.proctext``), but for a share read in full
    each time. So, after two reads: a weight changed elsewhere (the text shows it) is read
    back by the next read; a threshold changed elsewhere (no text shows it) by one of the
    next ``parts`` reads; a threshold the subject's own user sets, by the next read."""
    from director.dataplane.proctext import SHARE

    count = SHARE + 200
    keys = [
        ServiceKey.inet(Protocol.TCP, f"198.18.{i // 250}.{i % 250 + 1}", 80) for i in range(count)
    ]
    six = RealServer("2001:db8::11", 53)
    ops = []
    for key in keys:
        ops += [add(key), dest(OpKind.ADD_DEST, key, A)]
    for key in (SCTP, MARK4):  # every kind of line the text begins a service with
        ops += [add(key), dest(OpKind.ADD_DEST, key, A)]
    ops += [add(DNS6, RR6), dest(OpKind.ADD_DEST, DNS6, six)]
    assert ipvs.apply(ops).ok
    for _ in range(2):  # the baseline: the first reads all (and the text), the second a share
        assert len(ipvs.read().services) == count + 3
    other = _elsewhere(ipvs)
    try:
        weighted, limited = keys[5], keys[9]
        assert other.apply(
            [
                dest(OpKind.SET_DEST, weighted, A._replace(weight=7)),
                dest(OpKind.SET_DEST, limited, A._replace(upper_threshold=50)),
                *(dest(OpKind.SET_DEST, key, A._replace(weight=4)) for key in (SCTP, MARK4)),
                dest(OpKind.SET_DEST, DNS6, six._replace(weight=4)),
            ]
        ).ok
    finally:
        if other is not ipvs:
            other.close()
    reads = [ipvs.read().services for _ in range(-(-count // SHARE))]
    assert reads[0][weighted].real_servers[A.key].weight == 7
    assert reads[0][SCTP].real_servers[A.key].weight == 4, "an SCTP service's text read too"
    assert reads[0][MARK4].real_servers[A.key].weight == 4
    assert reads[0][DNS6].real_servers[six.key].weight == 4
    assert any(r[limited].real_servers[A.key].upper_threshold == 50 for r in reads)
    assert reads[-1][limited].real_servers[A.key].upper_threshold == 50
    own = keys[11]
    assert ipvs.apply([dest(OpKind.SET_DEST, own, A._replace(upper_threshold=60))]).ok
    assert ipvs.read().services[own].real_servers[A.key].upper_threshold == 60


def test_a_director_started_on_a_big_table_reads_only_a_share_at_its_second_read(
    ipvs: Ipvs,
) -> None:
    """A restart (or a replay by another process) finds a big table it did not write: its
    first read reads every service through netlink, and the kernel's text with it, so the
    second read takes what the text shows unchanged as the first read had it; ``reads``
    counts both."""
    from director.dataplane.proctext import SHARE

    count = SHARE * 2 + 500
    ops = []
    for i in range(count):
        key = ServiceKey.inet(Protocol.TCP, f"198.18.{i // 250}.{i % 250 + 1}", 80)
        ops += [add(key), dest(OpKind.ADD_DEST, key, A)]
    assert ipvs.apply(ops).ok
    restarted = _elsewhere(ipvs)  # the new process's handle: it wrote none of it
    try:
        assert len(restarted.read().services) == count
        first = (restarted.reads.netlink, restarted.reads.text)
        second = restarted.read().services
        assert second[ServiceKey.inet(Protocol.TCP, "198.18.0.1", 80)].real_servers == {A.key: A}
        counts = restarted.reads
    finally:
        if restarted is not ipvs:
            restarted.close()
    assert first == (count, 0), "nothing read before: every service through netlink"
    assert counts.parts == 3 and counts.netlink + counts.text == 2 * count
    assert count / 2 < counts.text < count, "about two thirds vouched for by the text"


@pytest.mark.kernel
def test_the_fake_prints_the_table_as_the_kernel_does(netns: str) -> None:
    """The kernel's text of the table (``/proc/net/ip_vs``) decides what a resync skips.
    The fake's must show exactly what the kernel's shows (and hide what it hides), or the
    fake would see changes the kernel's text never shows: service by service, byte for
    byte, across families, firewall marks, persistence, flags and methods."""
    import re
    import subprocess

    from director.dataplane.fake import FakeIpvs
    from director.dataplane.kernel import KernelIpvs
    from director.dataplane.proctext import body_of, render

    tunnel6 = RealServer("2001:db8::20", 0, 2, Forwarding.TUN)
    dns4 = ServiceKey.inet(Protocol.UDP, "198.51.100.12", 53)
    ops = [
        add(WEB, ServiceConfig("wlc", netmask=32)),
        dest(OpKind.ADD_DEST, WEB, A),
        dest(OpKind.ADD_DEST, WEB, B._replace(forwarding=Forwarding.DR, weight=65535)),
        dest(OpKind.ADD_DEST, WEB, tunnel6._replace(port=8080)),
        add(DNS6, ServiceConfig("rr", persistence=300, netmask=64)),
        dest(OpKind.ADD_DEST, DNS6, RealServer("2001:db8::1", 53, 0)),
        add(dns4, ServiceConfig("wrr", frozenset({"onepacket"}))),
        dest(OpKind.ADD_DEST, dns4, RealServer("192.0.2.13", 53, 4, Forwarding.NAT, 10, 2)),
        add(SCTP, ServiceConfig("sh", frozenset({"sh-port"}), persistence=60, netmask=24)),
        add(MARK4, ServiceConfig("lc", persistence=3600, netmask=24)),
        dest(OpKind.ADD_DEST, MARK4, RealServer("192.0.2.20", 0, 1, Forwarding.TUN)),
        add(MARK6, RR6),
        dest(OpKind.ADD_DEST, MARK6, tunnel6),
    ]
    fake = FakeIpvs()
    kernel = KernelIpvs(netns=netns)
    try:
        assert fake.apply(ops).ok and kernel.apply(ops).ok
    finally:
        kernel.close()
    shown = subprocess.run(
        ["ip", "netns", "exec", netns, "cat", "/proc/net/ip_vs"], capture_output=True, check=True
    ).stdout

    def blocks(text: bytes) -> list[bytes]:
        return sorted(re.split(rb"\n(?=[^ ])", body_of(text).rstrip(b"\n")))

    assert blocks(render(fake.read().services.values())) == blocks(shown)
