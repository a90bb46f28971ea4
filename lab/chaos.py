"""`make chaos`: faults injected on purpose, in the lab VM, into a keepalived pair and a BGP
trio that carry traffic, each director run as systemd runs it (``director run --netns``, a
process of its own, its admin API on loopback).

For each fault, one at a time: the seconds until every resource the director owns reads
back as it should again (``owned`` in ``/api/v1/status``; the target is one resync period,
60 s), what the clients saw (long-lived connections kept, requests failed, new connections
refused), and what the fault is about: how long a restricted VIP was open to a source its
Service does not allow, whether an intent answered 200 was ever lost, whether a restarted
FRR announced a VIP before its director had programmed it.

The faults: ``nft flush ruleset``; keepalived, vtysh and frr-reload.py taken away for 20 s
(mid-upgrade) while a change needs them; the state and intents folder on a full tmpfs;
SIGSTOP of a director for 20 s; the API server answering 429, then 500, for 60 s; kill -9
of keepalived, of FRR and of a director (each started again as systemd would);
``ip addr flush dev lo``; and a BGP director rebooted (its namespace rebuilt empty, FRR
first from its boot file, as the units order it).

    python -m lab.vm run lab.chaos        # make chaos: prints a table, writes results.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.bgp import TOKEN
from lab.kubeapi import FakeApiServer, endpoint_slice, service
from lab.netns import Prober
from lab.wait import wait_for

RESYNC = 60.0  # the target: every owned resource back in sync within one resync period
FAULT = 20.0  # seconds a fault that lasts lasts


def say(text: str) -> None:
    print(f"chaos: {text}", flush=True)


@dataclass
class Outcome:
    fault: str
    where: str
    in_sync_s: float | None = None  # from the end of the fault until all owned are in sync
    repairs: dict[str, int] = field(default_factory=dict)  # resource -> repairs it made
    alive: str = "-"  # long-lived connections kept
    failed_requests: int = 0
    detail: dict[str, Any] = field(default_factory=dict)
    ok: bool = True
    why: str = ""

    def __post_init__(self) -> None:
        say(f"{self.where}: {self.fault} ...")

    def miss(self, why: str) -> None:
        self.ok = False
        self.why = (self.why + "; " if self.why else "") + why


# -- talking to a director ------------------------------------------------------------------
def api(
    url: str,
    method: str = "GET",
    path: str = "/api/v1/status",
    body: Any = None,
    timeout: float = 10,
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{url}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def owned(url: str) -> dict[str, dict[str, Any]]:
    """Each owned resource as the director reports it ({} while it does not answer)."""
    try:
        status, body = api(url)
    except OSError:
        return {}
    return {o["resource"]: o for o in body.get("owned", [])} if status == 200 else {}


def in_sync(url: str, since: float, timeout: float = 2 * RESYNC) -> float | None:
    """Seconds from ``since`` until every resource ``url``'s director owns is in sync."""
    found = wait_for(
        lambda: (o := owned(url)) and all(r["in_sync"] for r in o.values()),
        timeout - (time.monotonic() - since),
        0.2,
    )
    return None if found is None else round(time.monotonic() - since, 2)


def repairs(url: str) -> dict[str, int]:
    return {name: o["repairs"] for name, o in owned(url).items()}


@contextlib.contextmanager
def away(path: Path) -> Iterator[None]:
    """``path`` gone for the duration (a package being replaced), then back."""
    aside = path.with_name(path.name + ".upgrading")
    path.rename(aside)
    try:
        yield
    finally:
        aside.rename(path)


def tool(folder: Path, name: str, real: str) -> None:
    """``folder/name``: runs ``real`` (the stand-in the suite can take away)."""
    path = folder / name
    path.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    path.chmod(0o755)


