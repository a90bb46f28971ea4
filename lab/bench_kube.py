"""Event-to-kernel latency of the Kubernetes sync, and the director's memory, at scale.

The API stand-in runs in a child process (so its store does not count in the director's
memory), populated with N LoadBalancer Services in pod mode, each with an EndpointSlice of
10 endpoints. The director (``director.runtime.Runtime``, as ``director run`` wires it)
watches it, in this process. One endpoint of one random Service changes at a time; the
figure is the time from sending that change to the API server to the moment the kernel (or
the fake) has applied the resulting operations, and the director's share of it (from the
watch event's arrival). The objects are as a cluster stores them (managedFields, kubectl's
last-applied annotation, Pod references), and the cold start is printed beside the time it
takes merely to list and parse the same objects. With several sizes, their events take turns
(``interleaved``); against the kernel, 500 more events a size run with its rate estimator off.

    python -m lab.bench_kube --services 1000 10000                # host, the fake
    python -m lab.vm run lab.bench_kube --memory 6G -- --adapter kernel   # VM, real IPVS
    (lab.bench also calls run() with the kernel adapter, after its dataplane figures)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from director.adapters.kube.client import FIELD_MANAGER, RESOURCES, KubeApi, api_client
from director.adapters.metrics.ipvs import IpvsExposition, Scrape
from director.adapters.metrics.promtext import CollectorRegistry
from director.daemon.runtime import Runtime
from director.dataplane.interface import Ipvs
from director.engine.reconcile import SyncReport
from director.schema.config import parse_config

ENDPOINTS = 10
TOKEN = "bench-token"


def _name(i: int) -> str:
    return f"svc-{i:05d}"


def _address(n: int, net: int = 19) -> str:
    return f"198.{net}.{n // 250 % 250}.{n % 250 + 1}"


NODES = 20


def _endpoints(i: int, generation: int = 0) -> list[dict[str, Any]]:
    """Service i's endpoints as the EndpointSlice controller writes them (a Pod reference,
    node and zone each); from generation 1 on, the first one is replaced."""
    addresses = [_address(i * ENDPOINTS + e) for e in range(ENDPOINTS)]
    if generation:
        addresses[0] = _address(generation, net=20)
    return [
        {
            "addresses": [a],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "targetRef": {
                "kind": "Pod",
                "namespace": "default",
                "name": f"{_name(i)}-7d9f8c6b5-{n:05x}",
                "uid": str(uuid.UUID(int=i * 1000 + n + generation * 10**9)),
            },
            "nodeName": f"node-{n % NODES:02d}",
            "zone": f"zone-{'abc'[n % 3]}",
        }
        for n, a in enumerate(addresses)
    ]


def _service(i: int) -> dict[str, Any]:
    """Service i as ``kubectl apply`` submits it (labels, the last-applied annotation)."""
    labels = {
        "app.kubernetes.io/name": _name(i),
        "app.kubernetes.io/instance": f"{_name(i)}-prod",
        "app.kubernetes.io/part-of": "shop",
        "app.kubernetes.io/managed-by": "kubectl",
    }
    manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": _name(i),
            "namespace": "default",
            "labels": labels,
            "annotations": {"lvs-director.io/backends": "pod"},
        },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "lvs-director.io/ipvs",
            "allocateLoadBalancerNodePorts": False,  # pod mode needs none
            "selector": {"app.kubernetes.io/name": _name(i)},
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
        },
    }
    obj: dict[str, Any] = json.loads(json.dumps(manifest))
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
        json.dumps(manifest, separators=(",", ":")) + "\n"
    )
    return obj


def _slice(i: int, service_uid: str) -> dict[str, Any]:
    """Service i's EndpointSlice as kube-controller-manager creates it."""
    return {
        "metadata": {
            "name": f"{_name(i)}-x",
            "generateName": f"{_name(i)}-",
            "labels": {
                "kubernetes.io/service-name": _name(i),
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                "app.kubernetes.io/name": _name(i),
                "app.kubernetes.io/part-of": "shop",
            },
            "annotations": {
                "endpoints.kubernetes.io/last-change-trigger-time": "2026-11-20T10:00:00Z"
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": _name(i),
                    "uid": service_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "addressType": "IPv4",
        "endpoints": _endpoints(i),
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    }


def _node(n: int) -> dict[str, Any]:
    """A Node as the kubelet reports it (its images list is most of it)."""
    name = f"node-{n:02d}"
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": f"zone-{'abc'[n % 3]}",
                "node.kubernetes.io/instance-type": "metal",
            },
        },
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"192.0.2.{n + 10}"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                {
                    "type": t,
                    "status": "True" if t == "Ready" else "False",
                    "reason": f"Kubelet{t}",
                    "message": f"kubelet reports {t}",
                    "lastHeartbeatTime": "2026-11-25T07:00:00Z",
                    "lastTransitionTime": "2026-11-20T10:00:00Z",
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "capacity": {"cpu": "32", "memory": "131072Mi", "pods": "110"},
            "allocatable": {"cpu": "31500m", "memory": "129024Mi", "pods": "110"},
            "nodeInfo": {
                "kubeletVersion": "v1.31.4",
                "osImage": "Debian GNU/Linux 12",
                "kernelVersion": "6.1.0-28-amd64",
                "containerRuntimeVersion": "containerd://1.7.24",
                "architecture": "amd64",
                "operatingSystem": "linux",
                "machineID": f"{n:032x}",
                "systemUUID": str(uuid.UUID(int=n)),
                "bootID": str(uuid.UUID(int=n + 99)),
            },
            "images": [
                {
                    "names": [
                        f"registry.example/team-{k}/app@sha256:{k:064x}",
                        f"registry.example/team-{k}/app:v1.{k}",
                    ],
                    "sizeBytes": 50_000_000 + k,
                }
                for k in range(40)
            ],
        },
    }


