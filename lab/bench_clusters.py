"""Several clusters on one director (issue 37, item 3 and the memory figure): isolation and
memory, on the host with the fake dataplane.

Each cluster is an API stand-in in a child process (``lab.bench_kube --serve``: Services in
pod mode with an EndpointSlice of 10 endpoints each, as a cluster stores them), and one
director (``Runtime``, as ``director run`` wires it, with ``clusters:``) serves them all.

- **Isolation**: cluster B's event-to-kernel latency (one endpoint of one of its Services
  changed at a time, from the moment B's stand-in begins the write, in its own process, to
  the change in the fake kernel), first with cluster A quiet, then while
  A relists its 10,000 Services and their EndpointSlices over and over (every watch of A
  expired: 410, as after an etcd compaction), then while A's EndpointSlices are churned
  without pause (a controller gone wild). Printed: p50 and p99 of each, and the ratios
  (target: B's p99 within 1.5x of B alone).
- **Memory**: three clusters of 5,000 Services against one of 15,000, each director in a
  fresh process once its first sync is done and it leads every cluster (target: within
  1.2x).

    python -m lab.bench_clusters [--services 10000] [--events 500] [--a-nice 19] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.engine.events import Listed
from director.engine.reconcile import SyncReport
from director.schema.config import parse_config
from lab.bench_kube import _name, rss_mb, write_kubeconfig

NETS = (18, 21, 22, 23)  # status addresses of each cluster's Services: 198.NET.x.y


class Stand:
    """One cluster's API stand-in, in a child process."""

    def __init__(self, child: subprocess.Popen[str], url: str, kubeconfig: Path) -> None:
        self.child, self.url, self.kubeconfig = child, url, kubeconfig

    def expire(self) -> None:
        """Every watch of this cluster expired: the director relists all of it."""
        assert self.child.stdin is not None
        self.child.stdin.write("gone\n")
        self.child.stdin.flush()

    def churn(self) -> None:
        """A burst without end: every EndpointSlice of this cluster changed in turn."""
        self._say("churn")

    def calm(self) -> int:
        """The burst over: how many changes it made."""
        assert self.child.stdout is not None
        self._say("calm")
        return int(self.child.stdout.readline())

    def _say(self, line: str) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write(line + "\n")
        self.child.stdin.flush()

    def change(self, i: int, generation: int) -> float:
        """One endpoint of Service i replaced, as the EndpointSlice controller does it, in
        the stand-in's own process (no request of the bench's competes with the director
        for its interpreter): the monotonic time the write began."""
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write(f"change {i} {generation}\n")
        self.child.stdin.flush()
        return float(self.child.stdout.readline())


