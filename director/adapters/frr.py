"""FRR: announce the VIPs of ``bgp`` pools to the routers (MetalLB's FRR mode is the model).

- ``render_frr``: the ``bgp:`` section + the routes the loop decided -> frr.conf text, from
  ``templates/frr.conf.j2``. The template holds only layout; ``template_vars`` builds plain
  values, all validated by the schema (addresses canonical, numbers bounded, passwords one
  word), so nothing from the cluster can inject configuration.
- ``Frr.install``: writes the new file beside the live one, has vtysh check it
  (``vtysh --dryrun -f``), applies only the difference to the running daemons with FRR's
  own ``frr-reload.py --reload`` (bgpd is never restarted: an announcement change resets no
  session), then renames it into place for FRR's next start. A file FRR rejects never goes
  live: the error is logged in FRR's words and counted.
- The VIPs are held on ``lo`` while they have virtual services, announced or not: IPVS
  takes a packet only when its address is local, and a withdrawn VIP still gets the
  connections the routers had sent here before.
- ``Frr.peers``: each session as FRR reports it (state, uptime, BFD), for the status page
  and the metrics.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2

from director.adapters.keepalived import TEMPLATES
from director.adapters.worker import Keeper
from director.core.announce import PeerState, Route, pool_of
from director.core.owned import (
    REFUSED_RETRY,
    Failure,
    Ledger,
    Refused,
    Transient,
    classify,
    not_run,
    run_failure,
    write_atomic,
)
from director.core.pools import Pool
from director.logs import event
from director.schema.config import BgpSettings

log = logging.getLogger("director.frr")
VIP_DEVICE = "lo"
# The longest frr-reload.py may take (it starts Python and reads back the whole running
# configuration: about a second on a real box, a minute under software emulation). A leave
# waits for one in flight: the withdrawal goes out after it.
RELOAD_SECONDS = 120
VERIFY_SECONDS = 10.0  # what FRR announces is read back this often, at least
FRR_CONFDIR = Path("/etc/frr")  # where FRR's own vtysh.conf is (per pathspace below it)


def template_vars(
    bgp: BgpSettings, routes: Mapping[str, Route], pools: tuple[Pool, ...], source_config: str
) -> dict[str, Any]:
    announced = sorted((r for r in routes.values() if r.announced), key=_route_order)
    profiles: dict[tuple[int, int], str] = {}
    peers = []
    for peer in bgp.peers:
        timing = (peer.bfd_interval_ms, peer.bfd_multiplier)
        profile = profiles.setdefault(timing, f"director-{timing[0]}ms-x{timing[1]}")
        peers.append(
            {
                **{
                    k: getattr(peer, k)
                    for k in (
                        "address",
                        "asn",
                        "port",
                        "password",
                        "source",
                        "multihop",
                        "keepalive",
                        "hold",
                        "bfd",
                    )
                },
                "bfd_profile": profile,
            }
        )
    families = []
    for name, version in (("ipv4", 4), ("ipv6", 6)):
        family_peers = [p.address for p in bgp.peers if _version(p.address) == version]
        family_routes = [r for r in announced if _version(r.vip) == version]
        if family_peers:
            families.append({"name": name, "peers": family_peers, "routes": family_routes})
    return {
        "source_config": "".join(c if c.isprintable() else "?" for c in source_config)[:200],
        "hostname": bgp.hostname or "director",
        "asn": bgp.asn,
        "router_id": bgp.router_id,
        "peers": peers,
        "families": families,
        "pools": [
            {
                "name": p.name,
                "communities": p.announce.communities,
                "local_preference": p.announce.local_preference,
            }
            for p in pools
            if p.announce.bgp
        ],
        "bfd_profiles": [
            {"name": name, "interval": interval, "multiplier": multiplier}
            for (interval, multiplier), name in profiles.items()
            if any(p.bfd for p in bgp.peers)
        ],
    }


def network_delta(old: str | None, new: str, asn: int) -> list[str] | None:
    """The vtysh commands that turn ``old`` into ``new`` when they differ only in their
    ``network`` lines (announced prefixes); None when anything else differs."""
    if old is None:
        return None
    old_rest, old_nets = _split_networks(old)
    new_rest, new_nets = _split_networks(new)
    if old_rest != new_rest:
        return None
    return _net_commands(old_nets, new_nets, asn)


Networks = dict[str, dict[str, str]]  # address family -> prefix -> its network line


def _net_commands(old_nets: Networks, new_nets: Networks, asn: int) -> list[str]:
    """The vtysh commands that change the announced prefixes from ``old_nets`` to
    ``new_nets`` under ``router bgp asn`` ([] for none)."""
    commands: list[str] = []
    for family in sorted(old_nets.keys() | new_nets.keys()):
        before, after = old_nets.get(family, {}), new_nets.get(family, {})
        lines = [f"no network {prefix}" for prefix in sorted(before.keys() - after.keys())]
        lines += [after[prefix] for prefix in sorted(after.keys() - before.keys())]
        lines += [after[p] for p in sorted(after.keys() & before.keys()) if after[p] != before[p]]
        if lines:
            commands += [f"address-family {family} unicast", *lines, "exit-address-family"]
    if not commands:
        return []
    return ["configure terminal", f"router bgp {asn}", *commands, "end"]


def _split_networks(text: str) -> tuple[list[str], Networks]:
    """The lines that are not ``network``, and the network lines by family and prefix."""
    rest: list[str] = []
    nets: Networks = {}
    family = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("address-family "):
            family = stripped.split()[1]
        if stripped.startswith("network "):
            nets.setdefault(family, {})[stripped.split()[1]] = stripped
        else:
            rest.append(line)
    return rest, nets


def _same_but_routes(one: str, other: str) -> bool:
    return _split_networks(one)[0] == _split_networks(other)[0]


def _version(address: str) -> int:
    return ipaddress.ip_address(address).version


def _route_order(route: Route) -> tuple[int, int]:
    address = ipaddress.ip_address(route.vip)
    return address.version, int(address)


def render_frr(
    bgp: BgpSettings,
    routes: Mapping[str, Route],
    pools: tuple[Pool, ...],
    source_config: str = "director",
    templates: Path = TEMPLATES,
) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # not HTML; every value is validated by the schema
    )
    variables = template_vars(bgp, routes, pools, source_config)
    return env.get_template("frr.conf.j2").render(**variables)


class FrrRejected(Refused):
    """FRR refused a rendered configuration (its words inside)."""


def boot_text(text: str) -> str:
    """``text`` without its ``network`` lines: the file FRR boots from. FRR started from it
    (a reboot, a restart of the daemons with no director running) announces nothing the
    director has not confirmed; the director sends the prefixes once IPVS serves them."""
    return "".join(
        line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("network ")
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _words(done: subprocess.CompletedProcess[str]) -> str:
    """FRR's own error lines ("% Can not configure the local system as neighbor", "line 2:
    % Unknown command"), each once and in order; else the last of what it printed."""
    lines = [_ANSI.sub("", line).strip() for line in (done.stderr + done.stdout).splitlines()]
    errors = [line for line in lines if line.startswith("%") or re.match(r"line \d+: %", line)]
    text = " | ".join(dict.fromkeys(errors)) or " | ".join(line for line in lines if line)
    return text[:1000] if errors else text[-1000:] or f"exited {done.returncode}"


