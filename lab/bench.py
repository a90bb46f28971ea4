"""`make bench`: the IPVS dataplane measured against ipvsadm, side by side, in one VM run.

Runs inside the lab VM (real kernel IPVS, software emulation: absolute times are slow and
noisy, so the figures that matter are ratios taken in the same run). Writes results.json.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import os
import random
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from director.core.model import (
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.ownership import Ownership
from director.core.services import Table, VirtualService
from director.engine.reconcile import Reconciler
from lab.netns import fresh_namespace
from lab.reads import read_growth

DESTS = 10
# RFC 2544 benchmarking range; only ever inside the bench namespace.
OWNED = Ownership((ipaddress.ip_network("198.18.0.0/16"),))


def build_table(services: int) -> Table:
    table: Table = {}
    for i in range(services):
        key = ServiceKey.inet(Protocol.TCP, f"198.18.{i // 250}.{i % 250 + 1}", 80)
        dests = [
            RealServer(f"198.19.{d}.{i % 250 + 1}", 8080, 1, Forwarding.NAT) for d in range(DESTS)
        ]
        table[key] = VirtualService.build(key, ServiceConfig("wlc"), dests, origin="bench")
    return table


def restore_file(table: Table, path: Path) -> None:
    lines = []
    for key, vs in table.items():
        vip = f"{key.address}:{key.port}"
        lines.append(f"-A -t {vip} -s {vs.config.scheduler}")
        lines.extend(
            f"-a -t {vip} -r {rs.address}:{rs.port} -m -w {rs.weight}"
            for rs in vs.real_servers.values()
        )
    path.write_text("\n".join(lines) + "\n")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def incremental(reconciler: Reconciler, table: Table, rounds: int = 40) -> dict[str, float]:
    """One real server's weight changes, one service at a time, against the cache."""
    rng = random.Random(7)
    keys = list(table)
    ops, times = [], []
    for _ in range(rounds):
        key = rng.choice(keys)
        vs = table[key]
        first = next(iter(vs.real_servers.values()))
        changed = RealServer(first.address, first.port, first.weight % 50 + 1, first.forwarding)
        dests = dict(vs.real_servers)
        dests[changed.key] = changed
        table[key] = VirtualService(key, vs.config, dests, vs.origin)
        report = reconciler.sync_service(key, table[key])
        assert report.result.ok
        ops.append(len(report.plan.ops))
        times.append(report.seconds * 1000)
    return {
        "ops_max": max(ops),
        "ops_min": min(ops),
        "ms_p50": statistics.median(times),
        "ms_p99": sorted(times)[int(len(times) * 0.99) - 1] if len(times) > 1 else times[0],
    }


