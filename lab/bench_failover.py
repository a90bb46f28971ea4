"""`make bench-dataplane` (in the lab VM): a keepalived pair's failover under load.

The namespace pair (``lab.ha``: two directors, real keepalived, the kernel's sync daemon,
conntrackd for full NAT) carries new connections at about half the highest rate the lab
sustains (wrk, a connection per request, nginx behind) and 200 long-lived connections asking
every second. Before the fault, the sync lag: the connections the master's kernel holds for
the VIP against what the backup's holds. Then kill -9 of the master's keepalived, and later
the failback (keepalived started again; it takes the VIPs back after ``preempt_delay``).
Counted: long-lived connections kept and requests failed on them, new connections that
failed (wrk's errors) and the window in which a prober's new connections failed.

The same on the BGP fleet (``lab.bgp``: three directors behind a router's ECMP, Maglev, tun):
kill -9 of one director's FRR and of the director itself, under the same kind of load, then
the director back. No sync daemon there: the survivors carry its flows by the same Maglev
table and sloppy TCP; what it costs is the new connections the router still sent to the
dead box until BFD dropped it.

    python -m lab.vm run lab.bench_failover --memory 4G

``make bench-dataplane`` runs it in the same boot as ``lab.bench_dataplane``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lab import bgp
from lab.dataplane import Servers, parse_wrk, requests_done, wrk, wrk_argv
from lab.ha import (
    FULLNAT_VIP,
    GATEWAY,
    NAT_PORT,
    NAT_VIP,
    HaLab,
    Talkers,
    build_ha_lab,
    kill_keepalived,
    start_conntrackd,
    start_director,
    start_keepalived,
)
from lab.netns import Netns, Prober
from lab.wait import wait_for

LOAD_PORT, NGINX_PORT = 81, 8081  # the load's virtual service, and nginx on each backend
LONG_LIVED = 200
PREEMPT_DELAY = 5


def services(lab: HaLab, fullnat: bool) -> str:
    """The long-lived connections' service (port 80, the lab's line servers) and the load's
    (port 81, nginx), on the nat VIP or, with ``fullnat``, on the full-NAT VIP."""
    vip, mode = (FULLNAT_VIP, ", forwarding: fullnat") if fullnat else (NAT_VIP, "")
    lines = ", ".join(f"{be.ipv4}:{NAT_PORT}" for be in lab.backends)
    load = ", ".join(f"{be.ipv4}:{NGINX_PORT}" for be in lab.backends)
    text = f"""services:
  - {{name: talk, address: {vip}, port: 80, scheduler: rr{mode}, real_servers: [{lines}]}}
  - {{name: load, address: {vip}, port: {LOAD_PORT}, scheduler: rr{mode}, real_servers: [{load}]}}
