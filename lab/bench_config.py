"""Loading a big static file: ``director check`` against ``keepalived -t``, side by side.

The same table is written twice, as the director's YAML and as keepalived's
``virtual_server`` blocks: N services x 10 real servers (each written in the long form,
``{address, port, weight}``). Both commands run as an operator runs them (a new process,
imports and all) REPEAT times in turn; the figure is each one's median wall time, and the
ratio of the two. The ``director`` command is the one an operator runs: the checkout built
as a wheel and installed in a venv of its own (as the Ansible role installs it), its
dependencies this interpreter's. The checkout's own editable install loads a finder at every
start (about 20 ms); its figure is printed beside (``editable``), as the figures before 0.4.13
were measured. A fourth column loads the same YAML with the precise reader alone (what a
file with anchors or tags costs, and what every file cost before the fast reader). With
``--before DIR`` (a checkout of earlier code) its ``director check``, installed the same
way, runs in the same turns.

    python -m lab.bench_config --services 1000 5000 --out bench/config-host.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import sysconfig
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


def installed(tree: Path, where: Path) -> Path:
    """The ``director`` command of the checkout ``tree`` as an operator has it: built as a
    wheel, installed in a venv of its own, its dataclasses' code written as the role writes
    it (where the tree has ``director.cli.classcode``); its dependencies are this
    interpreter's (a .pth line: a plain path, no finder)."""
    venv = where / f"venv-{len(list(where.glob('venv-*')))}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheels = where / f"wheels-{venv.name}"
    pip = [sys.executable, "-m", "pip", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(tree)], check=True)
    wheel = next(wheels.glob("*.whl"))
    subprocess.run(
        [*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", str(wheel)],
        check=True,
    )
    if (tree / "director" / "cli" / "classcode.py").exists():  # as the role installs it
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "director.cli.classcode"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return venv / "bin" / "director"


PRECISE = (
    "import sys, time\n"
    "from director.schema import document, rules, yamldoc\n"
    "text = open(sys.argv[1]).read()\n"
    "data, _ = yamldoc.precise(text)\n"
    "rules.compile_document(document.read_document(data), sys.argv[1])\n"
)


def measure(services: int, repeat: int, where: Path, commands: dict[str, Path]) -> dict[str, Any]:
    """``commands``: the installed ``director`` of this checkout, and of the earlier one
    (``before``) if given."""
    director_file, keepalived_file = write_tables(services, where)
    check = ["check", "--offline", "--config", str(director_file)]
    editable = [sys.executable, "-m", "director.cli.main", *check]
    keepalived = [shutil.which("keepalived") or "keepalived", "-t", "-f", str(keepalived_file)]
    precise = [sys.executable, "-c", PRECISE, str(director_file)]
    runs: dict[str, list[float]] = {"director": [], "keepalived": [], "editable": []}
    runs["precise"] = []
    if "before" in commands:
        runs["before"] = []
    for _ in range(repeat):  # in turn: a busy moment slows all, not one
        runs["director"].append(timed([str(commands["director"]), *check]))
        runs["keepalived"].append(timed(keepalived))
        runs["editable"].append(timed(editable, cwd=REPO))
        if "before" in commands:
            runs["before"].append(timed([str(commands["before"]), *check]))
    runs["precise"].append(timed(precise, cwd=REPO))  # once: it is the slow path
    out: dict[str, Any] = {"services": services, "real_servers": services * REAL_SERVERS}
    for name, values in runs.items():
        out[f"{name}_seconds"] = round(statistics.median(values), 3)
    out["ratio"] = round(out["director_seconds"] / out["keepalived_seconds"], 2)
    if "before" in commands:
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
        commands = {"director": installed(REPO, Path(tmp))}
        if args.before is not None:
            commands["before"] = installed(args.before, Path(tmp))
        for count in args.services:
            row = measure(count, args.repeat, Path(tmp), commands)
            results.append(row)
            earlier = (
                f"; before {row['before_seconds']:.3f} s ({row['ratio_before']}x)"
                if "before_seconds" in row
                else ""
            )
            print(
                f"{row['services']:>6} services x {REAL_SERVERS}: director check "
                f"{row['director_seconds']:.3f} s, keepalived -t {row['keepalived_seconds']:.3f} s"
                f" (ratio {row['ratio']}x){earlier}; from the checkout (editable) "
                f"{row['editable_seconds']:.3f} s; precise reader alone "
                f"{row['precise_seconds']:.3f} s",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps({"config_load": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
