"""Two checkouts' IPVS dataplane figures, alternated in one VM boot (before/after a change).

`python -m lab.vm run lab.bench_ab --memory 4G -- --before /path/to/old/checkout`

The dataplane part of `make bench` (lab.bench.dataplane: full sync against `ipvsadm -R`,
no-op resync against `ipvsadm -Ln`, incremental ops) runs in a fresh process per round, from
the old checkout and from this one in ABBA order, so a drift of the emulated machine over the
boot falls on both sides alike. Prints each round's ratios and their medians side by side and
writes results.json. The old checkout's bytecode should be compiled on the host first (the
guest sees the tree read-only): `python -m compileall -q DIR/director DIR/lab`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# Run with the checkout as the working directory and first on sys.path: its own director.
ONE_ROUND = """
import argparse, json, sys
from pathlib import Path
from lab import bench
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
results = {}
bench.dataplane(argparse.Namespace(services=int(sys.argv[2]), out=out), results)
print("RESULTS " + json.dumps(results, default=str), flush=True)
"""

FIGURES = ("full_sync_ratio", "noop_resync_ratio", "director_full_sync_s", "director_noop_resync_s")


def one_round(tree: Path, out: Path, services: int) -> dict[str, Any]:
    """One dataplane run from ``tree``: the figures ``FIGURES`` names (and each no-op
    resync's and ``ipvsadm -Ln``'s seconds, where the tree's bench records them)."""
    done = subprocess.run(
        [sys.executable, "-c", ONE_ROUND, str(out), str(services)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"bench_ab: the run from {tree} failed:\n{done.stdout}\n{done.stderr}")
    raw = json.loads(lines[-1][len("RESULTS ") :])
    return {
        "full_sync_ratio": raw["director_full_sync_s"] / raw["ipvsadm_restore_s"],
        "noop_resync_ratio": raw["director_noop_resync_s"] / raw["ipvsadm_list_s"],
        "director_full_sync_s": raw["director_full_sync_s"],
        "director_noop_resync_s": raw["director_noop_resync_s"],
        **{k: raw[k] for k in ("director_noop_resync_runs", "ipvsadm_list_runs") if k in raw},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--before", type=Path, required=True, help="the old checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--services", type=int, default=10_000)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": REPO}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for number in range(args.rounds):
        order = ("before", "after") if number % 2 == 0 else ("after", "before")
        for label in order:
            figures = one_round(trees[label], args.out / f"{label}-{number}", args.services)
            runs[label].append(figures)
            shown = " ".join(
                f"{name}={value:.3f}" if isinstance(value, float) else f"{name}={value}"
                for name, value in figures.items()
            )
            print(f"bench_ab: round {number} {label}: {shown}", flush=True)
    medians = {
        label: {name: statistics.median(run[name] for run in done) for name in FIGURES}
        for label, done in runs.items()
    }
    (args.out / "results.json").write_text(
        json.dumps({"services": args.services, "runs": runs, "medians": medians}, indent=2) + "\n"
    )
    head = f"{'figure':<24} {'before (median)':>16} {'after (median)':>16}"
    print(f"\n{head}  each run (before | after)")
    for name in FIGURES:
        each = " ".join(f"{run[name]:.2f}" for run in runs["before"])
        each += " | " + " ".join(f"{run[name]:.2f}" for run in runs["after"])
        middle = f"{medians['before'][name]:>16.3f} {medians['after'][name]:>16.3f}"
        print(f"{name:<24} {middle}  {each}")


if __name__ == "__main__":
    main()
