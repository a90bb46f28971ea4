"""Hashing schedulers on the real kernel: the same flow gets the same backend on every
director, whatever order each director saw the backends come in (the kernel builds the
sh, dh and mh tables by walking its list of real servers, and adds at the list's head).

Four services in one director namespace stand in for four directors: with ``mh-port`` the
kernel hashes only the client's address and port, so a flow sent to each VIP from one
source port is scheduled by each service's table alone."""

from __future__ import annotations

import ipaddress
import selectors
import socket
import threading
from collections.abc import Iterator

import pytest

from director.core.model import (
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.ownership import Ownership
from director.core.services import Op, OpKind, VirtualService
from director.dataplane.kernel import KernelIpvs
from director.engine.reconcile import Reconciler
from lab.netns import Lab, build_lab

pytestmark = pytest.mark.kernel

VIPS = ("198.51.100.41", "198.51.100.42", "198.51.100.43", "198.51.100.44")
PORT = 5300
# Five backends x two ports: ten real servers. The kernel hashes a real server by the sum
# of its address and port (ip_vs_mh_hashkey), so 10.0.0.2:7002 and 10.0.0.3:7001 would get
# one permutation and share the table badly: the ports are further apart than the addresses.
BACKEND_PORTS = (7001, 7101)
OWNED = Ownership((ipaddress.ip_network("198.51.100.0/24"),))
MH = ServiceConfig("mh", frozenset({"mh-port", "mh-fallback"}))
FLOWS = 400


class Responders:
    """Each backend answers a datagram on each port with ``name:port``."""

    def __init__(self, lab: Lab) -> None:
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        for be in lab.backends:
            for port in BACKEND_PORTS:
                sock = be.ns.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.bind((be.ipv4, port))
                sock.setblocking(False)
                self._sel.register(sock, selectors.EVENT_READ, f"{be.name}:{port}")
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.2):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                _, peer = sock.recvfrom(512)
                sock.sendto(key.data.encode(), peer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = build_lab(prefix="mh", backends=5, vips=VIPS)
    responders = Responders(lab)
    try:
        yield lab
    finally:
        responders.close()
        lab.close()


@pytest.fixture
def ipvs(lab: Lab) -> Iterator[KernelIpvs]:
    kernel = KernelIpvs(netns=lab.lvs.name)
    try:
        yield kernel
    finally:
        Reconciler(kernel, OWNED).full_sync({})
        kernel.close()


def real_servers(lab: Lab) -> list[RealServer]:
    return [
        RealServer(be.ipv4, port, 1, Forwarding.NAT)
        for be in lab.backends
        for port in BACKEND_PORTS
    ]


def choices(lab: Lab, vip: str, first_port: int) -> list[str]:
    """The backend that answers each of FLOWS flows (client source ports in a row)."""
    reached, lost = answered(lab, vip, first_port, timeout=3)
    assert lost == 0, f"{lost} of {FLOWS} flows to {vip} got no answer"
    return reached


def answered(lab: Lab, vip: str, first_port: int, timeout: float = 1.0) -> tuple[list[str], int]:
    """(the backend each flow reached, flows refused or unanswered) for FLOWS flows (client
    source ports in a row)."""
    source, out, lost = lab.client_sources4[0], [], 0
    for sport in range(first_port, first_port + FLOWS):
        sock = lab.client.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.settimeout(timeout)
            sock.bind((source, sport))
            sock.sendto(b"q", (vip, PORT))
            out.append(sock.recv(512).decode())
        except OSError:  # ICMP port unreachable (no destination), or nothing back
            lost += 1
        finally:
            sock.close()
    return out, lost


def agree(a: list[str], b: list[str]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


def service(vip: str, dests: list[RealServer], config: ServiceConfig = MH) -> VirtualService:
    return VirtualService.build(ServiceKey.inet(Protocol.UDP, vip, PORT), config, dests)


def test_directors_with_different_histories_choose_the_same_backend_for_every_flow(
    lab: Lab, ipvs: KernelIpvs
) -> None:
    every = real_servers(lab)
    # Director 1 saw all ten at once.
    one = Reconciler(ipvs, OWNED)
    fresh = service(VIPS[0], every)
    assert one.sync_service(fresh.key, fresh).result.ok
    # Director 2 started with five, then saw the rest one by one, in another order, and
    # one backend leave and come back.
    two = Reconciler(ipvs, OWNED)
    history = [every[i] for i in (9, 4, 7, 0, 2, 5, 1, 8, 3, 6)]
    key = service(VIPS[1], []).key
    for count in (5, 6, 7, 8, 9, 10):
        assert two.sync_service(key, service(VIPS[1], history[:count])).result.ok
    assert two.sync_service(key, service(VIPS[1], history[1:])).result.ok
    grown = service(VIPS[1], history)
    assert two.sync_service(grown.key, grown).result.ok
    # What the kernel does without the director's ordering: the same ten, added raw in
    # the second history's order.
    raw = service(VIPS[2], [])
    ops = [Op(OpKind.ADD_SERVICE, raw.key, config=MH)]
    ops += [Op(OpKind.ADD_DEST, raw.key, dest=rs) for rs in history]
    assert ipvs.apply(ops).ok

    held = ipvs.read().services
    assert list(held[fresh.key].real_servers) == list(held[grown.key].real_servers)
    assert list(held[raw.key].real_servers) != list(held[fresh.key].real_servers)
    first, second, unordered = (choices(lab, vip, 20000) for vip in VIPS[:3])
    print(
        f"\nflows agreeing with director 1: director 2 {agree(first, second)}/{FLOWS}, "
        f"raw kernel order {agree(first, unordered)}/{FLOWS}; backends used by director 1: "
        f"{len(set(first))}"
    )
    assert agree(first, second) == FLOWS
    assert agree(first, unordered) < FLOWS  # the kernel alone would disagree
    assert len(set(first)) == len(every)


def test_removing_one_of_ten_moves_its_flows_and_few_others(lab: Lab, ipvs: KernelIpvs) -> None:
    every = real_servers(lab)
    gone = every[3]
    gone_name = f"{lab.backends[1].name}:{gone.port}"
    reconciler = Reconciler(ipvs, OWNED)
    ten, nine = service(VIPS[0], every), service(VIPS[1], [rs for rs in every if rs != gone])
    assert reconciler.full_sync({ten.key: ten, nine.key: nine}).result.ok
    before, after = choices(lab, VIPS[0], 21000), choices(lab, VIPS[1], 21000)
    moved = FLOWS - agree(before, after)
    owned = before.count(gone_name)
    print(
        f"\none backend of ten removed: {moved}/{FLOWS} flows moved ({moved / FLOWS:.1%}); "
        f"{owned} of them were on the removed one"
    )
    assert gone_name not in after
    assert moved - owned <= FLOWS // 20  # Maglev: the removed one's tenth, and a few more


def test_quiescing_a_backend_moves_no_other_backends_flows(lab: Lab, ipvs: KernelIpvs) -> None:
    """Weight 0 (a failed check, a drain) keeps the kernel's table (it keeps the last
    weight); with mh-fallback the quiesced backend's flows go on to others, and every other
    flow stays where it was."""
    every = real_servers(lab)
    reconciler = Reconciler(ipvs, OWNED)
    live, later = service(VIPS[0], every), service(VIPS[1], every)
    assert reconciler.full_sync({live.key: live, later.key: later}).result.ok
    quiet = every[5]._replace(weight=0)
    name = f"{lab.backends[2].name}:{quiet.port}"
    quiesced = service(VIPS[1], [*every[:5], quiet, *every[6:]])
    report = reconciler.sync_service(later.key, quiesced)
    assert [op.kind for op in report.plan.ops] == [OpKind.SET_DEST]
    # A director that starts while that backend is down adds it at weight 0 from the start.
    started = service(VIPS[2], quiesced.real_servers.values())
    assert reconciler.sync_service(started.key, started).result.ok
    before, after = choices(lab, VIPS[0], 22000), choices(lab, VIPS[1], 22000)
    moved = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    print(
        f"\nquiesced {name}: {before.count(name)} of its flows went on to others; "
        f"{sum(a != name for a, _ in moved)} flows of other backends moved"
    )
    assert name not in after
    assert len(moved) == before.count(name) > 0
    assert choices(lab, VIPS[2], 22000) == after  # the same table as the one that saw it live


def test_the_shipped_bgp_default_sends_a_quiesced_backends_new_flows_on(
    lab: Lab, ipvs: KernelIpvs
) -> None:
    """Issue 71, 5 (severe): BGP services defaulted to mh with mh-port and no mh-fallback.
    The kernel's Maglev table keeps a quiesced real server's slots (a failed check, a
    drain), and without mh-fallback a new flow hashed to one finds no destination and is
    refused, on every director, for as long as the check fails. The fault injected is what
    a failed check (or a drain) does to the kernel: the real server quiesced at weight 0.
    The shipped default (``BGP_SCHEDULER``) sends those flows on: none refused. mh-port
    alone, for contrast, refuses about the quiesced backend's share."""
    from director.core.dests import BGP_SCHEDULER

    every = real_servers(lab)
    failed = every[5]._replace(weight=0)  # what a failed health check does: quiesce
    dests = [*every[:5], failed, *every[6:]]
    shipped = service(VIPS[0], dests, ServiceConfig(BGP_SCHEDULER[0], BGP_SCHEDULER[1]))
    bare = service(VIPS[1], dests, ServiceConfig("mh", frozenset({"mh-port"})))
    reconciler = Reconciler(ipvs, OWNED)
    assert reconciler.full_sync({shipped.key: shipped, bare.key: bare}).result.ok
    reached, refused = answered(lab, VIPS[0], 23000)
    _, refused_bare = answered(lab, VIPS[1], 23000)
    name = f"{lab.backends[2].name}:{failed.port}"
    print(
        f"\none backend of ten failing its check: {refused}/{FLOWS} new flows refused under "
        f"the shipped default, {refused_bare}/{FLOWS} with mh-port alone"
    )
    assert refused == 0 and name not in reached
    assert refused_bare > 0  # the fault the default avoids is real on this kernel