def serve(services: int, port_file: Path, net: int = 18) -> None:
    """Child process: the stand-in, populated as a cluster would be (each object written by
    its manager, so each carries the managedFields kube-apiserver keeps), until stdin
    closes. ``net``: the Services' addresses in status are 198.NET.x.y. A line ``gone`` on
    stdin expires every watch (each client relists); ``change I GEN`` replaces one endpoint
    of Service I, as the EndpointSlice controller does, and answers on stdout with the
    monotonic time just before the write (the clock ``time.perf_counter`` reads in every
    process: where the bench's event-to-kernel starts); ``churn`` changes every Service's
    EndpointSlice in turn as fast as it can until ``calm``, which answers with how many."""
    from lab.kubeapi import FakeApiServer

    server = FakeApiServer(token=TOKEN)
    store = server.store
    for n in range(NODES):
        store.create("nodes", "", _node(n), manager="kubelet")
    for i in range(services):
        svc = store.create("services", "default", _service(i), manager="kubectl-client-side-apply")
        # Steady state: the address is already in status, as after any restart.
        status = {
            "status": {"loadBalancer": {"ingress": [{"ip": _address(i, net), "ipMode": "VIP"}]}}
        }
        store.patch(
            "services", "default", _name(i), status, subresource="status", manager=FIELD_MANAGER
        )
        store.create(
            "endpointslices",
            "default",
            _slice(i, svc["metadata"]["uid"]),
            manager="kube-controller-manager",
        )
    server.start()
    # Written beside and renamed into place: the reader must never see the file empty.
    port_file.with_suffix(".new").write_text(str(server.port))
    port_file.with_suffix(".new").rename(port_file)
    churning = threading.Event()
    churned = [0]

    def change(i: int, generation: int) -> None:
        store.patch(
            "endpointslices",
            "default",
            f"{_name(i)}-x",
            {"endpoints": _endpoints(i, generation)},
            manager="kube-controller-manager",
        )

    def churn() -> None:
        """A controller gone wild: every Service's EndpointSlice changed in turn, as fast
        as the stand-in takes writes, until ``calm``."""
        while churning.is_set():
            change(churned[0] % services, 10**6 + churned[0])
            churned[0] += 1

    for line in sys.stdin:
        words = line.split()
        if words == ["gone"]:
            server.expire_watches()
        elif words[:1] == ["change"]:
            started = time.perf_counter()
            change(int(words[1]), int(words[2]))
            print(repr(started), flush=True)
        elif words == ["churn"]:
            churning.set()
            threading.Thread(target=churn, daemon=True).start()
        elif words == ["calm"]:
            churning.clear()
            print(churned[0], flush=True)
    churning.clear()
    server.stop()


