"""The parts ``director run`` is built from, each made from the file's settings: the cluster's
client and watchers, the firewall, the kernel's parameters, the pair's daemons and FRR, the
admin API's server and the health checker; and what a scrape reads of the daemons.

Each adapter is imported where the file asks for its part: a static box without
``kubernetes:`` or ``api:`` loads neither the Kubernetes client nor the web server, nor
Prometheus's client (its figures are served by the API alone).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from director.adapters.kube.lease import Elector
from director.core.announce import PeerState
from director.core.firewall import FakeFirewall, Firewall, SynGuard
from director.core.model import Family
from director.core.owned import Failure, Ledger
from director.daemon.token import read_token
from director.dataplane.fake import FakeIpvs
from director.dataplane.interface import Ipvs
from director.engine.events import BoxAddresses, LeaseRefused, TargetChecked, VrrpChanged
from director.engine.hooks import Hooks
from director.engine.loop import COMPONENT, Controller
from director.engine.source_filter import Guarded
from director.logs import event
from director.schema.config import Settings

if TYPE_CHECKING:  # each adapter is imported where the file asks for its part (a static
    # box without `kubernetes:` or `api:` loads neither the Kubernetes client nor flask)
    from director.adapters.box import BoxWatch
    from director.adapters.frr.sync import FrrSync
    from director.adapters.http.server import HttpServer as ApiServer
    from director.adapters.kube.client import KubeApi
    from director.adapters.kube.write import KubeWriter
    from director.adapters.metrics.collector import Metrics
    from director.adapters.metrics.daemons import ConntrackdFigures, FrrFigures
    from director.adapters.metrics.ipvs import Scrape
    from director.adapters.pair.conntrackd import ConntrackdFile
    from director.adapters.pair.keepalived import KeepalivedSync
    from director.adapters.pair.vrrp import VrrpFifo
    from director.adapters.prober import Checker
    from director.adapters.sysctl import Sysctls
    from director.web.front import Token

log = logging.getLogger("director.runtime")


def open_ipvs(netns: str | None) -> Ipvs:
    """The kernel's IPVS, in ``netns`` (the one place the kernel adapter is made; the fake is
    the tests' and a shadow's without IPVS)."""
    from director.dataplane.kernel import KernelIpvs  # only the kernel commands pay for netlink

    return KernelIpvs(netns)


# A director serves the middle of a connection that started on another (ECMP moved it):
# IPVS schedules a non-SYN packet only with these set.
SLOPPY = {
    name: ("1", "connections break when directors join or leave")
    for name in ("net.ipv4.vs.sloppy_tcp", "net.ipv4.vs.sloppy_sctp")
}
# A real server removed (drained to nothing, gone from the cluster): its connections are
# expired at their next packet, so the client's retry reaches a live one at once, instead
# of hanging on a destination that no longer exists (every box, whatever it serves).
EXPIRE_NODEST = {
    "net.ipv4.vs.expire_nodest_conn": (
        "1",
        "connections to a removed real server hang until their client gives up",
    )
}
# Full NAT: IPVS's connections in conntrack, so the SNAT of their packets is undone on the
# replies (the IPv4 switch covers IPv6 too).
FULLNAT_SYSCTLS = {"net.ipv4.vs.conntrack": ("1", "full-NAT replies are not translated back")}
# With conntrackd in the pair: the middle of a connection this box has no entry for is not
# taken up (with a new SNAT port) but dropped; TCP sends it again, and conntrackd's copy of
# the peer's entry (written to this box's kernel as it comes) carries it.
STRICT_PICKUP = {
    "net.netfilter.nf_conntrack_tcp_loose": (
        "0",
        "a full-NAT connection taken over without its entry gets a new SNAT port and breaks",
    )
}
# The SYN guard: synproxy's connections to the VIP are IPVS's, tracked; the ACK that carries
# a cookie has no entry and must be "invalid" for synproxy to take it, not picked up.
SYN_GUARD_SYSCTLS = {
    "net.ipv4.vs.conntrack": ("1", "SYN-guarded connections are reset after the handshake"),
    "net.netfilter.nf_conntrack_tcp_loose": (
        "0",
        "a SYN-guarded client's cookie is not checked: its ACK reaches IPVS, which resets it",
    ),
}


class Vrrp(NamedTuple):
    """A pair's parts: keepalived's file, its state FIFO, and conntrackd's file."""

    sync: KeepalivedSync
    fifo: VrrpFifo
    conntrackd: ConntrackdFile | None


