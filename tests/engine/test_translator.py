"""Hostile and careless cluster objects through translation, the whole director against
the API stand-in: a scoped address refused and every other Service served, sloppy
addresses read as kube-proxy reads them, an error in one Service logged, counted and shown
while the rest carries on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually
from tests.kubelab import N1, POD, PORTS, settings, stand_in


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    """One node, n1 (these tests add their own); the engine's conftest gives two."""
    with stand_in(N1) as server:
        yield server


def start(api: FakeApiServer, tmp_path: Path, ipvs: FakeIpvs, **kw: Any) -> Runtime:
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc"), **kw), ipvs)
    runtime.start()
    assert runtime.wait_ready(20), "the director never finished its first sync"
    return runtime


def vs(ipvs: FakeIpvs, address: str, port: int = 80):  # type: ignore[no-untyped-def]
    return ipvs.read().services.get(ServiceKey.inet(Protocol.TCP, address, port))


def ingress(api: FakeApiServer, name: str) -> list[str]:
    status = api.get("services", name).get("status") or {}
    return [i.get("ip") for i in (status.get("loadBalancer") or {}).get("ingress", [])]


def warnings(api: FakeApiServer, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e["message"]) for e in api.events_for(name) if e["type"] == "Warning"]


# -- item 1: a scoped IPv6 address in an annotation, and in status ------------------------
def test_a_scoped_address_is_refused_and_every_other_service_is_served(
    api: FakeApiServer, tmp_path: Path
) -> None:
    scoped = {"lvs-director.io/load-balancer-ips": "2001:db8::5%eth0"}
    evil = service("evil", PORTS, families=("IPv6",), annotations=scoped)
    api.create("services", evil)
    # What an earlier director (or a sloppy API server) left in status: read back, it must
    # not become the Service's allocation.
    api.patch(
        "services",
        "evil",
        {"status": {"loadBalancer": {"ingress": [{"ip": "2001:db8::5%eth0"}]}}},
        subresource="status",
    )
    api.create("services", service("good", PORTS))
    ipvs = FakeIpvs()
    with start(api, tmp_path, ipvs) as runtime:  # present at start: the worst case
        eventually(lambda: vs(ipvs, "198.51.100.0"), what="the good Service served")
        refusal = eventually(lambda: warnings(api, "evil"), what="a Warning on the evil Service")
        assert (
            "AddressRefused",
            "lvs-director.io/load-balancer-ips: '2001:db8::5%eth0' is not an IP address",
        ) in refusal
        eventually(lambda: ingress(api, "evil") == [], what="the poisoned status cleared")
        # The loop goes on: a new Service after the bad one is programmed too.
        api.create("services", service("later", PORTS))
        eventually(lambda: vs(ipvs, "198.51.100.1"), what="a later Service")
        assert runtime.controller.health.loop_errors == 0, "refused, not crashed"


# -- item 2: the API server's sloppy forms of addresses -----------------------------------
def test_sloppy_addresses_are_read_as_kube_proxy_reads_them_and_bad_ones_refused(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.create("nodes", node("n2", "192.168.001.005"))  # a leading-zero InternalIP
    api.create("services", service("nodes", PORTS))
    api.create("services", service("pods", PORTS, annotations=POD))
    api.create(
        "endpointslices",
        endpoint_slice(
            "pods",
            [
                ("10.0.0.01", "n1", True, False),
                ("10.0.0.256", "n1", True, False),
                ("10.0.0.7", "n1", True, False),
            ],
            [("http", "TCP", 8080)],
        ),
    )
    ipvs = FakeIpvs()
    with start(api, tmp_path, ipvs) as runtime:
        on_nodes = eventually(lambda: vs(ipvs, "198.51.100.0"), what="the nodeport Service")
        assert {address for address, _port in on_nodes.real_servers} == {
            "192.0.2.11",
            "192.168.1.5",
        }
        on_pods = eventually(lambda: vs(ipvs, "198.51.100.1"), what="the pod Service")
        assert sorted(on_pods.real_servers) == [("10.0.0.1", 8080), ("10.0.0.7", 8080)]
        refused = eventually(lambda: warnings(api, "pods"), what="a Warning for 10.0.0.256")
        assert refused == [
            (
                "InvalidEndpoint",
                "EndpointSlice pods-abcde: endpoints[1]: "
                "'10.0.0.256' is not an IPv4 address; ignored",
            )
        ]
        assert runtime.controller.health.refused == {"endpointslices": 1}
        assert runtime.controller.health.loop_errors == 0


# -- item 3: a step that raises is survived, and seen ---------------------------------------
def test_an_error_in_one_service_is_logged_counted_shown_and_the_rest_carries_on(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import director.engine.translator as controller_module

    real = controller_module.translate

    def translate(svc, *args, **kw):  # type: ignore[no-untyped-def]
        if svc.name == "cursed":
            raise RuntimeError("a bug that only this Service triggers")
        return real(svc, *args, **kw)

    monkeypatch.setattr(controller_module, "translate", translate)
    api.create("services", service("cursed", PORTS))
    ipvs = FakeIpvs()
    with start(api, tmp_path, ipvs) as runtime:
        health = runtime.controller.health
        assert health.synced and health.loop_errors >= 1  # once more when it becomes leader
        assert health.last_error == (
            "service default/cursed: RuntimeError: a bug that only this Service triggers"
        )
        api.create("services", service("fine", PORTS))
        eventually(lambda: len(ipvs.read().services) == 1, what="the next Service served")
        # Status is the leader's: once it is written, the step that took the lead (and
        # translated every Service again, the cursed one failing once more) is behind us.
        eventually(lambda: ingress(api, "fine") != [], what="the leader's status written")
        before = health.loop_errors
        api.patch("services", "cursed", {"metadata": {"labels": {"touched": "yes"}}})
        eventually(lambda: health.loop_errors == before + 1, what="the next failure counted")
        assert runtime.failed is None and runtime._thread.is_alive()