def slice_patch(url: str, i: int, generation: int) -> urllib.request.Request:
    """The PATCH that replaces one endpoint of Service i, as the EndpointSlice controller
    sends it."""
    return urllib.request.Request(
        f"{url}/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/"
        f"{_name(i)}-x?fieldManager=kube-controller-manager",
        data=json.dumps({"endpoints": _endpoints(i, generation)}).encode(),
        method="PATCH",
        headers={
            "Content-Type": "application/merge-patch+json",
            "Authorization": f"Bearer {TOKEN}",
        },
    )


def write_kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig for the stand-in at ``url`` (its bearer token)."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "b",
                "clusters": [{"name": "b", "cluster": {"server": url}}],
                "users": [{"name": "b", "user": {"token": TOKEN}}],
                "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}],
            }
        )
    )
    return path


def list_and_parse(kubeconfig: Path) -> float:
    """Seconds to list every object the director lists (paged the same way, through the
    same client) and parse its JSON, keeping nothing: the floor a cold start stands on."""
    kube = KubeApi(api_client(str(kubeconfig)))
    started = time.perf_counter()
    for resource in RESOURCES:
        kube.list(resource, lambda obj: None)
    return time.perf_counter() - started


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def alone(stage: str) -> None:
    """A size run on its own: it never waits for a turn."""


