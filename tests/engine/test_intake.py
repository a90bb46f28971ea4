"""Events taken in by the loop: one slice change touches only its Service; an API outage or
a 410 changes nothing in the kernel and the watches resume; a stopping director does not
report its own watches closing."""

from __future__ import annotations

from pathlib import Path

import pytest

from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, endpoint_slice, service
from lab.wait import eventually
from tests.kubelab import PORTS
from tests.looplab import SLICE_PORTS, start, vs_of


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


def test_a_stopping_director_does_not_report_its_own_watches_closing(
    api: FakeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping closes the watches: that is no failure, and says nothing at WARNING."""
    runtime = start(kubeconfig, FakeIpvs())
    for watcher in runtime.served.watchers:
        watcher.stop()
    caplog.clear()
    with api.outage():  # the API server goes away under the stopped watches
        for watcher in runtime.served.watchers:
            watcher._thread.join(10)
    runtime.stop()
    assert [w._thread.is_alive() for w in runtime.served.watchers] == [False] * 3
    assert "kube.watch_failed" not in caplog.text
