"""Clusters come and go by reload (issue 37, item 5): ``systemctl reload`` with a cluster
added starts its watches and its Lease without touching the others; with a cluster removed,
its Services leave the kernel and their addresses are released, its watches and Lease stop,
and the reply says so. A changed entry of a cluster still served needs a restart."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import ip_address
from pathlib import Path
from typing import Any, NamedTuple

from director.daemon.runtime import Runtime
from director.daemon.served import SWITCH_INTERVAL
from director.dataplane.fake import FakeIpvs
from director.schema.config import load_config
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests.looplab import ingress, vs_of

PORTS = [("http", "TCP", 80)]
POOLS = (
    "pools:\n"
    "  - {name: a, addresses: [198.51.100.0-198.51.100.3]}\n"
    "  - {name: b, addresses: [198.51.100.8-198.51.100.11]}\n"
)


def _entry(name: str, kubeconfig: Path, extra: str = "", *, listing: bool = True) -> str:
    """A cluster's entry; ``listing``: it lists its own pool (else it lists none)."""
    pools = f", pools: [{name}]" if listing else ""
    return (
        f"  - {{name: {name}, kubeconfig: {kubeconfig}, identity: edge, lease_seconds: 2"
        f"{pools}{extra}}}\n"
    )


class Site(NamedTuple):
    a: FakeApiServer
    b: FakeApiServer
    ka: Path
    kb: Path
    path: Path
    ipvs: FakeIpvs
    runtime: Runtime


@contextmanager
def site(tmp_path: Path, *, listing: bool = True) -> Iterator[Site]:
    """Two API stand-ins (a node each), and a director serving cluster a alone
    (``listing``: a lists its pool)."""
    with FakeApiServer() as a, FakeApiServer() as b:
        a.create("nodes", node("n1", "192.0.2.11"))
        b.create("nodes", node("n1", "192.0.2.21"))
        ka, kb = a.kubeconfig(tmp_path / "a"), b.kubeconfig(tmp_path / "b")
        path = tmp_path / "director.yaml"
        path.write_text(POOLS + "clusters:\n" + _entry("a", ka, listing=listing))
        ipvs = FakeIpvs()
        runtime = Runtime(load_config(path), ipvs).start()
        try:
            assert runtime.wait_ready(20)
            yield Site(a, b, ka, kb, path, ipvs, runtime)
        finally:
            runtime.stop()


def test_a_cluster_added_then_another_removed_by_reload(tmp_path: Path) -> None:
    with site(tmp_path) as (a, b, ka, kb, path, ipvs, runtime):
        # a thread that needs the interpreter while a watcher parses a relist asks for it
        # after 1 ms, not 5 (another cluster's events, the loop, the API)
        assert sys.getswitchinterval() <= SWITCH_INTERVAL == 0.001
        a.create("services", service("web", PORTS))
        (vip_a,) = eventually(lambda: ingress(a, "web"), what="a's status")
        eventually(lambda: vs_of(ipvs, vip_a), what="a's virtual service")
        watching_a = list(runtime.served.watchers)
        b.create("services", service("api", PORTS))  # before b is served

        path.write_text(POOLS + "clusters:\n" + _entry("a", ka) + _entry("b", kb))
        assert runtime.reload(str(path)) == (
            "applied",
            "added=0 removed=0 changed=0; clusters added: b",
        )
        (vip_b,) = eventually(lambda: ingress(b, "api"), what="b's status, after the reload")
        assert vip_b == "198.51.100.8"
        eventually(lambda: vs_of(ipvs, vip_b), what="b's virtual service")
        eventually(lambda: runtime.controller.health.leaders == {"a": True, "b": True})
        assert all(w in runtime.served.watchers for w in watching_a), "a's watches kept"
        assert all(w._thread.is_alive() for w in watching_a)

        # a changed entry of a cluster still served: a restart's, refused whole
        path.write_text(
            POOLS + "clusters:\n" + _entry("a", ka, ", lease_name: other") + _entry("b", kb)
        )
        result, detail = runtime.reload(str(path))
        assert result == "refused" and detail.startswith("clusters changed")

        path.write_text(POOLS + "clusters:\n" + _entry("b", kb))
        assert runtime.reload(str(path)) == (
            "applied",
            "added=0 removed=0 changed=0; clusters removed: a",
        )
        eventually(lambda: vs_of(ipvs, vip_a) is None, what="a's Service out of the kernel")
        # the address is no longer a's: its status stops naming it
        eventually(lambda: ingress(a, "web") == [], what="a's status taken back")
        allocator = runtime.controller.parts.addresses.allocator
        assert allocator.users(ip_address(vip_a)) == (), "a's address released"
        eventually(lambda: not any(w._thread.is_alive() for w in watching_a), timeout=10)
        assert runtime.controller.health.leaders == {"b": True}
        eventually(  # a's gone; b's each connected once its first list is in
            lambda: (
                set(runtime.controller.health.connected)
                == {"b/services", "b/endpointslices", "b/nodes"}
            ),
            what="only b's resources followed",
        )
        assert vs_of(ipvs, vip_b) is not None, "b untouched"
        # a late change in the removed cluster changes nothing
        a.create("services", service("late", PORTS))
        assert "a/default/late" not in runtime.controller.parts.intake.snapshot.services
        held = a.store.list("leases", None)["items"]
        assert all(not lease["spec"].get("holderIdentity") for lease in held), "a's Lease given up"


