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
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from director.adapters.keepalived import TEMPLATES
from director.adapters.worker import LatestWins
from director.core.announce import PeerState, Route, pool_of
from director.core.errors import DirectorError
from director.core.ipam import Pool
from director.logs import event
from director.schema.config import BgpSettings

log = logging.getLogger("director.frr")
VIP_DEVICE = "lo"
# The longest frr-reload.py may take (it starts Python and reads back the whole running
# configuration: about a second on a real box, a minute under software emulation). A leave
# waits for one in flight: the withdrawal goes out after it.
RELOAD_SECONDS = 120


def template_vars(
    bgp: BgpSettings, routes: Mapping[str, Route], pools: tuple[Pool, ...], source_config: str
) -> dict[str, Any]:
    announced = sorted((r for r in routes.values() if r.announced), key=_route_order)
    profiles: dict[tuple[int, int], str] = {}
    peers = []
    for peer in bgp.peers:
        timing = (peer.bfd_interval_ms, peer.bfd_multiplier)
        profile = profiles.setdefault(timing, f"director-{timing[0]}ms-x{timing[1]}")
        peers.append({**{k: getattr(peer, k) for k in (
            "address", "asn", "port", "password", "source", "multihop", "keepalive", "hold",
            "bfd")}, "bfd_profile": profile})  # fmt: skip
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
            {"name": p.name, "communities": p.announce.communities,
             "local_preference": p.announce.local_preference}
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


class FrrRejected(DirectorError):
    """FRR refused a rendered configuration, or could not apply it (its words inside)."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _words(done: subprocess.CompletedProcess[str]) -> str:
    """FRR's own error lines ("% Can not configure the local system as neighbor", "line 2:
    % Unknown command"), each once and in order; else the last of what it printed."""
    lines = [_ANSI.sub("", line).strip() for line in (done.stderr + done.stdout).splitlines()]
    errors = [line for line in lines if line.startswith("%") or re.match(r"line \d+: %", line)]
    text = " | ".join(dict.fromkeys(errors)) or " | ".join(line for line in lines if line)
    return text[:1000] if errors else text[-1000:] or f"exited {done.returncode}"