def ipvsadm(ns: str, *argv: str, stdin: Path | None = None) -> float:
    handle = open(stdin) if stdin else None  # noqa: SIM115
    started = time.perf_counter()
    subprocess.run(
        ["ip", "netns", "exec", ns, "ipvsadm", *argv],
        stdin=handle,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    elapsed = time.perf_counter() - started
    if handle:
        handle.close()
    return elapsed


def dataplane(args: argparse.Namespace, results: dict[str, object]) -> None:
    """The IPVS figures (their tables are freed when this returns)."""
    # Incremental at 1,000 services.
    ns, ipvs = fresh_namespace("bench-1k")
    small = build_table(1000)
    reconciler = Reconciler(ipvs, OWNED)
    reconciler.full_sync(small)
    results["incremental_1k"] = incremental(reconciler, small)
    print(f"bench: incremental at 1,000: {results['incremental_1k']}", flush=True)
    ipvs.close()
    ns.close()

    # Full sync from empty, each in a fresh namespace: ipvsadm -R, then the director.
    big = build_table(args.services)
    rules = args.out / "rules.txt"
    restore_file(big, rules)
    ns, ipvs = fresh_namespace("bench-ipvsadm")
    results["ipvsadm_restore_s"] = ipvsadm(ns.name, "-R", stdin=rules)
    print(f"bench: ipvsadm -R: {results['ipvsadm_restore_s']:.1f}s", flush=True)
    ipvs.close()
    ns.close()
    ns, ipvs = fresh_namespace("bench-director")
    reconciler = Reconciler(ipvs, OWNED)
    report = None

    def full() -> None:  # as the daemon syncs: planned and sent in chunks, no plan kept
        nonlocal report
        report = reconciler.full_sync(big, keep_plan=False)

    results["director_full_sync_s"] = timed(full)
    assert report is not None and report.result.ok
    results["director_full_sync_ops"] = report.result.requested
    results["director_full_sync_sends"] = report.result.sends
    print(
        f"bench: director full sync: {results['director_full_sync_s']:.1f}s "
        f"({report.result.requested} ops in {report.result.sends} sends)",
        flush=True,
    )

    # No-op resync: read the whole table back, find no difference; ipvsadm -Ln of the same.
    noop, listing = [], []
    for _ in range(2):
        noop.append(timed(lambda: reconciler.full_sync(big, keep_plan=False)))
        listing.append(ipvsadm(ns.name, "-Ln"))
    check = reconciler.full_sync(big, keep_plan=False)
    assert check.result.requested == 0, "a resync of an unchanged table found differences"
    results["director_noop_resync_s"] = min(noop)
    results["ipvsadm_list_s"] = min(listing)
    # Each run, in order: the first reads back a table the director has only written (it
    # decodes every real server); the second finds each reply as the first read it.
    results["director_noop_resync_runs"] = [round(x, 3) for x in noop]
    results["ipvsadm_list_runs"] = [round(x, 3) for x in listing]
    print(
        f"bench: no-op resync {min(noop):.1f}s vs ipvsadm -Ln {min(listing):.1f}s"
        f" (each: {results['director_noop_resync_runs']} / {results['ipvsadm_list_runs']})",
        flush=True,
    )

    results["incremental_10k"] = incremental(reconciler, big)
    print(f"bench: incremental at {args.services}: {results['incremental_10k']}", flush=True)
    results["read_growth_kib"] = read_growth(reconciler, ipvs, big)
    print(f"bench: what reads leave behind (KiB): {results['read_growth_kib']}", flush=True)
    results["rss_mb"] = round(rss_mb(), 1)
    ipvs.close()
    ns.close()
    rules.unlink()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--kube-rounds", type=int, default=60)
    parser.add_argument(
        "--dataplane-only",
        action="store_true",
        help="the IPVS figures alone (full sync, no-op resync, incremental), not the cluster's",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {
        "services": args.services,
        "dests_per_service": DESTS,
        "kernel": os.uname().release,
    }
    print(
        f"bench: {args.services} services x {DESTS} real servers, kernel {os.uname().release}",
        flush=True,
    )

    dataplane(args, results)
    gc.collect()  # the 10k tables are gone before the director's memory is measured
    full_ratio = results["director_full_sync_s"] / results["ipvsadm_restore_s"]  # type: ignore[operator]
    noop_ratio = results["director_noop_resync_s"] / results["ipvsadm_list_s"]  # type: ignore[operator]
    results["full_sync_ratio"] = round(full_ratio, 3)
    results["noop_resync_ratio"] = round(noop_ratio, 3)
    if args.dataplane_only:
        (args.out / "dataplane.json").write_text(json.dumps(results, indent=2) + "\n")
        print(f"bench: full_sync_ratio {full_ratio:.3f}, noop_resync_ratio {noop_ratio:.3f}")
        return

    # Kubernetes: one endpoint change at a time, API stand-in -> director -> kernel.
    from lab import bench_kube

    kube: dict[str, dict[str, Any]] = {}
    for count in (1000, args.services):
        kube[str(count)] = bench_kube.one("kernel", count, rounds=args.kube_rounds)
        print(f"bench: kubernetes at {count}: {kube[str(count)]}", flush=True)
    results["kube_vm"] = kube

    i1k, i10k = results["incremental_1k"], results["incremental_10k"]
    assert isinstance(i1k, dict) and isinstance(i10k, dict)
    results["incremental_ops"] = {"1k": i1k["ops_max"], "10k": i10k["ops_max"]}
    results["incremental_ms"] = {
        "1k_p50": round(i1k["ms_p50"], 2),
        "10k_p50": round(i10k["ms_p50"], 2),
        "1k_p99": round(i1k["ms_p99"], 2),
        "10k_p99": round(i10k["ms_p99"], 2),
    }
    k1, k10 = kube["1000"], kube[str(args.services)]
    event_ratio = k10["event_to_kernel_ms_p50"] / k1["event_to_kernel_ms_p50"]
    results["event_to_kernel_ratio_p50"] = round(event_ratio, 3)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")

    rows = [
        (
            "full_sync_ratio",
            f"{full_ratio:.2f}",
            "<= 1.0",
            f"director {results['director_full_sync_s']:.1f}s"
            f" / ipvsadm -R {results['ipvsadm_restore_s']:.1f}s",
        ),
        (
            "noop_resync_ratio",
            f"{noop_ratio:.2f}",
            "<= 1.0",
            f"director {results['director_noop_resync_s']:.1f}s"
            f" / ipvsadm -Ln {results['ipvsadm_list_s']:.1f}s",
        ),
        (
            "incremental_ops 1k / 10k",
            f"{i1k['ops_max']} / {i10k['ops_max']}",
            "1 / 1",
            "one real server's weight changed",
        ),
        (
            "incremental_ms p50 1k / 10k",
            f"{i1k['ms_p50']:.2f} / {i10k['ms_p50']:.2f}",
            "flat",
            f"p99 {i1k['ms_p99']:.2f} / {i10k['ms_p99']:.2f}",
        ),
        ("rss_mb", f"{results['rss_mb']}", "", "desired + cached actual, 10k x 10"),
        (
            "event_to_kernel_ms p50 1k / 10k",
            f"{k1['event_to_kernel_ms_p50']:.1f} / {k10['event_to_kernel_ms_p50']:.1f}",
            "< 1.5x",
            f"ratio {event_ratio:.2f}; p99 {k1['event_to_kernel_ms_p99']:.1f} / "
            f"{k10['event_to_kernel_ms_p99']:.1f}",
        ),
        (
            "kube rss_mb 10k",
            f"{k10['rss_mb']}",
            "< 200",
            "director process watching 10k Services x 10 endpoints",
        ),
    ]
    print()
    print(f"{'figure':<30} {'value':>14}  {'target':<8} detail")
    for name, value, target, detail in rows:
        print(f"{name:<30} {value:>14}  {target:<8} {detail}")


if __name__ == "__main__":
    main()