class Daemons(NamedTuple):
    """What the director keeps beside its table: the pair's files, FRR's, the kernel's
    parameters (each None when the file asks for none)."""

    vrrp: Vrrp | None
    frr: FrrSync | None
    sysctls: Sysctls | None

    @property
    def keepalived(self) -> KeepalivedSync | None:
        return self.vrrp.sync if self.vrrp else None

    @property
    def fifo(self) -> VrrpFifo | None:
        return self.vrrp.fifo if self.vrrp else None

    @property
    def conntrackd(self) -> ConntrackdFile | None:
        return self.vrrp.conntrackd if self.vrrp else None


class Cluster(NamedTuple):
    """One served cluster's client and writer."""

    name: str  # "" for kubernetes:, the one cluster
    api: KubeApi
    writer: KubeWriter
    kubeconfig: str | None = None  # where its credentials are (None: the pod's account)


def clusters(
    settings: Settings,
    kubeconfig: str | None,
    names: list[str] | None = None,
    beside: Sequence[Cluster] = (),
) -> list[Cluster]:
    """Each served cluster's Kubernetes client and writer (none without a cluster).
    ``kubeconfig``: the one cluster's, instead of the file's (``director run --kubeconfig``);
    ``names``: these clusters only (those a reload adds), ``beside`` the ones served now.
    Two clusters that reach one API server are refused (a ValueError)."""
    if not settings.in_cluster:
        return []
    if kubeconfig and settings.clusters:
        raise ValueError(
            "--kubeconfig stands for kubernetes.kubeconfig; with clusters: each cluster names "
            "its own kubeconfig in the file"
        )
    from director.adapters.kube.client import KubeApi
    from director.adapters.kube.write import KubeWriter

    out: list[Cluster] = []
    for kube in settings.served:
        if names is not None and kube.cluster not in names:
            continue
        where = (kubeconfig if not kube.cluster else None) or kube.kubeconfig
        section = f"clusters[{kube.cluster}]" if kube.cluster else "kubernetes"
        try:
            kube_api = KubeApi.connect(where)
        except Exception as exc:  # the client raises ConfigException, OSError, YAML errors
            raise ValueError(
                f"{section}: cannot load the cluster's credentials from "
                f"{where or 'the pod service account'}: {exc}"
            ) from None
        kube_api.api.configuration.retries = False  # the watchers have their own backoff
        # Events name the cluster as this director knows it: "From lvs-director/prod".
        component = f"{COMPONENT}/{kube.cluster}" if kube.cluster else COMPONENT
        writer = KubeWriter(kube_api, component, kube.identity)
        out.append(Cluster(kube.cluster, kube_api, writer, where))
    said = same_server([(c.name, c.api.api.configuration) for c in (*beside, *out)])
    if said is not None:
        raise ValueError(said)
    return out


def same_server(configured: Sequence[tuple[str, Any]]) -> str | None:
    """Why two of these clusters are one (their kubeconfigs reach the same API server: its
    address and its CA alike), or None. Served twice, each Service's status would flip
    between two addresses a few times a second, for ever."""
    import hashlib

    seen: dict[tuple[str, str], str] = {}
    for name, configuration in configured:
        host = str(getattr(configuration, "host", "") or "").rstrip("/").lower()
        ca = getattr(configuration, "ssl_ca_cert", None)
        try:
            digest = hashlib.sha256(Path(ca).read_bytes()).hexdigest() if ca else ""
        except OSError:
            digest = str(ca)
        other = seen.setdefault((host, digest), name)
        if other != name:
            return (
                f"clusters {other or 'kubernetes'} and {name or 'kubernetes'} reach the same "
                f"API server ({host}): one cluster served twice would have each Service's "
                "status flip between two addresses; list it once"
            )
    return None


def box_watch(
    settings: Settings, ipvs: Ipvs, netns: str | None, dry_run: bool, controller: Controller
) -> BoxWatch | None:
    """The box's own addresses, watched where Services are given addresses or endpoints
    (none beside the fake: the host's addresses are not the lab's)."""
    if dry_run or isinstance(ipvs, FakeIpvs) or not (settings.pools or settings.in_cluster):
        return None
    from director.adapters.box import BoxWatch

    return BoxWatch(
        lambda found: controller.post(BoxAddresses(tuple(sorted(found.items())))),
        netns or getattr(ipvs, "netns", None),
    )


def kernel_settings(
    settings: Settings, ipvs: Ipvs, netns: str | None, dry_run: bool, ledger: Ledger
) -> Sysctls | None:
    """The kernel parameters the director relies on, kept: ``expire_nodest_conn`` on every
    box, and what full NAT, the SYN guard and BGP need (none beside the fake: the host is
    not touched)."""
    if dry_run or isinstance(ipvs, FakeIpvs):
        return None
    wanted = {
        **EXPIRE_NODEST,
        **(FULLNAT_SYSCTLS if settings.snat else {}),
        **(SLOPPY if settings.bgp else {}),
    }
    if settings.snat and settings.ha is not None and settings.ha.conntrackd is not None:
        wanted.update(STRICT_PICKUP)
    if settings.syn_guard[0]:
        wanted.update(SYN_GUARD_SYSCTLS)
    from director.adapters.sysctl import Sysctls

    return Sysctls(netns or getattr(ipvs, "netns", None), wanted, ledger=ledger)


