"""The whole control loop on the host: the API stand-in, the official client, the fake IPVS.

Everything here runs through ``director.runtime.Runtime``, the same wiring ``director run``
uses; the cluster is played by writing to the stand-in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.cli.runtime import Runtime
from director.core.model import Forwarding, IpProtocol as Protocol, ServiceConfig, ServiceKey
from director.core.services import Op, OpKind
from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually
from tests.kubelab import settings

PORTS = [("http", "TCP", 80)]
SLICE_PORTS = [("http", "TCP", 8080)]


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        for name, address in (("n1", "192.0.2.11"), ("n2", "192.0.2.12")):
            server.create("nodes", node(name, address))
        yield server


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> Path:
    return api.kubeconfig(tmp_path / "kubeconfig")


def start(kubeconfig: Path, ipvs: FakeIpvs, **kw: object) -> Runtime:
    runtime_kw = {k: kw.pop(k) for k in ("dry_run", "state_file") if k in kw}
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


def test_restart_against_an_unchanged_cluster_writes_nothing(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs):
        for name in ("a", "b", "c"):
            api.create("services", service(name, PORTS))
        eventually(lambda: all(ingress(api, n) for n in "abc"), what="three addresses")
        eventually(lambda: len(ipvs.read().services) == 3)
    before = {n: ingress(api, n) for n in "abc"}
    api.delete("services", "a")  # frees the first address while the director is down
    writes, rv = len(ipvs.applied), api.store.rv
    with start(kubeconfig, ipvs, identity="director-a"):
        eventually(lambda: len(ipvs.read().services) == 2, what="a's removal")
        assert len(ipvs.applied) == writes + 1, "one delete, nothing else re-programmed"
        assert {n: ingress(api, n) for n in "bc"} == {n: before[n] for n in "bc"}
        rewritten = [h for h in api.store.history["services"] if h[0] > rv and h[1] == "MODIFIED"]
        assert rewritten == [], "no status rewritten"


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


def test_api_outage_and_410_change_nothing_in_the_kernel_then_resume(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs) as runtime:
        api.create("services", service("web", PORTS))
        eventually(lambda: vs_of(ipvs, "198.51.100.0"))
        writes = len(ipvs.applied)
        api.store.compact()  # the next watch resumes from a version the server forgot
        with api.outage():
            eventually(
                lambda: not runtime.controller.health.kubernetes_connected, what="outage seen"
            )
            # The cluster changes while the director cannot see it.
            api.store.patch(
                "nodes",
                "",
                "n1",
                {
                    "metadata": {
                        "labels": {
                            "node.kubernetes.io/exclude-from-external-load-balancers": "true"
                        }
                    }
                },
            )
        assert len(ipvs.applied) == writes, "nothing removed or re-added during the outage"
        eventually(lambda: runtime.controller.health.kubernetes_connected, what="reconnection")
        eventually(lambda: len(vs_of(ipvs, "198.51.100.0").real_servers) == 1, what="catch-up")
        assert len(ipvs.applied) == writes + 1


def test_dry_run_writes_nothing_and_keeps_the_state_file(
    api: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    ipvs = FakeIpvs()
    state = tmp_path / "state.json"
    with start(kubeconfig, ipvs, dry_run=True, state_file=state):
        api.create("services", service("web", PORTS))
        body = eventually(
            lambda: state.exists() and json.loads(state.read_text())["services"],
            what="the state file",
        )
        assert body[0]["service"] == "tcp 198.51.100.0:80"
        assert body[0]["origin"] == "default/web:http"
    assert ipvs.calls == 0 and ipvs.read().services == {}
    assert ingress(api, "web") == [] and api.events_for("web") == []
    assert api.store.list("leases", None)["items"] == []


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


def test_a_pair_programs_the_same_table_and_one_writes_status(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    one, two = FakeIpvs(), FakeIpvs()
    with (
        start(kubeconfig, one, identity="a") as first,
        start(kubeconfig, two, identity="b") as second,
    ):
        api.create("services", service("web", PORTS))
        eventually(lambda: ingress(api, "web"))
        eventually(lambda: one.read().services and one.read().services == two.read().services)
        leaders = [r.controller.reporter.leader for r in (first, second)]
        assert sorted(leaders) == [False, True]
        statuses = [h for h in api.store.history["services"] if h[1] == "MODIFIED"]
        assert len(statuses) == 1, "only the leader writes status"


def test_one_slice_change_touches_only_its_service(api: FakeApiServer, kubeconfig: Path) -> None:
    ipvs = FakeIpvs()
    pod = {"lvs-director.io/backends": "pod"}
    with start(kubeconfig, ipvs, pool="198.51.100.0/27"):
        for i in range(20):
            api.create("services", service(f"s{i}", PORTS, annotations=pod))
            api.create(
                "endpointslices",
                endpoint_slice(
                    f"s{i}", [(f"10.1.{i}.5", "n1", True, False)], SLICE_PORTS, name=f"s{i}-x"
                ),
            )
        eventually(lambda: len(ipvs.read().services) == 20, what="20 virtual services")
        eventually(lambda: all(len(vs.real_servers) == 1 for vs in ipvs.read().services.values()))
        calls, applied = ipvs.calls, len(ipvs.applied)
        api.patch(
            "endpointslices",
            "s7-x",
            {
                "endpoints": [
                    {"addresses": ["10.1.7.5"], "conditions": {"ready": True}},
                    {"addresses": ["10.1.7.6"], "conditions": {"ready": True}},
                ]
            },
        )
        eventually(lambda: len(ipvs.applied) > applied, what="the change")
        new_ops = ipvs.applied[applied:]
        assert [(op.kind.value, op.dest.address if op.dest else None) for op in new_ops] == [
            ("add-dest", "10.1.7.6")
        ]
        assert ipvs.calls == calls + 1, "one apply, for that Service only"


def test_full_resync_repairs_drift_and_leaves_foreign_entries(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    ipvs = FakeIpvs()
    foreign = ServiceKey.inet(Protocol.TCP, "203.0.113.9", 443)
    ipvs.apply([Op(OpKind.ADD_SERVICE, foreign, config=ServiceConfig("rr"))])
    with start(kubeconfig, ipvs, resync=1):
        api.create("services", service("web", PORTS))
        key = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
        eventually(lambda: vs_of(ipvs, "198.51.100.0"), what="the virtual service")
        ipvs.apply([Op(OpKind.DEL_SERVICE, key)])  # someone deletes it by hand
        eventually(lambda: vs_of(ipvs, "198.51.100.0"), what="the resync to restore it")
        assert foreign in ipvs.read().services, "a foreign entry is left alone"


def test_a_write_for_a_deleted_service_is_dropped_not_retried_forever() -> None:
    from director.adapters.kube import KubeError
    from director.engine.outbox import Outbox

    calls: list[str] = []

    class Gone:
        def patch_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
            calls.append(name)
            raise KubeError(404, "NotFound", f'services "{name}" not found')

        def event(self, *args: object, **kw: object) -> None:
            raise AssertionError("not called")

    outbox = Outbox(Gone())
    try:
        outbox.put(
            ("status", "default/web"), lambda: outbox.writer.patch_status("default", "web", ())
        )
        eventually(outbox.idle, timeout=5, what="the write to be dropped")
        assert calls == ["web"]
    finally:
        outbox.close()


def test_a_stopping_director_does_not_report_its_own_watches_closing(
    api: FakeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping closes the watches: that is no failure, and says nothing at WARNING."""
    runtime = start(kubeconfig, FakeIpvs())
    for watcher in runtime.watchers:
        watcher.stop()
    caplog.clear()
    with api.outage():  # the API server goes away under the stopped watches
        for watcher in runtime.watchers:
            watcher._thread.join(10)
    runtime.stop()
    assert [w._thread.is_alive() for w in runtime.watchers] == [False] * 3
    assert "kube.watch_failed" not in caplog.text


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


