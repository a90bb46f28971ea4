"""`make bench-flood` (in the lab VM): a SYN flood against a box, with the SYN guard and
without it.

A box on its own (``lab.netns.build_lab``: a client namespace, the box, two backends) runs
``director run`` as systemd would (a process of its own, its admin API on loopback), with
two static nat services: the flooded VIP and another. The flood (``lab.flood``: spoofed
sources from 198.18.0.0/15, as fast as the sender goes, bounded in seconds) hits the first;
meanwhile, from the same client namespace:

- new connections to each VIP, one every 50 ms, each allowed 3 s (as patient as TCP's first
  SYN retransmit): the share answered;
- 100 long-lived connections to the flooded VIP asking every second: how many are kept;
- ``GET /api/v1/status`` every 100 ms: its p99 latency, and how old the loop's last full
  sync gets (it should stay within its resync period);
- the backends' listening sockets (``ss``): their accept queue's fill at its highest, and
  the SYN cookies they had to send (the flood reaching them);
- IPVS's connection table for the flooded VIP at its fullest.

The same flood runs against a nat VIP with ``guard: {syn: on}``, then ``off``; then against
a dr VIP (which the guard cannot cover: the real servers answer the clients directly) three
times: as the kernel leaves IPVS, with IPVS's own defence ``drop_entry`` always on (it drops
half-open entries at random, and established ones it judges idle), and with ``secure_tcp``
always on (a stricter state table) — to choose what a dr or tun box should run by measuring
it. Traffic never leaves the lab's namespaces; the box's answers to the spoofed sources go
back to the client namespace, which drops them.

    python -m lab.vm run lab.bench_flood --memory 4G -- --seconds 20
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from lab.ha import Talkers
from lab.netns import (
    CLIENT_NET4,
    DR_PORT,
    NAT_PORT,
    Lab,
    Netns,
    Prober,
    build_lab,
    run,
    start_servers,
)

FLOODED, OTHER, DIRECT = "198.51.100.1", "198.51.100.2", "198.51.100.3"
# IPVS's defences as the kernel leaves them (what each dr scenario starts from, and is reset to)
IPVS_DEFAULTS: dict[str, str | int] = {"net.ipv4.vs.drop_entry": 0, "net.ipv4.vs.secure_tcp": 0}
SCENARIOS: dict[str, tuple[bool, str, dict[str, str | int]]] = {  # guard, forwarding, sysctls
    "guard": (True, "nat", {}),
    "no_guard": (False, "nat", {}),
    "dr": (False, "dr", {}),
    "dr_drop_entry": (False, "dr", {"net.ipv4.vs.drop_entry": 3}),
    "dr_secure_tcp": (False, "dr", {"net.ipv4.vs.secure_tcp": 3}),
}
API_PORT = 9190
TOKEN = "flood-bench-admin-api-token-0123"
LONG_LIVED = 100
RESYNC = 60  # the director's resync period here (kubernetes.resync_seconds's default)


def flooded(forwarding: str) -> tuple[str, int]:
    """The flooded VIP of a scenario, and the port its real servers listen on."""
    return (DIRECT, DR_PORT) if forwarding == "dr" else (FLOODED, NAT_PORT)


def config(workdir: Path, lab: Lab, guard: bool, forwarding: str = "nat") -> Path:
    token = workdir / "token"
    token.write_text(TOKEN + "\n")
    servers = [f"{be.ipv4}:{NAT_PORT}" for be in lab.backends]
    vip, port = flooded(forwarding)
    direct = [f"{be.ipv4}:{port}" for be in lab.backends]
    path = workdir / f"director-{'guard' if guard else 'open'}-{forwarding}.yaml"
    path.write_text(
        f"""
ownership: {{networks: [198.51.100.0/24]}}
services:
  - {{name: flooded, address: {vip}, port: 80, scheduler: rr, forwarding: {forwarding},
     real_servers: {direct}}}
  - {{name: other, address: {OTHER}, port: 80, scheduler: rr, real_servers: {servers}}}
