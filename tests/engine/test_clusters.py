"""One director, several clusters (issue 37): two API stand-ins, each strict as today, and
one ``director run`` (the Runtime, fake IPVS) with ``clusters:``. Each cluster's Services
are programmed with its own Nodes, given addresses from its own pools, their status and
Events written to their own cluster; a clash is refused in the later cluster; one
cluster's outage leaves the other going and its own Services programmed."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import Settings, parse_config
from director.web.app import create_app
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests.looplab import ingress, reasons, vs_of
from tests.weblab import AUTH, TOKEN, is_problem

PORTS = [("http", "TCP", 80)]
A_NODE, B_NODE = "192.0.2.11", "192.0.2.21"


def _settings(a: Path, b: Path, identity: str = "edge-1") -> str:
    return f"""
pools:
  - {{name: a-only, addresses: [198.51.100.0-198.51.100.3]}}
  - {{name: shared, addresses: [198.51.100.8-198.51.100.11]}}
  - {{name: b-only, addresses: [198.51.100.16-198.51.100.19]}}
clusters:
  - name: a
    kubeconfig: {a}
    identity: {identity}
    lease_seconds: 2
    pools: [a-only, shared]
    nodeport_vip: 192.0.2.100
  - name: b
    kubeconfig: {b}
    identity: {identity}
    lease_seconds: 2
    pools: [b-only, shared]
    resync_seconds: 3600