def spawn(config: Path, netns: str, workdir: Path) -> subprocess.Popen[bytes]:
    log = (workdir / "director.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "director",
            "run",
            "--config",
            str(config),
            "--netns",
            netns,
            "--state-file",
            str(workdir / "state" / "state.json"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"director run exited {proc.returncode}")
        with contextlib.suppress(OSError):
            if api(url, path="/readyz", timeout=5)[0] == 200:
                return time.monotonic() - started
        time.sleep(0.5)
    raise RuntimeError(f"{url}: never ready")


# -- the pair -------------------------------------------------------------------------------
@dataclass
class PairBox:
    name: str
    d: Any  # lab.ha.Director
    url: str
    config: Path
    tools: Path
    state: Path
    proc: subprocess.Popen[bytes] | None = None


def pair_config(lab: Any, d: Any, port: int, kubeconfig: Path, *, tools: Path, state: Path) -> str:
    from lab.ha import director_config

    token = d.workdir / "token"
    token.write_text(TOKEN + "\n")
    return (
        director_config(lab, d, preempt_delay=5)
        + f"  keepalived: {tools}/keepalived\n"
        + "pools:\n  - {name: pair, addresses: [203.0.113.112/29]}\n"
        + f"kubernetes: {{kubeconfig: {kubeconfig}, identity: {d.name}, lease_seconds: 6,\n"
        + "             resync_seconds: 60}\n"
        + f"api: {{listen: 127.0.0.1:{port}, token_file: {token},\n"
        + f"      intents_file: {state}/intents.json, public: [health]}}\n"
    )


def pod_service(api_server: FakeApiServer, lab: Any, name: str, allowed: str = "") -> None:
    """A LoadBalancer Service whose pods are the lab's backends (``allowed``: the one source
    its loadBalancerSourceRanges let in)."""
    from lab.ha import NAT_PORT

    obj = service(name, [("http", "TCP", 80)])
    if allowed:
        obj["spec"]["loadBalancerSourceRanges"] = [f"{allowed}/32"]
    obj["spec"]["ports"][0]["targetPort"] = NAT_PORT
    obj["metadata"]["annotations"] = {"lvs-director.io/backends": "pod"}
    api_server.create("services", obj)
    api_server.create(
        "endpointslices",
        endpoint_slice(
            name, [(be.ipv4, None, True, False) for be in lab.backends], [("http", "TCP", NAT_PORT)]
        ),
    )


def vip_of(api_server: FakeApiServer, name: str) -> str | None:
    ingress = api_server.get("services", name)["status"].get("loadBalancer", {}).get("ingress")
    return ingress[0].get("ip") if ingress else None


def pair_suite(workdir: Path, outcomes: list[Outcome], out: Path) -> None:
    from lab.ha import CLIENTS, NAT_VIP, Talkers, build_ha_lab, kill_keepalived, start_keepalived

    say("the pair: building the lab")
    lab = build_ha_lab("chaos", workdir)
    api_server = FakeApiServer().start()
    boxes: list[PairBox] = []
    try:
        allowed, excluded = CLIENTS[0], CLIENTS[1]
        pod_service(api_server, lab, "private", allowed)
        kubeconfig = api_server.kubeconfig(workdir / "kubeconfig")
        for index, d in enumerate(lab.directors):
            tools, state = d.workdir / "tools", d.workdir / "state"
            tools.mkdir(exist_ok=True)
            state.mkdir(exist_ok=True)
            # The state and intents folder: a tmpfs of its own, to be filled up later.
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(state)], check=True
            )
            tool(tools, "keepalived", shutil.which("keepalived") or "/usr/sbin/keepalived")
            config = d.workdir / "director.yaml"
            url = f"http://127.0.0.1:{9281 + index}"
            config.write_text(
                pair_config(lab, d, 9281 + index, kubeconfig, tools=tools, state=state)
            )
            box = PairBox(d.name, d, url, config, tools, state)
            box.proc = spawn(config, d.ns.name, d.workdir)
            say(f"{d.name} ready after {ready(url, box.proc):.0f} s")
            if wait_for(d.conf.exists, 60) is None:
                raise RuntimeError(f"{d.name}: the director wrote no keepalived.conf")
            start_keepalived(d)
            boxes.append(box)
            if index == 0 and wait_for(lambda d=d: d.has(NAT_VIP), 90) is None:  # type: ignore[misc]
                raise RuntimeError(
                    f"{d.name} never took {NAT_VIP}: its keepalived said "
                    f"{(d.workdir / 'keepalived.log').read_text()[-1500:]}"
                )
        master = boxes[0]
        wait_for(lambda: vip_of(api_server, "private"), 60, 0.5)
        private = vip_of(api_server, "private")
        if private is None or not wait_for(lambda: owned(master.url).get("nftables"), 60):
            raise RuntimeError("the restricted Service was never programmed and filtered")
        talkers = Talkers(lab, NAT_VIP, count=50, period=0.1)
        try:
            wait_for(lambda: talkers.answered >= 500, 60)
            outcomes.append(flush_ruleset(lab, master, private, excluded, allowed))
            outcomes.append(keepalived_away(lab, master, api_server))
            outcomes.append(full_disk(master, api_server, lab))
            outcomes.append(api_server_failing(master, api_server, lab))
            outcomes.append(director_stopped(lab, boxes))
            outcomes.append(kill_keepalived_outcome(lab, boxes, kill_keepalived, start_keepalived))
            outcomes.append(kill_director(master, lab))
            for outcome in outcomes[-7:]:
                outcome.alive = f"{talkers.alive}/50 (so far)"
            outcomes[-1].alive = f"{talkers.alive}/50"
            outcomes[-1].failed_requests = talkers.failed
        finally:
            talkers.close()
    finally:
        for box in boxes:
            if box.proc is not None and box.proc.poll() is None:
                box.proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    box.proc.wait(30)
            box.d.runtime = None  # (the processes held the directors, not this one)
            subprocess.run(["umount", "-l", str(box.state)], check=False)
            for name in ("director.log", "keepalived.log"):  # for the record (the VM's /tmp goes)
                log = box.d.workdir / name
                if log.exists():
                    shutil.copy(log, out / f"pair-{box.name}-{name}")
        api_server.stop()
        lab.close()