guard: {{syn: {"on" if guard else "off"}}}
api:
  listen: 127.0.0.1:{API_PORT}
  token_file: {token}
  intents_file: {workdir / "intents.json"}
"""
    )
    return path


class Api:
    """``GET /api/v1/status``, timed. ``director run --netns`` programs the box's namespace
    but runs, and listens, where it was started (here: the VM's own namespace)."""

    def status(self, timeout: float = 5.0) -> tuple[float, dict[str, Any]]:
        conn = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=timeout)
        started = time.monotonic()
        try:
            conn.request("GET", "/api/v1/status", headers={"Authorization": f"Bearer {TOKEN}"})
            reply = conn.getresponse()
            body = json.loads(reply.read())
        finally:
            conn.close()
        return (time.monotonic() - started) * 1000, body


@contextlib.contextmanager
def director(lab: Lab, path: Path) -> Iterator[Api]:
    """``director run`` in the box's namespace until the block ends (stopped as systemd
    stops it; its table and nftables rules removed after, for the next run)."""
    log = path.with_suffix(".log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "director", "run", "--config", str(path), "--netns", lab.lvs.name],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = Api()
    try:
        deadline = time.monotonic() + 600
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"director run exited {process.returncode}")
            with contextlib.suppress(OSError, ValueError):
                _ms, body = api.status()
                if body.get("ready"):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the director never synced")
            time.sleep(0.5)
        yield api
    finally:
        process.terminate()
        process.wait(60)
        lab.lvs.exec(["ipvsadm", "-C"])
        lab.lvs.exec(["nft", "delete", "table", "inet", "director"], check=False)
        # what the guard set, undone: the next run starts from the kernel's defaults
        lab.lvs.sysctls({"net.ipv4.vs.conntrack": 0, "net.netfilter.nf_conntrack_tcp_loose": 1})


def held(ns: Netns, vip: str) -> int:
    out = ns.exec(["ipvsadm", "-Lnc"])
    return sum(1 for line in out.splitlines() if f" {vip}:80 " in f"{line} ")


def accept_fill(lab: Lab, port: int = NAT_PORT) -> float:
    """The fullest accept queue of the backends' listening sockets (queued / backlog)."""
    fill = 0.0
    for be in lab.backends:
        for line in be.ns.exec(["ss", "-Hltn", f"( sport = :{port} )"]).splitlines():
            words = line.split()
            queued, backlog = int(words[1]), int(words[2])
            fill = max(fill, queued / backlog if backlog else 0.0)
    return fill


def syncookies_sent(lab: Lab) -> int:
    total = 0
    for be in lab.backends:
        out = be.ns.exec(["nstat", "-az", "TcpExtSyncookiesSent"])
        total += sum(
            int(w[1])
            for w in (line.split() for line in out.splitlines())
            if w[:1] == ["TcpExtSyncookiesSent"]
        )
    return total


class Watch:
    """Samples, every ``period`` seconds until closed: the API's latency and last sync, the
    backends' accept queues and IPVS's table for the flooded VIP."""

    def __init__(self, lab: Lab, api: Api, target: tuple[str, int] = (FLOODED, NAT_PORT)) -> None:
        self.lab, self.api, self.period = lab, api, 0.1
        self.vip, self.port = target
        self.latencies: list[float] = []
        self.failures = 0
        self.sync_age = 0.0
        self.fill = 0.0
        self.ipvs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tick = 0
        while not self._stop.wait(self.period):
            tick += 1
            try:
                ms, body = self.api.status()
                self.latencies.append(ms)
                last = body.get("last_sync")
                if last:
                    age = time.time() - datetime.fromisoformat(last).timestamp()
                    self.sync_age = max(self.sync_age, age)
            except (OSError, ValueError):
                self.failures += 1
            if tick % 10 == 0:  # once a second: ss and ipvsadm cost more
                self.fill = max(self.fill, accept_fill(self.lab, self.port))
                self.ipvs = max(self.ipvs, held(self.lab.lvs, self.vip))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def p99(self) -> float | None:
        if len(self.latencies) < 2:
            return None
        return round(statistics.quantiles(self.latencies, n=100)[98], 1)