def firewall(ipvs: Ipvs, netns: str | None, settings: Settings, dry_run: bool) -> Firewall:
    """The source filter and full NAT: the fake beside the fake, nftables beside the
    kernel's IPVS (in its namespace). With full NAT, IPVS's connections are tracked, so that
    conntrack undoes the SNAT on the replies (``net.ipv4.vs.conntrack``)."""
    if isinstance(ipvs, FakeIpvs):
        return FakeFirewall()
    from director.dataplane.nft import NftFirewall

    where = netns or getattr(ipvs, "netns", None)
    snat_to: dict[Family, tuple[str, ...]] = {}
    for address in settings.snat.addresses if settings.snat else ():
        snat_to[Family.of(address)] = (*snat_to.get(Family.of(address), ()), address)
    ports = settings.snat.ports if settings.snat else None
    guarding, _ = settings.syn_guard
    guard = SynGuard(settings.guard.mss, settings.guard.wscale) if guarding else None
    return NftFirewall(where, snat_to=snat_to, snat_ports=ports, syn_guard=guard)


def electors(settings: Settings, served: list[Cluster], controller: Controller) -> list[Elector]:
    """The status writer's Lease in each of the ``served`` clusters (none without one)."""
    kubes = {kube.cluster: kube for kube in settings.served}
    out: list[Elector] = []
    for one in served:
        kube, name = kubes[one.name], one.name
        out.append(
            Elector(
                one.writer,
                kube.lease_namespace,
                kube.lease_name,
                kube.lease_seconds,
                partial(controller.set_leader, cluster=name),
                on_refused=partial(_lease_refused, controller, name),
                ledger=controller.health.owned,
                owned_name=f"lease/{name}" if name else None,
            )
        )
    return out


def _lease_refused(controller: Controller, cluster: str, reason: str | None) -> None:
    text = f"cluster {cluster}: {reason}" if cluster and reason else reason
    controller.post(LeaseRefused(text))


def metrics(settings: Settings, wanted: bool | None = None) -> Metrics | None:
    """The Prometheus registry and what feeds it, kept when ``wanted`` (None: when the file
    has an ``api:`` section, whose ``/metrics`` is the only way to read it; ``api:`` is a
    restart-only section, so no reload can ask for it later)."""
    if not (settings.api is not None if wanted is None else wanted):
        return None
    from director.adapters.metrics.collector import Metrics

    return Metrics()


def admin_token(settings: Settings) -> Token | None:
    """The admin API's token, read from its file (a ValueError says why it cannot be)."""
    if settings.api is None:
        return None
    from director.web.front import Token

    return Token(read_token(settings.api.token_file))


def api_server(
    settings: Settings,
    controller: Controller,
    token: Token | None,
    *,
    writer: Mapping[str, KubeWriter] | None,
    scrape: Scrape | None,
    reader: Ipvs | None,
    peers: Callable[[], tuple[PeerState, ...]],
) -> ApiServer | None:
    """The admin API on its production server (none without an ``api:`` section). The
    Flask app is made here, before the server accepts anything: no request ever waits for
    it to load. ``token``: the admin token (a reload replaces it)."""
    if settings.api is None or token is None:
        return None
    from director.adapters.http.server import HttpServer as ApiServer
    from director.web.app import create_app
    from director.web.front import MAX_BODY, early_gate

    api = settings.api
    app = create_app(
        controller.door(),
        token,
        writer=writer,
        metrics=scrape,
        reader=reader,
        public=api.public,
        peers=peers,
    )
    return ApiServer(
        app,
        api.host,
        api.port,
        body_bytes=MAX_BODY,
        gate=early_gate(token, api.public),
        cert=api.tls_cert,
        key=api.tls_key,
    )


def checker(
    settings: Settings,
    netns: str | None,
    controller: Controller,
    hooks: Hooks,
    metrics: Metrics | None,
) -> Checker | None:
    """Active health checks, run from the director's own network namespace (each one's
    time into the metrics, where kept)."""
    if settings.health is None:
        return None
    from director.adapters.prober import Checker  # ssl: for checks over TLS

    recorder = metrics.recorder if metrics is not None else None
    made = Checker(
        lambda target, health: controller.post(TargetChecked(target, health.up)),
        netns=netns,
        on_result=None
        if recorder is None
        else lambda _target, health: recorder.health.observe(health.last_seconds),
    )
    hooks.on_targets = made.update
    return made


