"""The VIPs a BGP director holds on ``lo``, in a network namespace of the host's own."""

from __future__ import annotations

import subprocess

import pytest

from director.adapters.frr.loopback import LoopbackVips
from director.core.owned import Transient
from director.core.pools import Announce, Pool

VIP = "198.51.100.10"
EDGE = (Pool.parse("edge", ["198.51.100.0/24"], announce=Announce("bgp")),)


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def on_lo(netns: str) -> set[str]:
    out = run(["ip", "-n", netns, "-o", "addr", "show", "dev", "lo"]).stdout
    return {line.split()[3].split("/")[0] for line in out.splitlines()}


def test_vips_are_held_on_lo_and_a_restart_releases_those_no_longer_served(netns: str) -> None:
    """The director's VIPs go on lo; one a previous run left there that is no longer served
    goes; an address outside the pools stays (never what the director did not create)."""
    run(["ip", "-n", netns, "addr", "add", "198.51.100.5/32", "dev", "lo"])
    run(["ip", "-n", netns, "addr", "add", "192.0.2.99/32", "dev", "lo"])
    vips = LoopbackVips(run, ["ip", "-n", netns])
    vips.adopt(EDGE)  # a previous run's: 198.51.100.5 is in the edge pool
    assert vips.held == {"198.51.100.5"}
    vips.hold({VIP, "2001:db8::10"})
    assert on_lo(netns) >= {VIP, "2001:db8::10", "192.0.2.99"}
    assert "198.51.100.5" not in on_lo(netns)
    run(["ip", "-n", netns, "addr", "del", f"{VIP}/32", "dev", "lo"])  # someone else
    vips.hold(vips.held, missing=vips.held - vips.on_lo())
    assert VIP in on_lo(netns)  # put back
    vips.hold(set())
    assert VIP not in on_lo(netns) and "192.0.2.99" in on_lo(netns)


def test_a_vip_that_cannot_be_held_is_a_transient_failure_naming_it(netns: str) -> None:
    """``ip`` failing (here: a namespace that is gone) is a failure to run, retried with
    backoff, never a verdict on the VIP; nothing is counted as held."""
    vips = LoopbackVips(run, ["ip", "-n", f"{netns}-gone"])
    with pytest.raises(Transient, match=f"cannot hold {VIP} on lo"):
        vips.hold({VIP})
    assert vips.held == set()
    with pytest.raises(Transient, match="cannot read the addresses of lo"):
        vips.on_lo()
