"""In the lab VM: three active directors behind a router running FRR, one VIP announced by
each over BGP (with BFD), spread by the router's ECMP, Maglev hashing (``mh``) in IPVS,
tun forwarding, real traffic. See ``lab/bgp.py`` for the topology.

What must hold however loaded the machine is asserted (the spread, the agreement flow by
flow, connections kept when a director dies, leaves or joins); how fast the router drops a
dead director is printed, with a bound loose enough for a starved emulated machine."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from lab.bgp import (
    VIP,
    BgpLab,
    bgp_lab,
    connections_per_director,
    kill_frr,
    probe_flows,
    start_director,
    stop_director,
    vtysh,
    wait_nexthops,
)
from lab.ha import Talkers, new_connections

pytestmark = pytest.mark.kernel
SETTLE = 90.0  # seconds a loaded machine may take for sessions to come up


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BgpLab]:
    with bgp_lab("bgp", tmp_path_factory.mktemp("bgp")) as lab:
        for d in lab.directors:
            start_director(lab, d)
        took = wait_nexthops(lab, 3, SETTLE)
        print(f"\nbgp: three next hops after {took} s;", vtysh(lab.router, "show ip route"))
        assert took is not None, "the router never held three next hops for the VIP"
        yield lab


def test_the_router_spreads_client_flows_over_all_three_directors(lab: BgpLab) -> None:
    assert lab.nexthops() == {d.front for d in lab.directors}
    talkers = Talkers(lab, VIP, count=60, period=0.1)  # type: ignore[arg-type]
    try:
        time.sleep(2)
        spread = connections_per_director(lab)
        print(f"\nbgp spread of 60 connections: {spread}; answered {talkers.answered}")
        assert sum(spread.values()) >= 60
        assert all(count > 0 for count in spread.values()), spread
        assert talkers.alive == 60
    finally:
        talkers.close()


def test_every_director_sends_a_flow_to_the_same_backend(lab: BgpLab) -> None:
    ports = range(20000, 21000)
    seen = {d.name: probe_flows(lab, d, ports) for d in lab.directors}
    errors = [f"{n}:{p}:{r}" for n, got in seen.items() for p, r in got.items() if "error" in r]
    agree = sum(1 for port in ports if len({got[port] for got in seen.values()}) == 1)
    backends = {got[port] for got in seen.values() for port in ports}
    print(f"\nbgp agreement: {agree}/1000 flows, {len(backends)} backends, errors {errors[:3]}")
    assert not errors
    assert agree == 1000
    assert len(backends) == len(lab.backends)


def test_a_killed_director_is_dropped_by_bfd_and_its_connections_carry_on(lab: BgpLab) -> None:
    talkers = Talkers(lab, VIP, count=60, period=0.1)  # type: ignore[arg-type]
    victim = lab.directors[0]
    try:
        time.sleep(2)
        before = connections_per_director(lab)
        kill_frr(victim.ns)  # kill -9 of zebra, bfdd and bgpd: no goodbye to the router
        stop_director(victim)
        dropped = wait_nexthops(lab, 2, 30)
        time.sleep(3)
        ok, tried = new_connections(lab, VIP, 2)  # type: ignore[arg-type]
        print(f"\nbgp kill -9 of {victim.name} (carrying {before[victim.name]} of "
              f"{sum(before.values())}): router dropped it in {dropped} s; connections "
              f"survived {talkers.alive}/60, failed requests {talkers.failed}; "
              f"new connections {ok}/{tried}")  # fmt: skip
        assert dropped is not None, "the router kept the dead director"
        assert talkers.alive >= 59
        assert ok == tried
        survived = talkers.alive
        start_director(lab, victim)  # it comes back with an empty connection table
        back = wait_nexthops(lab, 3, SETTLE)
        time.sleep(3)
        print(f"bgp {victim.name} back after {back} s; connections alive {talkers.alive}/60")
        assert back is not None
        assert talkers.alive == survived, "a director joining broke connections"
    finally:
        talkers.close()
