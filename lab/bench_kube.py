"""Event-to-kernel latency of the Kubernetes sync, and the director's memory, at scale.

The API stand-in runs in a child process (so its store does not count in the director's
memory), populated with N LoadBalancer Services in pod mode, each with an EndpointSlice of
10 endpoints. The director (``director.runtime.Runtime``, as ``director run`` wires it)
watches it, in this process. One endpoint of one random Service changes at a time; the
figure is the time from sending that change to the API server to the moment the kernel (or
the fake) has applied the resulting operations.

    python -m lab.bench_kube --adapter fake --services 1000 10000     # host, native
    (in the VM, lab.bench calls run() with the kernel adapter)
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
from pathlib import Path
from typing import Any

from director.cli.runtime import Runtime
from director.dataplane.interface import Ipvs
from director.engine.reconcile import SyncReport
from director.schema.config import parse_config

ENDPOINTS = 10
TOKEN = "bench-token"


def _name(i: int) -> str:
    return f"svc-{i:05d}"


def _address(n: int, net: int = 19) -> str:
    return f"198.{net}.{n // 250 % 250}.{n % 250 + 1}"


def _endpoints(i: int, generation: int = 0) -> list[dict[str, Any]]:
    """Service i's endpoints; from generation 1 on, the first one is replaced."""
    addresses = [_address(i * ENDPOINTS + e) for e in range(ENDPOINTS)]
    if generation:
        addresses[0] = _address(generation, net=20)
    return [
        {"addresses": [a], "conditions": {"ready": True, "serving": True, "terminating": False}}
        for a in addresses
    ]


def serve(services: int, port_file: Path) -> None:
    """Child process: the stand-in, populated, until stdin closes."""
    from lab.kubeapi import FakeApiServer, endpoint_slice, service

    server = FakeApiServer(token=TOKEN)
    for i in range(services):
        obj = service(
            _name(i), [("http", "TCP", 80)], annotations={"lvs-director.io/backends": "pod"}
        )
        obj["spec"]["ports"][0]["targetPort"] = 8080
        obj["spec"]["allocateLoadBalancerNodePorts"] = False  # pod mode needs none
        server.create("services", obj)
        # Steady state: the address is already in status, as after any restart.
        status = {
            "status": {"loadBalancer": {"ingress": [{"ip": _address(i, 18), "ipMode": "VIP"}]}}
        }
        server.patch("services", _name(i), status, subresource="status")
        sl = endpoint_slice(_name(i), [], [("http", "TCP", 8080)], name=f"{_name(i)}-x")
        sl["endpoints"] = _endpoints(i)
        server.create("endpointslices", sl)
    server.start()
    port_file.write_text(str(server.port))
    sys.stdin.read()
    server.stop()


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(ipvs: Ipvs, services: int, rounds: int = 60) -> dict[str, float]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-kube-"))
    port_file = workdir / "port"
    child = subprocess.Popen(
        [sys.executable, "-m", "lab.bench_kube", "--serve", str(services),
         "--port-file", str(port_file)],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        while not port_file.exists():
            if child.poll() is not None:
                raise RuntimeError("the API stand-in did not start")
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "b",
            "clusters": [{"name": "b", "cluster": {"server": url}}],
            "users": [{"name": "b", "user": {"token": TOKEN}}],
            "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}],
        }))  # fmt: skip
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
            runtime.controller.leader and runtime.controller.queue.empty()
        ):
            time.sleep(0.1)
        time.sleep(1)
        rng = random.Random(11)
        times, ops = [], []
        for generation in range(1, rounds + 1):
            i = rng.randrange(services)
            ref = f"default/{_name(i)}"
            body = json.dumps({"endpoints": _endpoints(i, generation)}).encode()
            request = urllib.request.Request(
                f"{url}/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/{_name(i)}-x",
                data=body,
                method="PATCH",
                headers={"Content-Type": "application/merge-patch+json",
                         "Authorization": f"Bearer {TOKEN}"},
            )  # fmt: skip
            with cv:
                applied.pop(ref, None)
                applied_ops.pop(ref, None)
            t0 = time.perf_counter()
            urllib.request.urlopen(request).read()
            with cv:
                if not cv.wait_for(lambda ref=ref: ref in applied, timeout=60):  # type: ignore[misc]
                    raise RuntimeError(f"no kernel change for {ref}")
                times.append((applied[ref] - t0) * 1000)
            time.sleep(0.05)  # let a trailing sync of the same event land in applied_ops
            with cv:
                ops.append(applied_ops.get(ref, 0))
        memory = rss_mb()
        runtime.stop()
        times.sort()
        return {
            "services": services,
            "first_sync_s": round(first_sync, 2),
            "event_to_kernel_ms_p50": round(statistics.median(times), 2),
            "event_to_kernel_ms_p99": round(times[max(0, int(len(times) * 0.99) - 1)], 2),
            "ops_per_event_max": max(ops),
            "ops_per_event_min": min(ops),
            "rss_mb": round(memory, 1),
        }
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", type=int)
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--adapter", choices=("fake",), default="fake")
    parser.add_argument("--services", type=int, nargs="*", default=[1000, 10000])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.port_file)
        return
    from director.dataplane.fake import FakeIpvs

    results = {}
    for count in args.services:
        results[str(count)] = run(FakeIpvs(), count)
        print(f"bench-kube (fake, native): {results[str(count)]}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
