"""The desired table programmed as the cluster changes: pod backends follow endpoints
(removed ones drain), terminating endpoints at weight 0, weights moved in place, node
ports behind the NodePort VIP, nothing left behind by a deleted Service."""

from __future__ import annotations

from pathlib import Path

from director.core.model import Forwarding, IpProtocol as Protocol, ServiceKey
from director.core.services import OpKind
from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, endpoint_slice, service
from lab.wait import eventually
from tests.kubelab import PORTS
from tests.looplab import SLICE_PORTS, ingress, reasons, start, vs_of


def test_pod_backends_follow_endpoints_and_removed_ones_drain(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    ipvs = FakeIpvs()
    annotations = {"lvs-director.io/backends": "pod"}
    with start(kubeconfig, ipvs):
        api.create("services", service("web", PORTS, annotations=annotations))
        api.create(
            "endpointslices", endpoint_slice("web", [("10.1.0.5", "n1", True, False)], SLICE_PORTS)
        )
        key = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
        eventually(lambda: vs_of(ipvs, "198.51.100.0"), what="the virtual service")
        api.patch(
            "endpointslices",
            "web-abcde",
            {
                "endpoints": [
                    {"addresses": ["10.1.0.5"], "conditions": {"ready": True}, "nodeName": "n1"},
                    {"addresses": ["10.1.0.6"], "conditions": {"ready": True}, "nodeName": "n2"},
                ]
            },
        )
        eventually(lambda: len(vs_of(ipvs, "198.51.100.0").real_servers) == 2, what="scale up")
        # 10.1.0.5 has an open connection when it goes away: it drains at weight 0.
        ipvs.set_connections(key, ("10.1.0.5", 8080), active=1, inactive=0)
        api.patch(
            "endpointslices",
            "web-abcde",
            {
                "endpoints": [
                    {"addresses": ["10.1.0.6"], "conditions": {"ready": True}, "nodeName": "n2"}
                ]
            },
        )
        drained = eventually(
            lambda: vs_of(ipvs, "198.51.100.0").real_servers[("10.1.0.5", 8080)].weight == 0,
            what="weight 0 while the connection is open",
        )
        assert drained
        ipvs.set_connections(key, ("10.1.0.5", 8080), active=0, inactive=0)
        eventually(
            lambda: list(vs_of(ipvs, "198.51.100.0").real_servers) == [("10.1.0.6", 8080)],
            what="removal once the connection is gone",
        )


def test_terminating_endpoint_gets_weight_zero_and_comes_back_in_place(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    ipvs = FakeIpvs()
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
    with start(kubeconfig, ipvs):
        api.create(
            "services", service("web", PORTS, annotations={"lvs-director.io/backends": "pod"})
        )
        api.create(
            "endpointslices",
            endpoint_slice(
                "web",
                [("10.1.0.5", "n1", True, False), ("10.1.0.6", "n2", True, False)],
                SLICE_PORTS,
            ),
        )
        eventually(
            lambda: (
                vs_of(ipvs, "198.51.100.0") and len(vs_of(ipvs, "198.51.100.0").real_servers) == 2
            )
        )
        ipvs.set_connections(key, ("10.1.0.6", 8080), active=3, inactive=0)
        api.patch(
            "endpointslices",
            "web-abcde",
            endpoint_slice(
                "web",
                [("10.1.0.5", "n1", True, False), ("10.1.0.6", "n2", True, True)],
                SLICE_PORTS,
            ),
        )
        eventually(lambda: vs_of(ipvs, "198.51.100.0").real_servers[("10.1.0.6", 8080)].weight == 0)
        adds_before = sum(op.kind.value == "add-dest" for op in ipvs.applied)
        api.patch(
            "endpointslices",
            "web-abcde",
            endpoint_slice(
                "web",
                [("10.1.0.5", "n1", True, False), ("10.1.0.6", "n2", True, False)],
                SLICE_PORTS,
            ),
        )
        eventually(lambda: vs_of(ipvs, "198.51.100.0").real_servers[("10.1.0.6", 8080)].weight == 1)
        assert sum(op.kind.value == "add-dest" for op in ipvs.applied) == adds_before, (
            "set in place"
        )


def test_a_pod_moving_between_nodes_moves_the_local_weight_in_place(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    """externalTrafficPolicy Local: each node is weighed by its ready pods, and a pod that
    moves changes two weights in place (no real server removed and added: no connection cut)."""
    ipvs = FakeIpvs()

    def spread(on_n1: int, on_n2: int) -> dict[str, object]:
        eps = [(f"10.1.1.{i}", "n1", True, False) for i in range(on_n1)]
        eps += [(f"10.1.2.{i}", "n2", True, False) for i in range(on_n2)]
        return endpoint_slice("web", eps, SLICE_PORTS)

    def weights() -> dict[str, int]:
        vs = vs_of(ipvs, "198.51.100.0")
        return {k[0]: rs.weight for k, rs in vs.real_servers.items()} if vs else {}

    with start(kubeconfig, ipvs):
        api.create("services", service("web", PORTS, etp="Local"))
        api.create("endpointslices", spread(1, 3))
        eventually(lambda: weights() == {"192.0.2.11": 1, "192.0.2.12": 3}, what="1:3")
        before = len(ipvs.applied)
        api.patch("endpointslices", "web-abcde", spread(2, 2))
        eventually(lambda: weights() == {"192.0.2.11": 2, "192.0.2.12": 2}, what="2:2")
        assert {op.kind for op in ipvs.applied[before:]} == {OpKind.SET_DEST}
        api.patch("endpointslices", "web-abcde", spread(0, 4))
        eventually(lambda: weights().get("192.0.2.12") == 4, what="n2 takes all")
        # n1 has no pod left: it is no real server any more (kube-proxy there would drop).
        eventually(lambda: weights() == {"192.0.2.12": 4}, what="n1 gone")
        api.patch(
            "services",
            "web",
            {"metadata": {"annotations": {"lvs-director.io/local-weights": "even"}}},
        )
        eventually(lambda: weights() == {"192.0.2.12": 1}, what="turned off by annotation")


def test_nodeport_vip_balances_node_ports(api: FakeApiServer, kubeconfig: Path) -> None:
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs, kube_extra="  nodeport_vip: 192.0.2.100"):
        api.create("services", service("np", PORTS, type="NodePort"))
        port = api.get("services", "np")["spec"]["ports"][0]["nodePort"]
        vs = eventually(lambda: vs_of(ipvs, "192.0.2.100", port), what="the NodePort VIP")
        assert sorted(vs.real_servers) == [("192.0.2.11", port), ("192.0.2.12", port)]
        assert {rs.forwarding for rs in vs.real_servers.values()} == {Forwarding.NAT}
        api.patch(
            "services", "np", {"metadata": {"annotations": {"lvs-director.io/nodeport": "false"}}}
        )
        eventually(lambda: vs_of(ipvs, "192.0.2.100", port) is None, what="the opt-out")


def test_a_service_without_node_ports_gets_no_dead_address_in_nodeport_mode(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    """allocateLoadBalancerNodePorts: false leaves the ports without node ports, and in
    nodeport mode with nat the nodes are reached at them: no address is advertised, a
    Warning says why, and the Service is served once it asks for pod mode."""
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs):
        obj = service("bare", PORTS)
        obj["spec"]["allocateLoadBalancerNodePorts"] = False
        api.create("services", obj)
        eventually(lambda: "AddressRefused" in reasons(api, "bare"), what="a Warning")
        event = next(e for e in api.events_for("bare") if e["reason"] == "AddressRefused")
        assert event["type"] == "Warning"
        assert event["message"] == (
            "allocateLoadBalancerNodePorts is false: port http has no node port, and in "
            "nodeport mode with nat forwarding the nodes are reached at their node ports; "
            "set lvs-director.io/backends: pod, or give the port a nodePort"
        )
        assert ingress(api, "bare") == [] and ipvs.read().services == {}
        api.create(
            "endpointslices",
            endpoint_slice("bare", [("10.244.1.5", "n1", True, False)], SLICE_PORTS),
        )
        api.patch(
            "services", "bare", {"metadata": {"annotations": {"lvs-director.io/backends": "pod"}}}
        )
        assert eventually(lambda: ingress(api, "bare"), what="an address") == ["198.51.100.0"]
        vs = eventually(lambda: vs_of(ipvs, "198.51.100.0"), what="the virtual service")
        assert list(vs.real_servers) == [("10.244.1.5", 8080)]


def test_a_deleted_service_leaves_nothing_behind_and_a_zoneless_trigger_time_is_no_error(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    """Anyone can write an EndpointSlice's last-change-trigger-time: one with no zone is not
    a point in time, and is ignored (it was a TypeError in the loop). The latency figure
    keeps one entry per Service that exists, not per Service ever seen."""
    trigger = "endpoints.kubernetes.io/last-change-trigger-time"
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs, metrics=True) as runtime:  # the figure is the metrics'
        for name, when in (("naive", "2026-11-26T10:00:00"), ("web", "2026-11-26T10:00:00Z")):
            api.create("services", service(name, PORTS))
            piece = endpoint_slice(name, [("10.1.0.1", "n1", True, False)], SLICE_PORTS)
            piece["metadata"]["annotations"] = {trigger: when}  # type: ignore[index]
            api.create("endpointslices", piece)
        syncer = runtime.controller.parts.syncer
        eventually(lambda: "default/web" in syncer._triggers, what="the trigger time observed")
        assert "default/naive" not in syncer._triggers
        assert runtime.controller.health.loop_errors == 0
        api.delete("services", "web")
        eventually(lambda: "default/web" not in syncer._triggers, what="the entry forgotten")
        assert runtime.controller.health.loop_errors == 0


def test_a_sync_does_each_clusters_services_in_turn_the_cluster_with_fewest_first() -> None:
    """Cluster a's burst dirtied many Services, cluster b's one change one: b's is computed
    and programmed first, each cluster's in the order the translator gave."""
    from director.engine.programming import by_cluster

    ordered = ["a/ns/s1", "b/ns/web", "a/ns/s2", "a/ns/s3"]
    assert by_cluster(ordered) == [["b/ns/web"], ["a/ns/s1", "a/ns/s2", "a/ns/s3"]]
    assert by_cluster(["ns/one", "ns/two"]) == [["ns/one", "ns/two"]]  # kubernetes:
