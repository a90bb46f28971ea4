"""Real traffic through real IPVS in the lab VM: client namespace -> director namespace ->
backend namespaces, for nat, dr and tun, TCP and UDP, IPv4 and IPv6."""

from __future__ import annotations

import io
import ipaddress
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import redirect_stdout

import pytest

from director.cli import main as cli
from director.core.model import (
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.ownership import Ownership
from director.core.services import VirtualService
from director.dataplane.kernel import KernelIpvs
from director.dataplane.modules import resolve_family
from director.engine.reconcile import Reconciler
from lab.netns import (
    DR_PORT,
    NAT_PORT,
    UDP_NAT_PORT,
    UDP_PORT,
    Connection,
    Lab,
    ask_tcp,
    ask_udp,
    build_lab,
    start_servers,
)

pytestmark = pytest.mark.kernel

VIP = {
    (Forwarding.NAT, 4): "198.51.100.10",
    (Forwarding.NAT, 6): "2001:db8:100::10",
    (Forwarding.DR, 4): "198.51.100.20",
    (Forwarding.DR, 6): "2001:db8:100::20",
    (Forwarding.TUN, 4): "198.51.100.30",
    (Forwarding.TUN, 6): "2001:db8:100::30",
}
OWNED = Ownership(
    (ipaddress.ip_network("198.51.100.0/24"), ipaddress.ip_network("2001:db8:100::/64"))
)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = build_lab(
        prefix="tr",
        vips=[VIP[(Forwarding.NAT, 4)], VIP[(Forwarding.NAT, 6)]],
        dr_vips=[VIP[(Forwarding.DR, 4)], VIP[(Forwarding.DR, 6)]],
        tun_vips=[VIP[(Forwarding.TUN, 4)], VIP[(Forwarding.TUN, 6)]],
    )
    try:
        start_servers(lab)
        yield lab
    finally:
        lab.close()


@pytest.fixture
def ipvs(lab: Lab) -> Iterator[KernelIpvs]:
    kernel = KernelIpvs(netns=lab.lvs.name)
    try:
        yield kernel
    finally:
        # Remove what this test created, and only that.
        Reconciler(kernel, OWNED).full_sync({})
        kernel.close()


def service(
    lab: Lab, mode: Forwarding, family: int, proto: Protocol, scheduler: str = "rr"
) -> VirtualService:
    vip = VIP[(mode, family)]
    nat = mode is Forwarding.NAT
    port = {Protocol.TCP: DR_PORT, Protocol.UDP: UDP_PORT}[proto]
    backend_port = (NAT_PORT if proto is Protocol.TCP else UDP_NAT_PORT) if nat else port
    key = ServiceKey.inet(proto, vip, port)
    dests = [
        RealServer(be.ipv4 if family == 4 else be.ipv6, backend_port, 1, mode)
        for be in lab.backends
    ]
    return VirtualService.build(
        key, ServiceConfig(scheduler, netmask=32 if family == 4 else 128), dests, origin="test"
    )


@pytest.mark.parametrize("family", [4, 6], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("proto", [Protocol.TCP, Protocol.UDP], ids=["tcp", "udp"])
@pytest.mark.parametrize(
    "mode", [Forwarding.NAT, Forwarding.DR, Forwarding.TUN], ids=["nat", "dr", "tun"]
)
def test_client_reaches_every_backend_through_the_vip(
    lab: Lab, ipvs: KernelIpvs, mode: Forwarding, proto: Protocol, family: int
) -> None:
    vs = service(lab, mode, family, proto)
    report = Reconciler(ipvs, OWNED).full_sync({vs.key: vs})
    assert report.result.ok, [e.describe() for e in report.result.errors]
    ask = ask_tcp if proto is Protocol.TCP else ask_udp
    answers = Counter(ask(lab.client, vs.key.address, vs.key.port) for _ in range(6))
    # Round robin over three backends: each answered twice.
    assert answers == Counter({be.name: 2 for be in lab.backends})
    # The kernel folds per-CPU counters into what it reports every ~2 s (its estimator).
    deadline = time.monotonic() + 6
    while ipvs.read(stats=True).service_stats[vs.key].connections < 6:
        assert time.monotonic() < deadline, "IPVS never counted the 6 connections"
        time.sleep(0.25)
    state = ipvs.read(stats=True)
    assert state.service_stats[vs.key].connections == 6
    assert sum(state.dest_state[(vs.key, d)].stats.connections for d in vs.real_servers) == 6
    # A scrape reads the same counters in columns, laid out as the kernel wrote them.
    totals, dests = ipvs.read_counters().table()[vs.key]
    assert totals["connections"] == 6 and totals["bytes_in"] > 0
    assert {d: f["connections"] for d, f in dests.items()} == {d: 2 for d in vs.real_servers}
    assert all(f["bytes_in"] > 0 and f["packets_in"] > 0 for f in dests.values())


def test_scheduler_change_in_place_keeps_an_open_connection(lab: Lab, ipvs: KernelIpvs) -> None:
    vs = service(lab, Forwarding.NAT, 4, Protocol.TCP, scheduler="rr")
    reconciler = Reconciler(ipvs, OWNED)
    assert reconciler.full_sync({vs.key: vs}).result.ok
    conn = Connection(lab.client, vs.key.address, vs.key.port)
    try:
        first = conn.ask()
        sh = VirtualService(vs.key, ServiceConfig("sh"), vs.real_servers, vs.origin)
        report = reconciler.sync_service(vs.key, sh)
        assert [op.kind.value for op in report.plan.ops] == ["set-service"]
        assert report.result.ok
        # The same connection keeps talking to the same backend.
        assert [conn.ask() for _ in range(3)] == [first] * 3
    finally:
        conn.close()
    assert ipvs.read_service(vs.key).config.scheduler == "sh"  # type: ignore[union-attr]
    listing = lab.lvs.exec(["ipvsadm", "-Ln", "-t", "198.51.100.10:80"])
    assert "198.51.100.10:80 sh" in listing
    # New connections now hash on the client address: one source, one backend.
    assert len({ask_tcp(lab.client, vs.key.address, 80) for _ in range(4)}) == 1


def test_ipvsadm_sees_exactly_what_director_programmed(lab: Lab, ipvs: KernelIpvs) -> None:
    table = {
        vs.key: vs
        for vs in (
            service(lab, Forwarding.NAT, 4, Protocol.TCP),
            service(lab, Forwarding.DR, 6, Protocol.UDP, scheduler="wlc"),
            service(lab, Forwarding.TUN, 4, Protocol.TCP, scheduler="sed"),
        )
    }
    assert Reconciler(ipvs, OWNED).full_sync(table).result.ok
    listing = lab.lvs.exec(["ipvsadm", "-Ln"])
    assert "TCP  198.51.100.10:80 rr" in listing
    assert "UDP  [2001:db8:100::20]:53 wlc" in listing
    assert "TCP  198.51.100.30:80 sed" in listing
    assert listing.count("Masq") == 3 and listing.count("Route") == 3
    assert listing.count("Tunnel") == 3
    assert ipvs.read().services == table


def test_a_foreign_ipvsadm_entry_is_left_alone_and_reported(lab: Lab, ipvs: KernelIpvs) -> None:
    lab.lvs.exec(["ipvsadm", "-A", "-t", "203.0.113.200:80", "-s", "rr"])
    try:
        vs = service(lab, Forwarding.NAT, 4, Protocol.TCP)
        report = Reconciler(ipvs, OWNED).full_sync({vs.key: vs})
        foreign = ServiceKey.inet(Protocol.TCP, "203.0.113.200", 80)
        assert report.plan.foreign == (foreign,)
        assert all(op.key != foreign for op in report.plan.ops)
        # An empty desired state removes only what the director owns.
        Reconciler(ipvs, OWNED).full_sync({})
        assert list(ipvs.read().services) == [foreign]
    finally:
        lab.lvs.exec(["ipvsadm", "-D", "-t", "203.0.113.200:80"])


def test_cli_apply_then_plan_shows_no_changes(
    lab: Lab, ipvs: KernelIpvs, tmp_path: pytest.TempPathFactory
) -> None:
    config = tmp_path / "director.yaml"  # type: ignore[operator]
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services:\n"
        "  - {name: web, address: 198.51.100.10, port: 80, scheduler: rr,\n"
        "     real_servers: [192.0.2.11:8080, 192.0.2.12:8080]}\n"
    )
    args = ["--config", str(config), "--netns", lab.lvs.name]
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["plan", *args]) == 0
        assert ipvs.read().services == {}  # plan changed nothing
        assert cli.main(["apply", *args]) == 0
        assert cli.main(["plan", *args]) == 0
    text = out.getvalue()
    assert "+ service tcp 198.51.100.10:80 scheduler=rr   [static/web]" in text
    assert "To add: 1 service, 2 real servers." in text
    assert text.rstrip().endswith("No changes: the kernel matches the configuration.")
    assert {ask_tcp(lab.client, "198.51.100.10", 80) for _ in range(4)} == {"be1", "be2"}