def vrrp(settings: Settings, dry_run: bool, controller: Controller, hooks: Hooks) -> Vrrp | None:
    """The pair's parts: keepalived's file, its state FIFO, conntrackd's file."""
    if settings.ha is None or dry_run:
        return None
    from director.adapters.pair.keepalived import KeepalivedSync
    from director.adapters.pair.vrrp import VrrpFifo

    owned = controller.health.owned
    sync = KeepalivedSync(settings.ha, settings.source, ledger=owned)
    hooks.announce = sync.submit

    def heard(state: str) -> None:
        controller.post(VrrpChanged(state))
        # a VRRP process that reports is perhaps a new one (keepalived started, or respawned
        # it): its real-time priority is read back now, not in up to verify_seconds
        sync.read_back_soon()

    fifo = VrrpFifo(settings.ha.fifo, heard)
    conntrackd = None
    if settings.ha.conntrackd is not None:
        from director.adapters.pair.conntrackd import ConntrackdFile

        conntrackd = ConntrackdFile(settings.ha.conntrackd, settings.source, ledger=owned)
    return Vrrp(sync, fifo, conntrackd)


def frr(
    settings: Settings,
    dry_run: bool,
    netns: str | None,
    ipvs: Ipvs,
    *,
    controller: Controller,
    hooks: Hooks,
) -> FrrSync | None:
    """The BGP speaker's configuration (FRR), kept on a thread of its own."""
    if settings.bgp is None or dry_run:
        return None
    if isinstance(ipvs, FakeIpvs):  # nothing real to announce: the host is not touched
        event(log, "bgp.off", reason="the fake dataplane: routes are decided, not announced")
        return None
    from director.adapters.frr.sync import FrrSync

    sync = FrrSync(
        settings.bgp, settings.pools, settings.source, netns=netns, ledger=controller.health.owned
    )
    hooks.on_routes = sync.submit
    return sync


# What a scrape and the status page read of the daemons: ``daemons`` is None until they
# are made (a scrape may come first).
def peers(daemons: Daemons | None) -> tuple[PeerState, ...]:
    sync = daemons.frr if daemons is not None else None
    return sync.sessions if sync is not None else ()


def frr_figures(daemons: Daemons | None) -> FrrFigures | None:
    sync = daemons.frr if daemons is not None else None
    if sync is None:
        return None
    from director.adapters.metrics.daemons import FrrFigures

    return FrrFigures(sync.sessions, sync.frr.rejected, sync.frr.reloads)


def conntrack(daemons: Daemons | None) -> dict[str, int] | None:
    """netfilter's counters where full NAT runs (None without it, or beside the fake)."""
    keeper = daemons.sysctls if daemons is not None else None
    if keeper is None or "net.ipv4.vs.conntrack" not in keeper.effects:
        return None
    from director.dataplane.netns import conntrack_stats

    try:
        return conntrack_stats(keeper.netns)
    except OSError:
        return None


def syn_guard_figures(
    settings: Settings, guard: Guarded, firewall: Firewall | None, netns: str | None
) -> dict[str, int] | None:
    """The SYN guard's figures (None on a box that guards nothing): synproxy's counters,
    the guard's drops, and how many virtual services it covers."""
    if not settings.syn_guard[0] or firewall is None:
        return None
    from director.dataplane.netns import synproxy_stats

    figures: dict[str, int] = {"services": len(guard.enforced)}
    with contextlib.suppress(OSError):
        figures.update(synproxy_stats(netns))
    with contextlib.suppress(Failure):
        figures["dropped"] = firewall.guard_dropped()
    return figures


def conntrackd_figures(daemons: Daemons | None) -> ConntrackdFigures | None:
    """What the pair's conntrackd says of itself (None where the director runs none)."""
    kept = daemons.conntrackd if daemons is not None else None
    if kept is None:
        return None
    from director.adapters.metrics.daemons import ConntrackdFigures
    from director.adapters.pair.conntrackd import read_stats

    stats = read_stats(kept.ct.conntrackd, kept.path)
    if stats is None:
        return ConntrackdFigures(up=False)
    return ConntrackdFigures(
        True,
        stats.internal,
        stats.cache_failed,
        stats.inject_failed,
        stats.send_errors,
        stats.recv_errors,
        stats.malformed,
        stats.lost,
    )


def keepalived_counts(daemons: Daemons | None) -> tuple[int, int] | None:
    sync = daemons.keepalived if daemons is not None else None
    if sync is None:
        return None
    return sync.keepalived.rejected, sync.keepalived.reloads
