"""In the lab VM: full NAT in a keepalived pair, with and without conntrackd.

The IPVS sync daemon carries IPVS's connections to the backup; the SNAT mapping of a
full-NAT connection lives in conntrack, which it does not carry. conntrackd (primary-backup,
FT-FW over the back network, the peer's entries written to the backup's kernel as they come)
does.
The SNAT address is the floating gateway, so it moves with the VIPs.

To make the mapping matter, every client address opens its connections from the same ports:
to one backend SNAT can keep the port for one of them only and gives the others new ones.
A backup that rebuilds the mappings from the packets it sees (no conntrackd) gives the port
to whichever packet comes first, so some connections break (and the old master's stale
entries break more at failback). With conntrackd the new master holds the peer's entries
before it takes the VIPs, and takes up no connection it has no entry for
(nf_conntrack_tcp_loose=0; what conntrack cannot place is dropped, and TCP sends it again):
none may break."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.ha import (
    FULLNAT_VIP,
    NAT_VIP,
    HaLab,
    Talkers,
    build_ha_lab,
    kill_keepalived,
    start_conntrackd,
    start_director,
    start_keepalived,
)
from lab.netns import run
from lab.wait import wait_for
from tests.system.test_ha_pair import SETTLE, one_master, switch_over

pytestmark = pytest.mark.kernel


def make_pair(prefix: str, workdir: Path, *, conntrackd: bool) -> HaLab:
    """A pair serving FULLNAT_VIP, d1 master; with conntrackd running beside keepalived."""
    lab = build_ha_lab(prefix, workdir)
    try:
        d1, d2 = lab.directors
        start_director(lab, d1, fullnat=True, conntrackd=conntrackd)
        assert wait_for(lambda: d1.has(FULLNAT_VIP), 20) is not None, "d1 never became master"
        start_director(lab, d2, fullnat=True, conntrackd=conntrackd)
        assert wait_for(lambda: d2.runtime.controller.health.vrrp_state == "BACKUP", 20) is not None  # type: ignore[union-attr]
        heard = wait_for(lambda: d1.runtime.controller.health.vrrp_state == "MASTER", SETTLE)  # type: ignore[union-attr]
        assert heard is not None, "d1's director never heard MASTER from its keepalived"
        if conntrackd:
            for d in lab.directors:
                start_conntrackd(d)
        return lab
    except BaseException:
        lab.close()
        raise


@pytest.fixture
def plain_pair(tmp_path: Path) -> Iterator[HaLab]:
    lab = make_pair("hf", tmp_path, conntrackd=False)
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[HaLab]:
    lab = make_pair("hc", tmp_path, conntrackd=True)
    try:
        yield lab
    finally:
        lab.close()


def peer_entries(d) -> int:  # type: ignore[no-untyped-def]
    """conntrack entries for FULLNAT_VIP in ``d``'s kernel table: on the backup, the peer's,
    written there by conntrackd as they come (DisableExternalCache)."""
    out = d.ns.exec(["cat", "/proc/net/nf_conntrack"])
    return sum(f"dst={FULLNAT_VIP}" in line for line in out.splitlines())


def conntrackd_state(d) -> str:  # type: ignore[no-untyped-def]
    """What a failure shows of a conntrackd: its figures and the end of its log."""
    conf = str(d.workdir / "conntrackd.conf")
    stats = run(["conntrackd", "-C", conf, "-s"], check=False)
    log = (d.workdir / "conntrackd.log").read_text()[-1500:]
    alive = d.conntrackd is not None and d.conntrackd.poll() is None
    return f"running {alive}, kernel entries {peer_entries(d)}; {stats[-1200:]!r}; {log!r}"


def fail_over_and_back(pair: HaLab, talkers: Talkers) -> tuple[int, int, list[str]]:
    """kill -9 of d1's keepalived, then its return: (broken at failover, broken in all,
    the report)."""
    d1, d2 = pair.directors
    held, answering, (ok, tried) = switch_over(pair, FULLNAT_VIP, d2, lambda: kill_keepalived(d1))
    report = [
        f"fullnat kill -9 of the master's keepalived: VIP on the backup in {held:.2f}s, "
        f"answering in {answering:.2f}s; new connections during the switch {ok}/{tried}"
    ]
    wait_for(lambda: d2.runtime.controller.health.vrrp_state == "MASTER", SETTLE)  # type: ignore[union-attr]
    before = talkers.answered
    wait_for(lambda: talkers.answered >= before + 300, 30)
    at_failover = 50 - talkers.alive
    held, _answering, (ok, tried) = switch_over(
        pair, FULLNAT_VIP, d1, lambda: start_keepalived(d1), timeout=30, exclusive=True
    )
    report.append(
        f"fullnat failback: d1 took the VIP back after {held:.2f}s; new connections during "
        f"the switch {ok}/{tried}"
    )
    before = talkers.answered
    wait_for(lambda: talkers.answered >= before + 300, 30)
    one_master(pair, FULLNAT_VIP, d1)
    return at_failover, 50 - talkers.alive, report


def test_without_conntrackd_a_failover_breaks_the_connections_whose_snat_port_moved(
    plain_pair: HaLab, capsys: pytest.CaptureFixture[str]
) -> None:
    pair = plain_pair
    talkers = Talkers(pair, FULLNAT_VIP, count=50, period=0.1, same_ports=41000)
    try:
        assert wait_for(lambda: talkers.answered >= 500, 30) is not None, "no traffic"
        assert talkers.alive == 50
        at_failover, broken, report = fail_over_and_back(pair, talkers)
        report.append(
            f"fullnat without conntrackd: {at_failover}/50 connections broke at failover, "
            f"{broken}/50 across failover and failback ({talkers.failed} failed requests)"
        )
        with capsys.disabled():
            print("\n" + "\n".join(report))
        # Without the mappings, the new master cannot give each connection its old port.
        assert at_failover > 0, report[-1]
    finally:
        talkers.close()


def test_conntrackd_keeps_50_fullnat_connections_through_failover_and_failback(
    pair: HaLab, capsys: pytest.CaptureFixture[str]
) -> None:
    """And plain nat beside it, through the same switches: conntrackd and the strict pickup
    it asks for (nf_conntrack_tcp_loose=0) take nothing from what the IPVS sync daemon
    keeps."""
    d2 = pair.directors[1]
    talkers = Talkers(pair, FULLNAT_VIP, count=50, period=0.1, same_ports=42000)
    nat = Talkers(pair, NAT_VIP, count=20, period=0.3)
    try:
        assert wait_for(lambda: talkers.answered >= 500, 30) is not None, "no traffic"
        assert wait_for(lambda: nat.answered >= 100, 30) is not None, "no nat traffic"
        synced = wait_for(lambda: peer_entries(d2) >= 50, 60)
        assert synced is not None, "d2's conntrackd never held d1's 50 connections: " + "; ".join(
            f"{d.name}: {conntrackd_state(d)}" for d in pair.directors
        )
        at_failover, broken, report = fail_over_and_back(pair, talkers)
        report.append(
            f"fullnat with conntrackd: {at_failover}/50 connections broke at failover, "
            f"{broken}/50 across failover and failback, {talkers.answered} requests answered, "
            f"{talkers.failed} failed"
        )
        report.append(
            f"nat beside it in the same pair: {20 - nat.alive}/20 connections broke across "
            f"failover and failback, {nat.answered} requests answered, {nat.failed} failed"
        )
        with capsys.disabled():
            print("\n" + "\n".join(report))
        assert talkers.alive == 50 and talkers.failed == 0, report[-2]
        assert nat.alive == 20 and nat.failed == 0, report[-1]
    finally:
        talkers.close()
        nat.close()