def flush_ruleset(lab: Any, box: PairBox, vip: str, excluded: str, allowed: str) -> Outcome:
    """``nft flush ruleset`` (``systemctl reload nftables``): the director's table is gone and
    the restricted VIP open to all, until the director reads its table back and writes it
    again. The excluded source tries a new connection every 100 ms meanwhile."""
    outcome = Outcome("nft flush ruleset", box.name)
    before = repairs(box.url).get("nftables", 0)
    intruder = Prober(lab.client, vip, source=excluded)
    time.sleep(1)
    flushed = time.monotonic()
    box.d.ns.exec(["nft", "flush", "ruleset"])
    repaired = wait_for(lambda: repairs(box.url).get("nftables", 0) > before, RESYNC, 0.2)
    outcome.in_sync_s = in_sync(box.url, flushed)
    time.sleep(2)
    ok, tried = intruder.close()
    opened = [t - flushed for t in intruder.answered_at if t >= flushed]
    friend = Prober(lab.client, vip, source=allowed)
    time.sleep(2)
    friendly, asked = friend.close()
    outcome.repairs = {"nftables": repairs(box.url).get("nftables", 0) - before}
    outcome.detail = {
        "repaired_after_s": repaired and round(repaired, 2),
        "excluded_source_answered": f"{ok}/{tried}",
        "open_window_s": round(max(opened), 2) if opened else 0.0,
        "allowed_source_answered_after": f"{friendly}/{asked}",
    }
    if repaired is None:
        outcome.miss("the table was never written again")
    if opened and max(opened) > RESYNC:
        outcome.miss("the VIP stayed open for longer than a resync period")
    if asked and friendly != asked:
        outcome.miss("the allowed source was refused after the repair")
    return outcome


