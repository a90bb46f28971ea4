"""A static box's restart on a real kernel: its table back from the kept datagrams before the
director has loaded (the replay), then a first sync that finds nothing to do; and every case
where the replay must not add a thing (a table there already, the file changed, a full-NAT
service)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.cli import main as cli
from director.dataplane import replay
from director.dataplane.kernel import KernelIpvs
from lab.netns import Netns
from lab.wait import eventually, stop_group

pytestmark = pytest.mark.kernel

SERVICES = 40


def config_text(services: int = SERVICES) -> str:
    """IPv4 and IPv6 services, a firewall mark, UDP and persistence: every shape a
    datagram can have."""
    lines = [
        "ownership: {networks: [198.51.100.0/24, '2001:db8:100::/64'], fwmarks: [7]}",
        "services:",
    ]
    for i in range(services):
        lines.append(
            f"  - {{name: s{i}, address: 198.51.100.{i + 1}, port: 80, scheduler: wlc,"
            f" real_servers: [192.0.2.{i + 1}:8080, 192.0.2.{i + 101}:8080]}}"
        )
    lines += [
        "  - {name: six, address: '2001:db8:100::1', port: 443, scheduler: sh,"
        " flags: [sh-port], real_servers: ['[2001:db8:200::1]:443']}",
        "  - {name: dns, address: 198.51.100.200, port: 53, protocol: udp, persistence: 60,"
        " real_servers: [192.0.2.250:53]}",
        "  - {name: marked, fwmark: 7, scheduler: rr, real_servers: [192.0.2.251:0]}",
    ]
    return "\n".join(lines) + "\n"


class Start:
    """``python -m director run`` in a namespace (a new one, or ``ns``), as systemd starts it."""

    def __init__(self, tmp: Path, name: str, ns: Netns | None = None) -> None:
        self.tmp, self.owned = tmp, ns is None
        self.ns = ns or Netns(name)
        self.ns.ip("link set lo up")
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self, cache: str | None = None) -> None:
        """``cache``: ``--config-cache`` ('' for none); the state directory's by default."""
        argv = [sys.executable, "-m", "director", "run", "--config", str(self.tmp / "d.yaml")]
        named = str(self.tmp / "config.cache") if cache is None else cache
        argv += ["--netns", self.ns.name, "--config-cache", named]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def said(self, event: str) -> str:
        lines = [line for line in self.text().splitlines() if f"event={event}" in line]
        return lines[-1] if lines else ""

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, event: str, timeout: float = 120.0) -> str:
        def seen() -> str:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode}: {self.text()[-3000:]}")
            return self.said(event)

        try:
            return eventually(seen, timeout, f"{event} in {self.log}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.text()[-3000:]}") from None

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            assert self.proc.wait(60) == 0, self.text()[-3000:]
            self.proc = None

    def close(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
        if self.owned:
            self.ns.close()


@pytest.fixture
def starts(tmp_path: Path) -> Iterator[list[Start]]:
    (tmp_path / "d.yaml").write_text(config_text())
    made: list[Start] = []
    try:
        yield made
    finally:
        for start in made:
            start.close()


def started(
    tmp: Path, starts: list[Start], name: str, event: str, ns: Netns | None = None
) -> tuple[Start, str]:
    """A start (in a new namespace, or ``ns``), once it said ``event``: the start and its line."""
    start = Start(tmp, name, ns)
    starts.append(start)
    start.run()
    return start, start.wait_for(event)


def refused(tmp: Path, starts: list[Start], name: str) -> Start:
    """A start (in a new namespace) that must exit with a failure: the start, once exited."""
    start = Start(tmp, name)
    starts.append(start)
    start.run()
    assert start.proc is not None
    code = start.proc.wait(120)
    start.proc = None
    assert code != 0, start.text()[-3000:]
    return start


def table(ns: str) -> dict[str, list[str]]:
    with KernelIpvs(netns=ns) as ipvs:
        held = ipvs.read()
    return {str(key): sorted(str(d) for d in vs.real_servers) for key, vs in held.services.items()}


def no_changes(config: Path, ns: str, capsys: pytest.CaptureFixture[str]) -> bool:
    assert cli.main(["plan", "--config", str(config), "--netns", ns]) == 0
    return "No changes: the kernel matches the configuration." in capsys.readouterr().out


def test_a_restart_finds_its_table_in_the_kernel_before_the_director_has_loaded(
    tmp_path: Path, starts: list[Start], capsys: pytest.CaptureFixture[str]
) -> None:
    first, kept = started(tmp_path, starts, "replay-first", "table.kept")
    assert f"services={SERVICES + 3}" in kept, kept
    assert "replayed=False" in first.said("startup.replay")  # nothing kept before it
    built = table(first.ns.name)
    first.stop()

    # A reboot: the kernel's table is empty, the state directory is not.
    second, said = started(tmp_path, starts, "replay-second", "startup.timing")
    replayed = second.said("startup.replay")
    assert f"replayed=True services={SERVICES + 3}" in replayed and "refused=0" in replayed
    assert "event=sync.first" not in second.text(), "the first sync found its table there"
    assert table(second.ns.name) == built
    assert no_changes(tmp_path / "d.yaml", second.ns.name, capsys)
    phases = dict(part.split("=", 1) for part in said.split() if "=" in part)
    assert float(phases["replay"]) < float(phases["total"])
    assert "event=table.kept" not in second.text(), "kept already: not written again"
    second.stop()

    # A restart without a reboot: the kernel holds the table, so the replay adds nothing.
    third, _ = started(tmp_path, starts, "replay-third", "startup.timing", ns=second.ns)
    assert "the kernel holds virtual services already" in third.said("startup.replay")
    third.stop()


def test_a_changed_file_or_a_foreign_service_stops_the_replay(
    tmp_path: Path, starts: list[Start]
) -> None:
    first, _ = started(tmp_path, starts, "replay-keep", "table.kept")
    first.stop()

    foreign = Start(tmp_path, "replay-foreign")
    starts.append(foreign)
    foreign.ns.exec(["ipvsadm", "-A", "-t", "203.0.113.9:80", "-s", "rr"])
    foreign.run()
    foreign.wait_for("startup.timing")
    assert "the kernel holds virtual services already" in foreign.said("startup.replay")
    assert "203.0.113.9" in " ".join(table(foreign.ns.name)), "the foreign service is left"
    foreign.stop()

    (tmp_path / "d.yaml").write_text(config_text(SERVICES - 1))
    changed, _ = started(tmp_path, starts, "replay-changed", "startup.timing")
    assert "the file or the code changed" in changed.said("startup.replay")
    assert len(table(changed.ns.name)) == SERVICES + 2  # the first sync built it
    changed.stop()


def test_full_nat_services_are_never_replayed(tmp_path: Path, starts: list[Start]) -> None:
    """Their SNAT rule must be in force before they are: the first sync puts them in."""
    (tmp_path / "d.yaml").write_text(
        config_text(2) + "  - {name: fn, address: 198.51.100.99, port: 80, forwarding: fullnat,"
        " real_servers: [192.0.2.99:8080]}\n"
        "snat: {addresses: [192.0.2.254]}\n"
    )
    first, kept = started(tmp_path, starts, "replay-fn1", "table.kept")
    assert "services=5" in kept  # 2 + 3, not the full-NAT one
    first.stop()
    second, _ = started(tmp_path, starts, "replay-fn2", "startup.timing")
    assert "replayed=True services=5" in second.said("startup.replay")
    assert "198.51.100.99" in " ".join(table(second.ns.name)), "the first sync added it"
    second.stop()


def api_box(tmp: Path, port: int) -> tuple[Path, Path]:
    """A file of four services (seven with the extra shapes) and ``api:`` on ``port``: its
    token and intents files."""
    token, intents = tmp / "token", tmp / "intents.json"
    token.write_text("a-token-of-some-thirty-two-chars\n")
    token.chmod(0o600)
    (tmp / "d.yaml").write_text(
        config_text(4)
        + f"api: {{listen: '127.0.0.1:{port}', token_file: {token}, intents_file: {intents}}}\n"
    )
    return token, intents


def test_a_box_with_the_api_replays_only_with_its_intents_as_they_were(
    tmp_path: Path, starts: list[Start]
) -> None:
    """A drain or a maintenance set through the API since the table was kept changes what
    the first sync must build: the replay leaves it to the first sync."""
    _, intents = api_box(tmp_path, 19181)
    first, kept = started(tmp_path, starts, "replay-api1", "table.kept")
    assert "services=7" in kept
    first.stop()
    second, _ = started(tmp_path, starts, "replay-api2", "startup.timing")
    assert "replayed=True services=7" in second.said("startup.replay")
    second.stop()
    if intents.exists():  # the same intents, written otherwise: not as they were
        intents.write_text(intents.read_text() + "\n")
    else:
        intents.write_text("{}\n")
    third, _ = started(tmp_path, starts, "replay-api3", "startup.timing")
    assert f"{intents} changed since it was kept" in third.said("startup.replay")
    assert len(table(third.ns.name)) == 7  # the first sync built it
    third.stop()


def test_a_box_whose_token_went_bad_replays_nothing_and_refuses_to_start(
    tmp_path: Path, starts: list[Start]
) -> None:
    """A reboot after the admin token was spoiled: the start refuses it (the unit runs no
    check before it), and the replay, which runs before the token is read, must not have
    put the table in first: the kernel stays empty, as it would have under a check."""
    token, _ = api_box(tmp_path, 19182)
    first, kept = started(tmp_path, starts, "replay-tok1", "table.kept")
    assert "services=7" in kept
    first.stop()
    token.write_text("short\n")
    second = refused(tmp_path, starts, "replay-tok2")
    assert f"{token} changed since it was kept" in second.said("startup.replay")
    assert "at least 16 characters" in second.text(), second.text()[-3000:]
    assert table(second.ns.name) == {}


def test_a_reboot_after_a_reload_replays_the_file_it_reloaded(
    tmp_path: Path, starts: list[Start], capsys: pytest.CaptureFixture[str]
) -> None:
    """The table was kept once, at the first sync: after a reload (SIGHUP) the reboot found
    it under the old file's key and replayed nothing, a cold start. It is kept again once
    the reload is read."""
    first, kept = started(tmp_path, starts, "replay-reload1", "table.kept")
    assert f"services={SERVICES + 3}" in kept, kept
    (tmp_path / "d.yaml").write_text(config_text(SERVICES - 5))
    assert first.proc is not None
    first.proc.send_signal(signal.SIGHUP)
    eventually(
        lambda: f"services={SERVICES - 2}" in first.said("table.kept"),
        120,
        "the reloaded file's table kept",
    )
    assert "event=config.reloaded" in first.text()
    built = table(first.ns.name)
    assert len(built) == SERVICES - 2
    first.stop()

    second, _ = started(tmp_path, starts, "replay-reload2", "startup.timing")
    replayed = second.said("startup.replay")
    assert f"replayed=True services={SERVICES - 2}" in replayed and "refused=0" in replayed
    assert table(second.ns.name) == built
    assert no_changes(tmp_path / "d.yaml", second.ns.name, capsys)
    second.stop()


def test_a_table_cache_someone_removed_is_written_again_before_the_reboot(
    tmp_path: Path, starts: list[Start]
) -> None:
    """The kept table is owned state: removed (by hand, a cleanup), it is drift, written
    again within a check's period, and the reboot after it still replays."""
    first, _ = started(tmp_path, starts, "replay-removed1", "table.kept")
    kept = tmp_path / "table.cache"
    kept.unlink()
    repaired = first.wait_for("owned.repaired", timeout=120)
    assert "resource=start-cache" in repaired and "table.cache was removed" in repaired
    assert replay.stored_key(str(kept)) is not None
    first.stop()

    second, _ = started(tmp_path, starts, "replay-removed2", "startup.timing")
    assert f"replayed=True services={SERVICES + 3}" in second.said("startup.replay")
    second.stop()


def test_a_first_start_has_its_table_in_the_kernel_as_soon_as_its_file_is_read(
    tmp_path: Path, starts: list[Start], capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing kept yet (a first boot): the child that parses the file into the cache sends
    the table once it has read the file, while the command loads; the first sync finds it
    there and sends nothing. Without a cache, the command's first moments read the file
    and it sends the table before it loads the rest."""
    first, said = started(tmp_path, starts, "early-child", "startup.timing")
    sent = first.said("startup.early")
    assert f"sent=True services={SERVICES + 3}" in sent and "refused=0" in sent, sent
    assert "forked=True parsed=True" in first.said("startup.parse_ahead")
    figures = dict(part.split("=", 1) for part in (sent + " " + said).split() if "=" in part)
    assert float(figures["seconds"]) < float(figures["total"])  # sent before it was ready
    assert "event=sync.first" not in first.text(), "the first sync found its table there"
    assert no_changes(tmp_path / "d.yaml", first.ns.name, capsys)
    built = table(first.ns.name)
    assert len(built) == SERVICES + 3
    first.stop()

    here = Start(tmp_path, "early-here")
    starts.append(here)
    here.run(cache="")
    here.wait_for("startup.timing")
    assert f"sent=True services={SERVICES + 3}" in here.said("startup.early")
    assert "forked=False" in here.said("startup.parse_ahead")  # no cache: no child
    assert "event=sync.first" not in here.text()
    assert table(here.ns.name) == built
    # The early table is the director's own, kept true as any: a service removed behind its
    # back is put back by the next resync.
    here.ns.exec(["ipvsadm", "-D", "-t", "198.51.100.1:80"])
    assert "198.51.100.1:80" not in " ".join(table(here.ns.name))
    assert "ops=3" in here.wait_for("resync.repaired", timeout=240)  # the service, 2 servers
    assert table(here.ns.name) == built
    here.stop()


def test_a_first_start_refused_after_its_early_table_takes_it_back(
    tmp_path: Path, starts: list[Start]
) -> None:
    """The file reads, so its table is sent at once; then the start refuses the admin
    token (read only once the director has loaded). No director keeps that table: it is
    taken back, and the kernel is as empty as it was."""
    token, _ = api_box(tmp_path, 19183)
    token.write_text("short\n")
    start = refused(tmp_path, starts, "early-refused")
    assert "sent=True services=7" in start.said("startup.early"), start.text()[-3000:]
    assert "at least 16 characters" in start.text()
    assert "services=7" in start.said("startup.withdrawn"), start.text()[-3000:]
    assert table(start.ns.name) == {}


def test_a_reboot_refused_after_its_replay_takes_the_replayed_table_back(
    tmp_path: Path, starts: list[Start]
) -> None:
    """The replay cannot tell that the API's port is taken on this boot: the table goes in,
    the start is refused once the API binds, and what the replay added is taken out again
    (until 0.4.29 it stayed, with no director keeping it)."""
    api_box(tmp_path, 19184)
    first, kept = started(tmp_path, starts, "replay-port1", "table.kept")
    assert "services=7" in kept
    first.stop()

    def taken() -> socket.socket:
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.bind(("127.0.0.1", 19184))
        holder.listen()
        return holder

    second = Start(tmp_path, "replay-port2")
    starts.append(second)
    holder = taken()  # where the director's API listens (--netns is IPVS's namespace only)
    try:
        second.run()
        assert second.proc is not None
        code = second.proc.wait(120)
        second.proc = None
    finally:
        holder.close()
    assert code != 0, second.text()[-3000:]
    assert "replayed=True services=7" in second.said("startup.replay"), second.text()[-3000:]
    assert "api.listen 127.0.0.1:19184" in second.text()
    assert "services=7" in second.said("startup.withdrawn"), second.text()[-3000:]
    assert table(second.ns.name) == {}
