"""The whole control loop on the host: the API stand-in, the official client, the fake IPVS.

Everything here runs through ``director.runtime.Runtime``, the same wiring ``director run``
uses; the cluster is played by writing to the stand-in.
"""

from __future__ import annotations

import time
from pathlib import Path

from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests.kubelab import PORTS
from tests.looplab import ingress, start, vs_of


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
        leaders = [r.controller.parts.reporter.leader for r in (first, second)]
        assert sorted(leaders) == [False, True]
        statuses = [h for h in api.store.history["services"] if h[1] == "MODIFIED"]
        assert len(statuses) == 1, "only the leader writes status"


def test_a_write_for_a_deleted_service_is_dropped_not_retried_forever() -> None:
    from director.adapters.kube.client import KubeError
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
