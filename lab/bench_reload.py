"""`make bench` (in the lab VM): a one-line change in a big static file, reloaded in place.

keepalived's SIGHUP against the director's, on the same table (N virtual services x 10 real
servers, written once as keepalived's ``virtual_server`` blocks and once as the director's
YAML by ``lab.bench_config``), each in a fresh network namespace of its own with real IPVS.
Each contender loads the whole table, then REPEAT times: one real server's weight is changed
in its file (one line), the process gets SIGHUP, and the clock runs until ``ipvsadm`` reads
the new weight back from the kernel. The figure is each one's median, and their ratio.

    python -m lab.vm run lab.bench_reload
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.bench_config import REAL_SERVERS, write_tables
from lab.netns import Netns
from lab.wait import stop_group, wait_for

REPEAT = 3


def vip(i: int) -> str:
    return f"10.{(i >> 8) & 255}.{i & 255}.1"


def first_rs(i: int) -> str:
    return f"172.16.{i % 250}.1"


def services_in(ns: str) -> int:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "ipvsadm", "-Ln"], capture_output=True, text=True, check=False
    ).stdout
    return sum(1 for line in out.splitlines() if line.startswith("TCP"))


def weight_in_kernel(ns: str, i: int) -> int | None:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "ipvsadm", "-Ln", "-t", f"{vip(i)}:80"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    found = re.search(rf"{re.escape(first_rs(i))}:8080\s+\w+\s+(\d+)", out)
    return int(found.group(1)) if found else None


def set_weight(path: Path, marker: str, pattern: str, weight: int) -> None:
    """Change the first ``pattern`` after ``marker`` to ``weight``: one line of the file."""
    lines = path.read_text().splitlines(keepends=True)
    start = next(n for n, line in enumerate(lines) if marker in line)
    index = next(n for n in range(start, len(lines)) if re.search(pattern, lines[n]))
    lines[index] = re.sub(r"(weight:? )\d+", rf"\g<1>{weight}", lines[index], count=1)
    path.write_text("".join(lines))


def contender(
    name: str,
    ns: Netns,
    argv: list[str],
    edit: Callable[[int], None],
    *,
    services: int,
    workdir: Path,
) -> dict[str, Any]:
    log = (workdir / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns.name, *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        loaded = wait_for(lambda: services_in(ns.name) >= services, 900, 1.0)
        if loaded is None:
            raise SystemExit(f"{name}: the table never reached {services} services; see {log.name}")
        time.sleep(5)  # let it settle (keepalived's checkers, the director's first resync)
        last = services - 1
        runs: list[float] = []
        for weight in range(5, 5 + REPEAT):
            edit(weight)
            started = time.perf_counter()
            os.kill(proc.pid, signal.SIGHUP)
            took = wait_for(lambda w=weight: weight_in_kernel(ns.name, last) == w, 120, 0.01)  # type: ignore[misc]
            if took is None:
                raise SystemExit(f"{name}: weight {weight} never reached the kernel")
            runs.append(time.perf_counter() - started)
            time.sleep(2)
        return {
            "load_seconds": round(loaded, 1),
            "reload_seconds": [round(r, 3) for r in runs],
            "median": round(statistics.median(runs), 3),
        }
    finally:
        stop_group(proc)
        log.close()


def measure(services: int, workdir: Path) -> dict[str, Any]:
    director_file, keepalived_file = write_tables(services, workdir)
    last = services - 1
    out: dict[str, Any] = {"services": services, "real_servers": services * REAL_SERVERS}
    ns = Netns(f"reload-ka-{services}")
    try:
        ns.ip("link set lo up")
        out["keepalived"] = contender(
            "keepalived",
            ns,
            [
                shutil.which("keepalived") or "keepalived",
                "--dont-fork",
                "--log-console",
                "--check",
                "-f",
                str(keepalived_file),
                "-p",
                str(workdir / f"ka-{services}.pid"),
                "-c",
                str(workdir / f"ka-checkers-{services}.pid"),
            ],
            lambda w: set_weight(
                keepalived_file, f"virtual_server {vip(last)} 80 {{", r"^\s*weight ", w
            ),
            services=services,
            workdir=workdir,
        )
    finally:
        ns.close()
    ns = Netns(f"reload-dir-{services}")
    try:
        ns.ip("link set lo up")
        out["director"] = contender(
            "director",
            ns,
            [sys.executable, "-m", "director", "run", "--config", str(director_file)],
            lambda w: set_weight(director_file, f"  - name: s{last}\n", r"weight: ", w),
            services=services,
            workdir=workdir,
        )
    finally:
        ns.close()
    out["ratio"] = round(out["director"]["median"] / out["keepalived"]["median"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-reload-") as tmp:
        for count in args.services:
            row = measure(count, Path(tmp))
            rows.append(row)
            ka = row["keepalived"]
            print(
                f"bench reload at {count} services x {REAL_SERVERS}: keepalived SIGHUP -> "
                f"kernel {ka['median']:.3f} s {ka['reload_seconds']}, "
                f"director {row['director']['median']:.3f} s "
                f"{row['director']['reload_seconds']} (ratio {row['ratio']}); initial load "
                f"keepalived {row['keepalived']['load_seconds']} s, director "
                f"{row['director']['load_seconds']} s",
                flush=True,
            )
            for name in ("keepalived", "director"):
                shutil.copy(Path(tmp) / f"{name}.log", args.out / f"{name}-{count}.log")
    (args.out / "results.json").write_text(json.dumps({"reload": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