class Frr:
    """What FRR runs (its announcements), the file it boots from, and the VIPs held on
    ``lo``."""

    def __init__(self, bgp: BgpSettings, netns: str | None = None) -> None:
        self.bgp, self.netns = bgp, netns
        self.path = Path(bgp.config_file)  # the file FRR boots from (no network lines)
        self.rejected = 0  # configurations FRR refused (a metric)
        self.reloads = 0
        self.applied_by = ""  # how the last text went in: frr-reload, vtysh, vtysh-resume
        self.last_error: str | None = None
        self.held: set[str] = set()  # VIPs this director put on lo
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
            raise FrrRejected(_words(done))

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
            raise FrrRejected(_words(done))

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
            sent = self.send_networks(self.held_back, _split_networks(text)[1])
            self.invalid = self.held_back = None
            return self.write_boot_file() or sent
        refused = self.invalid
        if refused is not None and time.monotonic() - refused[1] >= REFUSED_RETRY:
            refused = self.invalid = None  # tried again: FRR may have been upgraded
        if refused is not None and _same_but_routes(text, refused[0]):
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
        self.held_back = _split_networks(self.applied or "")[1]
        wanted = _split_networks(text)[1]
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
        wanted = _split_networks(text)[1]
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
        commands = _net_commands(before, after, self.bgp.asn)
        if not commands:
            return False
        args = [arg for command in commands for arg in ("-c", command)]
        done = self._run([*self._vtysh(), *args], timeout=60)
        if done.returncode != 0:
            raise Transient(f"vtysh could not change the announcements: {_words(done)}")
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
            self.send_networks(running, _split_networks(text)[1])
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
                frr=_words(done),
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
            raise Transient(f"vtysh cannot read what FRR runs: {_words(done)}")
        text = _ANSI.sub("", done.stdout)
        if not re.search(rf"^router bgp {self.bgp.asn}\s*$", text, re.M):
            return None
        return _split_networks(text)[1]

    def wanted_networks(self) -> Networks:
        """The prefixes FRR should announce: those of the last text it took, or, after a
        refusal, the director's routes sent on top of the text before."""
        if self.held_back is not None:
            return self.held_back
        return _split_networks(self.applied or "")[1]

    def on_lo(self) -> set[str]:
        """The addresses on ``lo`` now."""
        done = self._run([*self._ip(), "-o", "addr", "show", "dev", VIP_DEVICE])
        if done.returncode != 0:
            raise Transient(f"cannot read the addresses of {VIP_DEVICE}: {_words(done)}")
        out = set()
        for line in done.stdout.splitlines():
            words = line.split()
            if len(words) > 3 and words[2] in ("inet", "inet6"):
                out.add(words[3].split("/")[0])
        return out

    def adopt(self, pools: tuple[Pool, ...]) -> None:
        """Count as held the addresses of ``pools`` already on ``lo`` (a previous run's): the
        pools are this director's own, so those it no longer serves are released."""
        self.held |= {address for address in self.on_lo() if pool_of(address, pools)}

    def hold(self, vips: set[str], *, missing: set[str] | None = None) -> None:
        """Exactly ``vips`` of the ones this director holds are on ``lo`` (others'
        untouched); ``missing``: held ones found gone from ``lo``, added back."""
        for vip in sorted((vips - self.held) | (missing or set())):
            prefix = 128 if ":" in vip else 32
            done = self._run([*self._ip(), "addr", "replace", f"{vip}/{prefix}", "dev", VIP_DEVICE])
            if done.returncode != 0:
                raise Transient(f"cannot hold {vip} on {VIP_DEVICE}: {_words(done)}")
            self.held.add(vip)
        for vip in sorted(self.held - vips):
            prefix = 128 if ":" in vip else 32
            self._run([*self._ip(), "addr", "del", f"{vip}/{prefix}", "dev", VIP_DEVICE])
            self.held.discard(vip)

    def peers(self) -> list[PeerState]:
        """Each configured peer's session, as FRR reports it now."""
        summary = self._json("show bgp summary json")
        bfd = self._json("show bfd peers json")
        found: dict[str, dict[str, Any]] = {}
        for family in summary.values() if isinstance(summary, dict) else ():
            if isinstance(family, dict):
                for address, data in (family.get("peers") or {}).items():
                    found.setdefault(str(address), data if isinstance(data, dict) else {})
        bfd_state = {
            str(p.get("peer")): str(p.get("status", "-"))
            for p in (bfd if isinstance(bfd, list) else [])
            if isinstance(p, dict)
        }
        out = []
        for peer in self.bgp.peers:
            data = found.get(peer.address)
            state = str(data.get("state", "unknown")) if data is not None else "unknown"
            out.append(
                PeerState(
                    peer.address,
                    peer.asn,
                    state,
                    float(data.get("peerUptimeMsec", 0) or 0) / 1000 if data else 0.0,
                    int(data.get("pfxSnt", 0) or 0) if data else 0,
                    bfd_state.get(peer.address, "-") if peer.bfd else "-",
                )
            )
        return out

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