"""


class Site:
    def __init__(self, a: FakeApiServer, b: FakeApiServer, runtime: Runtime, ipvs: FakeIpvs):
        self.a, self.b, self.runtime, self.ipvs = a, b, runtime, ipvs

    def real_servers(self, address: str, port: int = 80) -> set[str]:
        vs = vs_of(self.ipvs, address, port)
        return {dest[0] for dest in vs.real_servers} if vs is not None else set()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with FakeApiServer() as a, FakeApiServer() as b:
        a.create("nodes", node("n1", A_NODE))
        b.create("nodes", node("n1", B_NODE))  # the same name in another cluster
        text = _settings(a.kubeconfig(tmp_path / "a"), b.kubeconfig(tmp_path / "b"))
        ipvs = FakeIpvs()
        runtime = Runtime(parse_config(text, "multi.yaml"), ipvs)
        runtime.start()
        try:
            assert runtime.wait_ready(20), "the first sync never came"
            eventually(lambda: runtime.controller.parts.reporter.leader, what="both Leases")
            yield Site(a, b, runtime, ipvs)
        finally:
            runtime.stop()


def test_each_clusters_services_get_its_own_pools_nodes_and_status(site: Site) -> None:
    site.a.create("services", service("web", PORTS))
    site.b.create("services", service("web", PORTS))  # the same namespace/name
    in_a = eventually(lambda: ingress(site.a, "web"), what="a's status")
    in_b = eventually(lambda: ingress(site.b, "web"), what="b's status")
    # each from the first of its pools in the file's order: a's own, and (b's own coming
    # after it in the file) the shared one
    assert in_a == ["198.51.100.0"] and in_b == ["198.51.100.8"]
    eventually(lambda: site.real_servers(in_a[0]), what="a's virtual service")
    eventually(lambda: site.real_servers(in_b[0]), what="b's virtual service")
    assert site.real_servers(in_a[0]) == {A_NODE} and site.real_servers(in_b[0]) == {B_NODE}
    # Events are written apart from status (a slow Event write never holds status back):
    # each cluster's comes, in its own cluster, after its status.
    for cluster in (site.a, site.b):
        assert eventually(partial(reasons, cluster, "web"), what="the Event") == ["AddressAssigned"]
    produced = site.runtime.controller.parts.table.produced
    assert {"a/default/web", "b/default/web"} <= set(produced)
    # a's NodePort VIP serves a's node ports only
    node_port = site.a.get("services", "web")["spec"]["ports"][0]["nodePort"]
    eventually(lambda: site.real_servers("192.0.2.100", node_port), what="a's node port")
    assert site.real_servers("192.0.2.100", node_port) == {A_NODE}
    assert site.runtime.controller.health.leaders == {"a": True, "b": True}


def test_a_requested_address_clash_is_refused_in_the_later_cluster(site: Site) -> None:
    wants = {"lvs-director.io/load-balancer-ips": "198.51.100.8"}
    site.a.create("services", service("first", PORTS, annotations=wants))
    assert eventually(lambda: ingress(site.a, "first")) == ["198.51.100.8"]
    site.b.create("services", service("later", PORTS, annotations=wants))
    eventually(lambda: "AddressRefused" in reasons(site.b, "later"), what="b's refusal")
    event = next(e for e in site.b.events_for("later") if e["reason"] == "AddressRefused")
    assert event["type"] == "Warning"
    assert "198.51.100.8 is already used by a/default/first" in event["message"]
    # its source names the cluster as the director knows it
    assert event["source"] == {"component": "lvs-director/b", "host": "edge-1"}
    assert event["reportingComponent"] == "lvs-director/b"
    assert ingress(site.b, "later") == [] and ingress(site.a, "first") == ["198.51.100.8"]
    assert site.real_servers("198.51.100.8") == {A_NODE}
    # b's own pool is refused by name to a
    greedy = service("greedy", PORTS, annotations={"lvs-director.io/pool": "b-only"})
    site.a.create("services", greedy)
    eventually(lambda: "AddressRefused" in reasons(site.a, "greedy"), what="a's refusal")
    refused = next(e for e in site.a.events_for("greedy") if e["reason"] == "AddressRefused")
    assert "pool 'b-only' is not given to cluster 'a'" in refused["message"]


def test_one_clusters_outage_leaves_the_other_going_and_its_own_services_programmed(
    site: Site,
) -> None:
    site.a.create("services", service("web", PORTS))
    in_a = eventually(lambda: ingress(site.a, "web"))[0]
    eventually(lambda: site.real_servers(in_a), what="a's virtual service")
    health = site.runtime.controller.health
    with site.a.outage():
        eventually(lambda: not health.connected.get("a/services", True), what="a's watch down")
        site.b.create("services", service("api", PORTS))
        in_b = eventually(lambda: ingress(site.b, "api"), what="b's status, a away")[0]
        eventually(lambda: site.real_servers(in_b) == {B_NODE}, what="b programmed, a away")
        assert site.real_servers(in_a) == {A_NODE}, "a's Service stays programmed"
        assert health.connected["b/services"] and not health.kubernetes_connected
    eventually(lambda: health.kubernetes_connected, what="a's watches back")
    assert site.real_servers(in_a) == {A_NODE}


def test_the_api_names_a_service_by_cluster_where_two_have_it(site: Site) -> None:
    site.a.create("services", service("web", PORTS))
    site.b.create("services", service("web", PORTS))
    site.a.create("services", service("only-a", PORTS))
    eventually(lambda: ingress(site.b, "web") and ingress(site.a, "only-a"))
    controller = site.runtime.controller
    writers = {name: box.writer for name, box in controller.parts.reporter.outboxes.items()}
    client: FlaskClient = create_app(controller.door(), TOKEN, writer=writers).test_client()
    eventually(lambda: "b/default/web" in controller.parts.exports.view.services, what="the view")
    is_problem(client.get("/api/v1/services/default/web", headers=AUTH), 409)
    reply = client.get("/api/v1/services/default/web?cluster=b", headers=AUTH)
    assert reply.status_code == 200 and reply.get_json()["service"] == "b/default/web"
    listing = reply.get_json()["virtual_services"]
    assert listing[0]["origin"]["cluster"] == "b"
    assert client.get("/api/v1/services/default/only-a", headers=AUTH).status_code == 200
    is_problem(client.get("/api/v1/services/default/web?cluster=c", headers=AUTH), 404)
    # a scheduler choice is stored on the Service in its own cluster
    put = client.put(
        "/api/v1/services/default/web/scheduler?cluster=a", json={"scheduler": "sh"}, headers=AUTH
    )
    assert put.status_code == 200, put.get_data(as_text=True)
    stored = "lvs-director.io/scheduler-override"
    assert site.a.get("services", "web")["metadata"]["annotations"][stored] == "sh"
    assert stored not in site.b.get("services", "web")["metadata"].get("annotations", {})
    status = client.get("/api/v1/status", headers=AUTH).get_json()["kubernetes"]
    assert status["clusters"] == {
        "a": {"connected": True, "leader": True},
        "b": {"connected": True, "leader": True},
    }


def test_a_pair_elects_one_status_writer_in_each_cluster(tmp_path: Path) -> None:
    """Each cluster has its own Lease: one box of the pair holds it (not necessarily the same
    box for every cluster), only that box writes the cluster's status, and a clean stop hands
    each Lease the stopped box held to the other."""
    with FakeApiServer() as a, FakeApiServer() as b:
        a.create("nodes", node("n1", A_NODE))
        b.create("nodes", node("n1", B_NODE))
        ka, kb = a.kubeconfig(tmp_path / "a"), b.kubeconfig(tmp_path / "b")
        one, two = FakeIpvs(), FakeIpvs()
        first = Runtime(parse_config(_settings(ka, kb, "d1"), "d1.yaml"), one).start()
        second = Runtime(parse_config(_settings(ka, kb, "d2"), "d2.yaml"), two).start()
        try:
            pair = (first.controller.health, second.controller.health)

            def held() -> dict[str, list[bool]]:
                return {c: [h.leaders.get(c, False) for h in pair] for c in ("a", "b")}

            eventually(lambda: all(sum(v) == 1 for v in held().values()), what="one per cluster")
            a.create("services", service("web", PORTS))
            b.create("services", service("web", PORTS))
            eventually(lambda: ingress(a, "web") and ingress(b, "web"), what="both statuses")
            eventually(lambda: one.read().services == two.read().services and one.read().services)
            for api in (a, b):
                writes = [w for w in api.store.writes if w.endswith("/services/web/status")]
                assert len(writes) == 1, "only the cluster's leader writes its status"
            first.stop()
            eventually(lambda: pair[1].leaders == {"a": True, "b": True}, timeout=10)
        finally:
            first.stop()
            second.stop()


def test_director_status_shows_each_cluster(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """`director status` with several clusters: each one's watches and Lease, a line each."""
    import argparse

    from director.cli import ctl

    controller = site.runtime.controller
    client = create_app(controller.door(), TOKEN).test_client()
    eventually(lambda: controller.parts.exports.view.status.leaders == {"a": True, "b": True})
    eventually(lambda: controller.parts.exports.view.status.kubernetes_connected)
    reply = client.get("/api/v1/status", headers=AUTH).get_json()
    monkeypatch.setattr(ctl, "call", lambda *_args, **_kw: reply)
    lines = ctl._status(argparse.Namespace(json=False)).splitlines()
    assert "  a: connected; leader: yes" in lines and "  b: connected; leader: yes" in lines