"""
    return text + (f"snat: {{addresses: [{GATEWAY}]}}\n" if fullnat else "")


def held(ns: Netns, vip: str) -> int:
    """Connections the kernel's IPVS holds for ``vip`` (any state), as ``ipvsadm -Lnc``
    lists them."""
    out = ns.exec(["ipvsadm", "-Lnc"])
    return sum(1 for line in out.splitlines() if f" {vip}:" in line)


@contextlib.contextmanager
def pair(workdir: Path, fullnat: bool) -> Iterator[HaLab]:
    """The pair up, d1 MASTER, nginx on every backend."""
    lab = build_ha_lab("fo", workdir)
    servers = Servers()
    try:
        for be in lab.backends:
            servers.nginx(be.ns, f"fo-{be.name}", be.name, NGINX_PORT)
        for d in lab.directors:
            text = services(lab, fullnat)
            start_director(lab, d, PREEMPT_DELAY, services=text, conntrackd=fullnat)
            if fullnat:
                start_conntrackd(d)
        vip = FULLNAT_VIP if fullnat else NAT_VIP
        if wait_for(lambda: lab.directors[0].has(vip), 60) is None:
            raise RuntimeError("d1 never became MASTER")
        yield lab
    finally:
        servers.close()
        lab.close()


def calibrate(client: Netns, vip: str, seconds: float, port: int) -> tuple[float, int, float]:
    """The highest new-connection rate (wrk, 32 connections), and the concurrency whose
    rate is nearest half of it: (highest, connections, that rate)."""
    top = parse_wrk(wrk(client, vip, seconds, 32, close=True, port=port))[0]
    rates = {
        c: parse_wrk(wrk(client, vip, seconds, c, close=True, port=port))[0] for c in (1, 2, 4, 8)
    }
    chosen = min(rates, key=lambda c: abs(rates[c] - top / 2))
    return top, chosen, rates[chosen]


def under_load(
    client: Netns,
    vip: str,
    connections: int,
    seconds: float,
    *,
    fault: Callable[[], float | None],
    after: float,
    port: int = LOAD_PORT,
) -> dict[str, Any]:
    """wrk for ``seconds``; ``fault()`` ``after`` seconds in; what clients saw."""
    load = subprocess.Popen(
        ["ip", "netns", "exec", client.name, *wrk_argv(vip, seconds, connections, True, port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    prober = Prober(client, vip, period=0.05, timeout=1.0)
    time.sleep(after)
    took = fault()
    out, _ = load.communicate(timeout=seconds + 60)
    answered, tried = prober.close()
    rate, _p99, errors = parse_wrk(out)
    done = requests_done(out)
    return {
        "cps": round(rate, 1),
        "new_total": done + errors,
        "new_failed": errors,
        "probe_failed": tried - answered,
        "probe_tried": tried,
        "failed_window_s": round(prober.failed_window, 2),
        "takeover_s": took,
    }


def scenario(workdir: Path, fullnat: bool, seconds: float) -> dict[str, Any]:
    vip = FULLNAT_VIP if fullnat else NAT_VIP
    with pair(workdir / ("fullnat" if fullnat else "nat"), fullnat) as lab:
        d1, d2 = lab.directors
        top, connections, rate = calibrate(lab.client, vip, 5, LOAD_PORT)
        print(f"bench failover: highest {top:.0f}/s, load -c{connections} {rate:.0f}/s", flush=True)
        talkers = Talkers(lab, vip, count=LONG_LIVED, period=1.0)
        try:
            if wait_for(lambda: talkers.answered >= LONG_LIVED, 60) is None:
                raise RuntimeError("the long-lived connections never all answered")
            lag: dict[str, int] = {}

            def kill() -> float | None:
                lag["master"], lag["backup"] = held(d1.ns, vip), held(d2.ns, vip)
                started = time.monotonic()
                kill_keepalived(d1)
                return wait_for(lambda: d2.has(vip), 10) and round(time.monotonic() - started, 2)

            over = under_load(lab.client, vip, connections, seconds, fault=kill, after=seconds / 3)
            kept_after_failover = talkers.alive

            def back() -> float | None:
                started = time.monotonic()
                start_keepalived(d1)
                taken = wait_for(lambda: d1.has(vip) and not d2.has(vip), PREEMPT_DELAY + 30)
                return taken and round(time.monotonic() - started, 2)

            back_figures = under_load(
                lab.client, vip, connections, seconds, fault=back, after=seconds / 4
            )
        finally:
            talkers.close()
        return {
            **_kept(top, connections, over, talkers, kept_after_failover),
            "sync_master_held": lag.get("master", 0),
            "sync_backup_held": lag.get("backup", 0),
            "sync_held_ratio": round(lag["backup"] / lag["master"], 3)
            if lag.get("master")
            else None,
            "failback": back_figures,
        }


def bgp_scenario(workdir: Path, seconds: float) -> dict[str, Any]:
    """kill -9 of one director of three (its FRR and the director: a box whose software
    died) under load, then the director back; tun, Maglev, nginx on every backend."""
    servers = Servers()
    with bgp.bgp_lab("fob", workdir) as lab:
        try:
            for be in lab.backends:
                servers.nginx(be.ns, f"fob-{be.name}", be.name, LOAD_PORT)
            victim, *others = lab.directors
            for d in others:
                bgp.start_director(lab, d, load_port=LOAD_PORT)
            bgp.start_frr(victim.ns)
            bgp.start_director_process(lab, victim, load_port=LOAD_PORT)
            if bgp.wait_nexthops(lab, 3, 180) is None:
                raise RuntimeError("the router never held three next hops")
            top, connections, rate = calibrate(lab.client, bgp.VIP, 5, LOAD_PORT)
            print(f"bench failover bgp: highest {top:.0f}/s, load -c{connections} {rate:.0f}/s")
            talkers = Talkers(lab, bgp.VIP, count=LONG_LIVED, period=1.0)
            carried: dict[str, int] = {}
            try:
                if wait_for(lambda: talkers.answered >= LONG_LIVED, 60) is None:
                    raise RuntimeError("the long-lived connections never all answered")

                def kill() -> float | None:
                    carried.update(bgp.connections_per_director(lab, bgp.VIP))
                    started = time.monotonic()
                    bgp.kill_frr(victim.ns)
                    bgp.kill_director_process(victim)
                    took = bgp.wait_nexthops(lab, 2, 30, since=started)
                    return None if took is None else round(took, 2)

                over = under_load(
                    lab.client, bgp.VIP, connections, seconds, fault=kill, after=seconds / 3
                )
                kept_after_failover = talkers.alive

                def back() -> float | None:
                    # as systemd starts them: FRR (from the frr.conf the director left), then
                    # the director, a process of its own (one started in this process would
                    # starve the prober here of the interpreter, and read as failures)
                    started = time.monotonic()
                    bgp.start_frr(victim.ns)
                    bgp.start_director_process(lab, victim, load_port=LOAD_PORT)
                    took = bgp.wait_nexthops(lab, 3, 180, since=started)
                    return None if took is None else round(took, 2)

                # long enough that the router takes the director back while the load runs
                back_figures = under_load(
                    lab.client, bgp.VIP, connections, 3 * seconds, fault=back, after=seconds / 4
                )
            finally:
                talkers.close()
        finally:
            servers.close()
    return {
        **_kept(top, connections, over, talkers, kept_after_failover),
        "victim_carried": carried.get(victim.name, 0),
        "sync_held_ratio": None,
        "sync": "none: the survivors carry the dead box's flows by the same Maglev table",
        "failback": back_figures,
    }


def _kept(
    top: float, connections: int, over: dict[str, Any], talkers: Talkers, kept_after: int
) -> dict[str, Any]:
    """What a scenario's clients saw through the fault: the load, the long-lived connections
    kept, the new connections that failed."""
    return {
        "highest_cps": round(top, 1),
        "load_connections": connections,
        "cps": over["cps"],
        "long_lived": LONG_LIVED,
        "long_lived_kept": talkers.alive,
        "long_lived_kept_after_failover": kept_after,
        "long_lived_failed_requests": talkers.failed,
        "new_failed": over["new_failed"],
        "new_total": over["new_total"],
        "failed_window_s": over["failed_window_s"],
        "takeover_s": over["takeover_s"],
        "probe": {"failed": over["probe_failed"], "tried": over["probe_tried"]},
    }


def entry_sizes() -> dict[str, int]:
    """Bytes the kernel allocates per IPVS connection and per conntrack entry (their slab
    caches' object sizes): what a box's memory holds of each."""
    sizes: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/slabinfo").read_text().splitlines()[2:]:
            name, _active, _total, objsize = line.split()[:4]
            if name in ("ip_vs_conn", "nf_conntrack"):
                sizes[name] = int(objsize)
    return sizes


SCENARIOS = ("nat", "fullnat", "bgp")


def run(seconds: float, names: tuple[str, ...] = SCENARIOS) -> dict[str, Any]:
    """The scenarios, one after the other: the figures ``bench/failover-load.json`` keeps."""
    results: dict[str, Any] = {"kernel": os.uname().release, "seconds": seconds}
    for name in names:
        # the labs' files (keepalived's FIFO among them) on the guest's own disk, not 9p
        with tempfile.TemporaryDirectory(prefix="failover-") as workdir:
            if name == "bgp":
                results[name] = bgp_scenario(Path(workdir), seconds)
            else:
                results[name] = scenario(Path(workdir), name == "fullnat", seconds)
        print(f"bench failover {name}: {results[name]}", flush=True)
    results["entry_bytes"] = entry_sizes()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = run(args.seconds, tuple(args.only))
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