class Frr:
    """The live frr.conf, the daemons that run it, and the VIPs held on ``lo``."""

    def __init__(self, bgp: BgpSettings, netns: str | None = None) -> None:
        self.bgp, self.netns = bgp, netns
        self.path = Path(bgp.config_file)
        self.rejected = 0  # configurations FRR refused (a metric)
        self.reloads = 0
        self.last_error: str | None = None
        self.held: set[str] = set()  # VIPs this director put on lo
        self.synced = False  # the running daemons were brought to the file once
        self.invalid: str | None = None  # the last text FRR refused
        # After a refusal the daemons run the live file again; the director's routes are
        # still sent on top of it (these are the networks they run), so that a refused
        # configuration never leaves a VIP announced that should not be.
        self.held_back: Networks | None = None

    def _run(self, cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  check=False)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FrrRejected(f"cannot run {cmd[0]}: {exc}") from None

    def _vtysh(self) -> list[str]:
        return [self.bgp.vtysh, *(["-N", self.bgp.pathspace] if self.bgp.pathspace else [])]

    def validate(self, candidate: Path) -> None:
        done = self._run([self.bgp.vtysh, "--dryrun", "-f", str(candidate)])
        if done.returncode != 0:
            raise FrrRejected(_words(done))

    def apply(self, candidate: Path) -> None:
        """The difference between what the daemons run and ``candidate``, applied by FRR.
        Its work file goes to a folder of the director's own (not FRR's ``/run/frr``, which
        a sandboxed director may not write)."""
        space = ["--pathspace", self.bgp.pathspace] if self.bgp.pathspace else []
        with tempfile.TemporaryDirectory(prefix="director-frr-") as rundir:
            done = self._run([self.bgp.reload, "--reload", *space, "--stdout", "--rundir",
                              rundir, str(candidate)], timeout=RELOAD_SECONDS)  # fmt: skip
        if done.returncode != 0:
            raise FrrRejected(_words(done))

    def install(self, text: str) -> bool:
        """Make ``text`` the live configuration; True when it changed (and FRR applied it).
        Raises FrrRejected (the live file untouched, the daemons put back on it) when FRR
        refuses it.

        The first install after the director starts goes through frr-reload.py whatever the
        file holds (FRR may run something else). After that, a change of announced
        prefixes alone is sent as those few commands in one vtysh call (frr-reload.py
        starts Python and reads back the whole running configuration: seconds on a slow
        box); anything else, or a failed vtysh call, goes through frr-reload.py."""
        live = None
        with contextlib.suppress(FileNotFoundError):
            live = self.path.read_text()
        if live == text and self.synced and self.held_back is None:
            return False
        candidate = self.path.with_name(self.path.name + ".new")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        candidate.write_text(text)
        started = time.monotonic()
        if self.invalid is not None and _same_but_routes(text, self.invalid):
            if self.held_back is not None and live is not None:
                return self._routes_only(live, text)
            raise FrrRejected("refused before by FRR; not tried again")
        try:
            # A change of announced prefixes alone, on the file FRR runs: the few commands,
            # without parsing the whole file again (vtysh --dryrun costs O(VIPs); the lines
            # are made from checked addresses). After routes sent on top of a refused file's
            # predecessor, only frr-reload.py (it reads back what the daemons run) knows the
            # way to ``text``.
            quick = self.synced and self.held_back is None and self._announce(live, text)
            how = "vtysh" if quick else "frr-reload"
            if not quick:
                try:
                    self.validate(candidate)
                except FrrRejected:
                    self.invalid = text  # the same text is refused again: do not retry it
                    raise
            if how == "frr-reload":
                try:
                    self.apply(candidate)
                except FrrRejected:
                    # vtysh --dryrun checks the syntax, not what the daemons accept: they
                    # may have taken part of it. Put them back on the live file; if FRR
                    # takes that, the new text was at fault (not FRR being down): keep it out.
                    if live is not None and self._restore(live):
                        self.invalid, self.held_back = text, _split_networks(live)[1]
                    raise
        except FrrRejected as exc:
            self.rejected += 1
            self.last_error = str(exc)
            event(log, "frr.config_rejected", level=logging.ERROR, file=str(candidate),
                  frr=str(exc))  # fmt: skip
            raise
        os.replace(candidate, self.path)
        self.synced, self.invalid, self.held_back = True, None, None
        self.reloads += 1
        self.last_error = None
        event(log, "frr.reloaded", file=str(self.path), by=how,
              seconds=round(time.monotonic() - started, 3))  # fmt: skip
        return True

    def _routes_only(self, live: str, text: str) -> bool:
        """``text``'s routes on the configuration FRR last accepted (``live``), by one vtysh
        call: the refused settings stay out, the announcements still follow the director."""
        asn = re.search(r"^router bgp (\d+)", live, re.M)
        if asn is None or self.held_back is None:
            raise FrrRejected("refused before by FRR, and the live file has no router bgp")
        wanted = _split_networks(text)[1]
        commands = _net_commands(self.held_back, wanted, int(asn.group(1)))
        if commands:
            args = [arg for command in commands for arg in ("-c", command)]
            done = self._run([*self._vtysh(), *args], timeout=60)
            if done.returncode != 0:
                raise FrrRejected(f"routes on the last accepted configuration: {_words(done)}")
        self.held_back = wanted
        if not commands:
            return False
        event(log, "frr.routes_only", level=logging.WARNING, file=str(self.path),
              announced=sum(len(nets) for nets in wanted.values()),
              reason="FRR refused this configuration: its last accepted one runs, with the "
                     "director's routes")  # fmt: skip
        return True

    def _restore(self, live: str) -> bool:
        """The daemons back on the live file after they refused a new one; True if they were.
        (frr-reload.py may save what the daemons run over the file it applied: a pathspace's
        file is not its target; the director's text is put back.)"""
        try:
            self.apply(self.path)
            again = self.path.with_name(self.path.name + ".restored")
            again.write_text(live)
            os.replace(again, self.path)
        except (FrrRejected, OSError) as exc:
            event(log, "frr.restore_failed", level=logging.ERROR, file=str(self.path),
                  frr=str(exc))  # fmt: skip
            return False
        event(log, "frr.restored", level=logging.WARNING, file=str(self.path))
        return True

    def _announce(self, live: str | None, text: str) -> bool:
        """Apply a change of ``network`` lines alone with one vtysh call; False when the
        change is more than that (or vtysh failed): frr-reload.py then applies it."""
        commands = network_delta(live, text, self.bgp.asn)
        if commands is None:
            return False
        if not commands:
            return True
        args = [arg for command in commands for arg in ("-c", command)]
        done = self._run([*self._vtysh(), *args], timeout=60)
        if done.returncode != 0:
            event(log, "frr.vtysh_failed", level=logging.WARNING, frr=_words(done),
                  action="applying with frr-reload.py")  # fmt: skip
            return False
        return True

    def adopt(self, pools: tuple[Pool, ...]) -> None:
        """Count as held the addresses of ``pools`` already on ``lo`` (a previous run's): the
        pools are this director's own, so those it no longer serves are released."""
        ip = ["ip", *(["-n", self.netns] if self.netns else [])]
        done = self._run([*ip, "-o", "addr", "show", "dev", VIP_DEVICE])
        for line in done.stdout.splitlines():
            words = line.split()
            if len(words) > 3 and words[2] in ("inet", "inet6"):
                address = words[3].split("/")[0]
                if pool_of(address, pools) is not None:
                    self.held.add(address)

    def hold(self, vips: set[str]) -> None:
        """Exactly ``vips`` of the ones this director holds are on ``lo`` (others' untouched)."""
        ip = ["ip", *(["-n", self.netns] if self.netns else [])]
        for vip in sorted(vips - self.held):
            prefix = 128 if ":" in vip else 32
            done = self._run([*ip, "addr", "replace", f"{vip}/{prefix}", "dev", VIP_DEVICE])
            if done.returncode != 0:
                raise FrrRejected(f"cannot hold {vip} on {VIP_DEVICE}: {_words(done)}")
            self.held.add(vip)
        for vip in sorted(self.held - vips):
            prefix = 128 if ":" in vip else 32
            self._run([*ip, "addr", "del", f"{vip}/{prefix}", "dev", VIP_DEVICE])
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
            for p in (bfd if isinstance(bfd, list) else []) if isinstance(p, dict)
        }  # fmt: skip
        out = []
        for peer in self.bgp.peers:
            data = found.get(peer.address)
            state = str(data.get("state", "unknown")) if data is not None else "unknown"
            out.append(PeerState(
                peer.address, peer.asn, state,
                float(data.get("peerUptimeMsec", 0) or 0) / 1000 if data else 0.0,
                int(data.get("pfxSnt", 0) or 0) if data else 0,
                bfd_state.get(peer.address, "-") if peer.bfd else "-",
            ))  # fmt: skip
        return out

    def _json(self, command: str) -> Any:
        try:
            done = self._run([*self._vtysh(), "-c", command], timeout=10)
        except FrrRejected:
            return None
        if done.returncode != 0:
            return None
        try:
            return json.loads(done.stdout or "null")
        except ValueError:
            return None


