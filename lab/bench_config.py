"""Loading a big static file: ``director check`` against ``keepalived -t``, side by side.

The same table is written twice, as the director's YAML and as keepalived's
``virtual_server`` blocks: N services x 10 real servers (each written in the long form,
``{address, port, weight}``). Both commands run as an operator runs them (a new process,
imports and all) REPEAT times in turn; the figure is each one's median wall time, and the
ratio of the two. A third column loads the same YAML with the precise reader alone (what a
file with anchors or tags costs, and what every file cost before the fast reader). With
``--before DIR`` (a checkout of earlier code) its ``director check`` runs in the same turns.

    python -m lab.bench_config --services 1000 5000 --out bench/config-host.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REAL_SERVERS = 10
REPO = Path(__file__).resolve().parent.parent


def write_tables(services: int, where: Path) -> tuple[Path, Path]:
    yaml_lines = ["ownership:", "  networks: [10.0.0.0/8]", "services:"]
    conf_lines = []
    for i in range(services):
        vip = f"10.{(i >> 8) & 255}.{i & 255}.1"
        yaml_lines.append(
            f"  - name: s{i}\n    address: {vip}\n    port: 80\n    scheduler: wlc\n"
            "    real_servers:"
        )
        conf_lines.append(
            f"virtual_server {vip} 80 {{\n  lb_algo wlc\n  lb_kind NAT\n  protocol TCP"
        )
        for j in range(REAL_SERVERS):
            rs = f"172.16.{i % 250}.{j + 1}"
            yaml_lines.append(f"      - {{address: {rs}, port: 8080, weight: 1}}")
            conf_lines.append(f"  real_server {rs} 8080 {{\n    weight 1\n  }}")
        conf_lines.append("}")
    director = where / f"director-{services}.yaml"
    keepalived = where / f"keepalived-{services}.conf"
    director.write_text("\n".join(yaml_lines) + "\n")
    keepalived.write_text("\n".join(conf_lines) + "\n")
    return director, keepalived


def timed(argv: list[str], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()[:500]}")
    return elapsed


PRECISE = (
    "import sys, time\n"
    "from director.schema import document, rules, yamldoc\n"
    "text = open(sys.argv[1]).read()\n"
    "data, _ = yamldoc.precise(text)\n"
    "rules.compile_document(document.read_document(data), sys.argv[1])\n"
)


def measure(services: int, repeat: int, where: Path, before: Path | None) -> dict[str, Any]:
    director_file, keepalived_file = write_tables(services, where)
    director = [
        sys.executable,
        "-m",
        "director.cli.main",
        "check",
        "--offline",
        "--config",
        str(director_file),
    ]
    keepalived = [shutil.which("keepalived") or "keepalived", "-t", "-f", str(keepalived_file)]
    precise = [sys.executable, "-c", PRECISE, str(director_file)]
    runs: dict[str, list[float]] = {"director": [], "keepalived": [], "precise": []}
    if before is not None:
        runs["before"] = []
    for _ in range(repeat):  # in turn: a busy moment slows all, not one
        runs["director"].append(timed(director, cwd=REPO))
        runs["keepalived"].append(timed(keepalived))
        if before is not None:  # the same command, run from the earlier code's folder
            runs["before"].append(timed(director, cwd=before))
    runs["precise"].append(timed(precise, cwd=REPO))  # once: it is the slow path
    out: dict[str, Any] = {"services": services, "real_servers": services * REAL_SERVERS}
    for name, values in runs.items():
        out[f"{name}_seconds"] = round(statistics.median(values), 3)
    out["ratio"] = round(out["director_seconds"] / out["keepalived_seconds"], 2)
    if before is not None:
        out["ratio_before"] = round(out["before_seconds"] / out["keepalived_seconds"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--before", type=Path, help="a checkout of earlier code: its director check, in turn"
    )
    args = parser.parse_args()
    # Bytecode for both trees first: with PYTHONDONTWRITEBYTECODE set (as on the lab hosts),
    # a tree edited since its last compile recompiles its changed modules in every run.
    for tree in (REPO, args.before):
        if tree is not None:
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(tree / "director")],
                check=False,
                stdout=subprocess.DEVNULL,
            )
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-config-") as tmp:
        for count in args.services:
            row = measure(count, args.repeat, Path(tmp), args.before)
            results.append(row)
            earlier = (
                f"; before {row['before_seconds']:.3f} s ({row['ratio_before']}x)"
                if "before_seconds" in row
                else ""
            )
            print(
                f"{row['services']:>6} services x {REAL_SERVERS}: director check "
                f"{row['director_seconds']:.3f} s, keepalived -t {row['keepalived_seconds']:.3f} s"
                f" (ratio {row['ratio']}x){earlier}; precise reader alone "
                f"{row['precise_seconds']:.3f} s",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps({"config_load": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
