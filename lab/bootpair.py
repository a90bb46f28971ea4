"""Two edge boxes as a keepalived pair with conntrackd: the role applied to two Debian roots
from one inventory (as an operator provisions a pair), each root a disk image booted in qemu
with systemd as PID 1, the two qemus sharing both networks through bridges in boot-net.

    boot-net                                  edge1                  edge2
      br0: client 203.0.113.1-9 ───────────── eth0 203.0.113.10 ──── eth0 203.0.113.11
                                              VIPs .100 (nat), .101 (fullnat), with the master
      br1: bev ────────────────────────────── eth1 192.0.2.2 ─────── eth1 192.0.2.3
                                              gateway 192.0.2.254 floats with the VIPs
    boot-be: backends 192.0.2.11 and .12 (default route via the gateway: nat needs it; full
    NAT's replies go to the gateway as the SNAT source, whatever the route)

Nothing is configured on the boxes by hand: keepalived (VRRP, the IPVS sync daemon on eth1),
conntrackd (primary-backup over eth1, the peer's entries in the backup's kernel) and the
director run from the role's units and files.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from lab import bootlab, debroot
from lab.bootlab import BACKENDS, CLIENT, NAT_PORT, TOKEN, WORK, Box
from lab.ha import CLIENTS, WithClient, client_arp
from lab.netns import Netns, run
from lab.wait import wait_for

NAT_VIP, FULLNAT_VIP, GATEWAY = "203.0.113.100", "203.0.113.101", "192.0.2.254"
# VRRP every second (not the role's 0.1 s): two emulated boxes share two cores, and a guest
# starved for 0.3 s must not be taken for dead.
ADVERT_INT = 1.0
PREEMPT_DELAY = 30  # the role's default: a returning master syncs this long as backup first


@dataclass(frozen=True)
class Member:
    name: str
    front: str
    back: str
    priority: int
    macs: dict[str, str]
    taps: tuple[str, str]

    @property
    def root(self) -> Path:
        return WORK / f"root-{self.name}"

    @property
    def image(self) -> Path:
        return WORK / f"{self.name}.img"


EDGE1 = Member(
    "edge1",
    "203.0.113.10",
    "192.0.2.2",
    150,
    {"front": "52:54:00:d1:00:01", "back": "52:54:00:d1:00:02"},
    ("tapa0", "tapa1"),
)
EDGE2 = Member(
    "edge2",
    "203.0.113.11",
    "192.0.2.3",
    100,
    {"front": "52:54:00:d2:00:01", "back": "52:54:00:d2:00:02"},
    ("tapb0", "tapb1"),
)
MEMBERS = (EDGE1, EDGE2)


def director_config() -> dict[str, object]:
    """What the operator writes in ``director_config`` for the pair (the role adds ``ha:``)."""
    real = [f"{b}:{NAT_PORT}" for b in BACKENDS]
    return {
        "ownership": {"networks": ["203.0.113.96/28"]},
        "services": [
            {"name": "web-nat", "address": NAT_VIP, "port": 80, "scheduler": "rr",
             "real_servers": real},
            {"name": "web-full", "address": FULLNAT_VIP, "port": 80, "scheduler": "rr",
             "forwarding": "fullnat", "real_servers": real},
        ],
        "snat": {"addresses": [GATEWAY]},
    }  # fmt: skip


def inventory(path: Path) -> None:
    """One inventory for the pair: what differs per box is its addresses and priority; the
    peers (keepalived's and conntrackd's) come from the group."""
    hosts = {
        m.name: {
            "ansible_host": str(m.root),
            "director_vrrp_priority": m.priority,
            "director_vrrp_unicast_source": m.front,
            "director_conntrackd_source": m.back,
            "director_api_listen": f"{m.back}:9180",
        }
        for m in MEMBERS
    }
    common = {
        "ansible_connection": "community.general.chroot",
        "ansible_python_interpreter": "/usr/bin/python3",
        "director_wheelhouse": str(debroot.WHEELHOUSE),
        "director_vrrp_interface": "eth0",
        "director_vrrp_advert_int": ADVERT_INT,
        "director_vrrp_preempt_delay": PREEMPT_DELAY,
        "director_sync_interface": "eth1",
        "director_nat_gateways": [{"address": f"{GATEWAY}/24", "interface": "eth1"}],
        "director_api_token": TOKEN,
        "director_api_public": ["health"],
        "director_forwarding_modes": ["nat", "fullnat"],
        "director_config": director_config(),
    }
    path.write_text(
        yaml.safe_dump({"all": {"children": {"directors": {"hosts": hosts, "vars": common}}}})
    )


def build(log: Path) -> None:
    """Both images from scratch: two roots, the role on both in one run, two disks."""
    WORK.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    for m in MEMBERS:
        shutil.rmtree(m.root, ignore_errors=True)
    bootlab.prepare(EDGE1.root)
    run(["cp", "-a", str(EDGE1.root), str(EDGE2.root)])
    debroot.wheelhouse()
    hosts = WORK / "pair.yml"
    inventory(hosts)
    with bootlab.bound(*(m.root for m in MEMBERS)):
        bootlab.playbook(hosts, log)
    for m in MEMBERS:
        bootlab.identity(m.root, m.name, {m.macs["front"]: m.front, m.macs["back"]: m.back})
        bootlab.build_image(root=m.root, image=m.image)
        shutil.rmtree(m.root)  # the image holds it


@contextlib.contextmanager
def network() -> Iterator[tuple[Netns, Netns]]:
    """boot-net (the qemus, the client on br0) and boot-be (the backends behind br1)."""
    with bootlab.linked() as (net, be):
        net.ip(
            "link add br0 type bridge",
            "link set br0 up",
            *(f"addr add {a}/24 dev br0" for a in (CLIENT, *CLIENTS)),
        )
        be.ip(*(f"addr add {b}/24 dev be0" for b in BACKENDS), f"route add default via {GATEWAY}")
        yield net, be


def boot(net: Netns, member: Member) -> Box:
    """One box of the pair: one emulated CPU each (two boxes on two cores)."""
    return Box(
        net,
        name=member.name,
        image=member.image,
        macs=member.macs,
        taps=member.taps,
        front="br0",
        cpus=1,
    )


def held_by(
    lab: WithClient, address: str, member: Member, timeout: float, step: float = 0.05
) -> float | None:
    """Seconds until the client sends ``address``'s traffic to ``member`` (its ARP entry,
    set by the gratuitous ARP of the box taking the VIP over), or None."""
    return wait_for(lambda: client_arp(lab, address) == member.macs["front"], timeout, step=step)
