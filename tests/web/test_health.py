"""Readiness: ``/readyz`` 503 before the first sync and while the Lease cannot be written,
with the reason, and ready again once it is fixed."""

from __future__ import annotations

from pathlib import Path

from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from director.web.app import create_app
from lab.kubeapi import FakeApiServer, node
from lab.wait import eventually
from tests.kubelab import settings as kube_settings
from tests.weblab import AUTH, STATIC, TOKEN, Director, is_problem


def test_readyz_is_503_before_the_first_sync(tmp_path: Path) -> None:
    d = Director(parse_config(STATIC, "static.yaml"), tmp_path / "i.json")
    client = d.app.test_client()
    is_problem(client.get("/readyz"), 503, "first sync")
    assert client.get("/healthz").status_code == 200


def test_a_lease_namespace_that_does_not_exist_makes_the_director_unready_and_says_why(
    tmp_path: Path,
) -> None:
    """Neither box of a pair could write Service status: /readyz and `director status` say
    why (not just a warning in the log every few seconds), and clear once it is fixed."""
    with FakeApiServer(namespaces=("default",)) as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        runtime = Runtime(kube_settings(api.kubeconfig(tmp_path / "kc")), FakeIpvs())
        runtime.start()
        try:
            assert runtime.wait_ready(20)
            client = create_app(runtime.controller.door(), TOKEN).test_client()
            reason = (
                "the API server refuses the Lease lvs-director/lvs-director: HTTP 404 "
                'NotFound: namespaces "lvs-director" not found'
            )
            # The Lease's ledger entry turns /readyz 503 at once ("owned state out of sync:
            # lease: ..."); the refusal itself reaches the status after the loop's next step.
            eventually(
                lambda: client.get("/api/v1/status", headers=AUTH).get_json()["lease_refused"],
                what="the refusal in the status",
            )
            status = client.get("/api/v1/status", headers=AUTH).get_json()
            assert (status["leader"], status["lease_refused"]) == (False, reason)
            is_problem(client.get("/readyz"), 503, reason)
            api.create("namespaces", {"metadata": {"name": "lvs-director"}}, namespace="")
            eventually(lambda: client.get("/readyz").status_code == 200, what="ready again")
            eventually(
                lambda: runtime.controller.parts.exports.view.status.leader, what="the Lease taken"
            )
            assert client.get("/api/v1/status", headers=AUTH).get_json()["lease_refused"] is None
        finally:
            runtime.stop()
