"""keepalived: render the pair's configuration (pure), install it safely, follow VRRP state.

- ``render_keepalived``: settings + VIP set -> keepalived.conf text, from
  ``templates/keepalived.conf.j2``. The template holds only layout; ``template_vars`` builds
  the plain values, every one validated first (addresses canonical, names and numbers
  checked), so nothing from the cluster can inject configuration.
- ``Keepalived.install``: writes the new file beside the live one, has keepalived validate it
  (``keepalived -t -f``), renames it into place and reloads keepalived (SIGHUP), only when the
  content changed. A file keepalived rejects never goes live; the error is logged in
  keepalived's own words and counted.
- Its VRRP state comes back through ``director.adapters.pair.vrrp``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from director.adapters.pair.processes import RealtimeVrrp, is_process
from director.adapters.render import TEMPLATES, environment
from director.adapters.worker import Keeper, file_drift, install_checked
from director.core.model import Family, canonical_address
from director.core.owned import Ledger, Refused, not_run, run_failure
from director.logs import event
from director.schema.ha import HaSettings

log = logging.getLogger("director.keepalived")
INSTANCE = "director"
STATES = ("MASTER", "BACKUP", "FAULT", "STOP")


# keepalived refuses a VRRPv3 instance whose virtual_ipaddress is empty ("No VIP specified").
# Before the first VIP, with inline_vips: 0, or when every VIP is of the other family, the
# instance holds this stand-in on lo instead, so the pair still elects and the VIPs float:
# IPv4's dummy address (RFC 7600), and an address of the IPv6 documentation prefix.
PLACEHOLDERS = {Family.INET: "192.0.0.8/32", Family.INET6: "2001:db8:ffff::8/128"}


# keepalived's check that the director on its box is alive (templates/alive-check.sh, run
# through /bin/sh: nothing to make executable, and keepalived's script security looks at
# /bin/sh): the heartbeat the control loop touches is younger than ha.alive_seconds.
ALIVE_CHECK = TEMPLATES / "alive-check.sh"
# keepalived runs it every 2 s, gives it 4 s (a loaded box starts processes slowly), and acts
# on 3 failures or 2 passes in a row.
ALIVE_INTERVAL, ALIVE_TIMEOUT, ALIVE_FALL, ALIVE_RISE = 2, 4, 3, 2
ALIVE_WEIGHT = -253  # a failing box drops to priority 1: its peer takes over (if preempting)
# keepalived's notify commands for conntrackd in primary-backup (templates/conntrackd-notify.sh,
# through /bin/sh as the alive check): the new master sends its table, the new backup asks.
CONNTRACKD_NOTIFY = TEMPLATES / "conntrackd-notify.sh"


def heartbeat_path(ha: HaSettings) -> Path | None:
    """The file the control loop touches, beside the FIFO; None when the tie is off (also
    with nopreempt: the peer would never take over from a lower-priority master)."""
    if not ha.alive_seconds or ha.nopreempt or not _plain(str(ALIVE_CHECK)):
        return None
    return Path(ha.fifo).parent / "alive"


def notify_command(ha: HaSettings) -> str | None:
    """keepalived's notify line for conntrackd (its state is appended), or None."""
    ct = ha.conntrackd
    if ct is None:
        return None
    paths = (str(CONNTRACKD_NOTIFY), ct.conntrackd, ct.config_file)
    bad = [p for p in paths if not _plain(p)]
    if bad:
        raise ValueError(f"ha.conntrackd: {bad[0]} cannot be quoted for keepalived")
    return "/bin/sh " + " ".join(paths)


def _plain(path: str) -> bool:
    """Safe inside keepalived's quoted script line (no blanks, quotes or backslashes)."""
    return path.startswith("/") and not re.search(r"[\s\"'\\]", path)


