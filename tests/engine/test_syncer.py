"""Resyncs and repairs: a full resync repairs drift and leaves foreign entries; a restart
against an unchanged cluster writes nothing; a dry run writes nothing and keeps the state
file."""

from __future__ import annotations

import json
from pathlib import Path

from director.core.model import IpProtocol as Protocol, ServiceConfig, ServiceKey
from director.core.services import Op, OpKind
from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, service
from lab.wait import eventually
from tests.kubelab import PORTS
from tests.looplab import ingress, start, vs_of


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
