"""keepalived's processes: which is which, and the VRRP one at real-time priority, set by the
director, not by keepalived.

keepalived's own ``vrrp_rt_priority`` has its reload SIGKILL the VRRP process now and then:
at each reload (every new VIP) keepalived drops real-time scheduling and "restores" its
RLIMIT_RTTIME from a value it never read (zero, keepalived 2.2.7 and its code as of 2026),
then raises the priority before the limit; a scheduler tick between the two kills the
process (``has rlimit_rttime been exceeded?`` in its log), the peer takes the VIPs, and the
master takes them back after ``preempt_delay``: two moves, and connections too young to be
on the backup yet are reset. In the lab VM, 3 reloads in 48 under load killed it (with a
limit of 1 s or 10 s alike), none in 24 without real-time scheduling.

So keepalived is told nothing about real-time scheduling: the director sets it on the
VRRP process (SCHED_RR, reset on fork so keepalived's scripts run as ordinary processes,
RLIMIT_RTTIME's soft and hard limits at ``LIMIT_US``: a runaway still ends), reads it back
with the file every few seconds and sets it again on a new VRRP process (keepalived
restarted, or its child respawned).
"""

from __future__ import annotations

import logging
import os
import resource
from pathlib import Path

from director.core.owned import Transient
from director.logs import event

log = logging.getLogger("director.keepalived")

LIMIT_US = 1_000_000  # CPU time between blocking calls, beyond which the kernel kills it
_POLICY_MASK = ~os.SCHED_RESET_ON_FORK


def is_process(pid: int, program: str) -> bool:
    """Whether process ``pid`` runs ``program`` (by its name, as the kernel keeps it): a
    pid file outlives its daemon, and the number may be another process's by now."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return comm == Path(program).name[:15]


def children(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The processes whose parent is ``pid`` (keepalived's VRRP process is its child)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return sorted(found)


class RealtimeVrrp:
    """The real-time priority of the VRRP process of the keepalived named by ``pid_file``
    (running ``program``). ``priority`` 0: nothing is set or checked."""

    def __init__(self, pid_file: str, program: str, priority: int) -> None:
        self.pid_file, self.program, self.priority = pid_file, program, priority
        self.sets = 0  # processes given the priority (a figure for tests and the lab)
        # VRRP processes the kernel would not give it (no CAP_SYS_NICE, RestrictRealtime):
        # said once each, then left as keepalived left them, as keepalived itself did
        self.refused: set[int] = set()
        self.seen: set[int] = set()  # VRRP processes given it (or refused) once

    def processes(self) -> list[int]:
        """keepalived's child processes that run keepalived (its VRRP process; the director's
        file starts no checker), or none while keepalived is not running."""
        try:
            parent = int(Path(self.pid_file).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        if not is_process(parent, self.program):
            return []
        return [pid for pid in children(parent) if is_process(pid, self.program)]

    def drift(self, running: list[int] | None = None) -> str | None:
        """What differs from the priority asked for, or None. ``running``: the VRRP
        processes as just read (``processes()``), so one read-back scans /proc once."""
        if not self.priority:
            return None
        for pid in self.processes() if running is None else running:
            if pid in self.refused:
                continue
            try:
                policy = os.sched_getscheduler(pid) & _POLICY_MASK
                priority = os.sched_getparam(pid).sched_priority
                limit = resource.prlimit(pid, resource.RLIMIT_RTTIME)
            except ProcessLookupError:  # ended meanwhile: its successor is read next time
                continue
            except OSError as exc:
                raise Transient(f"keepalived's VRRP process {pid}: {exc}") from None
            if policy != os.SCHED_RR or priority != self.priority:
                return (
                    f"keepalived's VRRP process {pid} runs at "
                    f"{'SCHED_RR ' + str(priority) if policy == os.SCHED_RR else 'ordinary'} "
                    f"scheduling, not SCHED_RR {self.priority}"
                )
            if limit != (LIMIT_US, LIMIT_US):
                return f"keepalived's VRRP process {pid} has RLIMIT_RTTIME {limit}"
        return None

    def adopt(self, running: list[int] | None = None) -> None:
        """Give the priority to a VRRP process never seen before (keepalived started, or
        respawned it): not drift, what a new process starts as. One that had it and lost
        it is drift (``drift``), repaired by ``apply``."""
        running = self.processes() if running is None else running
        if self.priority and not set(running) <= self.seen:
            self.apply(running)

    def apply(self, running: list[int] | None = None) -> None:
        """Set the priority (and the limit first: never real-time without it) on each VRRP
        process. A refusal (EPERM: no CAP_SYS_NICE) is logged once for that process, which
        keeps ordinary scheduling; any other failure raises Transient (tried again)."""
        if not self.priority:
            return
        running = self.processes() if running is None else running
        self.refused &= set(running)
        self.seen &= set(running)
        for pid in running:
            if pid in self.refused:
                continue
            try:
                resource.prlimit(pid, resource.RLIMIT_RTTIME, (LIMIT_US, LIMIT_US))
                os.sched_setscheduler(
                    pid, os.SCHED_RR | os.SCHED_RESET_ON_FORK, os.sched_param(self.priority)
                )
            except ProcessLookupError:
                continue
            except PermissionError as exc:
                self.refused.add(pid)
                self.seen.add(pid)
                event(
                    log,
                    "keepalived.realtime_refused",
                    level=logging.WARNING,
                    pid=pid,
                    priority=self.priority,
                    reason=f"{exc.strerror or exc} (the director needs CAP_SYS_NICE and "
                    "no RestrictRealtime=)",
                )
                continue
            except OSError as exc:
                raise Transient(f"keepalived's VRRP process {pid}: {exc}") from None
            self.sets += 1
            self.seen.add(pid)
            event(log, "keepalived.realtime_set", pid=pid, priority=self.priority)
