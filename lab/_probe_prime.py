"""Probe (not committed): a priming start's log."""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from lab.bench_config import write_tables
from lab.netns import Netns


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path)
    p.parse_args()
    tmp = Path("/tmp/prime")
    tmp.mkdir(exist_ok=True)
    d, _ = write_tables(1000, tmp)
    ns = Netns("probe-prime")
    ns.ip("link set lo up")
    log = tmp / "log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, sys.executable, "-m", "director", "run",
             "--config", str(d), "--config-cache", str(tmp / "config.cache")],
            stdout=out, stderr=subprocess.STDOUT,
        )
        time.sleep(90)
        print("alive" if proc.poll() is None else f"exited {proc.returncode}")
        print(sorted(x.name for x in tmp.iterdir()))
        proc.terminate()
        proc.wait()
    print(log.read_text()[-6000:])
    ns.close()


if __name__ == "__main__":
    main()
