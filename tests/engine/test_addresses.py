"""Addresses handed out by the loop: a LoadBalancer Service gets one, its status and its
virtual service; exhaustion and bad annotations refused with Events; pools given to
namespaces and labels."""

from __future__ import annotations

from pathlib import Path

from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, service
from lab.wait import eventually
from tests.kubelab import PORTS
from tests.looplab import ingress, reasons, start, vs_of


def test_load_balancer_service_gets_an_address_status_and_a_virtual_service(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs):
        api.create("services", service("web", PORTS))
        ips = eventually(lambda: ingress(api, "web"), what="status.loadBalancer.ingress")
        assert ips == ["198.51.100.0"]
        assert api.get("services", "web")["status"]["loadBalancer"]["ingress"][0]["ipMode"] == "VIP"
        node_port = api.get("services", "web")["spec"]["ports"][0]["nodePort"]
        vs = eventually(lambda: vs_of(ipvs, "198.51.100.0"), what="the virtual service")
        assert sorted(vs.real_servers) == [("192.0.2.11", node_port), ("192.0.2.12", node_port)]
        eventually(
            lambda: "AddressAssigned" in reasons(api, "web"), what="an AddressAssigned event"
        )
        # A node leaving takes its real server out.
        not_ready = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
        api.patch("nodes", "n2", not_ready, subresource="status")
        eventually(lambda: len(vs_of(ipvs, "198.51.100.0").real_servers) == 1, what="node removal")
        # Deleting the Service removes the virtual service.
        api.delete("services", "web")
        eventually(lambda: vs_of(ipvs, "198.51.100.0") is None, what="the service to go")
    assert reasons(api, "web").count("AddressAssigned") == 1, "one event, not one per sync"


def test_exhaustion_and_bad_annotations_are_refused_with_events(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs, pool="198.51.100.0/32"):
        api.create("services", service("first", PORTS))
        eventually(lambda: ingress(api, "first"))
        api.create("services", service("second", PORTS))
        eventually(lambda: "AddressRefused" in reasons(api, "second"), what="a refusal event")
        event = next(e for e in api.events_for("second") if e["reason"] == "AddressRefused")
        assert event["type"] == "Warning"
        assert "no free IPv4 address in pool(s) default" in event["message"]
        assert ingress(api, "second") == [] and len(ipvs.read().services) == 1
        api.patch(
            "services",
            "first",
            {"metadata": {"annotations": {"lvs-director.io/scheduler": "fastest"}}},
        )
        eventually(lambda: "InvalidAnnotation" in reasons(api, "first"))
        assert vs_of(ipvs, "198.51.100.0").config.scheduler == "wlc", "last valid setting kept"
        api.patch(
            "services", "first", {"metadata": {"annotations": {"lvs-director.io/scheduler": "sh"}}}
        )
        eventually(lambda: vs_of(ipvs, "198.51.100.0").config.scheduler == "sh")


def test_pools_serve_the_namespaces_and_labels_they_are_given_to(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    """allocate_to (MetalLB's serviceAllocation): team-a's pool goes to team-a's Services
    first, a labelled pool to the Services it selects; a Service elsewhere that names
    team-a's pool is refused with the reason, and one whose labels no longer select it moves
    to a pool that serves it."""
    from director.schema.config import parse_config

    api.create("namespaces", {"metadata": {"name": "team-a"}})
    text = f"""
pools:
  - name: default
    addresses: [198.51.100.0-198.51.100.7]
  - name: team-a
    addresses: [198.51.100.8-198.51.100.9]
    allocate_to: {{priority: 1, namespaces: [team-a]}}
  - name: web
    addresses: [198.51.100.16-198.51.100.17]
    allocate_to:
      priority: 2
      service_selectors: [{{match_labels: {{tier: web}}}}]
kubernetes: {{kubeconfig: {kubeconfig}, identity: a, lease_seconds: 2}}
"""
    runtime = Runtime(parse_config(text, "pools.yaml"), FakeIpvs())
    runtime.start()
    try:
        assert runtime.wait_ready(20)
        api.create("services", service("own", PORTS), namespace="team-a")
        labelled = service("shop", PORTS)
        labelled["metadata"]["labels"] = {"tier": "web"}
        api.create("services", labelled)
        api.create("services", service("plain", PORTS))
        greedy = service("greedy", PORTS, annotations={"lvs-director.io/pool": "team-a"})
        api.create("services", greedy)
        own = lambda: ingress_in(api, "own", "team-a")  # noqa: E731
        eventually(lambda: own() and ingress(api, "shop") and ingress(api, "plain"))
        assert own() == ["198.51.100.8"]
        assert ingress(api, "shop") == ["198.51.100.16"]
        assert ingress(api, "plain") == ["198.51.100.0"]
        eventually(lambda: "AddressRefused" in reasons(api, "greedy"), what="a refusal")
        refusal = next(e for e in api.events_for("greedy") if e["reason"] == "AddressRefused")
        assert (
            "pool 'team-a' serves only namespaces team-a, not default/greedy" in refusal["message"]
        )
        api.patch("services", "shop", {"metadata": {"labels": {"tier": "db"}}})
        eventually(lambda: ingress(api, "shop") == ["198.51.100.1"], what="shop moved")
    finally:
        runtime.stop()


def ingress_in(api: FakeApiServer, name: str, namespace: str) -> list[str]:
    status = api.get("services", name, namespace=namespace)["status"]
    return [i["ip"] for i in status.get("loadBalancer", {}).get("ingress", [])]


def test_an_address_the_box_gains_is_never_a_vip(api: FakeApiServer, kubeconfig: Path) -> None:
    """Issue 71, 2: a pool holding one of the box's own interface addresses (its management
    address) gave it to a tenant's Service, whose port 22 then took the box's SSH. The box's
    addresses are watched (``adapters.box``): a Service holding one is moved to a free one,
    and one asking for it is refused with an Event saying why; an endpoint that is one is
    refused too."""
    from director.engine.events import BoxAddresses

    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs, pool="198.51.100.0/29") as runtime:
        api.create("services", service("web", PORTS))
        assert eventually(lambda: ingress(api, "web")) == ["198.51.100.1"]
        runtime.controller.post(BoxAddresses((("198.51.100.1", "eth0"),)))
        eventually(lambda: ingress(api, "web") == ["198.51.100.2"], what="web moved off it")
        eventually(lambda: vs_of(ipvs, "198.51.100.1") is None, what="its old VIP gone")
        asks = service(
            "asks", PORTS, annotations={"lvs-director.io/load-balancer-ips": "198.51.100.1"}
        )
        api.create("services", asks)
        eventually(lambda: "AddressRefused" in reasons(api, "asks"), what="a refusal")
        refusal = next(e for e in api.events_for("asks") if e["reason"] == "AddressRefused")
        assert "this box's own address (on eth0)" in refusal["message"], refusal["message"]
        assert ingress(api, "asks") == []