def test_only_whole_clusters_come_and_go_on_a_reload() -> None:
    """A reload may add and remove clusters; an entry of a cluster in both files must be
    unchanged, and the one-cluster kubernetes: is not among them (each a restart's)."""
    from director.engine.clusters import changed, reloadable

    pools = "pools: [{name: p, addresses: [198.51.100.0/28]}]\n"

    def config(*entries: str) -> Settings:
        body = "".join(f"  - {{{e}, pools: [p]}}\n" for e in entries)
        return parse_config(pools + ("clusters:\n" + body if entries else ""))

    a, b = "name: a, kubeconfig: /k/a", "name: b, kubeconfig: /k/b"
    one, two = config(a), config(a, b)
    assert reloadable(one, two) and changed(one, two) == (["b"], [])
    assert reloadable(two, config(b)) and changed(two, config(b)) == ([], ["a"])
    assert reloadable(config(), one) and changed(config(), one) == (["a"], [])
    assert not reloadable(two, config(a + ", lease_seconds: 5", b))
    single = parse_config(pools + "kubernetes: {kubeconfig: /k/a}\n")
    assert not reloadable(single, one) and not reloadable(one, single)


def test_status_and_lease_changed_behind_its_back_are_put_right_in_their_own_cluster(
    site: Site,
) -> None:
    """Someone rewrites a Service's status in cluster b and deletes b's Lease: the director
    writes b's status back and takes b's Lease again; cluster a is not written to."""
    site.b.create("services", service("web", PORTS))
    (vip,) = eventually(lambda: ingress(site.b, "web"), what="b's status")
    writes_in_a = len(site.a.store.writes)
    wrong = {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.99"}]}}}
    site.b.patch("services", "web", wrong, subresource="status")
    eventually(lambda: ingress(site.b, "web") == [vip], what="b's status put right")
    lease = site.b.store.list("leases", None)["items"][0]["metadata"]
    site.b.store.delete("leases", lease["namespace"], lease["name"])
    eventually(lambda: site.b.store.list("leases", None)["items"], what="b's Lease taken again")
    statuses_in_a = [w for w in site.a.store.writes[writes_in_a:] if "/status" in w]
    assert statuses_in_a == []