def flood(lab: Lab, seconds: float, vip: str = FLOODED) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            lab.client.name,
            sys.executable,
            "-m",
            "lab.flood",
            "--vip",
            vip,
            "--port",
            "80",
            "--seconds",
            str(seconds),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def scenario(lab: Lab, workdir: Path, name: str, seconds: float) -> dict[str, Any]:
    guard, forwarding, sysctls = SCENARIOS[name]
    vip, port = flooded(forwarding)
    lab.lvs.sysctls({**IPVS_DEFAULTS, **sysctls})
    with director(lab, config(workdir, lab, guard, forwarding)) as api:
        talkers = Talkers(lab, vip, count=LONG_LIVED, period=1.0)
        try:
            deadline = time.monotonic() + 60
            while talkers.answered < LONG_LIVED and time.monotonic() < deadline:
                time.sleep(0.2)
            cookies_before = syncookies_sent(lab)
            watch = Watch(lab, api, (vip, port))
            sender = flood(lab, seconds, vip)
            time.sleep(1)  # the flood at full rate before the clients' count starts
            probes = [Prober(lab.client, v, period=0.05, timeout=3.0) for v in (vip, OTHER)]
            out, _ = sender.communicate(timeout=seconds + 120)
            ended = time.monotonic()
            answered = [p.close() for p in probes]
            watch.close()
            # how fast the table is given back once the flood stops (a defence's worth)
            after: dict[str, int] = {}
            for wait in (5, 20):
                time.sleep(max(0.0, ended + wait - time.monotonic()))
                after[str(wait)] = held(lab.lvs, vip)
            sent = json.loads(out)
            time.sleep(2)
            return {
                "forwarding": forwarding,
                "guard": guard,
                "ipvs_sysctls": sysctls,
                "flood_pps": sent["pps"],
                "flood_packets": sent["sent"],
                "legit_success": round(answered[0][0] / answered[0][1], 4)
                if answered[0][1]
                else None,
                "legit_tried": answered[0][1],
                "other_vip_success": round(answered[1][0] / answered[1][1], 4)
                if answered[1][1]
                else None,
                "long_lived": LONG_LIVED,
                "long_lived_kept": talkers.alive,
                "long_lived_failed_requests": talkers.failed,
                "api_p99_ms": watch.p99(),
                "api_failures": watch.failures,
                "api_requests": len(watch.latencies),
                "last_sync_age_max_s": round(watch.sync_age, 1),
                "resync_seconds": RESYNC,
                "backend_accept_queue_max": round(watch.fill, 3),
                "backend_syncookies_sent": syncookies_sent(lab) - cookies_before,
                "ipvs_connections_max": watch.ipvs,
                "ipvs_connections_after_s": after,
            }
        finally:
            talkers.close()
            lab.lvs.sysctls(IPVS_DEFAULTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=list(SCENARIOS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    run(["modprobe", "-a", "ip_vs_rr", "nf_conntrack", "nft_synproxy"], check=False)
    lab = build_lab(prefix="fl", backends=2, dr_vips=[DIRECT])
    results: dict[str, Any] = {"kernel": os.uname().release, "seconds": args.seconds}
    try:
        lab.lvs.ip(
            *(f"addr add {vip}/32 dev vips" for vip in (FLOODED, OTHER)),
            f"route add 198.18.0.0/15 via {CLIENT_NET4}.2",
        )
        start_servers(lab, tcp_ports=(NAT_PORT, DR_PORT), udp_ports=())
        with tempfile.TemporaryDirectory(prefix="flood-") as folder:
            for name in args.only:
                results[name] = scenario(lab, Path(folder), name, args.seconds)
                print(f"bench flood {name}: {results[name]}", flush=True)
    finally:
        lab.close()
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