def test_a_cluster_with_a_nodeport_vip_comes_and_goes_by_reload(tmp_path: Path) -> None:
    """A cluster's NodePort VIP is the director's own address: it comes with the cluster on
    a reload (its node ports served there), and its services go with it."""
    with site(tmp_path) as (_a, b, ka, kb, path, ipvs, runtime):
        b.create("services", service("np", PORTS, type="NodePort"))
        node_port = b.get("services", "np")["spec"]["ports"][0]["nodePort"]
        with_vip = _entry("b", kb, ", nodeport_vip: 192.0.2.50")
        path.write_text(POOLS + "clusters:\n" + _entry("a", ka) + with_vip)
        result, detail = runtime.reload(str(path))
        assert (result, detail) == ("applied", "added=0 removed=0 changed=0; clusters added: b")

        def servers() -> set[str]:
            vs = vs_of(ipvs, "192.0.2.50", node_port)
            return {dest[0] for dest in vs.real_servers} if vs is not None else set()

        # b's node, once b's Nodes are listed (its lists come in one by one)
        eventually(lambda: servers() == {"192.0.2.21"}, what="b's node port, to b's node")
        path.write_text(POOLS + "clusters:\n" + _entry("a", ka))
        assert runtime.reload(str(path))[0] == "applied"
        eventually(lambda: vs_of(ipvs, "192.0.2.50", node_port) is None, what="gone with b")


def test_a_static_box_takes_its_first_cluster_by_reload(tmp_path: Path) -> None:
    """A box serving no cluster yet: a reload adds one, which it serves and leads as if it
    had started with it."""
    with FakeApiServer() as a:
        a.create("nodes", node("n1", "192.0.2.11"))
        path = tmp_path / "director.yaml"
        path.write_text(POOLS)
        ipvs = FakeIpvs()
        runtime = Runtime(load_config(path), ipvs).start()
        try:
            assert runtime.wait_ready(20)
            a.create("services", service("web", PORTS))
            path.write_text(POOLS + "clusters:\n" + _entry("a", a.kubeconfig(tmp_path / "a")))
            assert runtime.reload(str(path))[0] == "applied"
            (vip,) = eventually(lambda: ingress(a, "web"), what="the first cluster's status")
            eventually(lambda: vs_of(ipvs, vip), what="its virtual service")
            eventually(lambda: runtime.controller.health.leader, what="it leads its one cluster")
        finally:
            runtime.stop()


def test_a_reload_that_would_take_a_pool_holding_a_clusters_addresses_is_refused(
    tmp_path: Path,
) -> None:
    """A cluster listing no pools draws from those no cluster lists: a cluster added that
    lists one of them takes it away. Where the first cluster's Services hold addresses
    there, the reload is refused (moving live addresses is a restart's); elsewhere it is
    taken."""
    with site(tmp_path, listing=False) as (a, _b, ka, kb, path, ipvs, runtime):
        first = _entry("a", ka, listing=False)
        a.create("services", service("web", PORTS))
        assert eventually(lambda: ingress(a, "web")) == ["198.51.100.0"]  # pool a
        path.write_text(POOLS + "clusters:\n" + first + _entry("b", kb).replace("[b]", "[a]"))
        result, detail = runtime.reload(str(path))
        assert result == "refused"
        assert detail == (
            "cluster 'a' would lose pool 'a', where its Services hold addresses "
            "(a/default/web); restart to move them"
        )
        assert ingress(a, "web") == ["198.51.100.0"]
        path.write_text(POOLS + "clusters:\n" + first + _entry("b", kb))
        assert runtime.reload(str(path))[0] == "applied"
        assert ingress(a, "web") == ["198.51.100.0"] and vs_of(ipvs, "198.51.100.0")


def test_a_cluster_added_by_a_reload_the_loop_takes_late_is_still_watched(tmp_path: Path) -> None:
    """The loop busy past the reload's wait (a huge relist, a slow kernel): the reload says
    it failed, but when the loop takes the file after all, the cluster it adds is watched
    and served as on any reload, not left without watches until a restart."""
    with site(tmp_path) as (_a, b, ka, kb, path, ipvs, runtime):
        b.create("services", service("api", PORTS))
        gate = threading.Event()
        step = runtime.controller._step

        def busy(*args: Any) -> None:
            gate.wait(30)
            step(*args)

        runtime.controller._step = busy  # type: ignore[method-assign]
        path.write_text(POOLS + "clusters:\n" + _entry("a", ka) + _entry("b", kb))
        try:
            assert runtime.reload(str(path), timeout=0.3)[0] == "failed"
        finally:
            gate.set()
        (vip,) = eventually(lambda: ingress(b, "api"), what="b's status, the file taken late")
        eventually(lambda: vs_of(ipvs, vip), what="b's virtual service")
        assert any(w.cluster == "b" for w in runtime.served.watchers)


def test_a_reload_that_takes_a_pool_from_a_cluster_s_own_list_says_which_pool(
    tmp_path: Path,
) -> None:
    """Issue 71, 4: a reload that took a pool from a cluster's own ``pools:`` while its
    Services held addresses there got the generic refusal ("clusters changed"). A cluster's
    pools may change on a reload: one its Services hold addresses in is refused with the
    pool's own message, and one they do not use goes."""
    with site(tmp_path) as (a, _b, ka, kb, path, _ipvs, runtime):
        a.create("services", service("web", PORTS))
        assert eventually(lambda: ingress(a, "web")) == ["198.51.100.0"]  # pool a
        path.write_text(
            POOLS + "clusters:\n" + _entry("a", ka).replace("[a]", "[b]") + _entry("b", kb)
        )
        result, detail = runtime.reload(str(path))
        assert (result, detail) == (
            "refused",
            "cluster 'a' would lose pool 'a', where its Services hold addresses "
            "(a/default/web); restart to move them",
        )
        assert ingress(a, "web") == ["198.51.100.0"]
