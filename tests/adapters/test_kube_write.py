"""The director's writes to the cluster, as the API server records them."""

from __future__ import annotations

from pathlib import Path

from director.adapters.kube import KubeApi, api_client
from director.adapters.kube_write import KubeWriter
from lab.kubeapi import FakeApiServer


def test_the_director_s_writes_are_its_own_in_managed_fields(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """managedFields say who owns a Service's status: lvs-director, not the client
    library's default (OpenAPI-Generator), for status patches, Events and the Lease."""
    from lab.kubeapi import service

    api.create("services", service("web", [("http", "TCP", 80)]))
    writer = KubeWriter(
        KubeApi(api_client(str(api.kubeconfig(tmp_path / "kc")))), "lvs-director", "box-a"
    )
    writer.patch_status("default", "web", ("198.51.100.1",))
    writer.event("default", "web", "uid", kind="Normal", reason="AddressAssigned", message="m")
    assert writer.acquire_lease("default", "lvs-director", 15)
    status = [
        f
        for f in api.get("services", "web")["metadata"]["managedFields"]
        if f.get("subresource") == "status"
    ]
    assert [f["manager"] for f in status] == ["lvs-director"]
    event = api.events_for("web")[0]
    lease = api.get("leases", "lvs-director")
    for obj in (event, lease):
        assert [f["manager"] for f in obj["metadata"]["managedFields"]] == ["lvs-director"]


def test_status_is_taken_back_only_while_it_still_names_what_this_director_wrote(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """A cluster no longer served: the director empties the status it wrote; a status
    someone else wrote since (another fleet now serving the cluster) is left as it is."""
    from lab.kubeapi import service

    ports = [("http", "TCP", 80)]
    api.create("services", service("mine", ports))
    api.create("services", service("theirs", ports))
    writer = KubeWriter(
        KubeApi(api_client(str(api.kubeconfig(tmp_path / "kc")))), "lvs-director", "box-a"
    )
    for name in ("mine", "theirs"):
        writer.patch_status("default", name, ("198.51.100.1",))
    other = {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9", "ipMode": "VIP"}]}}}
    api.patch("services", "theirs", other, subresource="status")

    writer.clear_status("default", "mine", ("198.51.100.1",))
    writer.clear_status("default", "theirs", ("198.51.100.1",))
    assert api.get("services", "mine")["status"]["loadBalancer"] == {}
    assert api.get("services", "theirs")["status"] == other["status"]
