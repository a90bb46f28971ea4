"""Each cluster's lists taken by a process made for each list (``clusters:``, ``intake:
process``, issue 37): two API stand-ins and one director (the Runtime, fake IPVS). A list
runs in a process that is not the director, below it (SCHED_IDLE); kill -9 of it mid-relist
leaves the cluster's Services programmed and the other cluster's changes flowing, and the
list is taken again; a relist sends the director only what changed (nothing at all when
nothing did); a stop leaves no process behind; without the zygote the director stops
itself (its watchdog asks, or a list finds it gone)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.adapters.kube.intake import ChildListed
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually
from tests.looplab import ingress, vs_of

PORTS = [("http", "TCP", 80)]


class Site:
    def __init__(self, a: FakeApiServer, b: FakeApiServer, runtime: Runtime, ipvs: FakeIpvs):
        self.a, self.b, self.runtime, self.ipvs = a, b, runtime, ipvs
        self.kubeconfig_a = Path()

    def watcher(self, resource: str) -> ChildListed:
        (found,) = [w for w in self.runtime.served.watchers if w.resource.name == resource]
        assert isinstance(found, ChildListed)
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


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rpartition(")")[2].split()[1])


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
            site = Site(a, b, runtime, ipvs)
            site.kubeconfig_a = tmp_path / "a"
            yield site
        finally:
            a.hold_lists(False)
            runtime.stop()


def _serve(api: FakeApiServer, name: str, pods: list[str]) -> str:
    api.create("services", service(name, PORTS))
    api.create(
        "endpointslices",
        endpoint_slice(name, [(p, "n1", True, False) for p in pods], [("http", "TCP", 8080)]),
    )
    (vip,) = eventually(lambda: ingress(api, name), what=f"{name}'s status")
    return str(vip)


def _relisting(site: Site, resource: str) -> int:
    """``resource`` of cluster a relisting (410 Gone), its list held by the stand-in: the
    pid of the process taking it."""
    site.a.hold_lists()
    site.a.expire_watches()
    watcher = site.watcher(resource)
    return eventually(lambda: watcher.pid, what=f"a process listing {resource}")


def test_each_list_is_taken_by_a_process_below_the_director(site: Site) -> None:
    vip_a, vip_b = _serve(site.a, "web", ["10.1.0.1"]), _serve(site.b, "web", ["10.2.0.1"])
    eventually(lambda: site.real_servers(vip_a) == {"192.0.2.11"}, what="a's node in the kernel")
    eventually(lambda: site.real_servers(vip_b) == {"192.0.2.21"}, what="b's node in the kernel")
    zygote = site.runtime.served.zygote
    assert zygote is not None
    for resource in ("a/services", "a/endpointslices", "a/nodes", "b/services"):
        assert site.watcher(resource).lists == 1, resource  # the first list, in a process
    pid = _relisting(site, "a/services")
    assert pid not in (os.getpid(), zygote.pid) and _parent(pid) == zygote.pid
    # below the director: a cluster's relist runs on what the box leaves idle, and gives
    # way at once to the loop, or another cluster's watch
    eventually(  # (set by the process itself, as it starts)
        lambda: (
            os.sched_getscheduler(pid) == os.SCHED_IDLE
            and os.getpriority(os.PRIO_PROCESS, pid) == 19
        ),
        what="the list process SCHED_IDLE, at nice 19",
    )
    site.a.hold_lists(False)
    eventually(lambda: _ended(pid), what="the list process ended with its list")
    assert site.watcher("a/services").lists == 2


def test_kill_9_of_a_list_process_mid_relist(site: Site) -> None:
    vip_a, vip_b = _serve(site.a, "web", ["10.1.0.1"]), _serve(site.b, "api", ["10.2.0.1"])
    eventually(lambda: site.real_servers(vip_a) == {"192.0.2.11"}, what="a's real server")
    killed = _relisting(site, "a/nodes")
    os.kill(killed, signal.SIGKILL)
    health = site.runtime.controller.health
    eventually(lambda: health.connected.get("a/nodes") is False, what="a's nodes: disconnected")
    # while a cannot list, a's Service stays programmed and b's changes go on
    site.b.create("nodes", node("n2", "192.0.2.22"))
    eventually(lambda: site.real_servers(vip_b) == {"192.0.2.21", "192.0.2.22"})
    assert site.real_servers(vip_a) == {"192.0.2.11"}, "a's Service stayed programmed"
    assert _ended(killed)
    site.a.create("nodes", node("n2", "192.0.2.12"))  # seen by the next list, not a watch
    site.a.hold_lists(False)
    eventually(
        lambda: site.real_servers(vip_a) == {"192.0.2.11", "192.0.2.12"},
        what="a's new node, by the list taken again",
    )
    eventually(lambda: health.connected.get("a/nodes") is True, what="a's nodes followed again")
    assert site.watcher("a/nodes").lists >= 3
    assert site.watcher("b/nodes").lists == 1, "b never relisted"


def test_a_relist_hands_the_director_only_what_changed(site: Site) -> None:
    for i in range(30):  # (no address: nothing the director writes changes them)
        site.a.create("services", service(f"s{i}", PORTS, type="ClusterIP", lb_class=None))
    snapshot = site.runtime.controller.parts.intake.snapshot
    eventually(lambda: sum(r.startswith("a/") for r in snapshot.services) == 30)
    held = site.watcher("a/services").held
    decoded, relists = held.decoded, held.relists
    site.a.expire_watches()  # every watch 410: each resource listed again
    eventually(lambda: held.relists == relists + 1, what="a's Services relisted")
    assert held.decoded == decoded, "nothing changed: nothing sent"
    # Changes only a list sees (made while the relist waits): one Service changed, one
    # gone, one new.
    _relisting(site, "a/services")
    site.a.patch("services", "s1", {"metadata": {"annotations": {"lvs-director.io/x": "y"}}})
    site.a.delete("services", "s2")
    site.a.create("services", service("new", PORTS, type="ClusterIP", lb_class=None))
    site.a.hold_lists(False)
    eventually(lambda: held.relists == relists + 2, what="a's Services relisted again")
    assert held.decoded == decoded + 2, "the changed and the new one, no other"
    eventually(lambda: "a/default/s2" not in snapshot.services, what="the gone one gone")
    assert "a/default/new" in snapshot.services
    assert snapshot.services["a/default/s1"].annotations == {"lvs-director.io/x": "y"}
    site.a.create("services", service("after", PORTS))
    eventually(lambda: "a/default/after" in snapshot.services, what="a's watch after relist")


def test_a_list_the_server_refuses_is_retried_with_the_credentials_of_then(site: Site) -> None:
    """a's token is rotated while a relist is under way: the list's next page is answered
    401, passed on as the server's answer (a backoff, not an outage), the list process's
    socket closed; once the operator's rotation rewrites the kubeconfig, the next list
    process reads it and lists."""
    for i in range(150):  # more than a first page
        site.a.create("services", service(f"s{i}", PORTS, type="ClusterIP", lb_class=None))
    snapshot = site.runtime.controller.parts.intake.snapshot
    eventually(lambda: sum(r.startswith("a/") for r in snapshot.services) == 150)
    health = site.runtime.controller.health
    watcher = site.watcher("a/services")
    _relisting(site, "a/services")  # its first page asked for, with the token of then
    site.a.rotate_token("rotated")
    site.a.hold_lists(False)
    eventually(lambda: "401" in (watcher.last_error or ""), what="the next page's 401")
    # the watcher's DISCONNECTED reaches the health the controller keeps on its own thread
    eventually(lambda: health.connected.get("a/services") is False, what="a/services down")
    eventually(lambda: watcher.pid is None and watcher._sock is None, what="its list done with")
    lists = watcher.lists
    site.a.kubeconfig(site.kubeconfig_a)  # the rotation reaches the box's file
    site.a.create("services", service("after", PORTS, type="ClusterIP", lb_class=None))
    eventually(
        lambda: "a/default/after" in snapshot.services, timeout=60, what="listed with the new token"
    )
    assert watcher.lists > lists and health.connected.get("a/services") is True


def test_a_stop_leaves_no_process(site: Site) -> None:
    listing = _relisting(site, "a/endpointslices")  # a list under way
    zygote = site.runtime.served.zygote
    assert zygote is not None
    site.runtime.stop()
    for pid in (listing, zygote.pid):
        eventually(lambda pid=pid: _ended(pid), what=f"process {pid} ended")  # type: ignore[misc]


def test_a_zygote_that_is_gone_stops_the_director_while_it_is_calm(site: Site) -> None:
    """Not at the next relist (which may come in a storm of them): the watchdog asks."""
    zygote = site.runtime.served.zygote
    assert zygote is not None
    os.kill(zygote.pid, signal.SIGKILL)
    eventually(lambda: site.runtime.failed is not None, what="the director's watchdog")
    assert f"zygote that forks the list processes (pid {zygote.pid}) ended" in str(
        site.runtime.failed
    )
    # no list was needed to notice: every watcher still watches
    assert all(w._thread.is_alive() for w in site.runtime.served.watchers)


def test_a_list_that_finds_the_zygote_gone_ends_its_watcher(site: Site) -> None:
    """Between the watchdog's looks, a relist finds no zygote: the watcher's thread ends
    (``kube.watch_ended``), which stops the director too."""
    zygote = site.runtime.served.zygote
    assert zygote is not None
    site.runtime._stopping.set()  # the watchdog looks no more
    os.kill(zygote.pid, signal.SIGKILL)
    eventually(lambda: _ended(zygote.pid), what="the zygote gone")
    site.a.expire_watches()  # a/services etc. must list again: no process can take it
    watcher = site.watcher("a/services")
    eventually(lambda: not watcher._thread.is_alive(), what="a's services watcher ended")
    assert site.runtime.failed is None
    site.runtime._stopping.clear()
    site.runtime._watch()  # the watchdog's next look
    assert "watch-a/services" in str(site.runtime.failed)


def test_a_cluster_may_stay_on_the_directors_threads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``intake: thread``: that cluster's lists are decoded in the director, the others' in
    list processes; both are served. A reload cannot give the first such cluster list
    processes on a director that has no fork server (it is made at the start): it says so,
    and a restart does."""
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
            assert kinds == {("a", "Watcher"), ("b", "ChildListed")}
            site = Site(a, b, runtime, ipvs)
            vip_a, vip_b = _serve(a, "web", ["10.1.0.1"]), _serve(b, "web", ["10.2.0.1"])
            eventually(lambda: site.real_servers(vip_a) == {"192.0.2.11"})
            eventually(lambda: site.real_servers(vip_b) == {"192.0.2.21"})
        finally:
            runtime.stop()
