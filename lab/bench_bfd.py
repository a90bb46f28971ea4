"""`make bench` (on the host, native speed): how fast the router drops a dead director.

The VM lab measures this under software emulation, where every daemon runs tens of times
slower than on hardware. BGP and BFD need no IPVS, so this runs on the host itself: the
scale-out lab's router (FRR, ECMP, BFD 200 ms x 3, ``lab.bgp.router_config``) and three
directors, each running FRR with the configuration the director renders and applies
(``director.adapters.frr.announce.FrrSync``, the VIP held on ``lo``), all namespaces on one bridge.
For each fault, ROUNDS times: the time from the fault to bgpd taking the session down (read
from the router's FRR log, with the reason FRR gives) and to the router's kernel route
losing the next hop (polled every 5 ms).

- link down: the director's interface goes down; the router's stays up (it is on a
  bridge), so only BFD can tell. Goal: under 1 s.
- kill -9 of the director's FRR: its TCP session closes at once.

    python -m lab.bench_bfd --out bench/bfd-host.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from director.adapters.frr.sync import FrrSync
from director.core.announce import Route
from director.schema.config import parse_config
from lab.bgp import (
    BFD_MS,
    DIRECTOR_ASN,
    FRONT_NET,
    ROUTER_ASN,
    ROUTER_FRONT,
    VIP,
    kill_frr,
    nexthops,
    router_config,
    router_log,
    session_down_after,
    start_frr,
    vtysh,
)
from lab.ha import veth
from lab.netns import Netns
from lab.wait import wait_for

ROUNDS = 5
PREFIX = "bfdb"


def speaker_config(index: int) -> str:
    front = f"{FRONT_NET}.{10 + index}"
    return f"""
pools:
  - {{name: edge, addresses: [198.51.100.0/28], announce: bgp}}
bgp:
  asn: {DIRECTOR_ASN}
  router_id: {front}
  hostname: d{index}
  pathspace: {PREFIX}-d{index}
  config_file: /etc/frr/{PREFIX}-d{index}/frr.conf
  peers:
    - {{address: {ROUTER_FRONT}, asn: {ROUTER_ASN}, keepalive: 1, hold: 3, bfd: true,
       bfd_interval_ms: {BFD_MS}}}
"""


class Speaker:
    def __init__(self, index: int, ns: Netns) -> None:
        self.front = f"{FRONT_NET}.{10 + index}"
        self.ns = ns
        settings = parse_config(speaker_config(index), f"d{index}.yaml")
        assert settings.bgp is not None
        self.sync = FrrSync(settings.bgp, settings.pools, f"d{index}.yaml", netns=ns.name)

    def announce(self) -> None:
        """FRR started, then the director's configuration applied (the first time)."""
        start_frr(self.ns)
        route = Route(VIP, "edge", True, "bench")
        self.sync.install({VIP: route})  # raises FrrRejected: FRR refused the file

    def restart(self) -> None:
        """FRR started again after kill -9, from the file the director left (as at boot)."""
        start_frr(self.ns)


def bfd_up(router: Netns) -> int:
    """BFD sessions the router has up (its peers: the three directors)."""
    try:
        peers = json.loads(vtysh(router, "show bfd peers json") or "[]")
    except ValueError:
        return 0
    return sum(1 for p in peers if isinstance(p, dict) and p.get("status") == "up")


def close(made: list[Netns]) -> None:
    """Every namespace, its FRR and FRR's folders for it (this runs on the host)."""
    for ns in reversed(made):
        kill_frr(ns)
        ns.close()
        for folder in (Path("/etc/frr") / ns.name, Path("/run/frr") / ns.name):
            shutil.rmtree(folder, ignore_errors=True)


def build(made: list[Netns]) -> tuple[Netns, list[Speaker]]:
    switch = Netns(f"{PREFIX}-sw")
    made.append(switch)
    switch.ip("link set lo up", "link add brf type bridge", "link set brf up")
    router = Netns(f"{PREFIX}-router")
    made.append(router)
    veth(router, "rfront", switch, "p-r")
    switch.ip("link set p-r master brf", "link set p-r up")
    router.ip("link set lo up", "link set rfront up", f"addr add {ROUTER_FRONT}/24 dev rfront")
    router.sysctls({"net.ipv4.ip_forward": 1, "net.ipv4.fib_multipath_hash_policy": 1})
    start_frr(router, router_config(router_log(router)))
    speakers = []
    for index in range(1, 4):
        ns = Netns(f"{PREFIX}-d{index}")
        made.append(ns)
        veth(ns, "front", switch, f"p-d{index}")
        switch.ip(f"link set p-d{index} master brf", f"link set p-d{index} up")
        ns.ip(
            "link set lo up", "link set front up", f"addr add {FRONT_NET}.{10 + index}/24 dev front"
        )
        speaker = Speaker(index, ns)
        speaker.announce()
        speakers.append(speaker)
    return router, speakers


def fault(router: Netns, victim: Speaker, kind: str) -> dict[str, Any]:
    """One fault, timed; then the victim back, with three next hops again."""
    since_wall, since = time.time(), time.monotonic()
    if kind == "link down":
        victim.ns.ip("link set front down")
    else:
        kill_frr(victim.ns)
    gone = wait_for(lambda: victim.front not in nexthops(router), 10)
    route = None if gone is None else round(time.monotonic() - since, 3)
    time.sleep(0.5)  # the log line is written by now
    down = session_down_after(router, victim.front, since_wall)
    if kind == "link down":
        victim.ns.ip("link set front up")
    else:
        victim.restart()
    back = wait_for(lambda: len(nexthops(router)) == 3 and bfd_up(router) == 3, 60, 0.05)
    if back is None:
        raise SystemExit(f"{victim.ns.name} never came back after {kind}")
    time.sleep(2)  # BFD settles at its negotiated intervals
    return {
        "route_seconds": route,
        "session_down_seconds": down[0] if down else None,
        "reason": down[1] if down else None,
    }


def summary(rows: list[dict[str, Any]], field: str) -> dict[str, float | None]:
    values = [r[field] for r in rows if r[field] is not None]
    if not values:
        return {"median": None, "max": None}
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"bfd_ms": BFD_MS, "detect_multiplier": 3}
    made: list[Netns] = []
    try:
        router, speakers = build(made)
        settled = wait_for(lambda: len(nexthops(router)) == 3 and bfd_up(router) == 3, 60, 0.05)
        if settled is None:
            raise SystemExit(f"the router never held three next hops: {nexthops(router)}")
        time.sleep(3)
        for kind in ("link down", "kill -9"):
            rows = [fault(router, speakers[n % 3], kind) for n in range(args.rounds)]
            results[kind] = {
                "rounds": rows,
                "route": summary(rows, "route_seconds"),
                "session_down": summary(rows, "session_down_seconds"),
            }
            print(
                f"bench bfd (host, native) {kind}: the router's route lost the next hop "
                f"after {[r['route_seconds'] for r in rows]} s (median "
                f"{results[kind]['route']['median']}); bgpd took the session down after "
                f"{[r['session_down_seconds'] for r in rows]} s, saying "
                f"{sorted({r['reason'] for r in rows if r['reason']})}",
                flush=True,
            )
    finally:
        close(made)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
