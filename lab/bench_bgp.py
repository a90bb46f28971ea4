"""`make bench`: how fast a change reaches the routers over BGP, at 10 and at 1,000 VIPs.

In the lab VM: the scale-out lab's router (FRR) and one director with its own FRR
(``lab/bgp.py``), the Kubernetes API stand-in in this process, N LoadBalancer Services (pod
mode) in a pool announced over BGP, each with one ready endpoint. Once the router holds all N
routes, each round
  - creates a Service with a ready endpoint: the seconds until the router's kernel holds its
    route (watch, address, IPVS, the VIP on lo, one vtysh call, BGP UPDATE, zebra);
  - marks that endpoint not ready: the seconds until the route is gone from the router;
  - deletes it.
The figure that matters is the ratio between 1,000 and 10 announced VIPs, taken in one run:
the cost of one change must not grow with the number of VIPs (target < 2).

    python -m lab.vm run lab.bench_bgp --memory 4G
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from director.daemon.runtime import Runtime
from director.dataplane.kernel import KernelIpvs
from director.schema.config import parse_config
from lab.bgp import DIRECTOR_ASN, ROUTER_ASN, ROUTER_FRONT, BgpLab, bgp_lab, start_frr
from lab.kubeapi import FakeApiServer, endpoint_slice, service
from lab.wait import wait_for

POOL = "198.51.96.0/20"  # RFC 5737-adjacent, only inside the lab's namespaces
TOKEN = "bench-bgp-token"


def announced(lab: BgpLab) -> int:
    """Routes the router's kernel holds inside the pool (installed by zebra from BGP)."""
    text = lab.router.exec(["ip", "-4", "-o", "route", "show", "root", POOL], check=False)
    return sum(1 for line in text.splitlines() if line.strip())


def add(api: FakeApiServer, name: str, index: int) -> None:
    obj = service(name, [("http", "TCP", 80)], annotations={"lvs-director.io/backends": "pod"})
    obj["spec"]["ports"][0]["targetPort"] = 80
    obj["spec"]["allocateLoadBalancerNodePorts"] = False  # pod mode needs none
    api.create("services", obj)
    pod = f"10.{64 + index // 62500}.{index // 250 % 250}.{index % 250 + 1}"
    api.create(
        "endpointslices", endpoint_slice(name, [(pod, None, True, False)], [("http", "TCP", 80)])
    )


def scenario(vips: int, rounds: int, workdir: Path) -> dict[str, object]:
    with bgp_lab(f"bb{vips}", workdir / f"lab-{vips}", backends=1) as lab:
        d = lab.directors[0]
        api = FakeApiServer(token=TOKEN)
        for i in range(vips):
            add(api, f"svc-{i:05d}", i)
        api.start()
        kubeconfig = api.kubeconfig(workdir / f"kubeconfig-{vips}")
        start_frr(d.ns)
        settings = parse_config(
            f"""
pools:
  - {{name: edge, addresses: [{POOL}], announce: bgp}}
kubernetes: {{kubeconfig: {kubeconfig}, identity: bench, resync_seconds: 86400}}
bgp:
  asn: {DIRECTOR_ASN}
  router_id: {d.front}
  pathspace: {d.ns.name}
  config_file: {d.frr_conf}
  poll_seconds: 5
  peers:
    - {{address: {ROUTER_FRONT}, asn: {ROUTER_ASN}, bfd: false}}
""",
            "bench-bgp.yaml",
        )
        started = time.monotonic()
        ipvs = KernelIpvs(netns=d.ns.name)
        runtime = Runtime(settings, ipvs, netns=d.ns.name).start()
        try:
            if not runtime.wait_ready(1800):
                raise RuntimeError("the director never finished its first sync")
            converged = wait_for(lambda: announced(lab) == vips, 3600, 0.5)
            if converged is None:
                raise RuntimeError(f"the router never held {vips} routes ({announced(lab)})")
            converged_s = time.monotonic() - started
            print(
                f"bench bgp: {vips} VIPs on the router {converged_s:.1f}s after start", flush=True
            )
            created, withdrawn = [], []
            for r in range(rounds):
                name = f"probe-{r:03d}"
                t0 = time.perf_counter()
                add(api, name, 60000 + r)
                if wait_for(lambda: announced(lab) == vips + 1, 300, 0.01) is None:
                    raise RuntimeError(f"round {r}: the new Service's route never came")
                created.append(time.perf_counter() - t0)
                t1 = time.perf_counter()
                api.patch(
                    "endpointslices",
                    f"{name}-abcde",
                    {
                        "endpoints": [
                            {
                                "addresses": [f"10.99.0.{r % 250 + 1}"],
                                "conditions": {
                                    "ready": False,
                                    "serving": False,
                                    "terminating": False,
                                },
                            }
                        ]
                    },
                )
                if wait_for(lambda: announced(lab) == vips, 300, 0.01) is None:
                    raise RuntimeError(f"round {r}: the route stayed after its last endpoint")
                withdrawn.append(time.perf_counter() - t1)
                api.delete("services", name)
                api.delete("endpointslices", f"{name}-abcde")
                time.sleep(1)  # its address released before the next round
            result: dict[str, object] = {
                "vips": vips,
                "rounds": rounds,
                "converged_s": round(converged_s, 1),
                "created_to_route_s_p50": round(statistics.median(created), 3),
                "created_to_route_s_max": round(max(created), 3),
                "endpoint_down_to_withdrawn_s_p50": round(statistics.median(withdrawn), 3),
                "endpoint_down_to_withdrawn_s_max": round(max(withdrawn), 3),
                "frr_reloads": runtime.daemons.frr.frr.reloads if runtime.daemons.frr else 0,
            }
            print(f"bench bgp: {result}", flush=True)
            return result
        finally:
            runtime.stop(leave=False)
            ipvs.close()
            api.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--vips", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-bgp-"))
    runs = [scenario(n, args.rounds, workdir) for n in args.vips]
    small, large = runs[0], runs[-1]
    ratios = {
        key: round(float(large[key]) / float(small[key]), 2)  # type: ignore[arg-type]
        for key in ("created_to_route_s_p50", "endpoint_down_to_withdrawn_s_p50")
    }
    print(f"bench bgp: ratio {large['vips']} / {small['vips']} VIPs: {ratios}", flush=True)
    results = {"kernel": os.uname().release, "runs": runs, "ratios": ratios}
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