def test_a_server_older_than_1_29_drops_ip_mode_and_nothing_loops(tmp_path: Path) -> None:
    """Before 1.29 kube-apiserver does not know status.loadBalancer.ingress[].ipMode and
    drops it. The director compares addresses, not what it sent: it writes status once."""
    with FakeApiServer(version=(1, 28)) as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        ipvs = FakeIpvs()
        with start(api.kubeconfig(tmp_path / "kc"), ipvs):
            api.create("services", service("web", PORTS))
            assert eventually(lambda: ingress(api, "web"), what="status") == ["198.51.100.0"]
            assert api.get("services", "web")["status"]["loadBalancer"]["ingress"] == [
                {"ip": "198.51.100.0"}
            ]
            for value in ("a", "b", "c"):  # each brings the Service back to the loop
                api.patch("services", "web", {"metadata": {"labels": {"touch": value}}})
            eventually(lambda: vs_of(ipvs, "198.51.100.0"), what="the virtual service")
            time.sleep(1.0)
            status = "PATCH /api/v1/namespaces/default/services/web/status"
            assert api.store.writes.count(status) == 1, "written once, never again"


def test_a_deleted_service_leaves_nothing_behind_and_a_zoneless_trigger_time_is_no_error(
    api: FakeApiServer, kubeconfig: Path
) -> None:
    """Anyone can write an EndpointSlice's last-change-trigger-time: one with no zone is not
    a point in time, and is ignored (it was a TypeError in the loop). The latency figure
    keeps one entry per Service that exists, not per Service ever seen."""
    trigger = "endpoints.kubernetes.io/last-change-trigger-time"
    ipvs = FakeIpvs()
    with start(kubeconfig, ipvs) as runtime:
        for name, when in (("naive", "2026-11-26T10:00:00"), ("web", "2026-11-26T10:00:00Z")):
            api.create("services", service(name, PORTS))
            piece = endpoint_slice(name, [("10.1.0.1", "n1", True, False)], SLICE_PORTS)
            piece["metadata"]["annotations"] = {trigger: when}  # type: ignore[index]
            api.create("endpointslices", piece)
        syncer = runtime.controller.syncer
        eventually(lambda: "default/web" in syncer._triggers, what="the trigger time observed")
        assert "default/naive" not in syncer._triggers
        assert runtime.controller.health.loop_errors == 0
        api.delete("services", "web")
        eventually(lambda: "default/web" not in syncer._triggers, what="the entry forgotten")
        assert runtime.controller.health.loop_errors == 0


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