def keepalived_away(lab: Any, box: PairBox, api_server: FakeApiServer) -> Outcome:
    """keepalived taken away for FAULT seconds (mid-upgrade) while a new Service needs its
    VIP in keepalived's file: the install fails to run, is kept and tried again, and goes
    through once keepalived is back."""
    outcome = Outcome("keepalived unrunnable 20 s (a new VIP meanwhile)", box.name)
    with away(box.tools / "keepalived"):
        pod_service(api_server, lab, "late")
        time.sleep(FAULT)
        said = owned(box.url).get("keepalived", {})
        outcome.detail["while_away"] = f"in_sync={said.get('in_sync')} kind={said.get('kind')}"
    back = time.monotonic()
    outcome.in_sync_s = in_sync(box.url, back)
    vip = vip_of(api_server, "late")
    live = vip is not None and vip in box.d.conf.read_text()
    answered = wait_for(lambda: vip is not None and box.d.has(vip), RESYNC, 0.2)
    outcome.detail.update(
        {"vip": vip, "in_keepalived_conf": live, "held_after_s": answered and round(answered, 2)}
    )
    if said.get("in_sync") or said.get("kind") != "transient":
        outcome.miss("the failure to run keepalived was not shown as transient")
    if not live or answered is None:
        outcome.miss("the new VIP never reached keepalived")
    return outcome


def full_disk(box: PairBox, api_server: FakeApiServer, lab: Any) -> Outcome:
    """The state and intents folder fills up: scheduler changes are answered 503 (not
    stored, nothing changed); a Service created meanwhile is served, and the state file's
    write of it fails and is tried again; once there is room, the files are the truth
    again. An intent answered 200 is never lost, one answered 503 never applied."""
    outcome = Outcome("state and intents folder full (tmpfs)", box.name)
    before, _ = api(box.url, "PUT", "/api/v1/static/web-nat/scheduler", {"scheduler": "wlc"})
    filler = box.state / "filler"
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True, check=False
    )
    answers = []
    for scheduler in ("sh", "lc", "rr"):
        status, _ = api(
            box.url, "PUT", "/api/v1/static/web-nat/scheduler", {"scheduler": scheduler}
        )
        answers.append((scheduler, status))
    pod_service(api_server, lab, "while-full")
    time.sleep(FAULT)
    shown = owned(box.url)
    filler.unlink()
    freed = time.monotonic()
    outcome.in_sync_s = in_sync(box.url, freed)
    stored = json.loads((box.state / "intents.json").read_text()).get("schedulers", {})
    accepted = [s for s, status in answers if status == 200]
    now = stored.get("web-nat", {}).get("scheduler")
    state = json.loads((box.state / "state.json").read_text())
    outcome.detail = {
        "answers": answers,
        "stored": now,
        "shown_while_full": {k: v["in_sync"] for k, v in shown.items()},
        "state_file_services": len(state["services"]),
    }
    if before != 200:
        outcome.miss(f"the intent before the fault was answered {before}")
    if now != (accepted[-1] if accepted else "wlc"):
        outcome.miss(f"the stored intent is {now}: an answer was not kept to")
    if shown.get("state-file", {}).get("in_sync", True):
        outcome.miss("the state file's failing write was not shown")
    return outcome


def api_server_failing(box: PairBox, api_server: FakeApiServer, lab: Any) -> Outcome:
    """The API server answers 429 for 30 s, then 500 for 30 s; a Service is created behind
    it meanwhile. The directors keep serving; the Service is programmed and its status
    written once the server answers again."""
    outcome = Outcome("API server 429 then 500, 60 s", box.name)
    with api_server.failing(429, "TooManyRequests"):
        pod_service(api_server, lab, "during")  # into its store: the HTTP front fails
        time.sleep(30)
        outcome.detail["lease_while_429"] = owned(box.url).get("lease", {}).get("kind")
    with api_server.failing(500, "InternalError"):
        time.sleep(30)
    back = time.monotonic()
    outcome.in_sync_s = in_sync(box.url, back)
    written = wait_for(lambda: vip_of(api_server, "during"), RESYNC, 0.5)
    outcome.detail["status_written_after_s"] = written and round(written, 2)
    if written is None:
        outcome.miss("the Service created during the fault never got its address")
    return outcome


