"""The stand-in answers as kube-apiserver answered the same requests (issue 17): what the real
server refuses, it refuses, with the same status and words; what it changes on its own, it
changes. The director's own tests run against it, so a lenient stand-in would hide bugs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from director.adapters.kube.client import KubeApi, KubeError, api_client
from lab.kubeapi import FakeApiServer, endpoint_slice, service

SERVICES = "/api/v1/namespaces/default/services"
SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/lvs-director/leases"
MERGE = "application/merge-patch+json"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeApiServer, KubeApi]]:
    with FakeApiServer() as api:
        yield api, KubeApi(api_client(str(api.kubeconfig(tmp_path / "kc"))))


def refused(call: Any) -> tuple[int, str]:
    with pytest.raises(KubeError) as caught:
        call()
    return caught.value.status, caught.value.message


def test_services_the_real_server_refuses(kube: tuple[FakeApiServer, KubeApi]) -> None:
    _, api = kube
    post = lambda obj: lambda: api.request("POST", SERVICES, body=obj)  # noqa: E731
    bad_name = service("web_1", [("http", "TCP", 80)])
    assert refused(post(bad_name))[0] == 422
    assert 'metadata.name: Invalid value: "web_1": a DNS-1035 label' in refused(post(bad_name))[1]
    no_ports = service("web", [])
    assert refused(post(no_ports)) == (422, 'Service "web" is invalid: spec.ports: Required value')
    cluster_ip = service("web", [("http", "TCP", 80)], type="ClusterIP")
    cluster_ip["spec"]["loadBalancerClass"] = "lvs-director.io/ipvs"
    assert refused(post(cluster_ip))[1].endswith(
        "spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'"
    )
    bad_key = service("web", [("http", "TCP", 80)], annotations={"-bad/key-": "x"})
    assert 'metadata.annotations: Invalid value: "-bad/key-"' in refused(post(bad_key))[1]
    bad_port_name = service("web", [("Web_1", "TCP", 80)])
    assert refused(post(bad_port_name)) == (
        422,
        'Service "web" is invalid: spec.ports[0].name: '
        'Invalid value: "Web_1": a lowercase RFC 1123 label must consist of lower case '
        "alphanumeric characters or '-', and must start and end with an alphanumeric character "
        "(e.g. 'my-name',  or '123-abc', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    )
    bad_class = service("web", [("http", "TCP", 80)], lb_class="lvs director/ipvs")
    assert refused(post(bad_class))[1].startswith(
        'Service "web" is invalid: spec.loadBalancerClass: Invalid value: "lvs director/ipvs": '
        "name part must consist of alphanumeric characters"
    )


def test_a_service_changes_as_the_real_server_changes_it(
    kube: tuple[FakeApiServer, KubeApi],
) -> None:
    _, api = kube
    made = api.request("POST", SERVICES, body=service("web", [("http", "TCP", 80)]))
    node_port = made["spec"]["ports"][0]["nodePort"]
    path = f"{SERVICES}/web"
    status = {"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}]}}}
    api.request("PATCH", f"{path}/status", body=status, content_type=MERGE)
    bad_ip = {"status": {"loadBalancer": {"ingress": [{"ip": "not-an-ip"}]}}}
    answer = refused(
        lambda: api.request("PATCH", f"{path}/status", body=bad_ip, content_type=MERGE)
    )
    assert answer[1].endswith(
        'status.loadBalancer.ingress[0].ip: Invalid value: "not-an-ip": must be a valid IP address'
    )
    other_class = {"spec": {"loadBalancerClass": "example.com/other"}}
    assert (
        "may not change once set"
        in refused(lambda: api.request("PATCH", path, body=other_class, content_type=MERGE))[1]
    )
    # LoadBalancer -> ClusterIP: class, node ports, policy and status go; back: new node ports
    gone = api.request("PATCH", path, body={"spec": {"type": "ClusterIP"}}, content_type=MERGE)
    assert "loadBalancerClass" not in gone["spec"]
    assert "externalTrafficPolicy" not in gone["spec"]
    assert "nodePort" not in gone["spec"]["ports"][0]
    assert gone["status"] == {"loadBalancer": {}}
    back = api.request("PATCH", path, body={"spec": {"type": "LoadBalancer"}}, content_type=MERGE)
    assert back["spec"]["ports"][0]["nodePort"] not in (0, None)
    assert back["status"] == {"loadBalancer": {}} and node_port  # no stale ingress


def test_slices_events_and_leases_the_real_server_refuses(
    kube: tuple[FakeApiServer, KubeApi],
) -> None:
    _, api = kube
    loopback = endpoint_slice("web", [("127.0.0.1", None, True, False)], [("http", "TCP", 80)])
    assert refused(lambda: api.request("POST", SLICES, body=loopback))[1].endswith(
        'endpoints[0].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range'
        " (127.0.0.0/8, ::1/128)"
    )
    for address, why in [
        ("0.0.0.0", "may not be unspecified (0.0.0.0)"),
        ("::", "may not be unspecified (::)"),
        ("169.254.0.9", "may not be in the link-local range"),
        ("224.0.0.18", "may not be in the link-local multicast range"),
    ]:
        bad = endpoint_slice("web", [(address, None, True, False)], [("http", "TCP", 80)])
        assert (
            f'addresses[0]: Invalid value: "{address}": {why}'
            in refused(lambda b=bad: api.request("POST", SLICES, body=b))[1]
        ), address
    upper = endpoint_slice("web", [("10.0.0.5", None, True, False)], [("HTTP", "TCP", 80)])
    assert (
        'ports[0].name: Invalid value: "HTTP"'
        in refused(lambda: api.request("POST", SLICES, body=upper))[1]
    )
    made = api.request(
        "POST",
        SLICES,
        body=endpoint_slice("web", [("10.0.0.5", None, True, False)], [("http", "TCP", 80)]),
    )
    assert made["metadata"]["generation"] == 1
    event = {
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Service", "name": "web", "namespace": "other"},
        "reason": "R",
        "message": "m",
        "type": "Normal",
    }
    path = "/api/v1/namespaces/default/events"
    assert refused(lambda: api.request("POST", path, body=event))[1].endswith(
        'involvedObject.namespace: Invalid value: "other": does not match event.namespace'
    )
    event["involvedObject"]["namespace"] = "default"
    assert api.request("POST", path, body=event)["eventTime"] is None
    lease = {
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "a", "renewTime": "2026-11-24T10:00:00Z"},
    }
    assert refused(lambda: api.request("POST", LEASES, body=lease))[0] == 400
    lease["spec"]["renewTime"] = "2026-11-24T10:00:00.000000Z"
    stored = api.request("POST", LEASES, body=lease)
    stored["metadata"].pop("resourceVersion")
    assert refused(lambda: api.request("PUT", f"{LEASES}/l", body=stored)) == (
        422,
        'Lease "l" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be '
        "specified for an update",
    )
    assert refused(
        lambda: api.request(
            "POST", "/apis/coordination.k8s.io/v1/namespaces/nowhere/leases", body=lease
        )
    ) == (404, 'namespaces "nowhere" not found')


def test_node_ports_and_cluster_ips_are_not_handed_out_in_sequence(
    kube: tuple[FakeApiServer, KubeApi],
) -> None:
    _, api = kube
    ports = [
        api.request("POST", SERVICES, body=service(f"s{i}", [("http", "TCP", 80)]))["spec"][
            "ports"
        ][0]["nodePort"]
        for i in range(8)
    ]
    assert all(30000 <= p < 32768 for p in ports) and len(set(ports)) == 8
    assert ports != sorted(ports) or ports[-1] - ports[0] != 7


def test_after_a_restart_a_resumed_watch_gets_410_in_the_stream(
    kube: tuple[FakeApiServer, KubeApi],
) -> None:
    """kube-apiserver answers 200 and then an ERROR object (410 Expired) to a watch from
    before its restart: the client must relist."""
    from director.adapters.kube.client import NODES, Gone

    server, api = kube
    _, version = api.list(NODES, lambda obj: obj)
    server.create("services", service("web", [("http", "TCP", 80)]))  # the revision moves on
    with server.outage():
        pass
    events = api.watch(NODES, version, 5)  # answered: 200
    with pytest.raises(Gone, match="too old resource version"):
        next(events)


JSON_PATCH = "application/json-patch+json"


def test_json_patch_is_served_as_the_real_server_serves_it(
    kube: tuple[FakeApiServer, KubeApi],
) -> None:
    """RFC 6902 bodies (kubectl patch --type=json): applied whole or not at all; a body that
    is not a list of operations is 400, an operation that does not apply is 422; server-side
    apply stays refused (415): without field ownership it would be kinder than the server."""
    _, api = kube
    api.request("POST", SERVICES, body=service("web", [("http", "TCP", 80)]))
    path = f"{SERVICES}/web"
    ops = [
        {"op": "test", "path": "/metadata/name", "value": "web"},
        {"op": "add", "path": "/metadata/labels", "value": {"tier": "edge"}},
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "slash"},
        {"op": "copy", "from": "/metadata/labels/tier", "path": "/metadata/labels/copy"},
        {"op": "move", "from": "/metadata/labels/copy", "path": "/metadata/labels/moved"},
        {
            "op": "add",
            "path": "/spec/ports/-",
            "value": {"name": "https", "protocol": "TCP", "port": 443},
        },
        {"op": "replace", "path": "/spec/ports/0/port", "value": 8080},
    ]
    done = api.request("PATCH", path, body=ops, content_type=JSON_PATCH)
    assert done["metadata"]["labels"] == {"tier": "edge", "a/b": "slash", "moved": "edge"}
    assert [p["port"] for p in done["spec"]["ports"]] == [8080, 443]
    assert done["spec"]["ports"][1]["nodePort"], "validated and defaulted as an update is"
    version = done["metadata"]["resourceVersion"]

    def patch(body: Any) -> Any:
        return lambda: api.request("PATCH", path, body=body, content_type=JSON_PATCH)

    failed_test = [
        {"op": "remove", "path": "/metadata/labels/tier"},
        {"op": "test", "path": "/metadata/labels/moved", "value": "other"},
    ]
    assert refused(patch(failed_test)) == (422, "testing value /metadata/labels/moved failed")
    missing = [{"op": "replace", "path": "/spec/nothing/here", "value": 1}]
    assert refused(patch(missing))[0] == 422
    # (The official client sends a body that is not a list as a strategic merge patch.)
    assert refused(patch([{"op": "add", "path": "/metadata/labels/x"}]))[0] == 400  # no value
    assert refused(patch([{"op": "frobnicate", "path": "/spec"}]))[0] == 400
    stale = [{"op": "replace", "path": "/metadata/resourceVersion", "value": "1"}]
    assert refused(patch(stale))[0] == 409, "a changed resourceVersion is a precondition"
    invalid = [{"op": "replace", "path": "/spec/ports", "value": []}]
    assert refused(patch(invalid))[0] == 422, "the result is validated"
    after = api.request("GET", path)
    assert after["metadata"]["resourceVersion"] == version, "a refused patch changed nothing"
    assert after["metadata"]["labels"]["tier"] == "edge"
    apply = lambda: api.request("PATCH", path, body={}, content_type="application/apply-patch+yaml")  # noqa: E731
    assert refused(apply)[0] == 415


def test_managed_fields_record_each_writers_fields(kube: tuple[FakeApiServer, KubeApi]) -> None:
    """As on the real server, every write by a field manager is recorded in the object's
    ``managedFields`` with the fields it set (lists and watches carry them: what the
    director's ingest must wade through), and a field another manager changes moves to it."""
    server, api = kube
    created = api.request("POST", SERVICES, body=service("web", [("http", "TCP", 80)]))
    (mine,) = created["metadata"]["managedFields"]
    assert mine["manager"] == "lvs-director" and mine["operation"] == "Update"
    spec = mine["fieldsV1"]["f:spec"]
    port = spec["f:ports"]['k:{"port":80,"protocol":"TCP"}']
    assert "." in port and "f:targetPort" in port and "f:nodePort" in port  # defaulted too
    assert "f:type" in spec and "f:clusterIP" in spec
    assert "f:name" not in mine["fieldsV1"].get("f:metadata", {})  # identity: nobody's
    server.store.patch(
        "services",
        "default",
        "web",
        {"spec": {"externalTrafficPolicy": "Local"}},
        manager="kubectl-edit",
    )
    server.store.patch(
        "services",
        "default",
        "web",
        {"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}]}}},
        subresource="status",
        manager="lvs-director",
    )
    stored = server.get("services", "web")
    entries = {
        (e["manager"], e.get("subresource", "")): e for e in stored["metadata"]["managedFields"]
    }
    assert set(entries) == {("lvs-director", ""), ("kubectl-edit", ""), ("lvs-director", "status")}
    moved = "f:externalTrafficPolicy"
    assert moved in entries["kubectl-edit", ""]["fieldsV1"]["f:spec"]
    assert moved not in entries["lvs-director", ""]["fieldsV1"]["f:spec"]
    assert entries["lvs-director", "status"]["fieldsV1"] == {
        "f:status": {"f:loadBalancer": {"f:ingress": {}}}
    }
    # The same write again changes nothing, not even resourceVersion or a manager's time.
    local = {"spec": {"externalTrafficPolicy": "Local"}}
    again = server.store.patch("services", "default", "web", local, manager="kubectl-edit")
    assert again["metadata"] == stored["metadata"]
