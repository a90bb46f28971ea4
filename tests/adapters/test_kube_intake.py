"""Each cluster's intake in a process of its own (``clusters:``, issue 37): two API stand-ins
and one director (the Runtime, fake IPVS). Each cluster is followed by a process that is not
the director; kill -9 of one cluster's process leaves its Services programmed, a new one
takes over and the cluster's next change reaches the kernel, the other cluster untouched; a
relist of a cluster whose objects did not change hands the director nothing to decode; a
stop leaves no process behind; without the zygote the director stops itself."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.adapters.kube_intake import NICE, ClusterIntake
from director.cli.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually
from tests.looplab import ingress, vs_of

PORTS = [("http", "TCP", 80)]


class Site:
    def __init__(self, a: FakeApiServer, b: FakeApiServer, runtime: Runtime, ipvs: FakeIpvs):
        self.a, self.b, self.runtime, self.ipvs = a, b, runtime, ipvs

    def intake(self, cluster: str) -> ClusterIntake:
        (found,) = [w for w in self.runtime.served.watchers if w.cluster == cluster]
        assert isinstance(found, ClusterIntake)
        return found

    def real_servers(self, vip: str) -> set[str]:
        vs = vs_of(self.ipvs, vip)
        return {dest[0] for dest in vs.real_servers} if vs is not None else set()


def _ended(pid: int) -> bool:
    """Gone, or a zombie its parent has not reaped yet (it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with FakeApiServer() as a, FakeApiServer() as b:
        a.create("nodes", node("n1", "192.0.2.11"))
        b.create("nodes", node("n1", "192.0.2.21"))
        text = (
            "pools:\n"
            "  - {name: a, addresses: [198.51.100.0-198.51.100.3]}\n"
            "  - {name: b, addresses: [198.51.100.8-198.51.100.11]}\n"
            "clusters:\n"
            f"  - {{name: a, kubeconfig: {a.kubeconfig(tmp_path / 'a')}, identity: edge, "
            "lease_seconds: 2, pools: [a]}\n"
            f"  - {{name: b, kubeconfig: {b.kubeconfig(tmp_path / 'b')}, identity: edge, "
            "lease_seconds: 2, pools: [b]}\n"
        )
        ipvs = FakeIpvs()
        runtime = Runtime(parse_config(text, "multi.yaml"), ipvs)
        runtime.start()
        try:
            assert runtime.wait_ready(30), "the first sync never came"
            yield Site(a, b, runtime, ipvs)
        finally:
            runtime.stop()


def _serve(api: FakeApiServer, name: str, pods: list[str]) -> str:
    api.create("services", service(name, PORTS))
    api.create(
        "endpointslices",
        endpoint_slice(name, [(p, "n1", True, False) for p in pods], [("http", "TCP", 8080)]),
    )
    (vip,) = eventually(lambda: ingress(api, name), what=f"{name}'s status")
    return str(vip)


def test_each_cluster_is_followed_by_a_process_of_its_own(site: Site) -> None:
    a, b = site.intake("a"), site.intake("b")
    assert len({os.getpid(), a.pid, b.pid}) == 3
    # below the director: a cluster's bulk parsing never takes a core from its loop
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    for pid in (a.pid, b.pid):
        assert pid is not None
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, ours + NICE)
    vip_a, vip_b = _serve(site.a, "web", ["10.1.0.1"]), _serve(site.b, "web", ["10.2.0.1"])
    eventually(lambda: site.real_servers(vip_a) == {"192.0.2.11"}, what="a's node in the kernel")
    eventually(lambda: site.real_servers(vip_b) == {"192.0.2.21"}, what="b's node in the kernel")


def test_kill_9_of_one_clusters_intake_process(site: Site) -> None:
    vip_a, vip_b = _serve(site.a, "web", ["10.1.0.1"]), _serve(site.b, "api", ["10.2.0.1"])
    eventually(lambda: vs_of(site.ipvs, vip_a) is not None, what="a's virtual service")
    a, b = site.intake("a"), site.intake("b")
    killed, b_pid = a.pid, b.pid
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    eventually(lambda: a.pid != killed and a.starts == 2, what="a new intake process for a")
    assert vs_of(site.ipvs, vip_a) is not None, "a's Service stayed programmed"
    health = site.runtime.controller.health
    eventually(lambda: health.connected.get("a/services") is True, what="a followed again")
    # a's next change reaches the kernel through the new process; b never noticed
    site.a.create("nodes", node("n2", "192.0.2.12"))
    eventually(
        lambda: site.real_servers(vip_a) == {"192.0.2.11", "192.0.2.12"},
        what="a's new node in the kernel",
    )
    site.b.create("nodes", node("n2", "192.0.2.22"))
    eventually(lambda: site.real_servers(vip_b) == {"192.0.2.21", "192.0.2.22"})
    assert b.pid == b_pid and b.starts == 1
    assert _ended(killed)


