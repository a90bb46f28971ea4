"""`make bench` (in the lab VM): a keepalived pair whose master's CPU is starved, against
``advert_int`` and keepalived's real-time priority. Counts false failovers (VRRP changes
while nothing failed), split brain (both boxes holding the VIP) and broken connections;
then the takeover time after kill -9 of the master's keepalived, for each ``advert_int``.

Starving: the master's keepalived and two busy loops share a cgroup limited to a quarter of
one CPU per second (``cpu.max 250000 1000000``): once the loops have spent the quarter, every
process of the group waits for the next second, keepalived's adverts included. This is what a
box looks like whose CPU is taken (busy processes, a softirq storm under real traffic).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lab.ha import (
    NAT_VIP,
    HaLab,
    Talkers,
    build_ha_lab,
    kill_keepalived,
    start_director,
    stop_director,
)
from lab.wait import wait_for

CGROUP = Path("/sys/fs/cgroup/director-bench-starved")
QUOTA = "250000 1000000"  # a quarter of one CPU per second


def session_pids(leader: int) -> list[int]:
    """keepalived and its VRRP child (the session the lab started it in)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == leader:  # session id
                    pids.append(int(entry.name))
    return pids


class Starved:
    """The master's keepalived in a CPU-starved cgroup, beside two busy loops."""

    def __init__(self, keepalived_pid: int) -> None:
        root = Path("/sys/fs/cgroup")
        with contextlib.suppress(OSError):
            (root / "cgroup.subtree_control").write_text("+cpu")
        CGROUP.mkdir(exist_ok=True)
        (CGROUP / "cpu.max").write_text(QUOTA)
        self.loops = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)
        ]
        self.moved = session_pids(keepalived_pid)
        for pid in [*self.moved, *(p.pid for p in self.loops)]:
            (CGROUP / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        for proc in self.loops:
            proc.kill()
            proc.wait()
        for pid in self.moved:
            with contextlib.suppress(OSError):
                Path("/sys/fs/cgroup/cgroup.procs").write_text(str(pid))
        with contextlib.suppress(OSError):
            CGROUP.rmdir()


def masters(d: Any) -> int:
    """How many times this box's keepalived has entered MASTER (from its log)."""
    log = d.workdir / "keepalived.log"
    return log.read_text(errors="replace").count("Entering MASTER STATE") if log.exists() else 0


def watch_split_brain(lab: HaLab, stop: threading.Event, out: dict[str, float]) -> None:
    d1, d2 = lab.directors
    both = samples = 0
    while not stop.wait(0.02):
        samples += 1
        both += d1.has(NAT_VIP) and d2.has(NAT_VIP)
    out["split_brain_s"] = round(both * 0.02, 2)
    out["samples"] = samples


def scenario(advert: float, realtime: int, starve: bool, seconds: float) -> dict[str, Any]:
    name = f"a{int(advert * 100)}r{realtime}{'s' if starve else 'q'}"
    # FIFOs and pid files on the VM's own /tmp (the results folder is 9p: no FIFOs there).
    lab = build_ha_lab(name, Path(tempfile.mkdtemp(prefix=f"bench-ha-{name}-")))
    result: dict[str, Any] = {
        "advert_int": advert,
        "realtime_priority": realtime,
        "starved": starve,
        "seconds": seconds,
    }
    try:
        d1, d2 = lab.directors
        start_director(lab, d1, advert_int=advert, realtime=realtime)
        assert wait_for(lambda: d1.has(NAT_VIP), 30) is not None, "d1 never became master"
        start_director(lab, d2, advert_int=advert, realtime=realtime)
        assert wait_for(lambda: d2.runtime.controller.health.vrrp_state == "BACKUP", 30) is not None  # type: ignore[union-attr]
        time.sleep(2)
        talkers = Talkers(lab, NAT_VIP, count=50, period=0.1)
        wait_for(lambda: talkers.answered >= 300, 30)
        before = (masters(d1), masters(d2))
        stop = threading.Event()
        brain: dict[str, float] = {}
        watcher = threading.Thread(target=watch_split_brain, args=(lab, stop, brain))
        watcher.start()
        assert d1.keepalived is not None
        starved = Starved(d1.keepalived.pid) if starve else None
        try:
            time.sleep(seconds)
        finally:
            if starved is not None:
                starved.close()
        time.sleep(max(3 * advert + 1, 2))  # settle: the master takes its VIP back
        stop.set()
        watcher.join()
        result.update(brain)
        result["false_failovers"] = masters(d2) - before[1]
        result["master_returns"] = masters(d1) - before[0]
        result["one_master_after"] = d1.has(NAT_VIP) != d2.has(NAT_VIP)
        result["connections_alive"] = talkers.alive
        result["requests_failed"] = talkers.failed
        talkers.close()
        if not starve:  # the price of a slower advert: takeover after kill -9
            started = time.monotonic()
            kill_keepalived(d1)
            held = wait_for(lambda: d2.has(NAT_VIP), 30)
            result["takeover_s"] = None if held is None else round(time.monotonic() - started, 2)
    finally:
        for d in lab.directors:
            stop_director(d)
        lab.close()
    print(f"bench-ha: {json.dumps(result)}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for advert in (0.1, 0.3, 1.0):
        for realtime in (0, 50):
            runs.append(scenario(advert, realtime, True, args.seconds))
        runs.append(scenario(advert, 50, False, args.seconds))
    (args.out / "results.json").write_text(
        json.dumps({"kernel": os.uname().release, "runs": runs}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
