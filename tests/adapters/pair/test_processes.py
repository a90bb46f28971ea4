"""keepalived's processes: the VRRP one found under the daemon its pid file names, and given
real-time priority by the director (keepalived's own setting has its reload kill it now
and then: see the real daemon's test in test_keepalived.py and the VM's in
tests/system/test_ha_realtime.py)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.adapters.pair.processes import LIMIT_US, RealtimeVrrp, children, is_process

# A parent and its child, both named keepalived by the kernel (prctl PR_SET_NAME before the
# fork), as keepalived and its VRRP process are.
TREE = (
    "import ctypes, os, sys, time\n"
    "ctypes.CDLL(None).prctl(15, b'keepalived', 0, 0, 0)\n"
    "if os.fork() == 0:\n"
    "    time.sleep(60); sys.exit(0)\n"
    "print('forked', flush=True); time.sleep(60)\n"
)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """(the parent's pid, its pid file)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "forked\n"
        pid_file = tmp_path / "keepalived.pid"
        pid_file.write_text(f"{parent.pid}\n")
        yield parent.pid, pid_file
    finally:
        os.killpg(parent.pid, 9)
        parent.wait(timeout=10)


def policy(pid: int) -> tuple[int, int]:
    scheduler = os.sched_getscheduler(pid) & ~os.SCHED_RESET_ON_FORK
    return scheduler, os.sched_getparam(pid).sched_priority


def test_the_vrrp_process_is_the_child_of_the_daemon_the_pid_file_names(
    tree: tuple[int, Path],
) -> None:
    parent, pid_file = tree
    (child,) = children(parent)
    assert is_process(parent, "/usr/sbin/keepalived") and is_process(child, "keepalived")
    assert not is_process(child, "conntrackd")
    assert RealtimeVrrp(str(pid_file), "keepalived", 50).processes() == [child]


def test_the_vrrp_process_is_given_real_time_priority_with_its_limit_and_read_back(
    tree: tuple[int, Path],
) -> None:
    """Its drift is said (ordinary scheduling); once set: SCHED_RR at the priority, reset
    on fork (keepalived's scripts run as ordinary processes), RLIMIT_RTTIME's soft and
    hard limits equal (the kernel kills a runaway; no SIGXCPU keepalived would not catch),
    and nothing left to repair. keepalived's own process is left as it was."""
    parent, pid_file = tree
    (child,) = children(parent)
    realtime = RealtimeVrrp(str(pid_file), "keepalived", 50)
    drift = realtime.drift()
    assert drift is not None and f"process {child} runs at ordinary scheduling" in drift
    realtime.apply()
    assert policy(child) == (os.SCHED_RR, 50)
    assert os.sched_getscheduler(child) & os.SCHED_RESET_ON_FORK
    assert resource.prlimit(child, resource.RLIMIT_RTTIME) == (LIMIT_US, LIMIT_US)
    assert realtime.drift() is None and realtime.sets == 1
    assert policy(parent) == (os.SCHED_OTHER, 0)
    other = RealtimeVrrp(str(pid_file), "keepalived", 20)
    assert "runs at SCHED_RR 50 scheduling, not SCHED_RR 20" in (other.drift() or "")


def test_nothing_is_touched_when_the_pid_file_names_no_keepalived(tmp_path: Path) -> None:
    """keepalived died and its number is another program's (or the file is gone, or the
    priority is 0): no process is changed, and nothing is said to drift."""
    other = subprocess.Popen(["sleep", "30"])
    try:
        pid_file = tmp_path / "keepalived.pid"
        pid_file.write_text(f"{other.pid}\n")
        for realtime in (
            RealtimeVrrp(str(pid_file), "keepalived", 50),
            RealtimeVrrp(str(tmp_path / "none.pid"), "keepalived", 50),
        ):
            assert realtime.processes() == [] and realtime.drift() is None
            realtime.apply()
            assert realtime.sets == 0
        assert policy(other.pid) == (os.SCHED_OTHER, 0)
    finally:
        other.kill()
        other.wait()


def test_priority_zero_leaves_the_vrrp_process_ordinary(tree: tuple[int, Path]) -> None:
    parent, pid_file = tree
    realtime = RealtimeVrrp(str(pid_file), "keepalived", 0)
    realtime.apply()
    assert realtime.drift() is None and realtime.sets == 0
    assert all(policy(pid) == (os.SCHED_OTHER, 0) for pid in children(parent))


def test_a_director_without_cap_sys_nice_says_so_once_and_leaves_it(tree: tuple[int, Path]) -> None:
    """Where the kernel refuses (the director's unit without CAP_SYS_NICE, or with
    RestrictRealtime=): one warning naming the process and what is missing, then that VRRP
    process is left ordinary and not reported as drift at every read-back."""
    parent, pid_file = tree
    (child,) = children(parent)
    script = (
        "import logging, sys\n"
        "from director.adapters.pair.processes import RealtimeVrrp\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')\n"
        f"realtime = RealtimeVrrp({str(pid_file)!r}, 'keepalived', 50)\n"
        "for _ in range(3):\n"
        "    realtime.apply()\n"
        "print('drift', realtime.drift(), 'sets', realtime.sets)\n"
    )
    done = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_nice", "--inh-caps", "-sys_nice",
         sys.executable, "-c", script],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout.splitlines()
    refused = [line for line in said if "event=keepalived.realtime_refused" in line]
    assert len(refused) == 1 and f"pid={child}" in refused[0], said
    assert "CAP_SYS_NICE" in refused[0]
    assert said[-1] == "drift None sets 0"
    assert policy(child) == (os.SCHED_OTHER, 0)


def test_a_new_vrrp_process_is_adopted_once_and_a_lost_priority_is_drift(
    tree: tuple[int, Path],
) -> None:
    """A VRRP process never seen is given the priority when read back (what a new one
    starts as, not drift); once seen, losing it is drift until ``apply`` repairs it."""
    parent, pid_file = tree
    (child,) = children(parent)
    realtime = RealtimeVrrp(str(pid_file), "keepalived", 50)
    realtime.adopt()
    realtime.adopt()
    assert realtime.sets == 1 and realtime.drift() is None
    os.sched_setscheduler(child, os.SCHED_OTHER, os.sched_param(0))
    realtime.adopt()
    assert realtime.sets == 1 and "ordinary" in (realtime.drift() or "")
    realtime.apply()
    assert realtime.drift() is None and policy(child) == (os.SCHED_RR, 50)