class FrrSync(LatestWins[Mapping[str, Route]]):
    """Renders and applies FRR's configuration on a thread of its own (the latest route
    table wins; the loop never waits), and asks FRR how its sessions are in between."""

    name = "frr"

    def __init__(self, bgp: BgpSettings, pools: tuple[Pool, ...], source_config: str,
                 frr: Frr | None = None, netns: str | None = None) -> None:  # fmt: skip
        self.bgp, self.pools, self.source_config = bgp, pools, source_config
        self.frr = frr or Frr(bgp, netns)
        self.idle_seconds = float(bgp.poll_seconds) or None
        self.sessions: tuple[PeerState, ...] = tuple(
            PeerState(p.address, p.asn, "unknown") for p in bgp.peers
        )
        self.polled = 0.0
        self.wanted: Mapping[str, Route] | None = None  # the latest route table handed in
        super().__init__()

    def install(self, value: Mapping[str, Route]) -> bool:
        if not self.frr.synced and not self.frr.held:
            self.frr.adopt(tuple(p for p in self.pools if p.announce.bgp))
        announced = {vip for vip, route in value.items() if route.announced}
        # Held before it is announced, released only once it is withdrawn.
        self.frr.hold(self.frr.held | set(value))
        try:
            self.frr.install(render_frr(self.bgp, value, self.pools, self.source_config))
        except FrrRejected:
            return False  # logged and counted; the old configuration stays live
        self.frr.hold(set(value))
        event(log, "frr.routes", announced=len(announced), withdrawn=len(value) - len(announced))
        return True  # the sessions are asked about when idle: the next change does not wait

    def submit(self, value: Mapping[str, Route]) -> None:
        self.wanted = value
        super().submit(value)

    def idle(self) -> None:
        """Between changes: try again what FRR could not take (it was not running yet, a
        full disk), then ask FRR how its sessions are."""
        wanted = self.wanted
        if wanted is not None and self.installed is not wanted and self.install(wanted):
            self.installed = wanted
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
                event(log, "bgp.session", peer=peer.address, state=peer.state, bfd=peer.bfd,
                      level=logging.INFO if peer.up else logging.WARNING)  # fmt: skip
