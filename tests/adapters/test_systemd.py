"""systemd's notify protocol, as `director run` speaks it under Type=notify (issue 14):
READY=1 once the first sync is applied, WATCHDOG=1 from the control loop while it steps, and
no ping once it stops stepping, so that systemd restarts a wedged director."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from director.adapters.systemd import Notifier

REPO = Path(__file__).resolve().parents[2]


def listen(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.2)
    return sock


def received(sock: socket.socket, seconds: float) -> list[str]:
    out: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            out.extend(sock.recv(4096).decode().split("\n"))
        except TimeoutError:
            continue
    return out


def test_outside_systemd_nothing_is_sent() -> None:
    quiet = Notifier({})
    assert not quiet.active and quiet.send("READY=1") is False
    assert Notifier({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}).every is None, "not mine"


def test_director_run_says_ready_then_feeds_the_watchdog_until_its_loop_stops(
    tmp_path: Path,
) -> None:
    sock = listen(tmp_path / "notify")
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
    )
    # The loop wedges after a few seconds of work: what SIGSTOP or a deadlock looks like to
    # systemd (the process is there, its loop no longer steps).
    script = (
        "import sys, threading, time\n"
        "import director.cli.main as cli, director.engine.loop as c\n"
        "from director.dataplane.fake import FakeIpvs\n"
        "import director.daemon.run; director.daemon.run.open_ipvs = lambda netns: FakeIpvs()\n"
        "real, began = c.Controller.step, time.monotonic()\n"
        "def step(self, wait=0.5):\n"
        "    if time.monotonic() - began > 3: threading.Event().wait()\n"
        "    real(self, 0.1)\n"
        "c.Controller.step = step\n"
        f"sys.exit(cli.main(['run', '--config', {str(config)!r}]))\n"
    )
    env = dict(
        os.environ,
        NOTIFY_SOCKET=str(tmp_path / "notify"),
        WATCHDOG_USEC="400000",
        PYTHONPATH=str(REPO),
    )
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.DEVNULL)
    try:
        early = received(sock, 4.0)
        assert "READY=1" in early and "STATUS=1 virtual services programmed" in early
        assert early.count("WATCHDOG=1") >= 3, early
        late = received(sock, 2.0)
        assert "WATCHDOG=1" not in late, "a loop that stopped stepping still fed the watchdog"
    finally:
        proc.kill()  # its loop is wedged for good: what systemd's watchdog would do
        proc.wait(30)
        sock.close()