def test_a_relist_of_an_unchanged_cluster_hands_the_director_nothing_to_decode(site: Site) -> None:
    for i in range(30):  # (no address: nothing the director writes changes them)
        site.a.create("services", service(f"s{i}", PORTS, type="ClusterIP", lb_class=None))
    health = site.runtime.controller.health
    snapshot = site.runtime.controller.intake.snapshot
    eventually(lambda: sum(r.startswith("a/") for r in snapshot.services) == 30)
    mirror = site.intake("a").mirror
    decoded, relists = mirror.decoded, mirror.relists
    site.a.expire_watches()  # every watch 410: each resource listed again
    eventually(lambda: mirror.relists - relists == 3, what="a's three resources relisted")
    assert mirror.decoded == decoded, "nothing changed: nothing sent"
    eventually(lambda: health.connected.get("a/services") is True)
    site.a.create("services", service("after", PORTS))
    eventually(lambda: "a/default/after" in snapshot.services, what="a's watch after relist")


def test_a_stop_leaves_no_intake_process(tmp_path: Path, site: Site) -> None:
    pids = [site.intake("a").pid, site.intake("b").pid]
    zygote = site.runtime.served.zygote
    assert zygote is not None
    site.runtime.stop()
    for pid in [*pids, zygote.pid]:
        assert pid is not None
        eventually(lambda pid=pid: _ended(pid), what=f"process {pid} ended")  # type: ignore[misc]


def test_without_its_zygote_a_cluster_cannot_be_followed_and_the_director_stops(site: Site) -> None:
    zygote = site.runtime.served.zygote
    assert zygote is not None
    a = site.intake("a")
    os.kill(zygote.pid, signal.SIGKILL)
    assert a.pid is not None
    os.kill(a.pid, signal.SIGKILL)
    eventually(lambda: not a._thread.is_alive(), what="a's intake thread ended")
    eventually(
        lambda: site.runtime.failed is not None and "intake-a" in site.runtime.failed,
        what="the director's watchdog",
    )


def test_a_cluster_may_stay_on_the_directors_threads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``intake: thread``: that cluster's watchers run in the director, the others' in their
    processes; both are served. A reload may not add the first process-followed cluster to
    a director that has no fork server (it was made at the start): it says restart."""
    with FakeApiServer() as a, FakeApiServer() as b:
        a.create("nodes", node("n1", "192.0.2.11"))
        b.create("nodes", node("n1", "192.0.2.21"))
        ka, kb = a.kubeconfig(tmp_path / "a"), b.kubeconfig(tmp_path / "b")
        pools = (
            "pools:\n"
            "  - {name: a, addresses: [198.51.100.0-198.51.100.3]}\n"
            "  - {name: b, addresses: [198.51.100.8-198.51.100.11]}\n"
            "clusters:\n"
        )
        entry = "  - {{name: {0}, kubeconfig: {1}, identity: edge, pools: [{0}]{2}}}\n"
        path = tmp_path / "director.yaml"
        path.write_text(pools + entry.format("a", ka, ", intake: thread"))
        runtime = Runtime(parse_config(path.read_text(), str(path)), FakeIpvs())
        runtime.start()
        try:
            assert runtime.wait_ready(30)
            assert runtime.served.zygote is None
            path.write_text(
                pools + entry.format("a", ka, ", intake: thread") + entry.format("b", kb, "")
            )
            assert runtime.reload(str(path))[0] == "applied"
            assert {(w.cluster, type(w).__name__) for w in runtime.served.watchers} == {
                ("a", "Watcher"),
                ("b", "Watcher"),
            }
            assert "event=cluster.intake_thread cluster=b" in caplog.text
        finally:
            runtime.stop()
        path.write_text(
            pools + entry.format("a", ka, ", intake: thread") + entry.format("b", kb, "")
        )
        ipvs = FakeIpvs()
        runtime = Runtime(parse_config(path.read_text(), str(path)), ipvs)
        runtime.start()
        try:
            assert runtime.wait_ready(30)
            kinds = {(w.cluster, type(w).__name__) for w in runtime.served.watchers}
            assert kinds == {("a", "Watcher"), ("b", "ClusterIntake")}
            site = Site(a, b, runtime, ipvs)
            vip_a, vip_b = _serve(a, "web", ["10.1.0.1"]), _serve(b, "web", ["10.2.0.1"])
            eventually(lambda: site.real_servers(vip_a) == {"192.0.2.11"})
            eventually(lambda: site.real_servers(vip_b) == {"192.0.2.21"})
        finally:
            runtime.stop()