class Heartbeat:
    """The file keepalived's check looks at: touched at start (a restart has alive_seconds
    to reach its first sync) and, once ready, after the control loop's steps (at most once a
    second)."""

    def __init__(self, path: Path, every: float = 1.0) -> None:
        self.path, self.every = path, every
        self._next = 0.0
        self._failing = False  # said once, not every second

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()

    def beat(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every
            try:
                self.path.touch()
            except OSError as exc:
                if not self._failing:
                    event(
                        log,
                        "keepalived.heartbeat_failed",
                        level=logging.ERROR,
                        file=str(self.path),
                        reason=exc.strerror or str(exc),
                        effect="keepalived gives this box's VIPs to its peer",
                    )
                self._failing = True
            else:
                self._failing = False


def template_vars(ha: HaSettings, vips: Iterable[str], source_config: str) -> dict[str, Any]:
    """Plain, validated values for the template. VIPs of the unicast family go in
    virtual_ipaddress (the first ``inline_vips`` of them, so adverts stay small), the rest
    and every VIP of the other family in virtual_ipaddress_excluded; so do the floating
    gateways, by the same rule of family."""
    family = Family.of(ha.unicast_source)
    lines_inline: list[str] = []
    lines_excluded: list[str] = []
    for address, prefix, iface in ha.gateways:
        # keepalived refuses an address of the other family in virtual_ipaddress ("address
        # family must match VRRP instance"): a dual-stack pair's other gateway is excluded
        line = f"{canonical_address(address)}/{prefix} dev {iface}"
        (lines_inline if Family.of(address) is family else lines_excluded).append(line)
    gateways_inline = len(lines_inline)
    for vip in sorted({canonical_address(v) for v in vips}, key=_sort_key):
        vip_family = Family.of(vip)
        line = f"{vip}/{vip_family.max_prefix} dev {ha.interface}"
        if vip_family is family and len(lines_inline) < ha.inline_vips + gateways_inline:
            lines_inline.append(line)
        else:
            lines_excluded.append(line)
    if not lines_inline:
        scope = " scope host" if family is Family.INET else ""  # keepalived: no scope for v6
        lines_inline.append(f"{PLACEHOLDERS[family]} dev lo{scope}")
    heartbeat = heartbeat_path(ha)
    return {
        # A comment in the file: printable text only, so no line of configuration can hide
        # in the path it names.
        "source_config": "".join(c if c.isprintable() else "?" for c in source_config)[:200],
        "router_id": ha.router_id,
        "realtime_priority": ha.realtime_priority,
        "fifo": ha.fifo,
        "sync_interface": ha.sync_interface,
        "sync_id": ha.sync_id,
        "sync_port": ha.sync_port,
        "sync_group": None if ha.sync_group is None else canonical_address(ha.sync_group),
        "instance": INSTANCE,
        "interface": ha.interface,
        "virtual_router_id": ha.virtual_router_id,
        "priority": ha.priority,
        "advert_int": f"{ha.advert_int:.2f}",
        "nopreempt": ha.nopreempt,
        "preempt_delay": ha.preempt_delay,
        "unicast_source": canonical_address(ha.unicast_source),
        "peers": [canonical_address(p) for p in ha.peers],
        "track_interfaces": list(ha.track_interfaces),
        "inline": lines_inline,
        "excluded": lines_excluded,
        "notify": notify_command(ha),
        "alive": None
        if heartbeat is None
        else {
            "script": f"/bin/sh {ALIVE_CHECK}",
            "heartbeat": str(heartbeat),
            "seconds": ha.alive_seconds,
            "interval": ALIVE_INTERVAL,
            "timeout": ALIVE_TIMEOUT,
            "fall": ALIVE_FALL,
            "rise": ALIVE_RISE,
            "weight": ALIVE_WEIGHT,
        },
    }


def _sort_key(address: str) -> tuple[int, bytes]:
    import socket

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return (family, socket.inet_pton(family, address))


def render_keepalived(
    ha: HaSettings,
    vips: Iterable[str],
    source_config: str = "director",
    templates: Path = TEMPLATES,
) -> str:
    variables = template_vars(ha, vips, source_config)
    return environment(templates).get_template("keepalived.conf.j2").render(**variables)


class ConfigRejected(Refused):
    """keepalived refused a rendered configuration (its own words in the message)."""


class Keepalived:
    """The live keepalived.conf, and the daemon that reads it."""

    def __init__(self, ha: HaSettings) -> None:
        self.ha = ha
        self.path = Path(ha.config_file)
        self.rejected = 0  # configurations keepalived refused (a metric)
        self.reloads = 0
        self.last_error: str | None = None

    def validate(self, candidate: Path) -> None:
        try:
            done = subprocess.run(
                (["ip", "netns", "exec", self.ha.netns] if self.ha.netns else [])
                + [self.ha.keepalived, "-t", "-f", str(candidate)],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise run_failure(self.ha.keepalived, exc) from None
        failed = not_run(f"{self.ha.keepalived} -t", done.returncode, done.stderr)
        if failed is not None:  # killed (the OOM killer), or not there: not a verdict
            raise failed
        if done.returncode != 0:
            words = " | ".join(
                line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()
            )
            raise ConfigRejected(words[-2000:] or f"keepalived -t exited {done.returncode}")

    def install(self, text: str) -> bool:
        """Make ``text`` the live configuration; True when it changed (and keepalived was
        told). Raises ConfigRejected (the live file untouched) when keepalived refuses it,
        Transient when it could not be checked or written (a full disk, keepalived missing
        mid-upgrade)."""
        if not install_checked(self.path, text, self._checked, mode=0o600):
            return False
        self.reload()
        return True

    def _checked(self, candidate: Path) -> None:
        try:
            self.validate(candidate)
        except ConfigRejected as exc:
            self.rejected += 1
            self.last_error = str(exc)
            event(
                log,
                "keepalived.config_rejected",
                level=logging.ERROR,
                file=str(candidate),
                keepalived=str(exc),
            )
            raise

    def reload(self) -> None:
        """SIGHUP keepalived (it rereads its configuration, keeping its VRRP state), if the
        pid file names a running keepalived: never whatever process now holds the number."""
        try:
            pid = int(Path(self.ha.pid_file).read_text().split()[0])
        except (OSError, ValueError, IndexError) as exc:
            event(
                log,
                "keepalived.not_reloaded",
                level=logging.WARNING,
                reason=str(exc),
                pid_file=self.ha.pid_file,
            )
            return
        if not is_process(pid, self.ha.keepalived):
            event(
                log,
                "keepalived.not_reloaded",
                level=logging.WARNING,
                pid=pid,
                pid_file=self.ha.pid_file,
                reason="the pid file names no running keepalived (it reads the file when it "
                "starts)",
            )
            return
        try:
            os.kill(pid, signal.SIGHUP)
        except OSError as exc:
            event(log, "keepalived.not_reloaded", level=logging.WARNING, reason=str(exc), pid=pid)
            return
        self.reloads += 1
        event(log, "keepalived.reloaded", pid=pid, file=str(self.path))


class KeepalivedSync(Keeper[frozenset[str]]):
    """Renders and installs on a thread of its own (keepalived -t takes a while): the latest
    VIP set wins, the control loop never waits. The live file is read back every
    ``verify_seconds``: one changed or removed behind the director's back is put back (and
    keepalived told); so is the VRRP process's real-time priority (a new process, after
    keepalived restarted or respawned it, is given it then)."""

    name = "keepalived"
    resource = "keepalived"
    verify_seconds = 5.0

    def __init__(
        self,
        ha: HaSettings,
        source_config: str,
        keepalived: Keepalived | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.ha, self.source_config = ha, source_config
        self.keepalived = keepalived or Keepalived(ha)
        heartbeat = heartbeat_path(ha)
        self.heartbeat = None if heartbeat is None else Heartbeat(heartbeat)
        self.text: str | None = None  # the configuration installed last
        self.realtime = RealtimeVrrp(ha.pid_file, ha.keepalived, ha.realtime_priority)
        self._scheduling: str | None = None  # the drift verify found in the VRRP process
        super().__init__(ledger)

    def start(self) -> None:
        notify_command(self.ha)  # a path keepalived could not run: said at start, not later
        if self.heartbeat is not None:
            try:
                self.heartbeat.start()
            except OSError as exc:
                raise ValueError(
                    f"ha: the heartbeat {self.heartbeat.path}: {exc.strerror or exc}"
                ) from None
        elif self.ha.alive_seconds:
            reason = (
                "nopreempt: the peer never takes over from a lower-priority master"
                if self.ha.nopreempt
                else f"the check's path cannot be quoted for keepalived: {ALIVE_CHECK}"
            )
            event(log, "keepalived.alive_off", level=logging.WARNING, reason=reason)
        super().start()

    def install(self, value: frozenset[str]) -> None:
        text = render_keepalived(self.ha, value, self.source_config)
        self.keepalived.install(text)  # refused: logged and counted, the old file stays live
        self.text = text

    def verify(self, value: frozenset[str]) -> str | None:
        self._scheduling = None
        drift = file_drift(self.keepalived.path, self.text)
        if drift is None:
            running = self.realtime.processes()  # /proc scanned once a read-back
            self.realtime.adopt(running)  # a new VRRP process is given its priority, not drift
            drift = self._scheduling = self.realtime.drift(running)
        return drift

    def repair(self, value: frozenset[str], drift: str) -> None:
        if drift == self._scheduling:
            self.realtime.apply()
        else:
            self.install(value)
