"""`make boot-test`, the pair (issue 35): two boxes the Ansible role made, booted for real as
a keepalived pair with conntrackd, carrying long-lived `nat` and `fullnat` connections
through the faults an operator meets: keepalived killed with -9 on the master, and the
master rebooted. Nothing on the boxes is done by hand; what systemd and the role's units do
is what happens (lab/bootpair.py).

The full-NAT connections leave every client address from the same ports, so SNAT must give
some of them new ports towards a backend: a box that took a connection over without
conntrackd's copy of the mapping would give it a port of its own and break it. The tests run
in order on one boot of each box, and print what they measure.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from director.adapters.pair.processes import LIMIT_US
from lab import bootpair
from lab.bootlab import BACKENDS, NAT_PORT, WORK, Box, Responder
from lab.bootpair import EDGE1, EDGE2, FULLNAT_VIP, GATEWAY, MEMBERS, NAT_VIP, Member
from lab.ha import Talkers
from lab.netns import Netns, ask_tcp
from lab.wait import wait_for

pytestmark = pytest.mark.boot
COUNT = 20  # connections of each mode, each asking every PERIOD seconds
PERIOD = 0.5
PATIENCE = 30.0  # an answer slower than this is a failed request (emulated boxes are slow)


@dataclass
class Pair:
    client: Netns  # boot-net: the client's addresses on br0, where the qemus run
    be: Netns
    boxes: dict[str, Box]

    def box(self, member: Member) -> Box:
        return self.boxes[member.name]


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    started = time.monotonic()
    bootpair.build(WORK / "pair-ansible.log")
    print(
        f"\npair: two images built (the role on both, one run) in {time.monotonic() - started:.0f}s"
    )
    with bootpair.network() as (net, be):
        responder = Responder(be, BACKENDS, (NAT_PORT,))
        boxes: dict[str, Box] = {}
        try:
            powered = time.monotonic()
            for m in MEMBERS:
                boxes[m.name] = bootpair.boot(net, m)
            for m in MEMBERS:  # both boot at once: each is timed from the power-on
                booted = boxes[m.name].up()
                assert booted is not None, f"{m.name} never came up; see {boxes[m.name].console}"
                print(
                    f"pair: {m.name} up (guest agent answering) "
                    f"{time.monotonic() - powered:.0f}s after power-on"
                )
            yield Pair(net, be, boxes)
        finally:
            for box in boxes.values():
                box.close()
            responder.close()


def addresses(box: Box) -> str:
    return box.sh("ip -o addr show")


def state(pair: Pair) -> str:
    """What a failure shows: each box's units, addresses, conntrackd's figures, its logs."""
    out = []
    for m in MEMBERS:
        try:
            out.append(
                pair.box(m).sh(
                    "systemctl is-active director keepalived conntrackd; ip -o addr show; "
                    "ipvsadm -L --daemon; echo IPVS connections: $(ipvsadm -Lnc | grep -c ESTAB); "
                    "conntrackd -C /etc/conntrackd/conntrackd.conf -s | head -30; "
                    "journalctl -b -u keepalived -u conntrackd -n 40 -o short-precise; "
                    "journalctl -b -u director -n 20 -o cat",
                    check=False,
                    timeout=60,
                )
            )
        except (OSError, RuntimeError, TimeoutError, ValueError) as exc:  # down, or booting
            out.append(f"unreachable: {exc!r}; see {pair.box(m).console}")
    return "\n\n".join(f"== {m.name}\n{text}" for m, text in zip(MEMBERS, out, strict=True))


def carried(box: Box) -> str:
    """What this box holds of the pair's connections: IPVS's (the sync daemon's, on a
    backup) and conntrack's (on a backup, the peer's, written there by conntrackd)."""
    ipvs = box.sh("ipvsadm -Lnc | grep -c ESTABLISHED || true").strip()
    conntrack = box.sh("grep -c 'dport=80 ' /proc/net/nf_conntrack || true").strip()
    return f"{ipvs} IPVS connections, {conntrack} conntrack entries"


def answering(pair: Pair, vip: str, timeout: float) -> float | None:
    """Seconds until a new connection to ``vip`` is answered by a backend."""

    def asked() -> bool:
        try:
            return ask_tcp(pair.client, vip, 80, timeout=2) in ("be1", "be2")
        except OSError:
            return False

    return wait_for(asked, timeout, step=0.1)


class Traffic:
    """COUNT long-lived connections to each VIP, asking every PERIOD seconds."""

    def __init__(self, pair: Pair, ports: int) -> None:
        """``ports``: the first of the source ports the full-NAT connections share."""
        self.nat = Talkers(pair, NAT_VIP, count=COUNT, period=PERIOD, patience=PATIENCE)
        self.full = Talkers(
            pair, FULLNAT_VIP, count=COUNT, period=PERIOD, patience=PATIENCE, same_ports=ports
        )

    def flowing(self, more: int = 4 * COUNT, timeout: float = 120) -> bool:
        """Both kinds answered ``more`` requests from now (every connection asked again)."""
        nat, full = self.nat.answered, self.full.answered
        return (
            wait_for(
                lambda: self.nat.answered >= nat + more and self.full.answered >= full + more,
                timeout,
            )
            is not None
        )

    def report(self) -> str:
        return (
            f"nat {self.nat.alive}/{COUNT} alive ({self.nat.answered} answered, "
            f"{self.nat.failed} failed); fullnat {self.full.alive}/{COUNT} alive "
            f"({self.full.answered} answered, {self.full.failed} failed)"
        )

    def failures(self) -> str:
        """Each failed request: when (UTC), which connection, why."""
        lines = [
            f"{time.strftime('%H:%M:%S', time.gmtime(at))}.{int(at * 1000) % 1000:03d} "
            f"{kind} #{i}: {why}"
            for kind, talkers in (("nat", self.nat), ("fullnat", self.full))
            for at, i, why in talkers.failures
        ]
        return "\n".join(sorted(lines))

    def kept(self) -> bool:
        return (
            self.nat.alive == COUNT
            and self.full.alive == COUNT
            and self.nat.failed == 0
            and self.full.failed == 0
        )

    def close(self) -> None:
        self.nat.close()
        self.full.close()


# Each test's full-NAT connections leave from ports of their own. A connection from the
# address and port of one closed a minute before is another matter, not tested here: its
# peer's entry reaches the backup while the old one lingers there in TIME_WAIT, conntrackd
# updates the old entry (a NAT mapping cannot change), so the new master would use the old
# SNAT port. That is the likely cause of the one reset seen in four runs, when the reboot
# test reused the kill test's ports; it is not proven.
PORTS = itertools.count(42000, 100)


@pytest.fixture
def traffic(pair: Pair) -> Iterator[Traffic]:
    made = Traffic(pair, next(PORTS))
    try:
        # 20 s of traffic first: every connection synced to the backup several times over
        # (IPVS every 10 packets, conntrackd on every change), as for any long-lived one.
        assert made.flowing(more=40 * COUNT), made.report()
        yield made
    finally:
        made.close()


def vrrp_scheduling(box: Box) -> list[str]:
    """keepalived's process and its VRRP child as `chrt -p` and `prlimit` read them: one line
    each, "name policy priority [soft hard]" (the limits for the VRRP process only)."""
    out = box.sh(
        "main=$(systemctl show -p MainPID --value keepalived); "
        "echo keepalived $(chrt -p $main | cut -d: -f2); "
        "for c in $(pgrep -P $main -x keepalived); do echo vrrp $(chrt -p $c | cut -d: -f2) "
        "$(prlimit --rttime -p $c -o SOFT,HARD --noheadings); done",
        check=False,
    )
    return out.strip().splitlines()


# keepalived real-time from its start (the role's drop-in; the director sets only the VRRP
# process's), its VRRP process as the director adopts it: reset on fork, the 1 s limit.
REALTIME = ["keepalived SCHED_RR 50", f"vrrp SCHED_RR|SCHED_RESET_ON_FORK 50 {LIMIT_US} {LIMIT_US}"]


def test_the_pair_comes_up_with_edge1_master_and_conntrackd_beside_keepalived(pair: Pair) -> None:
    for m in MEMBERS:
        box = pair.box(m)
        box.settled()
        active = box.sh("systemctl is-active director keepalived conntrackd").split()
        assert active == ["active"] * 3, state(pair)
        # What full NAT with conntrackd needs of the kernel, set at boot by the role's files
        # (the hardened unit cannot write /proc/sys).
        for name, value in (
            ("net/ipv4/vs/conntrack", "1"),
            ("net/netfilter/nf_conntrack_tcp_loose", "0"),
        ):
            assert box.sh(f"cat /proc/sys/{name}").strip() == value, (m.name, name)
        journal = box.sh("journalctl -b -u director -o cat")
        assert "event=sysctl.not_set" not in journal, journal[-3000:]
        assert "event=controller.ready" in journal
        adopted = wait_for(lambda box=box: vrrp_scheduling(box) == REALTIME, 60, step=2.0)  # type: ignore[misc]
        assert adopted is not None, (vrrp_scheduling(box), journal[-3000:])
        assert "event=keepalived.realtime_set" in box.sh("journalctl -b -u director -o cat")

    # Booted together, edge2 may be master first: edge1 takes over after preempt_delay.
    def master(member: Member, other: Member) -> bool:
        first, second = addresses(pair.box(member)), addresses(pair.box(other))
        return all(
            f" {a}/" in first and f" {a}/" not in second for a in (NAT_VIP, FULLNAT_VIP, GATEWAY)
        )

    held = wait_for(lambda: master(EDGE1, EDGE2), bootpair.PREEMPT_DELAY + 180, step=2.0)
    assert held is not None, state(pair)
    ruleset = pair.box(EDGE1).sh("nft list ruleset")
    assert "snat" in ruleset and GATEWAY in ruleset, ruleset
    for vip in (NAT_VIP, FULLNAT_VIP):
        answers = {ask_tcp(pair.client, vip, 80, timeout=10) for _ in range(6)}
        assert answers == {"be1", "be2"}, (vip, answers)
    print("\npair: edge1 master (VIPs and the gateway), edge2 backup; both VIPs answered")


def test_kill_9_of_the_masters_keepalived_keeps_nat_and_fullnat_connections(
    pair: Pair, traffic: Traffic
) -> None:
    edge1, edge2 = pair.box(EDGE1), pair.box(EDGE2)
    pid = edge1.sh("systemctl show -p MainPID --value keepalived").strip()
    print(f"\npair: before the kill, edge2 (backup) holds {carried(edge2)}")
    killed = time.monotonic()
    edge1.sh("systemctl kill --signal=SIGKILL keepalived")  # every keepalived process: a crash
    took = bootpair.held_by(pair, NAT_VIP, EDGE2, 60)
    assert took is not None, state(pair)
    served = answering(pair, FULLNAT_VIP, 60)
    assert served is not None, state(pair)
    taken_at = time.monotonic() - killed
    assert traffic.flowing(), traffic.report() + traffic.failures() + state(pair)
    after_failover = traffic.report()
    # systemd starts keepalived again (the role's drop-in); it comes back as backup, syncs for
    # preempt_delay, then takes its part back.
    again = wait_for(
        lambda: edge1.sh("systemctl show -p MainPID --value keepalived").strip() not in (pid, "0"),
        60,
    )
    assert again is not None, state(pair)
    restarted = time.monotonic() - killed
    back = bootpair.held_by(pair, NAT_VIP, EDGE1, bootpair.PREEMPT_DELAY + 120, step=0.2)
    assert back is not None, state(pair)
    failback_at = time.monotonic() - killed
    assert traffic.flowing(), traffic.report() + traffic.failures() + state(pair)
    for address in (NAT_VIP, FULLNAT_VIP, GATEWAY):
        assert f" {address}/" not in addresses(edge2), "edge2 let go at failback"
    print(
        f"\npair: kill -9 of edge1's keepalived: edge2 held the VIPs after {took:.1f}s (VRRP "
        f"every {bootpair.ADVERT_INT:g}s), a new full-NAT connection answered {served:.1f}s "
        f"later ({taken_at:.1f}s from the kill); then {after_failover}\n"
        f"pair: systemd restarted keepalived {restarted:.0f}s after the kill; edge1 took the "
        f"VIPs back {failback_at:.0f}s after the kill (preempt_delay {bootpair.PREEMPT_DELAY}s); "
        f"across both: {traffic.report()}"
    )
    assert traffic.kept(), f"{traffic.report()}\n{traffic.failures()}\n{state(pair)}"


def test_a_reboot_of_the_master_keeps_nat_and_fullnat_connections(
    pair: Pair, traffic: Traffic
) -> None:
    edge1, edge2 = pair.box(EDGE1), pair.box(EDGE2)
    print(f"\npair: before the reboot, edge2 (backup) holds {carried(edge2)}")
    before = edge1.boot_id()
    rebooted = time.monotonic()
    edge1.reboot()  # what an operator types: systemctl reboot
    took = bootpair.held_by(pair, NAT_VIP, EDGE2, 120)
    assert took is not None, state(pair)
    assert traffic.flowing(), traffic.report() + traffic.failures() + state(pair)
    after_failover = traffic.report()
    up = wait_for(lambda: edge1.boot_id() not in ("", before), 900, step=2.0)
    assert up is not None, f"edge1 did not come back; see {edge1.console}"
    edge1.settled()
    print(f"pair: edge1 back (backup, booted), holds {carried(edge1)}")
    # Its table came back by its one way in: the file read, the first sync, READY.
    journal = edge1.sh("journalctl -b -u director -o cat")
    timed = [line for line in journal.splitlines() if "event=startup.timing" in line]
    print(f"pair: edge1's start after the boot: {timed[-1] if timed else 'no timing said'}")
    assert timed and "first_sync=" in timed[-1], journal[-3000:]
    adopted = wait_for(lambda: vrrp_scheduling(edge1) == REALTIME, 60, step=2.0)
    assert adopted is not None, (vrrp_scheduling(edge1), journal[-3000:])
    back = bootpair.held_by(pair, NAT_VIP, EDGE1, bootpair.PREEMPT_DELAY + 300, step=0.2)
    assert back is not None, state(pair)
    failback_at = time.monotonic() - rebooted
    assert traffic.flowing(), traffic.report() + traffic.failures() + state(pair)
    print(
        f"\npair: systemctl reboot of edge1: edge2 held the VIPs after {took:.1f}s; then "
        f"{after_failover}\npair: edge1 back up {up:.0f}s after the reboot began, and master "
        f"again {failback_at:.0f}s after it; across both: {traffic.report()}"
    )
    assert traffic.kept(), f"{traffic.report()}\n{traffic.failures()}\n{state(pair)}"
