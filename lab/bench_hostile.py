"""A tenant's biggest Service against the loop: the longest step while it is taken in.

A Service as big as the API server takes (about 1.5 MB: etcd's request limit) holding tens
of thousands of ``loadBalancerSourceRanges`` is refused as a whole (a Warning Event; its
addresses refuse every source), and one at the cap (1,000 ranges) is served, filtered by
real nftables in a namespace of its own. For each: the watcher's time to read the object
(off the loop), and the control loop's longest step while it takes the Service in, against
a target of 100 ms. Natively, on the host (nftables works here; IPVS is the fake).

    python -m lab.bench_hostile [--out bench/hostile-host.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from director.core.cluster_parse import MAX_SOURCE_RANGES, service_from_json
from director.core.firewall import FakeFirewall, Firewall
from director.core.model import IpProtocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually

TARGET_MS = 100.0


def big_service(name: str, ranges: int) -> dict[str, Any]:
    obj = service(name, [("http", "TCP", 80)])
    obj["spec"]["loadBalancerSourceRanges"] = [
        f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}/32" for i in range(ranges)
    ]
    return obj


def firewall(netns: str | None) -> Firewall:
    if netns is None:
        return FakeFirewall()
    from director.dataplane.nft import NftFirewall

    return NftFirewall(netns)


def one(name: str, ranges: int, netns: str | None, workdir: Path) -> dict[str, Any]:
    """Take one Service of ``ranges`` ranges in; its figures."""
    obj = big_service(name, ranges)
    size = len(json.dumps(obj))
    started = time.perf_counter()
    info = service_from_json(obj)
    parse_ms = 1000 * (time.perf_counter() - started)
    with FakeApiServer() as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        settings = parse_config(
            f"""
pools: [{{name: default, addresses: [198.51.100.0-198.51.100.7]}}]
kubernetes: {{kubeconfig: {api.kubeconfig(workdir / "kc")}, identity: a, lease_seconds: 2,
             resync_seconds: 3600}}
""",
            "bench.yaml",
        )
        wall = firewall(netns)
        runtime = Runtime(settings, FakeIpvs(), firewall=wall)
        steps: list[float] = []
        work = runtime.controller._step

        def timed(*args: Any) -> None:  # the step's work, under the loop's lock
            begun = time.perf_counter()
            try:
                work(*args)
            finally:
                steps.append(1000 * (time.perf_counter() - begun))

        runtime.controller._step = timed  # type: ignore[method-assign, assignment]
        with runtime.start():
            assert runtime.wait_ready(30)
            steps.clear()
            api.create("services", obj)
            api.create(
                "endpointslices",
                endpoint_slice(name, [("192.0.2.11", "n1", True, False)], [("http", "TCP", 8080)]),
            )
            key = ServiceKey.inet(IpProtocol.TCP, "198.51.100.0", 80)
            parts = runtime.controller.parts
            eventually(
                lambda: key in parts.exports.view.desired or key in parts.filter.held_back,
                timeout=60,
                what="taken in",
            )
            if ranges > MAX_SOURCE_RANGES:
                eventually(lambda: api.events_for(name), timeout=30, what="its Warning")
            time.sleep(1.0)
            served = key in runtime.controller.parts.exports.view.desired
            filtered = key in runtime.controller.parts.exports.view.filtered
            events = [e["reason"] for e in api.events_for(name)]
    return {
        "ranges": ranges,
        "bytes": size,
        "parse_ms": round(parse_ms, 1),
        "longest_step_ms": round(max(steps), 1),
        "steps": len(steps),
        "served": served,
        "filtered": filtered,
        "events": events,
        "refused": info.source_ranges == () and ranges > MAX_SOURCE_RANGES,
        "firewall": "nftables" if netns else "fake",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    netns = None
    if os.geteuid() == 0 and shutil.which("nft"):
        from lab.netns import Netns

        space = Netns(f"bench-hostile-{os.getpid()}")
        netns = space.name
    try:
        workdir = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
        results = {
            "huge": one("huge", 85_000, netns, workdir),  # ~1.5 MB: the API's object limit
            "at_cap": one("capped", MAX_SOURCE_RANGES, netns, workdir),
        }
    finally:
        if netns is not None:
            space.close()
    for name, r in results.items():
        verdict = (
            "refused as a whole"
            if r["refused"]
            else ("served, filtered" if r["filtered"] else "served")
        )
        print(
            f"bench: {name}: a Service of {r['bytes'] / 1e6:.2f} MB with {r['ranges']} "
            f"ranges: {verdict} ({', '.join(r['events']) or 'no Event'}); the watcher read it "
            f"in {r['parse_ms']} ms; the loop's longest step {r['longest_step_ms']} ms "
            f"(target {TARGET_MS:.0f}) over {r['steps']} steps; {r['firewall']}"
        )
    results["target_ms"] = TARGET_MS  # type: ignore[assignment]
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
