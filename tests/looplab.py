"""Helpers of the loop's tests against a cluster: a Runtime started as ``director run``
wires it (fake IPVS), a Service's ingress addresses and Events, a virtual service read
back."""

from __future__ import annotations

from pathlib import Path

from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer
from tests.kubelab import settings

SLICE_PORTS = [("http", "TCP", 8080)]


def start(kubeconfig: Path, ipvs: FakeIpvs, **kw: object) -> Runtime:
    runtime_kw = {k: kw.pop(k) for k in ("dry_run", "state_file", "metrics") if k in kw}
    runtime = Runtime(settings(kubeconfig, **kw), ipvs, **runtime_kw)  # type: ignore[arg-type]
    runtime.start()
    assert runtime.wait_ready(20), "the controller never finished its first sync"
    return runtime


def ingress(api: FakeApiServer, name: str) -> list[str]:
    status = api.get("services", name)["status"]
    return [i["ip"] for i in status.get("loadBalancer", {}).get("ingress", [])]


def vs_of(ipvs: FakeIpvs, address: str, port: int = 80):  # type: ignore[no-untyped-def]
    return ipvs.read().services.get(ServiceKey.inet(Protocol.TCP, address, port))


def reasons(api: FakeApiServer, name: str) -> list[str]:
    return [e["reason"] for e in api.events_for(name)]
