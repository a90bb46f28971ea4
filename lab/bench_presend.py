"""A first start's Python before its table goes to the kernel, two checkouts side by side (VM).

``director run`` with a static file and nothing kept (no cache) reads its file and sends its
table (``director.cli.early``) before it loads the rest. What comes before the send is all
Python: the interpreter, the imports the reader and the sender need, the file. Here the send
itself is replaced by a look at the clock (seconds since exec, the kernel's record of the
process's start) and at ``sys.modules`` when the send opens its socket (an audit hook: no
module is loaded ahead of the command's own order), so the figure has neither the kernel's
work nor a poll of the kernel's table in it: the noise of ``lab.bench_start``'s whole starts
(a few tenths of a second a turn in the VM) hid a change of a tenth.

Both run as ``lab.bench_start`` runs the director: from a box on the guest's tmpfs, on the
role's interpreter, under the unit's environment; the current code and ``--before``'s in
turns, REPEAT times each, at each size.

    python -m lab.vm run lab.bench_presend -- --before DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from lab.bench_config import write_tables
from lab.bench_start import BOX, home_of, local_box, role_python, unit_environment, warm_up

REPEAT = 11
AT_SEND = """
import json, os, sys
def at_send(event, args):
    if event != "socket.__new__":  # the early send's netlink socket: its first step
        return
    from director.cli import startup
    startup.STARTUP.mark("at_send")
    figures = startup.STARTUP.figures()
    figures["modules"] = len(sys.modules)
    figures["loaded"] = sorted(sys.modules)
    print("AT_SEND", json.dumps(figures), flush=True)
    os._exit(0)
sys.addaudithook(at_send)  # nothing imported ahead of the command's own order
from director.cli.boot import main
sys.argv = ["director", "run", "--config", sys.argv[1], "--config-cache", ""]
main()
"""


def at_send(
    python: str, config: Path, env: dict[str, str], cwd: Path | None = None
) -> dict[str, Any]:
    """A real ``director run --config CONFIG`` (no cache) on ``python`` with the environment
    ``env``, stopped where it would send its table: its phases' seconds since exec
    (``director.cli.startup``), how many modules it had loaded and their names (``loaded``).
    The test of what a first start loads before its table takes the names from here too."""
    done = subprocess.run(
        [python, "-c", AT_SEND, str(config)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("AT_SEND ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"at the send: exited {done.returncode}: {done.stderr[-1500:]}")
    found: dict[str, Any] = json.loads(lines[0].removeprefix("AT_SEND "))
    return found


def once(python: str, env: dict[str, str], config: Path) -> dict[str, float]:
    figures = at_send(python, config, {**os.environ, **env}, cwd=BOX)
    del figures["loaded"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-presend-") as tmp:
        python = role_python()
        modules = warm_up(min(args.services), Path(tmp), python=python)[0]
        modules += warm_up(min(args.services), Path(tmp), args.before, python)[0]
        from sys import executable

        box = local_box({"py": home_of(python or Path(executable).resolve(), modules)}, args.before)
        assert box.before is not None
        envs = {
            "after": {**box.env, **unit_environment()},
            "before": {**box.before, **unit_environment()},
        }
        for count in args.services:
            config, _ = write_tables(count, Path(tmp))
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in envs}
            for _ in range(args.repeat):
                for name, env in envs.items():
                    runs[name].append(once(box.director[0], env, config))
            row: dict[str, object] = {"services": count}
            for name, figures in runs.items():
                row[name] = {
                    key: round(statistics.median(f[key] for f in figures), 3) for key in figures[0]
                }
                row[name]["at_send_each"] = [f["total"] for f in figures]  # type: ignore[index]
            after, before = row["after"], row["before"]
            row["ratio"] = round(after["total"] / before["total"], 3)  # type: ignore[index]
            rows.append(row)
            print(f"bench presend at {count} services: {json.dumps(row)}", flush=True)
    (args.out / "results.json").write_text(json.dumps({"presend": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