def run(
    ipvs: Ipvs,
    services: int,
    rounds: int = 500,
    estimation: Callable[[bool], None] | None = None,
    turn: Callable[[str], None] = alone,
) -> dict[str, Any]:
    """One size. ``turn`` is called before each event and once before the rest (resync,
    scrape, floor): where an interleaved run waits for its turn."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-kube-"))
    port_file = workdir / "port"
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lab.bench_kube",
            "--serve",
            str(services),
            "--port-file",
            str(port_file),
        ],
        stdin=subprocess.PIPE,
    )
    try:
        while not port_file.exists():
            if child.poll() is not None:
                raise RuntimeError("the API stand-in did not start")
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        kubeconfig = write_kubeconfig(workdir / "kubeconfig", url)
        settings = parse_config(
            f"pools: [{{name: bench, addresses: [198.18.0.0/16]}}]\n"
            f"kubernetes: {{kubeconfig: {kubeconfig}, identity: bench, resync_seconds: 86400}}\n",
            "bench.yaml",
        )
        applied: dict[str, float] = {}
        applied_ops: dict[str, int] = {}
        cv = threading.Condition()

        def observer(ref: str, report: SyncReport) -> None:
            if report.result.requested:
                with cv:
                    applied[ref] = time.perf_counter()
                    applied_ops[ref] = applied_ops.get(ref, 0) + len(report.plan.ops)
                    cv.notify_all()

        started = time.perf_counter()
        runtime = Runtime(settings, ipvs, observer=observer).start()
        if not runtime.wait_ready(3600):
            raise RuntimeError("the director never finished its first sync")
        first_sync = time.perf_counter() - started
        # Wait for the lease and its recomputation to settle (they are not the figure).
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (
            runtime.controller.parts.reporter.leader
            and runtime.controller.parts.intake.queue.empty()
        ):
            time.sleep(0.1)
        time.sleep(1)
        # When each change reached the director (its watch handed the parsed slice to the
        # loop): the director's own share of the latency, without the API server's.
        received: dict[str, float] = {}
        inbox = runtime.controller.parts.intake.queue
        put = inbox.put

        def arrived(item: Any, *args: Any, **kwargs: Any) -> None:
            ref = getattr(getattr(item, "obj", None), "service", None)
            if isinstance(ref, str):
                with cv:
                    received.setdefault(ref, time.perf_counter())
            put(item, *args, **kwargs)

        inbox.put = arrived  # type: ignore[method-assign]
        rng = random.Random(11)
        ops: list[int] = []

        def events(generations: range) -> dict[str, float]:
            """One EndpointSlice change at a time, each waited for in the kernel."""
            times, own = [], []
            for generation in generations:
                turn("events")
                i = rng.randrange(services)
                ref = f"default/{_name(i)}"
                request = slice_patch(url, i, generation)
                with cv:
                    applied.pop(ref, None)
                    applied_ops.pop(ref, None)
                    received.pop(ref, None)
                t0 = time.perf_counter()
                urllib.request.urlopen(request).read()
                with cv:
                    if not cv.wait_for(lambda ref=ref: ref in applied, timeout=60):  # type: ignore[misc]
                        raise RuntimeError(f"no kernel change for {ref}")
                    times.append((applied[ref] - t0) * 1000)
                    own.append((applied[ref] - received.get(ref, t0)) * 1000)
                time.sleep(0.05)  # let a trailing sync of the same event land in applied_ops
                with cv:
                    ops.append(applied_ops.get(ref, 0))
            # p99: of 500 events (the default), the fifth-slowest.
            times.sort()
            own.sort()
            return {
                "event_to_kernel_ms_p50": round(statistics.median(times), 2),
                "event_to_kernel_ms_p99": round(times[max(0, int(len(times) * 0.99) - 1)], 2),
                # From the watch event's arrival at the director to the kernel.
                "director_ms_p50": round(statistics.median(own), 2),
                "director_ms_p99": round(own[max(0, int(len(own) * 0.99) - 1)], 2),
            }

        latency = events(range(1, rounds + 1))
        if estimation is not None:
            # The same, with the kernel's rate estimator off (what the role's
            # director_ipvs_rate_estimation: false does): before 6.2 its timer walks every
            # estimator under the lock that adding a real server takes.
            estimation(False)
            try:
                off = events(range(rounds + 1, 2 * rounds + 1))
            finally:
                estimation(True)
            latency |= {f"{name}_estimation_off": value for name, value in off.items()}
        turn("finish")
        memory = rss_mb()
        # What every director then does once a minute (resync_seconds, 86400 here so that
        # none fell among the events): read the whole kernel table back and diff it.
        pace = runtime.controller.parts.pace
        t0 = time.perf_counter()
        pace.resynced(0)
        while pace.resync_due(time.monotonic()):
            time.sleep(0.05)
        resync_s = time.perf_counter() - t0
        after_resync = rss_mb()
        # What Prometheus then costs: one scrape of every kernel counter (the director's
        # /metrics), and the memory it leaves.
        scrape = Scrape(CollectorRegistry(), IpvsExposition(runtime.controller.door()))
        t0 = time.perf_counter()
        scraped = len(scrape.gzipped())
        scrape_s = time.perf_counter() - t0
        after_scrape = rss_mb()  # Prometheus asks for gzip: what a plain request unpacks is not
        text_mb = sum(len(piece) for piece in scrape.plain()) / 1e6
        runtime.stop()
        # The floor, measured after the director (so its garbage is not the director's
        # memory), twice: the faster is taken, which makes the ratio the harder one.
        floor = min(list_and_parse(kubeconfig) for _ in range(2))
        return {
            "services": services,
            "first_sync_s": round(first_sync, 2),
            "list_and_parse_s": round(floor, 2),
            "first_sync_over_list": round(first_sync / floor, 2),
            "events": rounds,
            **latency,
            "ops_per_event_max": max(ops),
            "ops_per_event_min": min(ops),
            "rss_mb": round(memory, 1),
            "resync_s": round(resync_s, 2),
            "rss_mb_after_resync": round(after_resync, 1),
            "scrape_s": round(scrape_s, 2),
            "scrape_text_mb": round(text_mb, 1),
            "scrape_gzip_mb": round(scraped / 1e6, 1),
            "rss_mb_after_scrape": round(after_scrape, 1),
        }
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(timeout=30)


def one(
    adapter: str, count: int, rounds: int = 500, turn: Callable[[str], None] = alone
) -> dict[str, Any]:
    """One size, in this process: the fake (host), or the kernel in a fresh namespace (VM)."""
    if adapter == "fake":
        from director.dataplane.fake import FakeIpvs

        result = run(FakeIpvs(record=False), count, rounds, turn=turn)
    else:
        from lab.netns import fresh_namespace

        ns, ipvs = fresh_namespace(f"bench-kube-{count}")
        try:
            result = run(
                ipvs,
                count,
                rounds,
                lambda on: ns.sysctls({"net.ipv4.vs.run_estimation": int(on)}),
                turn,
            )
        finally:
            ipvs.close()
            ns.close()
    result["malloc_arena_max"] = os.environ.get("MALLOC_ARENA_MAX", "default")
    return result


TURN = "bench-kube-turn"


def _take_turns(stage: str) -> None:
    """A child of an interleaved run: say it waits, and wait for its parent's go."""
    print(f"{TURN} {stage}", flush=True)
    if not sys.stdin.readline():
        raise SystemExit("the bench's parent is gone")