@contextmanager
def stands(sizes: list[int], workdir: Path, nice: tuple[int, ...] = ()) -> Iterator[list[Stand]]:
    """A stand-in per size, populated in parallel; stopped on the way out. ``nice``: each
    one's niceness (the first ones'; 0 for the others)."""
    children, files = [], []
    for index, size in enumerate(sizes):
        port_file = workdir / f"port-{index}"
        command = [sys.executable, "-m", "lab.bench_kube", "--serve", str(size)]
        command += ["--port-file", str(port_file), "--net", str(NETS[index])]
        if index < len(nice) and nice[index]:
            command = ["nice", "-n", str(nice[index]), *command]
        children.append(
            subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
        files.append(port_file)
    try:
        out = []
        for index, (child, port_file) in enumerate(zip(children, files, strict=True)):
            while not port_file.exists():
                if child.poll() is not None:
                    raise RuntimeError("an API stand-in did not start")
                time.sleep(0.1)
            url = f"http://127.0.0.1:{port_file.read_text()}"
            out.append(Stand(child, url, write_kubeconfig(workdir / f"kubeconfig-{index}", url)))
        yield out
    finally:
        for child in children:
            if child.stdin:
                child.stdin.close()
        for child in children:
            child.wait(timeout=60)


def settings_text(kubeconfigs: list[Path], names: list[str], intake: str = "process") -> str:
    """Each cluster with a pool of its own (its Services' status addresses); ``names`` [""]:
    the one cluster of ``kubernetes:``."""
    pools = "".join(
        f"  - {{name: {name}, addresses: [198.{NETS[i]}.0.0/16]}}\n" for i, name in enumerate(names)
    )
    if len(names) == 1 and names[0] == "":
        return (
            f"pools:\n  - {{name: one, addresses: [198.{NETS[0]}.0.0/16]}}\n"
            f"kubernetes: {{kubeconfig: {kubeconfigs[0]}, identity: bench, "
            "resync_seconds: 86400}\n"
        )
    clusters = "".join(
        f"  - {{name: {name}, kubeconfig: {kubeconfigs[i]}, identity: bench, pools: [{name}], "
        f"resync_seconds: 86400, intake: {intake}}}\n"
        for i, name in enumerate(names)
    )
    return f"pools:\n{pools}clusters:\n{clusters}"


def settle(runtime: Runtime) -> None:
    """Ready, leading every cluster, and nothing left queued."""
    if not runtime.wait_ready(3600):
        raise RuntimeError("the director never finished its first sync")
    deadline = time.monotonic() + 600
    controller = runtime.controller
    while time.monotonic() < deadline and not (
        controller.parts.reporter.leader and controller.parts.intake.queue.empty()
    ):
        time.sleep(0.1)
    time.sleep(1)


class Pauses:
    """The collector's pauses (a full collection holds every thread): while ``on``, each
    one's length in ms."""

    def __init__(self) -> None:
        self.on, self._start = False, 0.0
        self.taken: list[float] = []
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif self.on:
            self.taken.append((time.perf_counter() - self._start) * 1000)

    def figures(self) -> dict[str, Any]:
        return {
            "collections": len(self.taken),
            "longest_ms": round(max(self.taken, default=0.0), 1),
            "over_10ms": sum(1 for t in self.taken if t > 10),
        }


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * 0.99) - 1)]