def director_stopped(lab: Any, boxes: list[PairBox]) -> Outcome:
    """SIGSTOP of the master's director for FAULT seconds: the kernel forwards on; past
    ha.alive_seconds keepalived gives the VIPs to the peer (the connections follow, synced);
    SIGCONT, and the director catches up."""
    from lab.ha import NAT_VIP

    box = boxes[0]
    outcome = Outcome("SIGSTOP of the director 20 s", box.name)
    assert box.proc is not None
    box.proc.send_signal(signal.SIGSTOP)
    time.sleep(FAULT)
    outcome.detail["vip_on_peer"] = boxes[1].d.has(NAT_VIP)
    box.proc.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    outcome.in_sync_s = in_sync(box.url, resumed)
    return outcome


def kill_keepalived_outcome(
    lab: Any, boxes: list[PairBox], kill: Callable[[Any], None], start: Callable[[Any], None]
) -> Outcome:
    """kill -9 of the master's keepalived: the peer takes the VIPs; keepalived started
    again (as systemd would) reads the file the director keeps."""
    box = boxes[0]
    outcome = Outcome("kill -9 of keepalived (then restarted)", box.name)
    kill(box.d)
    time.sleep(3)
    start(box.d)
    restarted = time.monotonic()
    outcome.in_sync_s = in_sync(box.url, restarted)
    return outcome


def kill_director(box: PairBox, lab: Any) -> Outcome:
    """kill -9 of the director (then started again, as systemd would): IPVS, keepalived and
    the VIPs carry on meanwhile; the new process reads the kernel back and changes nothing."""
    outcome = Outcome("kill -9 of the director (then restarted; in sync: from ready)", box.name)
    assert box.proc is not None
    box.proc.send_signal(signal.SIGKILL)
    box.proc.wait(30)
    box.proc = spawn(box.config, box.d.ns.name, box.d.workdir)
    outcome.detail["ready_after_s"] = round(ready(box.url, box.proc), 1)
    outcome.in_sync_s = in_sync(box.url, time.monotonic())  # from ready (Python starts slowly)
    return outcome


# -- the BGP trio ---------------------------------------------------------------------------
def bgp_suite(workdir: Path, outcomes: list[Outcome], out: Path) -> None:
    from lab.bgp import (
        VIP,
        bgp_lab,
        kill_director_process,
        kill_frr,
        start_director_process,
        start_frr,
        wait_nexthops,
    )
    from lab.ha import Talkers

    say("the BGP trio: building the lab")
    with bgp_lab("chaosb", workdir, backends=6) as lab:
        tools = workdir / "tools"
        tools.mkdir(exist_ok=True)
        tool(tools, "vtysh", shutil.which("vtysh") or "/usr/bin/vtysh")
        tool(tools, "frr-reload", "/usr/lib/frr/frr-reload.py")
        for d in lab.directors:
            start_frr(d.ns)
            start_director_process(lab, d, tools)
        if wait_nexthops(lab, 3, 180) is None:
            raise RuntimeError("the router never held three next hops")
        talkers = Talkers(lab, VIP, count=60, period=0.1)
        victim = lab.directors[0]
        try:
            time.sleep(2)
            outcomes.append(flush_lo(lab, victim))
            outcomes.append(vtysh_away(lab, victim, tools))
            outcomes.append(kill_frr_outcome(lab, victim, kill_frr, start_frr))
            outcomes.append(kill_bgp_director(lab, victim, kill_director_process, tools))
            alive, failed = talkers.alive, talkers.failed
        finally:
            talkers.close()
        for outcome in outcomes[-4:]:
            outcome.alive = f"{alive}/60 (the four faults)"
        outcomes[-1].failed_requests = failed
        outcomes.append(reboot(lab, victim, tools))
        for d in lab.directors:
            log = d.workdir / "director.log"
            if log.exists():
                shutil.copy(log, out / f"bgp-{d.name}.log")


