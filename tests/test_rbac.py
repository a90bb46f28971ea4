"""The Kubernetes identity of deploy/kubernetes/rbac.yaml is enough, and no more than
needed: the director runs against an API stand-in that authorises every request with
exactly those rules (as kube-apiserver's RBAC does), through its whole life: listing and
watching, the Lease, status, Events, and the scheduler annotation the admin API writes."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import yaml

from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer, Rbac, endpoint_slice, node, service
from lab.wait import eventually

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "deploy" / "kubernetes" / "rbac.yaml"
TOKEN = "admin-token-for-the-rbac-test"
READS = {"get", "list", "watch"}


def test_the_manifest_grants_what_the_issue_lists_in_one_namespace_for_leases() -> None:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("ServiceAccount", "lvs-director") in kinds
    rbac = Rbac(docs, "lvs-director", "lvs-director")
    leases = {g for g in rbac.grants if g[2] == "leases"}
    assert leases and all(scope == "lvs-director" for scope, *_ in leases)  # not cluster-wide
    writes = {(g[2], g[3]) for g in rbac.grants if g[3] not in READS}
    assert writes == {
        ("services/status", "patch"),
        ("services", "patch"),
        ("events", "create"),
        ("events", "patch"),
        ("leases", "create"),
        ("leases", "update"),
    }
    assert not any(g[3] in ("delete", "deletecollection", "*") for g in rbac.grants)


def test_the_director_runs_with_exactly_these_rights(tmp_path: Path) -> None:
    rbac = Rbac.from_file(MANIFEST, "lvs-director", "lvs-director")
    with FakeApiServer(rbac=rbac) as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        api.create("services", service("web", [("http", "TCP", 80)]))
        api.create(
            "endpointslices",
            endpoint_slice("web", [("10.0.0.5", "n1", True, False)], [("http", "TCP", 8080)]),
        )
        (tmp_path / "token").write_text(TOKEN)
        text = f"""
pools: [{{name: default, addresses: [198.51.100.64/28]}}]
kubernetes:
  kubeconfig: {api.kubeconfig(tmp_path / "kc")}
  identity: edge1
  lease_namespace: lvs-director
  lease_seconds: 2
api: {{listen: "127.0.0.1:0", token_file: {tmp_path / "token"},
       intents_file: {tmp_path / "intents.json"}}}
"""
        ipvs = FakeIpvs()
        runtime = Runtime(parse_config(text, "director.yaml"), ipvs).start()
        try:
            assert runtime.wait_ready(20)
            # status written (services/status patch) and an Event for it (events create)
            eventually(
                lambda: api.get("services", "web")["status"]["loadBalancer"].get("ingress"),
                what="status.loadBalancer.ingress",
            )
            eventually(lambda: api.events_for("web"), what="an Event on the Service")
            # the admin API's scheduler override (services patch)
            assert runtime.api is not None
            request = urllib.request.Request(
                f"http://127.0.0.1:{runtime.api.port}/api/v1/services/default/web/scheduler",
                data=json.dumps({"scheduler": "sh"}).encode(),
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                method="PUT",
            )
            with urllib.request.urlopen(request, timeout=10) as reply:
                assert reply.status == 200
            annotations = api.get("services", "web")["metadata"]["annotations"]
            assert annotations["lvs-director.io/scheduler-override"] == "sh"
            # the Lease renewed at least once (leases get + update)
            eventually(
                lambda: ("lvs-director", "coordination.k8s.io", "leases", "update") in rbac.used,
                timeout=10,
                what="a Lease renewal",
            )
            # the same Warning twice is one Event, counted (events create, get, patch)
            reporter = runtime.controller.parts.reporter
            for value, told in (("bogus", True), (None, False), ("bogus", True)):
                api.patch(
                    "services",
                    "web",
                    {"metadata": {"annotations": {"lvs-director.io/forwarding": value}}},
                )
                eventually(
                    lambda t=told: (
                        any(
                            k.startswith("problem:")  # type: ignore[misc]
                            for k in reporter.topics("default/web")
                        )
                        is t
                    ),
                    what=f"the problem told: {told}",
                )
            counts = lambda: [  # noqa: E731
                e.get("count") for e in api.events_for("web") if e["reason"] == "InvalidAnnotation"
            ]
            eventually(lambda: counts() == [2], what="one InvalidAnnotation Event, count 2")
        finally:
            runtime.stop()
    assert rbac.refused == [], rbac.refused
    # Every write the role grants, and every list and watch, was needed.
    unused = {g for g in rbac.grants - rbac.used if g[3] != "get" or g[2] == "leases"}
    assert unused == set(), f"granted but never used: {sorted(unused)}"


def test_a_missing_right_is_refused_the_way_kube_apiserver_refuses_it(tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    for doc in docs:  # take events away
        if doc["kind"] == "ClusterRole":
            doc["rules"] = [r for r in doc["rules"] if r["resources"] != ["events"]]
    rbac = Rbac(docs, "lvs-director", "lvs-director")
    with FakeApiServer(rbac=rbac) as api:
        request = urllib.request.Request(
            f"{api.url}/api/v1/namespaces/default/events",
            data=b"{}",
            method="POST",
            headers={"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(request, timeout=5)
            raise AssertionError("the stand-in allowed a create the role does not grant")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
            status = json.loads(exc.read())
    assert status["reason"] == "Forbidden" and status["kind"] == "Status"
    assert status["message"] == (
        'events is forbidden: User "system:serviceaccount:lvs-director:lvs-director" '
        'cannot create resource "events" in API group "" in the namespace "default"'
    )