def isolation(
    services: int, events: int, b_services: int = 200, a_nice: int = 0, intake: str = "process"
) -> dict[str, Any]:
    """B's event-to-kernel times alone, while A relists, while A churns; ``intake``: each
    cluster's lists and watches in a process of its own (``process``, what ``clusters:``
    runs) or on the director's threads (``thread``, what it ran before 0.4.19)."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-clusters-"))
    with stands([services, b_services], workdir, (a_nice,)) as (a, b):
        text = settings_text([a.kubeconfig, b.kubeconfig], ["a", "b"], intake)
        applied: dict[str, float] = {}
        cv = threading.Condition()

        def observer(ref: str, report: SyncReport) -> None:
            if report.result.requested:
                with cv:
                    applied[ref] = time.perf_counter()
                    cv.notify_all()

        runtime = Runtime(
            parse_config(text, "bench.yaml"),
            FakeIpvs(),
            observer=observer,
            intake_processes=intake == "process",
        )
        started = time.perf_counter()
        runtime.start()
        try:
            settle(runtime)
            first_sync = time.perf_counter() - started
            relists: list[float] = []  # when each of A's Services relists reached the loop
            inbox = runtime.controller.parts.intake.queue
            put = inbox.put

            received: dict[str, float] = {}  # when a change of B's reached the loop's queue

            def arrived(item: Any, *args: Any, **kwargs: Any) -> None:
                if isinstance(item, Listed) and item.resource == "a/endpointslices":
                    with cv:
                        relists.append(time.perf_counter())
                        cv.notify_all()
                ref = getattr(getattr(item, "obj", None), "service", None)
                if isinstance(ref, str) and ref.startswith("b/"):
                    with cv:
                        received.setdefault(ref, time.perf_counter())
                put(item, *args, **kwargs)

            inbox.put = arrived  # type: ignore[method-assign]
            rng = random.Random(7)
            generation = iter(range(1, 10**6))

            def b_events() -> tuple[list[float], list[float]]:
                """Each change's event-to-kernel time, and the director's share of it
                (from its arrival in the loop's queue)."""
                times, own = [], []
                for _ in range(events):
                    i = rng.randrange(b_services)
                    ref = f"b/default/{_name(i)}"
                    with cv:
                        applied.pop(ref, None)
                        received.pop(ref, None)
                    t0 = b.change(i, next(generation))
                    with cv:
                        if not cv.wait_for(lambda ref=ref: ref in applied, timeout=120):  # type: ignore[misc]
                            raise RuntimeError(f"no kernel change for {ref}")
                        times.append((applied[ref] - t0) * 1000)
                        own.append((applied[ref] - received.get(ref, t0)) * 1000)
                    time.sleep(0.02)
                return times, own

            pauses = Pauses()
            alone, alone_own = b_events()
            stop = threading.Event()
            cycles: list[float] = []

            a_slices = next(
                w for w in runtime.served.watchers if w.resource.name == "a/endpointslices"
            )
            a_held = getattr(a_slices, "held", None)

            def relisted() -> int:
                """A's relists taken in whole, each a list of A's EndpointSlices: on the
                director's threads, reaching the loop; in list processes, each listed again
                (what changed, if anything, sent as events)."""
                if a_held is not None:
                    return int(a_held.relists)
                with cv:
                    return len(relists)

            def relisting() -> None:
                while not stop.is_set():
                    seen = relisted()
                    t0 = time.perf_counter()
                    a.expire()
                    deadline = time.monotonic() + 120
                    while relisted() <= seen and not stop.is_set():
                        if time.monotonic() > deadline:
                            raise RuntimeError("A's relist never ended")
                        time.sleep(0.01)
                    cycles.append(time.perf_counter() - t0)

            storm = threading.Thread(target=relisting, daemon=True)
            storm.start()
            time.sleep(1.0)  # the first relist under way
            pauses.on = True
            during, during_own = b_events()
            pauses.on = False
            stop.set()
            storm.join(timeout=150)
            # A's controller gone wild: its EndpointSlices churned without pause.
            a.churn()
            time.sleep(1.0)
            churn_started = time.perf_counter()
            burst, burst_own = b_events()
            churn_seconds = time.perf_counter() - churn_started
            churned = a.calm()
        finally:
            runtime.stop()
    return {
        "intake": intake,
        "a_stand_in_nice": a_nice,
        "a_services": services,
        "b_services": b_services,
        "events": events,
        "first_sync_s": round(first_sync, 2),
        "b_alone_ms_p50": round(statistics.median(alone), 2),
        "b_alone_ms_p99": round(_p99(alone), 2),
        "b_while_a_relists_ms_p50": round(statistics.median(during), 2),
        "b_while_a_relists_ms_p99": round(_p99(during), 2),
        "p99_ratio": round(_p99(during) / _p99(alone), 2),
        # from the change's arrival at the director (its watch handed it over) to the kernel
        "b_alone_director_ms_p50": round(statistics.median(alone_own), 2),
        "b_alone_director_ms_p99": round(_p99(alone_own), 2),
        "b_while_a_relists_director_ms_p50": round(statistics.median(during_own), 2),
        "b_while_a_relists_director_ms_p99": round(_p99(during_own), 2),
        "director_p99_ratio": round(_p99(during_own) / _p99(alone_own), 2),
        "b_while_a_churns_ms_p50": round(statistics.median(burst), 2),
        "b_while_a_churns_ms_p99": round(_p99(burst), 2),
        "churn_p99_ratio": round(_p99(burst) / _p99(alone), 2),
        "b_while_a_churns_director_ms_p99": round(_p99(burst_own), 2),
        "a_churn_events_per_s": round(churned / (churn_seconds + 1.0)),
        "a_relists_during": len(cycles),
        "gc_while_a_relists": pauses.figures(),
        "a_relist_s_median": round(statistics.median(cycles), 2) if cycles else None,
    }


def private_mb(pid: int) -> float:
    """What a process holds that no other does (its USS: private clean and dirty pages)."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total / 1024


def memory_child(clusters: int, services: int, intake: str) -> dict[str, Any]:
    """One director serving ``clusters`` clusters of ``services`` each, their lists taken by
    list processes (``process``) or on the director's threads (``thread``; ``kubernetes``:
    one cluster in the one-cluster form). The zygote's own memory, and any list process's
    still running (USS: what is shared with the director is in its RSS already), is added
    to the director's RSS."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-clusters-mem-"))
    with stands([services] * clusters, workdir) as found:
        names = [""] if intake == "kubernetes" else [f"c{i}" for i in range(clusters)]
        text = settings_text([s.kubeconfig for s in found], names, intake)
        runtime = Runtime(parse_config(text, "bench.yaml"), FakeIpvs())
        started = time.perf_counter()
        runtime.start()
        try:
            settle(runtime)
            ready = time.perf_counter() - started
            gc.collect()
            rss = rss_mb()
            # A list process exits once it has sent its list: between lists only the
            # zygote is left of the intake.
            zygote = runtime.served.zygote
            intake_mb = private_mb(zygote.pid) if zygote is not None else 0.0
        finally:
            runtime.stop()
    return {
        "clusters": clusters,
        "services_each": services,
        "intake": intake,
        "ready_s": round(ready, 1),
        "director_rss_mb": round(rss, 1),
        "intake_processes": int(zygote is not None),  # the zygote (list processes come and go)
        "intake_private_mb": round(intake_mb, 1),
        "rss_mb": round(rss + intake_mb, 1),
    }


