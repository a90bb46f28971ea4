"""`make bench-dataplane` (in the lab VM): what a box forwards, bare IPVS against the
director, in one boot.

For each round, in turns: bare IPVS in one mode (``ipvsadm`` by hand), then each director
variant compared with it (``lab.dataplane.VARIANTS``: nat, dr, tun, full NAT, 1,000 source
ranges, a full-NAT Service elsewhere on the box). Each set-up gets the same three loads, one
after the other: wrk with a connection per request (new connections a second), wrk over kept
connections (requests a second, p99), iperf3 (Gbit/s). The figures are medians over rounds;
the ratios are director / bare in the same mode (above 1 is better for cps, rps and Gbit/s;
below 1 is better for p99). Software emulation makes every figure small: compare ratios.

    python -m lab.vm run lab.bench_dataplane --memory 4G -- --rounds 3 --seconds 5

With ``--failover-seconds S``, ``lab.bench_failover`` follows in the same boot (its figures
in ``failover.json`` beside ``results.json``): what ``make bench-dataplane`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from lab import bench_failover
from lab.dataplane import MODES, VARIANTS, Figures, bare, labs, measure, served_by, settle

METRICS = ("cps", "rps", "gbps", "p99_ms", "p99_new_ms")


def medians(runs: list[Figures]) -> dict[str, Any]:
    out: dict[str, Any] = {
        m: round(statistics.median(getattr(r, m) for r in runs), 3) for m in METRICS
    }
    out["errors"] = sum(r.errors for r in runs)
    out["each_round"] = {m: [round(getattr(r, m), 3) for r in runs] for m in ("cps", "rps", "gbps")}
    return out


def ratios(mine: dict[str, Any], floor: dict[str, Any]) -> dict[str, float]:
    def ratio(a: float, b: float) -> float:
        return round(a / b, 3) if b else float("nan")

    return {
        "cps_ratio": ratio(mine["cps"], floor["cps"]),
        "rps_ratio": ratio(mine["rps"], floor["rps"]),
        "gbps_ratio": ratio(mine["gbps"], floor["gbps"]),
        "p99_ratio": ratio(mine["p99_ms"], floor["p99_ms"]),
        "p99_new_ratio": ratio(mine["p99_new_ms"], floor["p99_new_ms"]),
    }


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--failover-seconds", type=float, help="then the failover bench")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bare_runs: dict[str, list[Figures]] = {m: [] for m in MODES}
    mine_runs: dict[str, list[Figures]] = {v.name: [] for v in VARIANTS}
    conntrack: dict[str, str] = {}
    spread: dict[str, dict[str, int]] = {}
    with labs(args.out) as boxes:
        for round_ in range(args.rounds):
            order = MODES[round_ % len(MODES) :] + MODES[: round_ % len(MODES)]
            for mode in order:
                bare(boxes.bare, mode)
                settle()
                figures = measure(boxes.bare, args.seconds, args.connections)
                bare_runs[mode].append(figures)
                spread[f"bare {mode}"] = served_by(boxes.bare)
                say(f"round {round_ + 1} bare {mode}: {figures.as_dict()}")
                for variant in (v for v in VARIANTS if v.bare == mode):
                    box = boxes.director(variant)
                    box.serve(variant)
                    settle()
                    figures = measure(box.lab, args.seconds, args.connections)
                    mine_runs[variant.name].append(figures)
                    spread[variant.name] = served_by(box.lab)
                    conntrack[variant.name] = box.lab.lvs.exec(
                        ["sysctl", "-n", "net.ipv4.vs.conntrack"]
                    ).strip()
                    say(f"round {round_ + 1} {variant.name}: {figures.as_dict()}")
    floors = {m: medians(r) for m, r in bare_runs.items()}
    modes = {}
    for variant in VARIANTS:
        mine = medians(mine_runs[variant.name])
        modes[variant.name] = {
            **ratios(mine, floors[variant.bare]),
            **mine,
            "compared_with": f"bare {variant.bare}",
            "vs_conntrack": int(conntrack[variant.name]),
            "connections_per_real_server": spread[variant.name],
        }
    results = {
        "modes": modes,
        "bare": floors,
        "kernel": os.uname().release,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "connections": args.connections,
        "load": "wrk -t2 (Connection: close for cps), iperf3 one stream; nginx backends",
        "p99": "milliseconds, on kept connections (p99_new: a connection per request)",
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    if args.failover_seconds:
        failover = bench_failover.run(args.failover_seconds)
        (args.out / "failover.json").write_text(json.dumps(failover, indent=1) + "\n")
    for name, row in modes.items():
        say(
            f"{name:20} cps {row['cps_ratio']:.2f}  rps {row['rps_ratio']:.2f}  "
            f"Gbit/s {row['gbps_ratio']:.2f}  p99 {row['p99_ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