def test_putting_a_hashing_service_in_order_keeps_open_connections(
    lab: Lab, ipvs: KernelIpvs
) -> None:
    """A new real server that sorts after the others makes the director delete and add
    them again (the kernel adds at the head of its list, and sh builds its table in list
    order). A deleted real server waits in the kernel's trash with its connections and
    comes back with them: an open connection keeps talking to the same backend."""
    full = service(lab, Forwarding.NAT, 4, Protocol.TCP, scheduler="sh")
    ordered = sorted(full.real_servers)
    dests = full.real_servers
    first_two = VirtualService(full.key, full.config, {d: dests[d] for d in ordered[:2]})
    reconciler = Reconciler(ipvs, OWNED)
    assert reconciler.full_sync({full.key: first_two}).result.ok
    conns = [
        Connection(lab.client, full.key.address, full.key.port, source)
        for source in lab.client_sources4
    ]
    try:
        before = [conn.ask() for conn in conns]
        report = reconciler.sync_service(full.key, full)
        assert [op.kind.value for op in report.plan.ops] == [
            "del-dest",
            "del-dest",
            "add-dest",
            "add-dest",
            "add-dest",
        ]
        assert report.result.ok
        assert [conn.ask() for conn in conns] == before
        assert list(ipvs.read().services[full.key].real_servers) == ordered
    finally:
        for conn in conns:
            conn.close()


