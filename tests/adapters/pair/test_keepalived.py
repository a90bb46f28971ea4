"""keepalived configuration: rendering (pure), validation by the real keepalived, safe install,
and the VRRP state read from keepalived's notify FIFO."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.adapters.pair.keepalived import ConfigRejected, Keepalived, render_keepalived
from director.schema.ha import HaSettings
from lab.wait import eventually

KEEPALIVED = shutil.which("keepalived") or "/usr/sbin/keepalived"


@pytest.fixture
def netns() -> Iterator[str]:
    """A namespace with the interfaces the rendered file names (keepalived -t checks them)."""
    name = f"kt-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(
            [
                "ip",
                "-n",
                name,
                "link",
                "add",
                "eth-front",
                "type",
                "veth",
                "peer",
                "name",
                "eth-back",
            ],
            check=True,
        )
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def ha(tmp_path: Path, **kw: object) -> HaSettings:
    base = dict(
        interface="eth-front",
        router_id="d1",
        priority=150,
        unicast_source="203.0.113.11",
        peers=("203.0.113.12",),
        track_interfaces=("eth-back",),
        sync_interface="eth-back",
        sync_id=7,
        gateways=(("192.0.2.1", 24, "eth-back"),),
        inline_vips=2,
        config_file=str(tmp_path / "keepalived.conf"),
        pid_file=str(tmp_path / "k.pid"),
        fifo=str(tmp_path / "k.fifo"),
        keepalived=KEEPALIVED,
        preempt_delay=5,
    )
    base.update(kw)
    return HaSettings(**base)  # type: ignore[arg-type]


def test_render_puts_the_first_vips_inline_and_the_rest_excluded(tmp_path: Path) -> None:
    text = render_keepalived(
        ha(tmp_path), ["203.0.113.102", "203.0.113.100", "2001:db8::1", "203.0.113.101"]
    )
    inline = text.split("virtual_ipaddress {")[1].split("}")[0].split()
    excluded = text.split("virtual_ipaddress_excluded {")[1].split("}")[0].split()
    assert " ".join(inline) == (
        "192.0.2.1/24 dev eth-back 203.0.113.100/32 dev eth-front 203.0.113.101/32 dev eth-front"
    )
    assert " ".join(excluded) == ("203.0.113.102/32 dev eth-front 2001:db8::1/128 dev eth-front")
    assert "version 3" in text and "advert_int 0.10" in text and "preempt_delay 5" in text
    # real-time priority is the director's to set (keepalived's own: see the reload test)
    settings = [line.split()[0] for line in text.splitlines() if line.strip()]
    assert "vrrp_rt_priority" not in settings and "vrrp_rlimit_rttime" not in settings
    assert "unicast_src_ip 203.0.113.11" in text and "203.0.113.12" in text
    assert "lvs_sync_daemon eth-back director id 7" in text
    assert f"notify_fifo {tmp_path / 'k.fifo'}" in text


def test_the_rendered_file_passes_keepalived_t(tmp_path: Path, netns: str) -> None:
    target = tmp_path / "k.conf"
    settings = ha(tmp_path, netns=netns, sync_port=8849, sync_group="239.255.81.81")
    target.write_text(render_keepalived(settings, ["203.0.113.100", "2001:db8::7"]))
    assert "lvs_sync_daemon eth-back director id 7 port 8849 group 239.255.81.81" in (
        target.read_text()
    )
    Keepalived(settings).validate(target)  # raises with keepalived's words on failure


def test_a_floating_gateway_of_the_other_family_passes_keepalived_t(
    tmp_path: Path, netns: str
) -> None:
    """Issue 71, 2: an IPv6 floating gateway on an IPv4 pair (what dual-stack full NAT in a
    pair needs) was rendered into virtual_ipaddress, and keepalived refused every file ("address
    family must match VRRP instance"). It goes to virtual_ipaddress_excluded, which moves with
    the instance whatever its family, and keepalived -t takes the file."""
    target = tmp_path / "k.conf"
    gateways = (("192.0.2.1", 24, "eth-back"), ("2001:db8:1::1", 64, "eth-back"))
    settings = ha(tmp_path, netns=netns, gateways=gateways)
    text = render_keepalived(settings, ["203.0.113.100", "2001:db8::7"])
    inline = text.split("virtual_ipaddress {")[1].split("}")[0]
    excluded = text.split("virtual_ipaddress_excluded {")[1].split("}")[0]
    assert "192.0.2.1/24 dev eth-back" in inline and "2001:db8:1::1" not in inline
    assert "2001:db8:1::1/64 dev eth-back" in excluded
    target.write_text(text)
    Keepalived(settings).validate(target)  # raises with keepalived's words on failure


def test_nothing_from_the_cluster_reaches_the_file_unchecked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an IPv4 or IPv6 address"):
        render_keepalived(ha(tmp_path), ["203.0.113.100 dev lo\n}\nvrrp_script x {"])


def test_a_rejected_config_never_goes_live_and_an_unchanged_one_is_not_reloaded(
    tmp_path: Path, netns: str
) -> None:
    settings = ha(tmp_path, netns=netns)
    manager = Keepalived(settings)
    good = render_keepalived(settings, ["203.0.113.100"])
    pid_file = Path(settings.pid_file)
    sleeper = subprocess.Popen([stand_in(tmp_path), "30"])  # stands in for keepalived's parent
    pid_file.write_text(f"{sleeper.pid}\n")
    try:
        hangups: list[int] = []
        signal.signal(signal.SIGHUP, lambda *_: hangups.append(1))
        assert manager.install(good) is True
        assert manager.reloads == 1
        assert manager.install(good) is False, "same content: no write, no reload"
        assert manager.reloads == 1
        broken = good.replace("virtual_router_id 51", "virtual_router_id 512")
        with pytest.raises(ConfigRejected) as caught:
            manager.install(broken)
        assert "VRID '512' not valid" in str(caught.value), "keepalived's own words"
        assert Path(settings.config_file).read_text() == good, "the old file stays live"
        assert Path(settings.config_file + ".new").read_text() == broken, "the refused aside"
        assert manager.rejected == 1 and manager.reloads == 1
    finally:
        sleeper.kill()
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def stand_in(folder: Path) -> str:
    """A program the kernel calls keepalived (sleep, copied under that name)."""
    path = folder / "keepalived"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", path)
    return str(path)


def test_a_reload_never_signals_a_process_that_is_not_keepalived(
    tmp_path: Path, netns: str, caplog: pytest.LogCaptureFixture
) -> None:
    """keepalived died and its pid was reused: the pid file names another program, which a
    SIGHUP would kill (or make reload its own configuration). It is left alone; the new
    file is in place for keepalived's next start."""
    settings = ha(tmp_path, netns=netns)
    manager = Keepalived(settings)
    other = subprocess.Popen(["sleep", "30"])  # holds the number keepalived once had
    Path(settings.pid_file).write_text(f"{other.pid}\n")
    try:
        assert manager.install(render_keepalived(settings, ["203.0.113.100"])) is True
        time.sleep(0.2)
        assert other.poll() is None, "the other process was not signalled"
        assert manager.reloads == 0 and "names no running keepalived" in caplog.text
        assert "203.0.113.100" in Path(settings.config_file).read_text()
    finally:
        other.kill()


@pytest.mark.parametrize(
    ("source", "vips", "inline_vips"),
    [
        ("203.0.113.11", [], 2),  # a Kubernetes-only director before its first VIP
        ("203.0.113.11", ["203.0.113.100", "203.0.113.101"], 0),
        ("203.0.113.11", ["2001:db8::7", "2001:db8::8"], 2),  # every VIP of the other family
        ("2001:db8:1::11", ["203.0.113.100"], 2),  # an IPv6 pair with IPv4 VIPs
    ],
    ids=["no-vip", "inline-0", "only-ipv6-vips", "ipv6-pair"],
)
def test_every_shape_of_vip_set_passes_keepalived_t(
    tmp_path: Path, netns: str, source: str, vips: list[str], inline_vips: int
) -> None:
    """keepalived refuses a VRRPv3 instance with an empty virtual_ipaddress ("No VIP
    specified", exit 5): the instance then holds a stand-in, and the VIPs still float."""
    peer = "2001:db8:1::12" if ":" in source else "203.0.113.12"
    settings = ha(
        tmp_path,
        netns=netns,
        unicast_source=source,
        peers=(peer,),
        gateways=(),
        inline_vips=inline_vips,
    )
    target = tmp_path / "k.conf"
    text = render_keepalived(settings, vips)
    target.write_text(text)
    Keepalived(settings).validate(target)
    inline = text.split("virtual_ipaddress {")[1].split("}")[0].split()
    assert inline[0] in ("192.0.0.8/32", "2001:db8:ffff::8/128") or inline[0].split("/")[0] in vips
    for vip in vips:
        assert f"{vip}/" in text, "every VIP is in the file"


# -- keepalived knows whether the director on its box is alive (issue 18) -------------------
def alive(heartbeat: Path, seconds: int) -> int:
    """The check keepalived runs, as it runs it (the script line of the rendered file)."""
    from director.adapters.pair.keepalived import ALIVE_CHECK

    return subprocess.run(
        ["/bin/sh", str(ALIVE_CHECK), str(heartbeat), str(seconds)], check=False
    ).returncode


def test_the_liveness_check_passes_on_a_fresh_heartbeat_only(tmp_path: Path) -> None:
    beat = tmp_path / "alive"
    assert alive(beat, 30) == 1, "no heartbeat: the director never started here"
    beat.touch()
    assert alive(beat, 30) == 0
    old = time.time() - 31
    os.utime(beat, (old, old))
    assert alive(beat, 30) == 1, "the control loop has not stepped for 31 s"
    assert alive(beat, 60) == 0


def test_the_tie_is_rendered_unless_off_or_nopreempt(tmp_path: Path) -> None:
    text = render_keepalived(ha(tmp_path, alive_seconds=20), [])
    assert f'script "/bin/sh {tmp_path.parent}' not in text  # the shipped check, not a tmp file
    script = text.split("vrrp_script director_alive {")[1].split("}")[0]
    assert f"alive-check.sh {tmp_path / 'alive'} 20" in script and "weight -253" in script
    assert "enable_script_security" in text and "track_script {\n        director_alive" in text
    for off in (ha(tmp_path, alive_seconds=0), ha(tmp_path, nopreempt=True)):
        assert "director_alive" not in render_keepalived(off, [])


def alive_settings(tmp_path: Path, netns: str, **kw: object) -> HaSettings:
    """One box of a pair in ``netns`` with the alive check (no sync daemon: the host has no
    IPVS), its front link up with its address."""
    subprocess.run(["ip", "-n", netns, "link", "set", "eth-front", "up"], check=True)
    subprocess.run(["ip", "-n", netns, "link", "set", "eth-back", "up"], check=True)
    subprocess.run(
        ["ip", "-n", netns, "addr", "add", "203.0.113.11/24", "dev", "eth-front"], check=True
    )
    base: dict[str, object] = dict(
        interface="eth-front",
        router_id="d1",
        priority=150,
        unicast_source="203.0.113.11",
        peers=("203.0.113.12",),
        config_file=str(tmp_path / "keepalived.conf"),
        pid_file=str(tmp_path / "k.pid"),
        fifo=str(tmp_path / "k.fifo"),
        keepalived=KEEPALIVED,
        netns=netns,
        alive_seconds=3,
    )
    return HaSettings(**{**base, **kw})  # type: ignore[arg-type]


@contextlib.contextmanager
def running_keepalived(
    tmp_path: Path, settings: HaSettings, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[Path, Path]]:
    """The real daemon (VRRP only) on the rendered file, in the settings' namespace: (its
    file, its log). ``prefix``: what keepalived is exec'd through (real-time, say)."""
    conf = tmp_path / "keepalived.conf"
    conf.write_text(render_keepalived(settings, ["203.0.113.100"]))
    log = tmp_path / "keepalived.log"
    assert settings.netns is not None
    daemon = subprocess.Popen(
        ["ip", "netns", "exec", settings.netns, *prefix, KEEPALIVED, "--dont-fork", "--log-console",
         "--vrrp", "-f", str(conf), "-p", str(tmp_path / "k.pid"), "-r",
         str(tmp_path / "v.pid")],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield conf, log
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=30)


def checking(log: Path) -> None:
    """keepalived's log says the alive check passed."""
    eventually(
        lambda: "VRRP_Script(director_alive) succeeded" in log.read_text(),
        30,
        what="the check passing",
    )


def test_keepalived_lowers_the_priority_of_a_box_whose_director_stopped_stepping(
    tmp_path: Path, netns: str
) -> None:
    """The real daemon with the rendered file: a heartbeat older than alive_seconds drops
    this box to priority 1 (its peer takes over); a fresh one puts it back."""
    from director.adapters.pair.keepalived import Heartbeat, heartbeat_path

    settings = alive_settings(tmp_path, netns)
    path = heartbeat_path(settings)
    assert path is not None
    beat = Heartbeat(path)
    beat.start()
    with running_keepalived(tmp_path, settings) as (_conf, log):
        checking(log)
        assert "priority from 150 to 1" not in log.read_text()
        eventually(
            lambda: "Changing effective priority from 150 to 1" in log.read_text(),
            30,
            what="the priority dropping once the heartbeat is older than 3 s",
        )

        def stepping() -> bool:  # the loop steps again, and keeps stepping
            beat.path.touch()
            return "Changing effective priority from 1 to 150" in log.read_text()

        eventually(stepping, 30, what="the priority back")
        assert "SECURITY VIOLATION" not in log.read_text()


def test_a_reload_keeps_the_alive_check_and_the_notify_commands(tmp_path: Path, netns: str) -> None:
    """keepalived reloads (SIGHUP) at every change of the VIP set. keepalived 2.2 re-reads
    the file in order and, on a reload, could not give the scripts a user before reaching
    ``script_user``: it dropped the alive check ("Unable to set default user for vrrp script
    director_alive - removing"), so a box whose director had stopped kept its VIPs."""
    from director.adapters.pair.keepalived import heartbeat_path
    from director.schema.ha import ConntrackdSettings

    conntrackd = ConntrackdSettings(
        source="192.0.2.2", peer="192.0.2.3", interface="eth-back",
        config_file=str(tmp_path / "conntrackd.conf"),
    )  # fmt: skip
    settings = alive_settings(tmp_path, netns, conntrackd=conntrackd)
    path = heartbeat_path(settings)
    assert path is not None
    path.touch()
    with running_keepalived(tmp_path, settings) as (_conf, log):
        checking(log)
        os.kill(int((tmp_path / "k.pid").read_text()), signal.SIGHUP)
        eventually(lambda: "Reload complete" in log.read_text(), 30, what="the reload")
        said = log.read_text()
        assert "removing" not in said and "Unable to set default user" not in said, said
        assert "Failed to set default user" not in said, said  # the notify commands
        eventually(  # and the check still acts: no heartbeat since, the priority drops
            lambda: "Changing effective priority from 150 to 1" in log.read_text(),
            30,
            what="the alive check acting after the reload",
        )


def test_a_heartbeat_that_cannot_be_written_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from director.adapters.pair.keepalived import Heartbeat

    beat = Heartbeat(tmp_path / "gone" / "alive", every=0)  # its folder does not exist
    with caplog.at_level("ERROR", logger="director.keepalived"):
        for _ in range(5):
            beat.beat()
    assert sum("keepalived.heartbeat_failed" in r.getMessage() for r in caplog.records) == 1
    (tmp_path / "gone").mkdir()
    beat.beat()
    assert (tmp_path / "gone" / "alive").exists()


def test_a_vip_set_keepalived_could_not_take_is_kept_and_installed_once_it_can(
    tmp_path: Path, netns: str
) -> None:
    """keepalived missing mid-upgrade (or keepalived -t timing out, or the disk full): the
    install could not run. The VIP set is kept and tried again with a backoff (it was
    dropped, and a new Service's VIP never reached the pair until another VIP changed);
    the failure shows as transient; once keepalived is back the set goes live. A file
    someone else changes is put back."""
    from director.adapters.pair.keepalived import KeepalivedSync

    binary = tmp_path / "bin" / "keepalived"
    binary.parent.mkdir()
    binary.write_text(f'#!/bin/sh\nexec {KEEPALIVED} "$@"\n')
    binary.chmod(0o755)
    settings = ha(tmp_path, netns=netns, keepalived=str(binary))
    sync = KeepalivedSync(settings, "d.yaml")
    sync.start()
    try:
        sync.submit(frozenset({"203.0.113.100"}))
        assert sync.settle(30)
        binary.rename(tmp_path / "bin" / "keepalived.upgrading")
        sync.submit(frozenset({"203.0.113.100", "203.0.113.101"}))
        eventually(lambda: sync.attempts >= 3, timeout=20, what="tried again")
        state = sync.ledger.get("keepalived")
        assert state is not None and not state.in_sync and state.kind == "transient"
        assert sync.pending is not None and sync.keepalived.rejected == 0
        assert "203.0.113.101" not in Path(settings.config_file).read_text()
        (tmp_path / "bin" / "keepalived.upgrading").rename(binary)
        eventually(
            lambda: "203.0.113.101" in Path(settings.config_file).read_text(),
            timeout=40,
            what="the set installed once keepalived is back",
        )
        eventually(lambda: sync.ledger.get("keepalived").in_sync)  # type: ignore[union-attr]
        Path(settings.config_file).write_text("# someone else's\n")
        eventually(
            lambda: "203.0.113.101" in Path(settings.config_file).read_text(),
            timeout=20,
            what="the file put back",
        )
        eventually(
            lambda: sync.ledger.get("keepalived").repairs == 1,  # type: ignore[union-attr]
            what="the repair counted",
        )
    finally:
        sync.stop()


def reloaded(tmp_path: Path, log: Path, count: int) -> None:
    """SIGHUP to the running keepalived, as systemctl reload sends it; back once its log
    says ``count`` reloads are complete."""
    os.kill(int((tmp_path / "k.pid").read_text()), signal.SIGHUP)
    eventually(
        lambda: log.read_text().count("Reload complete") >= count, 30, what=f"reload {count}"
    )


def test_reloads_keep_the_vrrp_process_real_time_and_alive(tmp_path: Path, netns: str) -> None:
    """The real daemon: the director gives its VRRP process real-time priority (at the
    keeper's read-back; taken away behind its back, it is drift, and repaired), and reload
    after reload (one at each
    change of the VIP set) the same process keeps it. With keepalived's own
    vrrp_rt_priority, each reload set the process's RLIMIT_RTTIME to zero for a moment and
    the kernel now and then killed it (the peer took the VIPs)."""
    from director.adapters.pair.keepalived import KeepalivedSync
    from director.adapters.pair.processes import LIMIT_US

    settings = alive_settings(tmp_path, netns, alive_seconds=0)
    sync = KeepalivedSync(settings, "d.yaml")
    vips = frozenset({"203.0.113.100"})
    with running_keepalived(tmp_path, settings) as (_conf, log):
        (vrrp,) = eventually(sync.realtime.processes, 30, what="the VRRP process")
        sync.install(vips)  # the file as the keeper writes it (and a reload)
        eventually(lambda: "Reload complete" in log.read_text(), 30, what="the first reload")
        assert sync.verify(vips) is None, "a new VRRP process is given it: not drift"
        assert sync.realtime.sets == 1
        os.sched_setscheduler(vrrp, os.SCHED_OTHER, os.sched_param(0))  # behind our back
        drift = sync.verify(vips)
        assert drift is not None and "ordinary scheduling, not SCHED_RR 50" in drift
        sync.repair(vips, drift)
        assert sync.verify(vips) is None and sync.realtime.sets == 2
        for reload in range(2, 7):
            reloaded(tmp_path, log, reload)
        assert sync.realtime.processes() == [vrrp], log.read_text()
        assert os.sched_getscheduler(vrrp) & ~os.SCHED_RESET_ON_FORK == os.SCHED_RR
        assert os.sched_getparam(vrrp).sched_priority == 50
        assert resource.prlimit(vrrp, resource.RLIMIT_RTTIME) == (LIMIT_US, LIMIT_US)
        assert sync.verify(vips) is None
        assert "signal 9" not in log.read_text() and "died" not in log.read_text()


def test_keepalived_started_real_time_keeps_it_through_reloads_on_its_own(
    tmp_path: Path, netns: str
) -> None:
    """How the role's drop-in and the lab start it: keepalived exec'd at SCHED_RR 50 with the
    1 s limit, its file saying nothing of either. Its VRRP process inherits both and keeps
    them reload after reload with no director to set them (keepalived resets only what it
    set itself): never ordinary, from its first advert. The director then adopts it (reset
    on fork, so keepalived's scripts run ordinary), and that is not drift."""
    from director.adapters.pair.keepalived import KeepalivedSync
    from director.adapters.pair.processes import LIMIT_US
    from lab.ha import realtime_exec

    settings = alive_settings(tmp_path, netns, alive_seconds=0)
    sync = KeepalivedSync(settings, "d.yaml")

    def scheduling(pid: int) -> tuple[int, int, tuple[int, int]]:
        return (
            os.sched_getscheduler(pid),
            os.sched_getparam(pid).sched_priority,
            resource.prlimit(pid, resource.RLIMIT_RTTIME),
        )

    inherited = (os.SCHED_RR, 50, (LIMIT_US, LIMIT_US))
    with running_keepalived(tmp_path, settings, tuple(realtime_exec(50))) as (conf, log):
        said = [line.split()[0] for line in conf.read_text().splitlines() if line.strip()]
        assert "vrrp_rt_priority" not in said and "vrrp_rlimit_rttime" not in said
        (vrrp,) = eventually(sync.realtime.processes, 30, what="the VRRP process")
        assert scheduling(vrrp) == inherited
        for reload in range(1, 5):
            reloaded(tmp_path, log, reload)
            assert scheduling(vrrp) == inherited, f"after reload {reload}"
        assert sync.realtime.processes() == [vrrp], log.read_text()
        sync.realtime.adopt()
        assert sync.realtime.sets == 1 and sync.realtime.drift() is None
        assert scheduling(vrrp) == (os.SCHED_RR | os.SCHED_RESET_ON_FORK, 50, inherited[2])
        assert "signal 9" not in log.read_text()
