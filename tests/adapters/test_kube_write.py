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
