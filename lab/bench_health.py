"""2,000 real servers checked every 2 s by one checker: its CPU share and thread count.

Natively on the host, against loopback: one accepting server in a child process answers on
127.0.0.0/8 (every 127.x.y.z is local), so the figure is the checker's own cost.

    python -m lab.bench_health [--targets 2000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from director.adapters.prober import Checker
from director.core.checks import CheckSpec, Target


def serve(port_file: Path) -> None:
    """Child: accept and close, forever (until stdin closes)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", 0))
    sock.listen(4096)
    port_file.write_text(str(sock.getsockname()[1]))

    def loop() -> None:
        while True:
            conn, _ = sock.accept()
            conn.close()

    threading.Thread(target=loop, daemon=True).start()
    sys.stdin.read()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", type=Path)
    parser.add_argument("--targets", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    port_file = Path(f"/tmp/bench-health-{os.getpid()}")
    child = subprocess.Popen(
        [sys.executable, "-m", "lab.bench_health", "--serve", str(port_file)], stdin=subprocess.PIPE
    )
    try:
        while not port_file.exists():
            time.sleep(0.05)
        port = int(port_file.read_text())
        spec = CheckSpec("tcp", interval=2.0, timeout=1.0, rise=2, fall=3)
        targets = [
            Target(f"127.0.{i // 250}.{i % 250 + 1}", port, spec) for i in range(args.targets)
        ]
        checker = Checker(lambda t, h: None)
        checker.start()
        checker.update(add=targets)
        time.sleep(spec.interval * 2)  # warm up: every target checked twice
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        checks_before = sum(h.checks for h in checker.state.values())
        time.sleep(args.seconds)
        after = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.monotonic() - started
        checks = sum(h.checks for h in checker.state.values()) - checks_before
        down = sum(1 for h in checker.state.values() if not h.up)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        threads = int(
            next(
                line.split()[1]
                for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("Threads:")
            )
        )
        checker.stop()
        result = {
            "targets": args.targets,
            "interval_s": spec.interval,
            "checks_per_s": round(checks / wall, 1),
            "cpu_percent_of_one_core": round(100 * cpu / wall, 2),
            "threads": threads,
            "down": down,
        }
        print(f"bench-health (native): {result}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(timeout=10)
        port_file.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
