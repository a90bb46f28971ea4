"""FRR kept in step: routes it could not take tried again (a refused file not), a file the
daemons refuse rolled back, FRR restarted from its boot file sent the routes again, VIPs
put back on lo, a vtysh that cannot run retried and never taken for FRR refusing."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.adapters.frr.announce import Frr, FrrRejected
from director.adapters.frr.conf import render_frr
from director.adapters.frr.sync import FrrSync
from director.core.announce import Route
from director.schema.config import Settings, parse_config
from lab.netns import Netns
from tests.bgplab import BASE, ROUTES, VIP


def test_routes_frr_could_not_take_are_tried_again_and_a_refused_file_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """FRR not running yet (at boot, frr-reload.py fails): a transient failure, kept pending
    and tried again with a backoff until FRR takes it; a file vtysh refuses is refused
    once, not every poll. The file FRR boots from never holds the routes."""
    from director.adapters.frr.sync import FrrSync
    from lab.wait import eventually

    answer = tmp_path / "answer"
    answer.write_text("1")
    reload = tmp_path / "frr-reload"  # stands in for frr-reload.py: its exit status is given
    reload.write_text(f"#!/bin/sh\nexit $(cat {answer})\n")
    reload.chmod(0o755)
    text = BASE.replace(
        "bgp:\n",
        f"bgp:\n  config_file: {tmp_path}/frr.conf\n  reload: {reload}\n  poll_seconds: 0\n",
    )
    settings = parse_config(text)
    assert settings.bgp is not None
    sync = FrrSync(settings.bgp, settings.pools, "d.yaml")
    sync.frr.peers = lambda: []  # type: ignore[method-assign]  # no vtysh daemons here
    sync.frr.vips.hold = lambda vips, missing=None: None  # type: ignore[method-assign]  # no lo
    sync.start()
    try:
        sync.submit(dict(ROUTES))
        eventually(lambda: sync.attempts >= 2, what="a second try after FRR failed")
        state = sync.ledger.get("frr")
        assert sync.installed is None and sync.pending is not None, "kept, not dropped"
        assert state is not None and not state.in_sync and state.kind == "transient"
        assert not sync.settle(0.1)
        answer.write_text("0")  # FRR is up
        eventually(lambda: sync.installed is not None, what="the routes applied on a retry")
        assert sync.settle(1) and sync.ledger.get("frr").in_sync  # type: ignore[union-attr]
        assert "network 198.51.100.10/32" in (sync.frr.applied or "")
        boot = (tmp_path / "frr.conf").read_text()
        assert "router bgp 64512" in boot and "\n  network " not in boot
    finally:
        sync.stop()
    frr = sync.frr
    bad = (frr.applied or "").replace("remote-as 64500", "remote-az 64500", 1)  # same routes
    before = frr.rejected
    for _ in range(3):
        with pytest.raises(FrrRejected):
            frr.install(bad)
    assert frr.rejected == before + 1  # refused and counted once; the same file is not retried


def test_a_file_the_daemons_refuse_is_rolled_back_and_routes_still_follow(tmp_path: Path) -> None:
    """vtysh --dryrun checks the syntax only; bgpd may still refuse a line (a neighbor that
    is this box) after taking the ones before it. The daemons are put back on the live
    file, the refused text is not reloaded again, and the director's routes are still sent
    on top of the last accepted configuration (a VIP that should go is withdrawn)."""
    calls, vtysh_calls = tmp_path / "calls", tmp_path / "vtysh-calls"
    reload = tmp_path / "frr-reload"  # stands in for frr-reload.py: refuses "remote-as 64999"
    reload.write_text(
        "#!/bin/sh\n"
        f'for last; do :; done; echo "$last" >> {calls}; cp "$last" {calls}.last\n'
        'if grep -q "remote-as 64999" "$last"; then\n'
        '  echo "% Can not configure the local system as neighbor"; exit 1; fi\n'
    )
    vtysh = tmp_path / "vtysh"  # FRR's own parser for --dryrun; the daemons' side recorded
    dryruns = tmp_path / "dryruns"
    vtysh.write_text(
        f'#!/bin/sh\nif [ "$1" = --dryrun ]; then echo x >> {dryruns}; '
        f'exec {shutil.which("vtysh")} "$@"; fi\n'
        f'echo "$@" >> {vtysh_calls}\n'
    )
    for script in (reload, vtysh):
        script.chmod(0o755)
    text = BASE.replace(
        "bgp:\n",
        f"bgp:\n  config_file: {tmp_path}/frr.conf\n  reload: {reload}\n  vtysh: {vtysh}\n",
    )
    settings = parse_config(text)
    assert settings.bgp is not None
    frr = Frr(settings.bgp)
    fewer = {VIP: Route(VIP, "edge", False, "no healthy real server")}
    good_fewer = render_frr(settings.bgp, {**ROUTES, **fewer}, settings.pools)
    assert frr.install(good_fewer)
    good = render_frr(settings.bgp, ROUTES, settings.pools)
    checked = len(dryruns.read_text().split())
    assert frr.install(good)  # prefixes alone: one vtysh call, the file not parsed again
    assert len(dryruns.read_text().split()) == checked
    assert f"-c network {VIP}/32 route-map director-edge" in vtysh_calls.read_text()
    bad = good.replace("remote-as 64500", "remote-as 64999", 1)
    with pytest.raises(FrrRejected, match=r"^% Can not configure the local system as neighbor$"):
        frr.install(bad)
    from director.adapters.frr.conf import boot_text

    assert (tmp_path / "frr.conf").read_text() == boot_text(good)  # the live file: the old one
    assert frr.applied == good
    applied = calls.read_text().split()
    assert (tmp_path / "calls.last").read_text() == good, "the daemons were put back"
    assert all(call.endswith("/frr.conf") and "director-frr-" in call for call in applied), (
        "frr-reload.py is given <its confdir>/frr.conf: it saves nothing over FRR's file"
    )
    assert frr.rejected == 1
    sent = vtysh_calls.read_text()
    with pytest.raises(FrrRejected, match="refused by FRR"):  # the refusal stands, and shows
        frr.install(bad)
    assert vtysh_calls.read_text() == sent  # the same routes: nothing to send, nothing reloaded
    bad_fewer = render_frr(settings.bgp, {**ROUTES, **fewer}, settings.pools).replace(
        "remote-as 64500", "remote-as 64999", 1
    )
    with pytest.raises(FrrRejected, match="its routes are sent"):
        frr.install(bad_fewer)
    assert f"-c no network {VIP}/32" in vtysh_calls.read_text()  # withdrawn all the same
    assert len(calls.read_text().split()) == len(applied)  # no frr-reload.py for it again
    assert frr.rejected == 1
    assert frr.install(good) is True and frr.invalid is None  # a good file is whole again


# -- FRR for real, in a namespace of the host's own ---------------------------------------------
@contextlib.contextmanager
def keeping(frr_ns: tuple[Netns, Path], vtysh: str = "/usr/bin/vtysh") -> Iterator[FrrSync]:
    """FRR started in the namespace, and a director's FRR keeper (polled every second, so
    read back every 10 s) running against it."""
    from lab.bgp import start_frr

    ns, conf = frr_ns
    start_frr(ns)
    settings = frr_settings(ns.name, conf, vtysh)
    assert settings.bgp is not None
    sync = FrrSync(settings.bgp, settings.pools, "d.yaml", netns=ns.name)
    sync.start()
    try:
        yield sync
    finally:
        sync.stop()


@pytest.fixture
def frr_ns() -> Iterator[tuple[Netns, Path]]:
    """A namespace for FRR's zebra, bfdd and bgpd (FRR works on this host's kernel; IPVS
    does not): the tests start them, this stops them."""
    import os

    from lab.bgp import kill_frr

    if shutil.which("vtysh") is None or not Path("/usr/lib/frr/bgpd").exists():
        pytest.skip("FRR is not installed (make setup installs it)")
    ns = Netns(f"frr{os.getpid()}")
    ns.ip("link set lo up")
    try:
        yield ns, Path("/etc/frr") / ns.name / "frr.conf"
    finally:
        kill_frr(ns)
        ns.close()


def frr_settings(netns: str, conf: Path, vtysh: str = "/usr/bin/vtysh") -> Settings:
    extra = f"  config_file: {conf}\n  pathspace: {netns}\n  poll_seconds: 1\n  vtysh: {vtysh}\n"
    return parse_config(BASE.replace("bgp:\n", "bgp:\n" + extra))


def test_frr_restarted_from_its_boot_file_announces_nothing_until_the_director_sends_it_again(
    frr_ns: tuple[Netns, Path], tmp_path: Path
) -> None:
    """The file FRR boots from holds no route: FRR started alone (a reboot, a crash, no
    director) announces nothing the director has not confirmed. The director reads back what
    bgpd runs and sends its routes again (a repair, counted)."""
    from lab.bgp import kill_frr, start_frr
    from lab.wait import eventually

    ns, conf = frr_ns
    with keeping(frr_ns) as sync:
        sync.submit(dict(ROUTES))
        announced = f"{VIP}/32"
        eventually(
            lambda: announced in (sync.frr.running() or {}).get("ipv4", {}),
            timeout=30,
            what="the route sent",
        )
        assert sync.settle(30)
        assert "\n  network " not in conf.read_text() and "router bgp 64512" in conf.read_text()
        kill_frr(ns)  # FRR dies, and starts again from its file: no route
        start_frr(ns)
        assert announced not in (sync.frr.running() or {}).get("ipv4", {}), "the boot file"
        eventually(
            lambda: announced in (sync.frr.running() or {}).get("ipv4", {}),
            timeout=30,
            what="the route sent again",
        )
        frr_state = eventually(lambda: (s := sync.ledger.get("frr")) and s.repairs and s)
        assert frr_state.in_sync and frr_state.repairs >= 1


def test_vips_removed_from_lo_by_someone_else_are_put_back(
    frr_ns: tuple[Netns, Path], tmp_path: Path
) -> None:
    """``ip addr flush dev lo`` (networkd re-applying lo, say): IPVS takes no packet for a
    VIP that is not local, while FRR announces on. The director finds its VIPs gone at its
    next look at lo (every poll), puts them back and counts a repair."""
    from lab.wait import eventually

    ns, _conf = frr_ns
    with keeping(frr_ns) as sync:
        sync.submit(dict(ROUTES))
        assert sync.settle(30) and VIP in sync.frr.vips.on_lo()
        ns.exec(["ip", "addr", "flush", "dev", "lo"])  # (put back within poll_seconds: 1)
        eventually(lambda: VIP in sync.frr.vips.on_lo(), timeout=30, what="the VIP put back on lo")
        state = eventually(lambda: (s := sync.ledger.get("addresses")) and s.repairs and s)
        assert state.in_sync and state.repairs == 1


def test_vtysh_that_cannot_run_is_retried_never_taken_as_frr_refusing(
    frr_ns: tuple[Netns, Path], tmp_path: Path
) -> None:
    """vtysh missing mid-upgrade (or timing out) is a failure to run, tried again with a
    backoff: once it is back the routes changed meanwhile go out. Stored as "FRR refused
    this text", every later change was refused without being tried."""
    from lab.wait import eventually

    gone = tmp_path / "upgrading"
    vtysh = tmp_path / "vtysh"  # vtysh while the package is being replaced: not there
    vtysh.write_text(
        f'#!/bin/sh\nif [ -e {gone} ]; then echo "vtysh: not found" >&2; '
        f'exit 127; fi\nexec {shutil.which("vtysh")} "$@"\n'
    )
    vtysh.chmod(0o755)
    with keeping(frr_ns, str(vtysh)) as sync:
        sync.submit({VIP: ROUTES[VIP]})
        eventually(lambda: sync.installed is not None, timeout=30, what="the first routes")
        gone.touch()
        sync.submit(dict(ROUTES))  # a second VIP while vtysh cannot run
        eventually(lambda: sync.attempts >= 3, timeout=30, what="tried again")
        state = sync.ledger.get("frr")
        assert state is not None and not state.in_sync and state.kind == "transient"
        assert sync.frr.rejected == 0 and sync.frr.invalid is None, "not a refusal"
        gone.unlink()
        v6 = "2001:db8:100::5/128"
        eventually(
            lambda: v6 in (sync.frr.running() or {}).get("ipv6", {}),
            timeout=60,
            what="the second VIP announced once vtysh is back",
        )
        eventually(
            lambda: sync.ledger.get("frr").in_sync,  # type: ignore[union-attr]
            what="in sync once the routes went out",
        )


