"""`make bench` (in the lab VM): a static box's memory, the director against keepalived.

The same table (N virtual services x 10 real servers, ``lab.bench_config``'s files) loaded by
keepalived and by ``director run``, each in a fresh namespace. keepalived's resident memory is
read once the kernel holds the whole table (its parent and its checker process, summed); the
director's after its first periodic resync (the whole table read back) and two scrapes of
``/metrics`` as Prometheus asks for them (gzip), with the API it needs for them (and once
more after an operator's first request of the admin API), and again with nothing but the
file (no ``api:``: no scrape). ``--in-process`` is kept for the command line's sake: every
start parses its file in the director itself (before 0.4.34 a child could).

    python -m lab.vm run lab.bench_static --memory 4G -- --services 1000 5000
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lab.bench_config import REAL_SERVERS, write_tables
from lab.bench_start import table_in
from lab.netns import Netns
from lab.wait import eventually, stop_group

RESYNC_SECONDS = 60  # a static box's full resync (the default kubernetes.resync_seconds)
TOKEN = "a-token-of-some-thirty-two-chars"


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as status:
            total += next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return total


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def keepalived(conf: Path, services: int, workdir: Path) -> dict[str, Any]:
    ns = Netns(f"mem-ka-{services}")
    ns.ip("link set lo up")
    argv = [shutil.which("keepalived") or "keepalived", "--dont-fork", "--log-console"]
    argv += ["--check", "-f", str(conf), "-p", str(workdir / "ka.pid")]
    argv += ["-c", str(workdir / "ka-checkers.pid")]
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns.name, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        want = (services, services * REAL_SERVERS)
        eventually(lambda: table_in(ns) >= want, 900, "keepalived's table")
        time.sleep(2)
        pids = [int((workdir / name).read_text()) for name in ("ka.pid", "ka-checkers.pid")]
        return {"rss_mib": round(rss_kib(pids) / 1024, 1), "processes": len(pids)}
    finally:
        stop_group(proc)
        ns.close()


def director(
    config: Path, services: int, workdir: Path, api: bool, in_process: bool = False
) -> dict[str, Any]:
    ns = Netns(f"mem-d{int(api)}-{services}")
    ns.ip("link set lo up")
    log = workdir / f"director-{services}-{int(api)}.log"
    state = workdir / f"state-{services}-{int(api)}"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir()
    argv = [sys.executable, "-m", "director", "run", "--config", str(config)]
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, *argv],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        eventually(lambda: "event=startup.timing" in log.read_text(), 900, "ready")
        out: dict[str, Any] = {"ready_mib": round(rss_kib([proc.pid]) / 1024, 1)}
        time.sleep(RESYNC_SECONDS + 5)  # one periodic resync: the whole table read back
        if proc.poll() is not None:
            raise SystemExit(f"the director exited ({proc.returncode}); see {log}")
        out["after_resync_mib"] = round(rss_kib([proc.pid]) / 1024, 1)
        if api:
            for _ in range(2):
                size = scrape(ns)
            out["scrape_gzip_bytes"] = size
            out["after_scrapes_mib"] = round(rss_kib([proc.pid]) / 1024, 1)
            # What an operator's first use of the admin API adds: its Flask app, made then.
            ask(ns, "/api/v1/status")
            out["after_admin_request_mib"] = round(rss_kib([proc.pid]) / 1024, 1)
        return out
    finally:
        stop_group(proc)
        ns.close()


def scrape(ns: Netns) -> int:
    """/metrics as Prometheus asks for it, from inside the namespace; the body's bytes."""
    return ask(ns, "/metrics", gzip=True)


def ask(ns: Netns, path: str, gzip: bool = False) -> int:
    """GET ``path`` of the API with the token, from inside the namespace; the body's bytes."""
    headers = {"Authorization": f"Bearer {TOKEN}", **({"Accept-Encoding": "gzip"} if gzip else {})}
    script = (
        "import urllib.request; r = urllib.request.Request("
        f"'http://127.0.0.1:19180{path}', headers={headers!r});"
        " print(len(urllib.request.urlopen(r, timeout=600).read()))"
    )
    return int(ns.exec([sys.executable, "-c", script]).strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--in-process", action="store_true", help="the file parsed in the director itself"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-static-") as tmp:
        workdir = Path(tmp)
        token = workdir / "token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        for count in args.services:
            plain, conf = write_tables(count, workdir)
            with_api = workdir / f"api-{count}.yaml"
            with_api.write_text(
                f"api: {{listen: '127.0.0.1:19180', token_file: {token},"
                f" intents_file: {workdir / 'intents.json'}, public: [health, metrics]}}\n"
                + plain.read_text()
            )
            row = {
                "services": count,
                "real_servers": count * REAL_SERVERS,
                "keepalived": keepalived(conf, count, workdir),
                "director": director(plain, count, workdir, False, args.in_process),
                "director_api": director(with_api, count, workdir, True, args.in_process),
            }
            rows.append(row)
            print(f"bench static memory at {count} x {REAL_SERVERS}: {json.dumps(row)}", flush=True)
    (args.out / "results.json").write_text(json.dumps({"static_memory": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