class FrrSync(Keeper[Mapping[str, Route]]):
    """Renders and applies FRR's configuration on a thread of its own (the latest route
    table wins; the loop never waits), and keeps it true: every ``VERIFY_SECONDS`` (or
    ``poll_seconds``, if longer) it reads back what bgpd announces, the file FRR boots from
    and the VIPs on ``lo``, and repairs whatever someone else changed (FRR restarted from
    its boot file, ``ip addr flush dev lo``); every ``poll_seconds`` it asks FRR how its
    sessions are. Each read-back starts vtysh once: on a box emulated in software that is
    most of a second of CPU, so it is not done every second."""

    name = "frr"
    resource = "frr"

    def __init__(
        self,
        bgp: BgpSettings,
        pools: tuple[Pool, ...],
        source_config: str,
        frr: Frr | None = None,
        *,
        netns: str | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.bgp, self.pools, self.source_config = bgp, pools, source_config
        self.frr = frr or Frr(bgp, netns)
        self.idle_seconds = float(bgp.poll_seconds) or None
        self.verify_seconds = max(VERIFY_SECONDS, float(bgp.poll_seconds))
        self.sessions: tuple[PeerState, ...] = tuple(
            PeerState(p.address, p.asn, "unknown") for p in bgp.peers
        )
        self.polled = 0.0
        self._observed: Networks | None = {}  # what verify found bgpd announcing (None: no bgp)
        super().__init__(ledger)

    def start(self) -> None:
        self.ledger.track("addresses")
        super().start()

    def install(self, value: Mapping[str, Route]) -> None:
        if self.frr.applied is None and not self.frr.held:
            self.frr.adopt(tuple(p for p in self.pools if p.announce.bgp))
        announced = {vip for vip, route in value.items() if route.announced}
        # Held before it is announced, released only once it is withdrawn.
        self.frr.hold(self.frr.held | set(value))
        self.frr.install(render_frr(self.bgp, value, self.pools, self.source_config))
        self.frr.hold(set(value))
        event(log, "frr.routes", announced=len(announced), withdrawn=len(value) - len(announced))

    def verify(self, value: Mapping[str, Route]) -> str | None:
        if not self.idle_seconds:  # else every poll looks at lo already
            self._keep_addresses()
        drift = []
        running = self.frr.running()
        wanted = self.frr.wanted_networks()
        if running is None and self._observed is not None:
            # bgpd runs no router bgp: FRR restarting (its boot file not loaded yet), most
            # likely. Repaired (a whole frr-reload.py: a minute under emulation) only if the
            # next read-back finds it so too.
            self._observed = None
            return None
        self._observed = running
        if running is None:
            drift.append(f"bgpd runs no router bgp {self.bgp.asn}")
        elif _prefixes(running) != _prefixes(wanted):
            extra = sorted(p.split()[2] for p in _prefixes(running) - _prefixes(wanted))
            lost = sorted(p.split()[2] for p in _prefixes(wanted) - _prefixes(running))
            drift.append(
                f"bgpd announces {len(extra)} prefixes it should not "
                f"({', '.join(extra[:3]) or '-'}) and misses {len(lost)} "
                f"({', '.join(lost[:3]) or '-'})"
            )
        if self.frr.applied is not None:
            try:
                boot = self.frr.path.read_text()
            except FileNotFoundError:
                boot = None
            except OSError as exc:
                raise classify(exc) from None
            if boot != boot_text(self.frr.applied):
                drift.append(f"{self.frr.path} is not the file the director wrote")
        return "; ".join(drift) or None

    def repair(self, value: Mapping[str, Route], drift: str) -> None:
        running = self._observed
        if running is None:
            # FRR runs something else: frr-reload.py brings it back to the whole text.
            self.frr.applied = None
            self.install(value)
            return
        self.frr.send_networks(running, self.frr.wanted_networks())
        self.frr.write_boot_file()

    def _keep_addresses(self) -> None:
        """The VIPs this director holds on ``lo``, put back if someone removed them (IPVS
        takes a packet only when its address is local: a VIP announced without it on ``lo``
        black-holes its traffic)."""
        if not self.frr.held:
            self.ledger.ok("addresses")
            return
        try:
            missing = self.frr.held - self.frr.on_lo()
            if not missing:
                self.ledger.ok("addresses")
                return
            what = f"{len(missing)} VIPs gone from {VIP_DEVICE} ({', '.join(sorted(missing)[:3])})"
            self.ledger.drift("addresses", what)
            event(
                log,
                "owned.drift",
                level=logging.WARNING,
                resource="addresses",
                drift=what,
                action="repairing",
            )
            self.frr.hold(set(self.frr.held), missing=missing)
        except Failure as exc:
            self.ledger.failed("addresses", exc)
            event(log, "frr.addresses_failed", level=logging.ERROR, reason=exc.reason)
            return
        self.ledger.ok("addresses", repaired=True)
        event(log, "owned.repaired", resource="addresses", drift=what)

    def poll(self) -> None:
        """Between changes: ask FRR how its sessions are, and look at ``lo`` (cheap, and a
        VIP gone from it black-holes its traffic until it is back)."""
        self._keep_addresses()
        self._poll()

    def withdrawn(self, timeout: float) -> bool:
        """Wait until FRR says it sends no prefix to any established peer (the withdrawals
        went out); False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self._poll()
            if all(p.prefixes_sent == 0 for p in self.sessions if p.up):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def _poll(self) -> None:
        previous = {p.address: p.state for p in self.sessions}
        self.sessions = tuple(self.frr.peers())
        self.polled = time.time()
        for peer in self.sessions:
            if previous.get(peer.address) != peer.state:
                event(
                    log,
                    "bgp.session",
                    peer=peer.address,
                    state=peer.state,
                    bfd=peer.bfd,
                    level=logging.INFO if peer.up else logging.WARNING,
                )


def _prefixes(networks: Networks) -> set[str]:
    """Each announced prefix with its family and its route-map: what bgpd sends."""
    return {f"{family} {line}" for family, nets in networks.items() for line in nets.values()}