def test_decommission_removes_what_the_director_made_and_leaves_the_rest(
    lab: Lab, ipvs: KernelIpvs, tmp_path: pytest.TempPathFactory
) -> None:
    """director decommission (the director stopped): without --yes it only lists; with it,
    the owned services and the director's nftables table go, a foreign ipvsadm entry and a
    foreign nftables table stay."""
    config = tmp_path / "director.yaml"  # type: ignore[operator]
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services:\n"
        "  - {name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.11:8080]}\n"
        "  - {name: dns, address: 198.51.100.53, port: 53, protocol: udp,\n"
        "     real_servers: [192.0.2.11:53]}\n"
    )
    args = ["--config", str(config), "--netns", lab.lvs.name]
    nft = ["nft", "add", "table", "inet"]
    lab.lvs.exec(["ipvsadm", "-A", "-t", "203.0.113.200:80", "-s", "rr"])
    lab.lvs.exec([*nft, "director"])
    lab.lvs.exec([*nft, "someone-else"])
    try:
        out = io.StringIO()
        with redirect_stdout(out):
            assert cli.main(["apply", *args]) == 0
            assert cli.main(["decommission", *args]) == 0
        assert len(ipvs.read().services) == 3, "without --yes nothing goes"
        shown = out.getvalue()
        assert "- service tcp 198.51.100.10:80" in shown and "udp 198.51.100.53:53" in shown
        assert "Left alone (not owned): tcp 203.0.113.200:80" in shown
        assert "nftables table inet director" in shown and "--yes" in shown
        with redirect_stdout(io.StringIO()):
            assert cli.main(["decommission", *args, "--yes"]) == 0
        remaining = ipvs.read().services
        assert list(remaining) == [ServiceKey.inet(Protocol.TCP, "203.0.113.200", 80)]
        tables = lab.lvs.exec(["nft", "list", "tables"])
        assert "inet director" not in tables and "inet someone-else" in tables
    finally:
        lab.lvs.exec(["ipvsadm", "-D", "-t", "203.0.113.200:80"])
        lab.lvs.exec(["nft", "delete", "table", "inet", "someone-else"], check=False)


def test_the_ipvs_family_found_without_a_library_is_the_one_pyroute2_finds() -> None:
    """The director finds IPVS's generic netlink family on its own socket; pyroute2, which
    tests keep as an independent implementation, finds the same id."""
    from pyroute2.netlink.generic import GenericNetlinkSocket
    from pyroute2.netlink.generic.ipvs import GENL_NAME, ipvsmsg

    genl = GenericNetlinkSocket()
    try:
        genl.bind(GENL_NAME, ipvsmsg)
        assert resolve_family() == genl.prid
    finally:
        genl.close()