def _until_turn(child: subprocess.Popen[str]) -> str:
    """What the child waits to do next ("events" or "finish"), or its result line."""
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith(TURN):
            return line.split()[1]
        if line.startswith("bench-kube ("):
            return line.strip()
    raise RuntimeError(f"a bench child exited ({child.wait()})")


def _go(child: subprocess.Popen[str]) -> str:
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    return _until_turn(child)


def interleaved(adapter: str, sizes: list[int]) -> dict[str, Any]:
    """Each size in a process of its own (memory is a figure), with the allocator setting
    the systemd unit gives the director. Cold starts, and what follows the events, run one
    size at a time; the events take turns (one of each size in turn), so that a machine
    that slows down mid-run does so for every size alike: these machines do (a run's
    1,000-Service p50 has moved from 3.2 to 4.5 ms between runs)."""
    env = dict(os.environ, MALLOC_ARENA_MAX=os.environ.get("MALLOC_ARENA_MAX", "1"))
    children: dict[int, subprocess.Popen[str]] = {}
    stage: dict[int, str] = {}
    results: dict[str, Any] = {}
    try:
        for count in sizes:
            children[count] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lab.bench_kube",
                    "--adapter",
                    adapter,
                    "--services",
                    str(count),
                    "--turns",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            stage[count] = _until_turn(children[count])  # its cold start, alone
        while any(stage[count] == "events" for count in sizes):
            for count in sizes:
                if stage[count] == "events":
                    stage[count] = _go(children[count])
        for count in sizes:  # resync, scrape and the floor: alone
            line = _go(children[count])
            print(line, flush=True)
            results[str(count)] = json.loads(line.partition(": ")[2])
            children[count].wait(timeout=60)
    finally:
        for child in children.values():
            child.kill()
            child.wait()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", type=int)
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--net", type=int, default=18, help="with --serve: status 198.NET.x.y")
    parser.add_argument("--adapter", choices=("fake", "kernel"), default="fake")
    parser.add_argument("--services", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--turns", action="store_true", help="a child of an interleaved run")
    parser.add_argument("--out", type=Path, help="a file, or (lab.vm run) a directory")
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.port_file, args.net)
        return
    where = "fake, native" if args.adapter == "fake" else "kernel"
    if len(args.services) == 1:
        result = one(args.adapter, args.services[0], turn=_take_turns if args.turns else alone)
        print(f"bench-kube ({where}): {json.dumps(result)}", flush=True)
        return
    results = interleaved(args.adapter, args.services)
    if args.out:
        path = args.out / "results.json" if args.out.is_dir() else args.out
        path.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