def flush_lo(lab: Any, d: Any) -> Outcome:
    """``ip addr flush dev lo`` on a director (networkd re-applying lo): its VIPs are gone,
    IPVS takes nothing for them, FRR announces on; the director puts them back."""
    from lab.bgp import VIP

    outcome = Outcome("ip addr flush dev lo", d.name)
    before = repairs(d.url).get("addresses", 0)
    d.ns.exec(["ip", "addr", "flush", "dev", "lo"])
    d.ns.exec(["ip", "link", "set", "lo", "up"])
    flushed = time.monotonic()
    back = wait_for(
        lambda: VIP in d.ns.exec(["ip", "-o", "addr", "show", "dev", "lo"]), RESYNC, 0.2
    )
    outcome.in_sync_s = in_sync(d.url, flushed)
    outcome.repairs = {"addresses": repairs(d.url).get("addresses", 0) - before}
    outcome.detail["vip_back_after_s"] = back and round(back, 2)
    if back is None:
        outcome.miss("the VIP was never put back on lo")
    return outcome


def vtysh_away(lab: Any, d: Any, tools: Path) -> Outcome:
    """vtysh and frr-reload.py taken away for FAULT seconds while the operator puts the
    director in maintenance: the withdrawal cannot go out, is kept and tried again, never
    taken for FRR refusing it, and goes out once they are back; maintenance off then
    announces again."""
    from lab.bgp import ctl, wait_nexthops

    outcome = Outcome("vtysh and frr-reload.py unrunnable 20 s (maintenance meanwhile)", d.name)
    with away(tools / "vtysh"), away(tools / "frr-reload"):
        ctl(d, "maintenance", "on", "--reason", "chaos")
        time.sleep(FAULT)
        said = owned(d.url).get("frr", {})
        outcome.detail["while_away"] = f"in_sync={said.get('in_sync')} kind={said.get('kind')}"
        outcome.detail["still_announced"] = d.front in lab.nexthops()
    back = time.monotonic()
    gone = wait_for(lambda: d.front not in lab.nexthops(), RESYNC, 0.2)
    outcome.in_sync_s = in_sync(d.url, back)
    outcome.detail["withdrawn_after_s"] = gone and round(gone, 2)
    ctl(d, "maintenance", "off")
    outcome.detail["announced_again_after_s"] = wait_nexthops(lab, 3, RESYNC)
    if said.get("kind") != "transient":
        outcome.miss("the failure to run vtysh was not shown as transient")
    if gone is None:
        outcome.miss("the withdrawal never went out")
    return outcome


def kill_frr_outcome(
    lab: Any, d: Any, kill: Callable[[Any], None], start: Callable[[Any], None]
) -> Outcome:
    """kill -9 of a director's FRR, started again from its boot file (as systemd would):
    it announces nothing until the director, reading back what bgpd runs, sends the route
    again."""
    from lab.bgp import VIP, wait_nexthops

    outcome = Outcome("kill -9 of FRR (then restarted from its boot file)", d.name)
    kill(d.ns)
    wait_nexthops(lab, 2, 30)
    start(d.ns)
    restarted = time.monotonic()
    announced_alone = "\n  network " in d.frr_conf.read_text()
    back = wait_nexthops(lab, 3, 2 * RESYNC, since=restarted)
    outcome.in_sync_s = in_sync(d.url, restarted)
    outcome.detail = {
        "boot_file_has_routes": announced_alone,
        "announced_again_after_s": back,
        "vip": VIP,
    }
    if announced_alone:
        outcome.miss("FRR's boot file announces routes on its own")
    if back is None:
        outcome.miss("the route was never sent again")
    return outcome


def kill_bgp_director(lab: Any, d: Any, kill: Callable[[Any], None], tools: Path) -> Outcome:
    """kill -9 of a BGP director's process (then started again): FRR and IPVS carry on; the
    new process reads the kernel and FRR back and changes nothing."""
    from lab.bgp import start_director_process

    outcome = Outcome("kill -9 of the director (then restarted; in sync: from ready)", d.name)
    kill(d)
    time.sleep(2)
    outcome.detail["still_a_next_hop"] = d.front in lab.nexthops()
    started = time.monotonic()
    start_director_process(lab, d, tools)
    outcome.detail["ready_after_s"] = round(time.monotonic() - started, 1)
    outcome.in_sync_s = in_sync(d.url, time.monotonic())  # from ready (Python starts slowly)
    return outcome


