"""FRR: announce the VIPs of ``bgp`` pools to the routers (MetalLB's FRR mode is the model).
The text is ``conf``'s, the thread that keeps it true ``sync``'s.

- ``Frr.install``: writes the new file beside the live one, has vtysh check it
  (``vtysh --dryrun -f``), applies only the difference to the running daemons with FRR's
  own ``frr-reload.py --reload`` (bgpd is never restarted: an announcement change resets no
  session), then renames it into place for FRR's next start. A file FRR rejects never goes
  live: the error is logged in FRR's words and counted.
- ``Frr.vips``: the VIPs held on ``lo`` (``director.adapters.frr.loopback``).
- ``Frr.peers``: each session as FRR reports it (state, uptime, BFD), for the status page
  and the metrics.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from director.adapters.frr.conf import (
    ANSI,
    Networks,
    boot_text,
    frr_words,
    net_commands,
    network_delta,
    parse_peers,
    same_but_routes,
    split_networks,
)
from director.adapters.frr.loopback import LoopbackVips
from director.core.announce import PeerState
from director.core.owned import (
    REFUSED_RETRY,
    Failure,
    Refused,
    Transient,
    classify,
    not_run,
    run_failure,
    write_atomic,
)
from director.logs import event
from director.schema.bgp import BgpSettings

log = logging.getLogger("director.frr")
# The longest frr-reload.py may take (it starts Python and reads back the whole running
# configuration: about a second on a real box, a minute under software emulation). A leave
# waits for one in flight: the withdrawal goes out after it.
RELOAD_SECONDS = 120
VERIFY_SECONDS = 10.0  # what FRR announces is read back this often, at least
FRR_CONFDIR = Path("/etc/frr")  # where FRR's own vtysh.conf is (per pathspace below it)


class FrrRejected(Refused):
    """FRR refused a rendered configuration (its words inside)."""


class Frr:
    """What FRR runs (its announcements), the file it boots from, and (``vips``) the VIPs
    held on ``lo``."""

    def __init__(self, bgp: BgpSettings, netns: str | None = None) -> None:
        self.bgp, self.netns = bgp, netns
        self.path = Path(bgp.config_file)  # the file FRR boots from (no network lines)
        self.rejected = 0  # configurations FRR refused (a metric)
        self.reloads = 0
        self.applied_by = ""  # how the last text went in: frr-reload, vtysh, vtysh-resume
        self.last_error: str | None = None
        self.vips = LoopbackVips(self._run, self._ip())  # the VIPs this director holds on lo
        self.applied: str | None = None  # the whole text FRR last took (network lines too)
        # The last text FRR refused, and when: the same text is not sent again until it
        # changes or REFUSED_RETRY has passed (an upgrade may have fixed FRR).
        self.invalid: tuple[str, float] | None = None
        # After a refusal the daemons run the last accepted text again; the director's
        # routes are still sent on top of it (these are the networks they run), so that a
        # refused configuration never leaves a VIP announced that should not be.
        self.held_back: Networks | None = None

    def _run(self, cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run one of FRR's programs; one that cannot be run or does not finish is a
        transient failure, never FRR's verdict."""
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise run_failure(cmd[0], exc) from None

    def _vtysh(self) -> list[str]:
        return [self.bgp.vtysh, *(["-N", self.bgp.pathspace] if self.bgp.pathspace else [])]

    def _ip(self) -> list[str]:
        return ["ip", *(["-n", self.netns] if self.netns else [])]

    def validate(self, text: str) -> None:
        """FRR's own parser on ``text`` (``vtysh --dryrun``)."""
        with self._staged(text) as candidate:
            done = self._run([self.bgp.vtysh, "--dryrun", "-f", str(candidate)])
        failed = not_run(f"{self.bgp.vtysh} --dryrun", done.returncode, done.stderr)
        if failed is not None:
            raise failed
        if done.returncode != 0:
            raise FrrRejected(frr_words(done))

    def apply(self, text: str) -> None:
        """The difference between what the daemons run and ``text``, applied by FRR. The
        text, and frr-reload.py's work files, go to a folder of the director's own (not
        FRR's ``/run/frr``, which a sandboxed director may not write), named as FRR's
        configuration folder: frr-reload.py then saves nothing (given a file other than
        ``<confdir>/frr.conf`` it runs ``write``, and FRR's boot file would hold the routes).
        Raises FrrRejected with FRR's words (whether the daemons or the text were at fault
        is for the caller to find out)."""
        space = ["--pathspace", self.bgp.pathspace] if self.bgp.pathspace else []
        with self._staged(text) as candidate:
            folder = str(candidate.parent)
            done = self._run(
                [
                    self.bgp.reload,
                    "--reload",
                    *space,
                    "--stdout",
                    "--rundir",
                    folder,
                    "--confdir",
                    folder,
                    str(candidate),
                ],
                timeout=RELOAD_SECONDS,
            )
        if done.returncode != 0:
            raise FrrRejected(frr_words(done))

    @contextlib.contextmanager
    def _staged(self, text: str) -> Iterator[Path]:
        """``text`` as ``frr.conf`` in a folder of its own, for the time of one call, beside
        a copy of FRR's ``vtysh.conf`` (vtysh reads it from the folder it is given)."""
        space = self.bgp.pathspace or ""
        try:
            with tempfile.TemporaryDirectory(prefix="director-frr-") as folder:
                candidate = Path(folder) / "frr.conf"
                candidate.write_text(text)
                vtysh_conf = Path(folder) / space / "vtysh.conf"
                vtysh_conf.parent.mkdir(exist_ok=True)
                with contextlib.suppress(OSError):  # none: vtysh's defaults
                    shutil.copyfile(FRR_CONFDIR / space / "vtysh.conf", vtysh_conf)
                yield candidate
        except OSError as exc:  # no room for it (ENOSPC), no /tmp
            raise classify(exc) from None

    def install(self, text: str) -> bool:
        """Make ``text`` what FRR runs, and its network-less form the file FRR boots from;
        True when something was sent. Raises FrrRejected (FRR put back on the last text it
        took) when FRR refuses it, Transient when FRR could not be asked (not running,
        vtysh missing mid-upgrade, a timeout, a full disk).

        The first install after the director starts goes through frr-reload.py (FRR may
        run anything), unless FRR runs on from the file this director wrote for the same
        text (a restart of the director alone, or FRR booted from that file): then only
        the routes are sent. After that, a change of announced prefixes alone is sent as
        those few commands in one vtysh call (frr-reload.py starts Python and reads back
        the whole running configuration: seconds on a slow box, a minute under emulation);
        anything else, or a failed vtysh call, goes through frr-reload.py."""
        if text == self.applied:
            if self.held_back is None:
                return self.write_boot_file()
            # Back to the text the daemons run: its routes replace those sent on top of it.
            sent = self.send_networks(self.held_back, split_networks(text)[1])
            self.invalid = self.held_back = None
            return self.write_boot_file() or sent
        refused = self.invalid
        if refused is not None and time.monotonic() - refused[1] >= REFUSED_RETRY:
            refused = self.invalid = None  # tried again: FRR may have been upgraded
        if refused is not None and same_but_routes(text, refused[0]):
            if self.held_back is not None:
                return self._routes_only(text)
            raise FrrRejected("refused before by FRR; tried again when it changes")
        started = time.monotonic()
        try:
            how = self._send(text)
        except FrrRejected as exc:
            self.rejected += 1
            self.last_error = str(exc)
            event(
                log, "frr.config_rejected", level=logging.ERROR, file=str(self.path), frr=str(exc)
            )
            raise
        self.applied, self.invalid, self.held_back = text, None, None
        self.reloads += 1
        self.applied_by = how
        self.last_error = None
        self.write_boot_file()
        event(
            log,
            "frr.reloaded",
            file=str(self.path),
            by=how,
            seconds=round(time.monotonic() - started, 3),
        )
        return True

    def _send(self, text: str) -> str:
        """Send ``text`` to the daemons; how it went."""
        # A change of announced prefixes alone, on the text FRR runs: the few commands,
        # without parsing the whole file again (vtysh --dryrun costs O(VIPs); the lines are
        # made from checked addresses).
        if self.applied is not None and self.held_back is None and self._announce(text):
            return "vtysh"
        if self.applied is None and self.held_back is None and self._resume(text):
            return "vtysh-resume"
        try:
            self.validate(text)
        except FrrRejected:
            self._keep_routes(text)  # the daemons run what they ran
            raise
        try:
            self.apply(text)
        except FrrRejected as exc:
            # vtysh --dryrun checks the syntax, not what the daemons accept: they may have
            # taken part of it. Put them back on the last text they took; if FRR takes
            # that, the new text was at fault (not FRR being down): keep it out.
            if not self._restore():
                raise Transient(
                    f"FRR did not apply the configuration ({exc}), and could "
                    "not be put back on the last one: is it running?"
                ) from None
            self._keep_routes(text)
            raise
        return "frr-reload"

    def _keep_routes(self, text: str) -> None:
        """``text`` was refused: not sent again until it changes (or REFUSED_RETRY), and its
        routes sent at once on top of what the daemons run (the last text they took), so
        that the announcements follow the director all the same. Raises Transient when
        vtysh cannot send them (tried again through ``_routes_only``)."""
        self.invalid = (text, time.monotonic())
        self.held_back = split_networks(self.applied or "")[1]
        wanted = split_networks(text)[1]
        self.send_networks(self.held_back, wanted)
        self.held_back = wanted

    def write_boot_file(self) -> bool:
        """The file FRR boots from, if it is not what it should be; True when written."""
        if self.applied is None:
            return False
        boot = boot_text(self.applied)
        with contextlib.suppress(OSError):
            if self.path.read_text() == boot:
                return False
        try:  # it holds the peers' passwords: the director's and FRR's group only
            write_atomic(self.path, boot, mode=0o640)
        except OSError as exc:
            raise classify(exc) from None
        return True

    def _routes_only(self, text: str) -> bool:
        """``text``'s routes on the configuration FRR last accepted, by one vtysh call: the
        refused settings stay out, the announcements still follow the director. Raises
        FrrRejected all the same (what FRR runs is not ``text``: the refusal stands, and
        shows, until the text changes)."""
        refused = self.invalid
        if self.held_back is None or refused is None:
            raise FrrRejected("refused before by FRR")
        wanted = split_networks(text)[1]
        if self.send_networks(self.held_back, wanted):
            event(
                log,
                "frr.routes_only",
                level=logging.WARNING,
                file=str(self.path),
                announced=sum(len(nets) for nets in wanted.values()),
                reason="FRR refused this configuration: its last accepted one runs, with the "
                "director's routes",
            )
        self.held_back = wanted
        raise FrrRejected(
            f"refused by FRR (tried again when it changes; its routes are sent "
            f"on the last configuration FRR took): {self.last_error or '-'}"
        )

    def send_networks(self, before: Networks, after: Networks) -> bool:
        """The vtysh commands that take the daemons from announcing ``before`` to ``after``;
        True when there were any. Raises Transient when vtysh fails."""
        commands = net_commands(before, after, self.bgp.asn)
        if not commands:
            return False
        args = [arg for command in commands for arg in ("-c", command)]
        done = self._run([*self._vtysh(), *args], timeout=60)
        if done.returncode != 0:
            raise Transient(f"vtysh could not change the announcements: {frr_words(done)}")
        return True

    def _restore(self) -> bool:
        """The daemons back on the last text they took (else the file they boot from) after
        they refused a new one; True if they were."""
        last = self.applied
        if last is None:
            try:
                last = self.path.read_text()
            except OSError:
                return False
        try:
            self.apply(last)
        except Failure as exc:
            event(log, "frr.restore_failed", level=logging.ERROR, file=str(self.path), frr=str(exc))
            return False
        if self.applied is None:
            self.applied = last
        event(log, "frr.restored", level=logging.WARNING, file=str(self.path))
        return True

    def _resume(self, text: str) -> bool:
        """FRR runs ``text`` but for its routes, and those alone are sent: when the file FRR
        boots from is ``text``'s (this director wrote it, once FRR had taken ``text``) and
        bgpd runs this ASN. False (frr-reload.py then applies the whole text) on any doubt:
        another file, no ``router bgp``, FRR that cannot be asked, a failed vtysh call."""
        try:
            if self.path.read_text() != boot_text(text):
                return False
            running = self.running()
            if running is None:
                return False
            self.send_networks(running, split_networks(text)[1])
        except (OSError, Failure) as exc:
            event(
                log,
                "frr.resume_skipped",
                reason=str(exc)[:200],
                action="applying with frr-reload.py",
            )
            return False
        return True

    def _announce(self, text: str) -> bool:
        """Apply a change of ``network`` lines alone with one vtysh call; False when the
        change is more than that (or vtysh refused): frr-reload.py then applies it."""
        commands = network_delta(self.applied, text, self.bgp.asn)
        if commands is None:
            return False
        if not commands:
            return True
        args = [arg for command in commands for arg in ("-c", command)]
        done = self._run([*self._vtysh(), *args], timeout=60)
        if done.returncode != 0:
            event(
                log,
                "frr.vtysh_failed",
                level=logging.WARNING,
                frr=frr_words(done),
                action="applying with frr-reload.py",
            )
            return False
        return True

    def running(self) -> Networks | None:
        """The prefixes bgpd announces now, read back from what it runs; None when it runs
        no ``router bgp`` of this ASN (restarted from another file, say). Raises Transient
        when FRR cannot be asked."""
        done = self._run([*self._vtysh(), "-c", "show running-config"], timeout=30)
        if done.returncode != 0:
            raise Transient(f"vtysh cannot read what FRR runs: {frr_words(done)}")
        text = ANSI.sub("", done.stdout)
        if not re.search(rf"^router bgp {self.bgp.asn}\s*$", text, re.M):
            return None
        return split_networks(text)[1]

    def wanted_networks(self) -> Networks:
        """The prefixes FRR should announce: those of the last text it took, or, after a
        refusal, the director's routes sent on top of the text before."""
        if self.held_back is not None:
            return self.held_back
        return split_networks(self.applied or "")[1]

    def peers(self) -> list[PeerState]:
        """Each configured peer's session, as FRR reports it now."""
        summary = self._json("show bgp summary json")
        return parse_peers(self.bgp, summary, self._json("show bfd peers json"))

    def _json(self, command: str) -> Any:
        try:
            done = self._run([*self._vtysh(), "-c", command], timeout=10)
        except Failure:  # vtysh could not be run: no answer this time ("unknown")
            return None
        if done.returncode != 0:
            return None
        try:
            return json.loads(done.stdout or "null")
        except ValueError:
            return None
