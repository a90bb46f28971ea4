"""The backends' side: the director_node role's ``director-node`` script in a namespace (a dr
backend's VIP on lo with ARP quiet, bad arguments refused with nothing changed, a kernel
that cannot decapsulate named)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.bgplab import VIP

NODE = Path(__file__).resolve().parents[1] / "ansible/roles/director_node/files/director-node"


def node(netns: str, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, str(NODE), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_dr_backend_gets_the_vip_on_lo_with_arp_quiet_once(netns: str) -> None:
    """In a namespace standing in for a node: --check says what differs, a run sets it, a
    second run and --check find nothing to do. (tun on the VM's kernel: test_bgp_lab.py.)"""
    code, out = node(netns, "--vip", VIP, "--check")
    assert code == 1 and f"would add {VIP}/32 on lo" in out and "arp_ignore from 0 to 1" in out
    code, out = node(netns, "--vip", VIP)
    assert code == 0 and f"{VIP}/32 on lo" in out, out
    code, out = node(netns, "--vip", VIP)
    assert (code, out) == (0, "")  # idempotent: a boot after the first changes nothing
    assert node(netns, "--vip", VIP, "--check") == (0, "")
    for name, value in (("arp_ignore", "1"), ("arp_announce", "2")):
        live = f"/proc/sys/net/ipv4/conf/all/{name}"
        got = subprocess.run(
            ["ip", "netns", "exec", netns, "cat", live], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert got == value, name


@pytest.mark.parametrize(
    "args", [["--vip", "198.51.100"], ["--vip", "300.1.1.1"], ["--vip"], ["--tunnel"]]
)
def test_the_node_script_refuses_bad_arguments_and_changes_nothing(
    netns: str, args: list[str]
) -> None:
    code, out = node(netns, *args)
    assert code == 2 and ("not an IPv4 address" in out or "usage:" in out), out
    assert node(netns, "--vip", VIP, "--check")[0] == 1  # nothing was set


def test_the_node_script_says_why_when_the_kernel_cannot_decapsulate(netns: str) -> None:
    has_ipip = (
        Path("/sys/module/ipip").exists()
        or subprocess.run(["modprobe", "-n", "ipip"], capture_output=True, check=False).returncode
        == 0
    )
    if has_ipip:
        pytest.skip("this kernel has ipip: the lab VM's test covers --tun")
    code, out = node(netns, "--tun")
    assert code == 3 and "no tunl0: the kernel has no ipip module" in out, out