def reboot(lab: Any, d: Any, tools: Path) -> Outcome:
    """A director's box rebooted: its namespace rebuilt (no IPVS table, nothing on lo), FRR
    started first from its boot file (the units' order), then the director. New
    connections all along: those ECMP sends to the rebooted box before its director has
    programmed IPVS fail, so FRR must not announce before then."""
    from lab.bgp import (
        VIP,
        director_namespace,
        kill_director_process,
        kill_frr,
        start_director_process,
        start_frr,
        wait_nexthops,
    )

    outcome = Outcome("reboot (namespace rebuilt, FRR first; in sync: from ready)", d.name)
    kill_director_process(d)
    kill_frr(d.ns)
    wait_nexthops(lab, 2, 30)
    index = lab.directors.index(d)
    lab.namespaces.remove(d.ns)
    d.ns.close()
    d.ns = director_namespace(lab.switch, lab.prefix, index + 1)
    lab.namespaces.append(d.ns)
    prober = Prober(lab.client, VIP)
    booted = time.monotonic()
    start_frr(d.ns)
    early = wait_for(lambda: d.front in lab.nexthops(), 20, 0.2)  # FRR alone, no director
    start_director_process(lab, d, tools)
    ready_at = time.monotonic()
    back = wait_nexthops(lab, 3, 4 * RESYNC, since=booted)
    outcome.in_sync_s = in_sync(d.url, ready_at)
    time.sleep(5)
    ok, tried = prober.close()
    outcome.failed_requests = tried - ok
    outcome.detail = {
        "announced_by_frr_alone_after_s": early,
        "back_after_s": back,
        "new_connections": f"{ok}/{tried}",
    }
    if early is not None:
        outcome.miss("FRR announced the VIP before the director had programmed it")
    if tried - ok > tried // 100:
        outcome.miss(f"{tried - ok} of {tried} new connections failed")
    return outcome


# -- the run --------------------------------------------------------------------------------
def report(outcomes: list[Outcome]) -> str:
    rows = [("fault", "where", "in sync after", "repairs", "connections", "what else")]
    for o in outcomes:
        rows.append(
            (
                o.fault,
                o.where,
                "never" if o.in_sync_s is None else f"{o.in_sync_s} s",
                ", ".join(f"{k} {v}" for k, v in o.repairs.items()) or "-",
                o.alive,
                "; ".join(f"{k} {v}" for k, v in o.detail.items())
                + ("" if o.ok else f"  MISSED: {o.why}"),
            )
        )
    return "\n".join(" | ".join(str(c) for c in row) for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", choices=("pair", "bgp"), help="one of the two suites")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "modprobe",
            "-a",
            "ip_vs",
            "ip_vs_rr",
            "ip_vs_wlc",
            "ip_vs_mh",
            "ip_vs_sh",
            "ip_vs_lc",
            "nf_tables",
        ],
        check=False,
    )
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    outcomes: list[Outcome] = []
    started = time.monotonic()
    for name, suite in (("pair", pair_suite), ("bgp", bgp_suite)):
        if args.only not in (None, name):
            continue
        try:
            suite(Path(tempfile.mkdtemp(prefix=f"chaos-{name}-")), outcomes, args.out)
        except Exception as exc:  # a suite that could not run is a failure, said so
            outcomes.append(Outcome(f"the {name} suite", "-", ok=False, why=repr(exc)[:500]))
    for outcome in outcomes:
        say(
            f"{outcome.where}: {outcome.fault}: in sync after {outcome.in_sync_s} s; "
            f"{outcome.detail}"
        )
        if outcome.in_sync_s is None or outcome.in_sync_s > RESYNC:
            outcome.miss("not back in sync within one resync period")
    text = report(outcomes)
    print(f"\nchaos: {len(outcomes)} faults in {time.monotonic() - started:.0f} s\n{text}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    missed = [o for o in outcomes if not o.ok]
    if missed:
        print(f"chaos: {len(missed)} missed: " + "; ".join(f"{o.fault}: {o.why}" for o in missed))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
