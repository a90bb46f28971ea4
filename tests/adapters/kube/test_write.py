"""The director's writes to the cluster, as the API server records them."""

from __future__ import annotations

from pathlib import Path

import pytest

from director.adapters.kube.client import KubeApi, api_client
from director.adapters.kube.write import KubeWriter
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


@pytest.mark.parametrize("version", [(1, 24), (1, 31)], ids=["1.24", "1.31"])
def test_status_is_taken_back_only_while_it_still_names_what_this_director_wrote(
    tmp_path: Path, version: tuple[int, int]
) -> None:
    """A cluster no longer served: the director empties the status it wrote; a status
    someone else wrote since (another fleet now serving the cluster) is left as it is.
    Issue 71, 4: on an API server before 1.29 (no ipMode stored) the JSON patch's test,
    which expected ipMode, failed with 422 and the status was never emptied."""

    with FakeApiServer(version=version) as api:
        _take_back(api, tmp_path)


def _take_back(api: FakeApiServer, tmp_path: Path) -> None:
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
    kept = api.get("services", "theirs")["status"]["loadBalancer"]["ingress"]
    assert [i["ip"] for i in kept] == ["203.0.113.9"]