def test_a_director_restarted_while_frr_runs_its_file_sends_only_the_routes(
    frr_ns: tuple[Netns, Path], tmp_path: Path
) -> None:
    """A restart of the director alone (an upgrade, a rolling restart) while FRR runs on the
    file the director wrote: its first install sends the routes alone (one vtysh call),
    where frr-reload.py reads and diffs the whole configuration (a minute under emulation).
    A boot file that is not the director's, or a change of anything but routes, still goes
    through frr-reload.py."""
    from lab.bgp import start_frr
    from lab.wait import eventually

    ns, conf = frr_ns
    conf.unlink(missing_ok=True)  # (an earlier test's) FRR starts from nothing
    start_frr(ns)
    settings = frr_settings(ns.name, conf)
    assert settings.bgp is not None

    def director(routes: dict[str, Route]) -> FrrSync:
        sync = FrrSync(settings.bgp, settings.pools, "d.yaml", netns=ns.name)  # type: ignore[arg-type]
        sync.start()
        sync.submit(routes)
        assert sync.settle(60), sync.ledger.get("frr")
        return sync

    def announced() -> set[str]:
        running = FrrSync(settings.bgp, settings.pools, "d.yaml", netns=ns.name).frr.running()  # type: ignore[arg-type]
        return {p for nets in (running or {}).values() for p in nets}

    first = director({VIP: ROUTES[VIP]})
    assert first.frr.applied_by == "frr-reload"
    first.stop()
    second = director(dict(ROUTES))  # restarted, and a new VIP meanwhile
    try:
        assert second.frr.applied_by == "vtysh-resume"
        eventually(
            lambda: announced() == {f"{VIP}/32", "2001:db8:100::5/128"},
            what="the routes of the text, sent alone",
        )
        assert "\n  network " not in conf.read_text()
    finally:
        second.stop()
    conf.write_text(conf.read_text() + "! edited by hand\n")
    third = director(dict(ROUTES))
    try:
        assert third.frr.applied_by == "frr-reload", "a file the director did not write"
        assert announced() == {f"{VIP}/32", "2001:db8:100::5/128"}
    finally:
        third.stop()