# (clusters, intake) of each shape measured; the first two are set against the third (one
# cluster of the same total in the one-cluster form), and the first also against the fourth
# (one cluster of that total, its intake in a process as well: what a cluster costs beyond
# the zygote every director with list processes has).
SHAPES = ((3, "process"), (3, "thread"), (1, "kubernetes"), (1, "process"))


def memory(total: int) -> dict[str, Any]:
    """Each shape in a fresh process, side by side."""
    out: dict[str, Any] = {}
    for count, intake in SHAPES:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "lab.bench_clusters",
                "--memory-child",
                str(count),
                str(total // count),
                intake,
            ],
            capture_output=True,
            text=True,
            check=True,
            # as the systemd unit runs the director (and its list processes)
            env=dict(os.environ, MALLOC_ARENA_MAX=os.environ.get("MALLOC_ARENA_MAX", "1")),
        )
        out[f"{count}x{total // count} {intake}"] = json.loads(run.stdout.strip().splitlines()[-1])
    rss = [out[f"{count}x{total // count} {intake}"]["rss_mb"] for count, intake in SHAPES]
    out["rss_ratio_process"] = round(rss[0] / rss[2], 2)
    out["rss_ratio_thread"] = round(rss[1] / rss[2], 2)
    out["rss_ratio_process_vs_one_process"] = round(rss[0] / rss[3], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--services", type=int, default=10000, help="cluster A's Services")
    parser.add_argument("--events", type=int, default=500, help="B's events per phase")
    parser.add_argument(
        "--a-nice",
        type=int,
        default=19,
        help="cluster A's stand-in's niceness: at a site A's API server is another machine; "
        "here it shares the director's 2 cores, and at 0 its relists take a core from B's",
    )
    parser.add_argument("--memory-total", type=int, default=15000)
    parser.add_argument("--memory-child", nargs=3, metavar=("CLUSTERS", "EACH", "INTAKE"))
    parser.add_argument("--skip", choices=("isolation", "memory"), action="append", default=[])
    parser.add_argument(
        "--intake",
        nargs="+",
        choices=("process", "thread"),
        default=["process", "thread"],
        help="isolation with each cluster's intake in a process of its own, on threads, or "
        "both in turn (the default)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.memory_child:
        count, each, intake = args.memory_child
        print(json.dumps(memory_child(int(count), int(each), intake)), flush=True)
        return
    results: dict[str, Any] = {}
    if "isolation" not in args.skip:
        runs = results["isolation"] = []
        for intake in args.intake:
            runs.append(isolation(args.services, args.events, a_nice=args.a_nice, intake=intake))
            print(f"bench-clusters isolation: {json.dumps(runs[-1])}", flush=True)
    if "memory" not in args.skip:
        results["memory"] = memory(args.memory_total)
        print(f"bench-clusters memory: {json.dumps(results['memory'])}", flush=True)
    if args.out:
        path = args.out / "results.json" if args.out.is_dir() else args.out
        path.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
