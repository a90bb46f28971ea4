"""The HA lab: a client, two directors and three backends on two bridges, real keepalived.

    client 203.0.113.2-9 ── front bridge ── d1 203.0.113.11 / d2 203.0.113.12   (VIPs .100 .101)
                                            d1 192.0.2.2   / d2 192.0.2.3 ── back bridge ── be1-3
                                            gateway 192.0.2.1 (floats with the VIPs: LVS-NAT)

Each director runs ``director.runtime.Runtime`` (static services, the ``ha`` section) against
the IPVS of its namespace, renders keepalived.conf, and a real keepalived (VRRPv3, unicast,
the IPVS connection sync daemon on the back network) runs beside it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from director.adapters.pair.processes import LIMIT_US
from director.daemon.runtime import Runtime
from director.dataplane.kernel import KernelIpvs
from director.schema.config import parse_config
from lab.netns import Backend, BackendServers, Netns, run
from lab.wait import wait_for

NAT_VIP, DR_VIP, GATEWAY = "203.0.113.100", "203.0.113.101", "192.0.2.1"
FULLNAT_VIP = "203.0.113.102"  # full NAT: leaves for the backends from GATEWAY, which floats
NAT_PORT = 8080
CLIENTS = [f"203.0.113.{2 + i}" for i in range(8)]


def veth(ns_a: Netns, name_a: str, ns_b: Netns, name_b: str) -> None:
    run(
        [
            "ip",
            "link",
            "add",
            name_a,
            "netns",
            ns_a.name,
            "type",
            "veth",
            "peer",
            "name",
            name_b,
            "netns",
            ns_b.name,
        ]
    )


@dataclass
class Director:
    name: str
    ns: Netns
    front: str
    back: str
    priority: int
    workdir: Path
    runtime: Runtime | None = None
    ipvs: KernelIpvs | None = None
    keepalived: subprocess.Popen[bytes] | None = None
    conntrackd: subprocess.Popen[bytes] | None = None
    realtime: int = 50  # its file's realtime_priority: keepalived starts real-time at it

    @property
    def conf(self) -> Path:
        return self.workdir / "keepalived.conf"

    @property
    def pid_file(self) -> Path:
        return self.workdir / "keepalived.pid"

    def has(self, address: str) -> bool:
        """Is ``address`` one of this director's own? (Read from the kernel's local routes in
        the namespace: no process to start, so the measures stay fine-grained.)"""
        return address in local_addresses(self.ns)

    @functools.cached_property
    def mac(self) -> str:
        return self.ns.exec(["cat", "/sys/class/net/front/address"]).strip()


def local_addresses(ns: Netns) -> set[str]:
    """The namespace's local IPv4 addresses, from /proc/thread-self/net/fib_trie."""
    text = ns.call(lambda: Path("/proc/thread-self/net/fib_trie").read_text())
    found, last = set(), ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|--") or stripped.startswith("+--"):
            last = stripped[3:].strip().split("/")[0]
        elif stripped.startswith("/32 host LOCAL"):
            found.add(last)
    return found


def client_arp(lab: WithClient, address: str) -> str | None:
    """The MAC the client's ARP table holds for ``address``."""
    text = lab.client.call(lambda: Path("/proc/thread-self/net/arp").read_text())
    for line in text.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == address and fields[2] != "0x0":
            return fields[3]
    return None


@dataclass
class HaLab:
    prefix: str
    switch: Netns
    client: Netns
    directors: list[Director]
    backends: list[Backend]
    namespaces: list[Netns] = field(default_factory=list)
    servers: BackendServers | None = None
    dr_vips: tuple[str, ...] = ()  # (BackendServers binds UDP to these; TCP only here)
    tun_vips: tuple[str, ...] = ()

    def close(self) -> None:
        if self.servers is not None:
            self.servers.close()
        for d in self.directors:
            stop_director(d)
        for ns in reversed(self.namespaces):
            ns.close()


def build_ha_lab(prefix: str, workdir: Path) -> HaLab:
    run(["modprobe", "-a", "ip_vs", "veth", "bridge"], check=False)
    made: list[Netns] = []
    try:
        switch = Netns(f"{prefix}-sw")
        made.append(switch)
        switch.ip(
            "link set lo up",
            "link add brf type bridge",
            "link add brb type bridge",
            "link set brf up",
            "link set brb up",
        )
        client = Netns(f"{prefix}-client")
        made.append(client)
        veth(client, "c0", switch, "p-client")
        client.ip("link set lo up", "link set c0 up", *(f"addr add {a}/24 dev c0" for a in CLIENTS))
        switch.ip("link set p-client master brf", "link set p-client up")
        directors = []
        for index, priority in ((1, 150), (2, 100)):
            name = f"d{index}"
            ns = Netns(f"{prefix}-{name}")
            made.append(ns)
            veth(ns, "front", switch, f"p-{name}f")
            veth(ns, "back", switch, f"p-{name}b")
            switch.ip(
                f"link set p-{name}f master brf",
                f"link set p-{name}f up",
                f"link set p-{name}b master brb",
                f"link set p-{name}b up",
            )
            front, back = f"203.0.113.{10 + index}", f"192.0.2.{1 + index}"
            ns.ip(
                "link set lo up",
                "link set front up",
                "link set back up",
                f"addr add {front}/24 dev front",
                f"addr add {back}/24 dev back",
            )
            ns.sysctls(
                {
                    "net.ipv4.ip_forward": 1,
                    "net.ipv4.conf.all.rp_filter": 0,
                    "net.ipv4.conf.default.rp_filter": 0,
                    # DR replies come back through the gateway with the VIP (local) as source.
                    "net.ipv4.conf.all.accept_local": 1,
                    "net.ipv4.conf.back.accept_local": 1,
                    "net.ipv4.vs.conntrack": 0,
                    # Sync established connections often (every 10 packets after the 3rd).
                    "net.ipv4.vs.sync_threshold": "3 10",
                }
            )
            d = Director(name, ns, front, back, priority, workdir / name)
            d.workdir.mkdir(parents=True, exist_ok=True)
            directors.append(d)
        backends = []
        for index in range(3):
            name = f"be{index + 1}"
            ns = Netns(f"{prefix}-{name}")
            made.append(ns)
            veth(ns, "eth0", switch, f"p-{name}")
            switch.ip(f"link set p-{name} master brb", f"link set p-{name} up")
            address = f"192.0.2.{11 + index}"
            ns.ip(
                "link set lo up",
                "link set eth0 up",
                f"addr add {address}/24 dev eth0",
                f"route add default via {GATEWAY}",
                f"addr add {DR_VIP}/32 dev lo",
            )
            ns.sysctls({"net.ipv4.conf.all.arp_ignore": 1, "net.ipv4.conf.all.arp_announce": 2})
            backends.append(Backend(name, ns, address, ""))
        lab = HaLab(prefix, switch, client, directors, backends, made)
        lab.servers = BackendServers(lab, (NAT_PORT, 80), ())  # type: ignore[arg-type]
        return lab
    except BaseException:
        for ns in reversed(made):
            ns.close()
        raise


ALIVE_SECONDS = 15  # keepalived gives up a box whose director has not stepped for this long


def restart_director(lab: HaLab, d: Director, preempt_delay: int = 5) -> float:
    """The director alone, stopped and started again (keepalived runs on): seconds to its
    first sync."""
    assert d.runtime is not None and d.ipvs is not None
    started = time.monotonic()
    d.runtime.stop()
    settings = parse_config(director_config(lab, d, preempt_delay), f"{d.name}.yaml")
    d.runtime = Runtime(settings, d.ipvs).start()
    if not d.runtime.wait_ready(60):
        raise RuntimeError(f"{d.name}: the restarted director never synced")
    return time.monotonic() - started


def director_config(
    lab: HaLab,
    d: Director,
    preempt_delay: int,
    advert_int: float = 0.1,
    realtime: int = 50,
    *,
    fullnat: bool = False,
    conntrackd: bool = False,
    services: str | None = None,
) -> str:
    """``fullnat``: a full-NAT service on FULLNAT_VIP whose SNAT address is the floating
    GATEWAY; ``conntrackd``: its settings (primary-backup over the back network);
    ``services``: what the director serves instead of the static web-nat and web-dr (pools
    and clusters, say)."""
    peer = next(o for o in lab.directors if o is not d)
    nat = ", ".join(f"{be.ipv4}:{NAT_PORT}" for be in lab.backends)
    dr = ", ".join(f"{{address: {be.ipv4}, port: 80, forwarding: dr}}" for be in lab.backends)
    full, with_conntrackd = "", ""
    if fullnat:
        full = (
            f"  - {{name: web-full, address: {FULLNAT_VIP}, port: 80, scheduler: rr, "
            f"forwarding: fullnat, real_servers: [{nat}]}}\nsnat: {{addresses: [{GATEWAY}]}}"
        )
    if conntrackd:
        with_conntrackd = f"""
  conntrackd:
    source: {d.back}
    peer: {peer.back}
    interface: back
    config_file: {d.workdir / "conntrackd.conf"}
    socket: {d.workdir / "conntrackd.sock"}
    lock_file: {d.workdir / "conntrackd.lock"}"""
    if services is None:
        services = f"""services:
  - {{name: web-nat, address: {NAT_VIP}, port: 80, scheduler: rr, real_servers: [{nat}]}}
  - {{name: web-dr, address: {DR_VIP}, port: 80, scheduler: rr, real_servers: [{dr}]}}
{full}"""
    return f"""
ownership: {{networks: [203.0.113.96/28]}}
{services}
ha:
  interface: front
  router_id: {d.name}
  priority: {d.priority}
  unicast_source: {d.front}
  peers: [{peer.front}]
  advert_int: {advert_int}
  realtime_priority: {realtime}
  alive_seconds: {ALIVE_SECONDS}
  preempt_delay: {preempt_delay}
  track_interfaces: [back]
  sync_interface: back
  sync_id: 1
  sync_group: 239.255.81.81
  sync_port: 8849
  gateways: [{{address: {GATEWAY}/24, interface: back}}]
  config_file: {d.conf}
  pid_file: {d.pid_file}
  fifo: {d.workdir / "keepalived.fifo"}
  netns: {d.ns.name}{with_conntrackd}
"""


def start_director(
    lab: HaLab,
    d: Director,
    preempt_delay: int = 5,
    advert_int: float = 0.1,
    realtime: int = 50,
    *,
    fullnat: bool = False,
    conntrackd: bool = False,
    services: str | None = None,
) -> None:
    """The director (IPVS and keepalived.conf), then keepalived itself."""
    text = director_config(
        lab,
        d,
        preempt_delay,
        advert_int,
        realtime,
        fullnat=fullnat,
        conntrackd=conntrackd,
        services=services,
    )
    settings = parse_config(text, f"{d.name}.yaml")
    d.realtime = realtime
    d.ipvs = KernelIpvs(netns=d.ns.name)
    d.runtime = Runtime(settings, d.ipvs).start()
    if not d.runtime.wait_ready(60):
        raise RuntimeError(f"{d.name}: the director never synced")
    assert d.runtime.daemons.keepalived is not None
    if not d.runtime.daemons.keepalived.settle(60) or not d.conf.exists():
        raise RuntimeError(
            f"{d.name}: no keepalived.conf ({d.runtime.daemons.keepalived.keepalived.last_error})"
        )
    start_keepalived(d)


def realtime_exec(priority: int) -> list[str]:
    """What starts keepalived real-time from its exec, as the role's systemd drop-in does
    (CPUSchedulingPolicy=rr, LimitRTTIME=): its VRRP process inherits it, so it is never
    ordinary, not even before the director first reads it back (a just-started backup
    starved then can miss its peer's adverts and take the VIPs for a moment). keepalived
    is told nothing (no vrrp_rt_priority) and so never touches it; the director adopts the
    VRRP process (reset on fork, the limit) and repairs it. ``priority`` 0: nothing."""
    if not priority:
        return []
    return ["prlimit", f"--rttime={LIMIT_US}:{LIMIT_US}", "--", "chrt", "-r", str(priority)]


def start_keepalived(d: Director) -> None:
    """keepalived (VRRP only) in the director's namespace, on the file it wrote, real-time
    from its exec at the director's ``realtime_priority``."""
    d.keepalived = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            d.ns.name,
            *realtime_exec(d.realtime),
            "keepalived",
            "--dont-fork",
            "--log-console",
            "--vrrp",
            "-f",
            str(d.conf),
            "-p",
            str(d.pid_file),
            "-r",
            str(d.workdir / "vrrp.pid"),
        ],
        stdout=(d.workdir / "keepalived.log").open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start_conntrackd(d: Director) -> None:
    """conntrackd in the director's namespace, from the file the director wrote."""
    assert d.runtime is not None and d.runtime.daemons.conntrackd is not None
    if not d.runtime.daemons.conntrackd.settle(60):
        raise RuntimeError(f"{d.name}: the director never wrote conntrackd.conf")
    run(["modprobe", "nf_conntrack_netlink"], check=False)
    conf = str(d.workdir / "conntrackd.conf")
    d.conntrackd = subprocess.Popen(
        ["ip", "netns", "exec", d.ns.name, "conntrackd", "-C", conf],
        stdout=(d.workdir / "conntrackd.log").open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # Ready once it answers on its socket (its first dump of the kernel's table done and its
    # events subscribed): a connection opened before would reach it only by a resync.
    answers = wait_for(
        lambda: (
            subprocess.run(
                ["conntrackd", "-C", conf, "-s"], capture_output=True, check=False
            ).returncode
            == 0
        ),
        30,
        step=0.2,
    )
    if answers is None:
        raise RuntimeError(f"{d.name}: conntrackd never answered on its socket")


def stop_conntrackd(d: Director) -> None:
    if d.conntrackd is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(d.conntrackd.pid, signal.SIGTERM)
        try:
            d.conntrackd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(d.conntrackd.pid, signal.SIGKILL)
            d.conntrackd.wait(timeout=10)
        d.conntrackd = None
    with contextlib.suppress(FileNotFoundError):
        (d.workdir / "conntrackd.lock").unlink()  # a daemon killed leaves it behind


def kill_keepalived(d: Director) -> None:
    """kill -9 keepalived and its VRRP process: a crash, no goodbye advert, VIPs left."""
    if d.keepalived is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(d.keepalived.pid, signal.SIGKILL)
        d.keepalived.wait(timeout=10)
        d.keepalived = None


def stop_director(d: Director) -> None:
    stop_conntrackd(d)
    if d.keepalived is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(d.keepalived.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            d.keepalived.wait(timeout=10)
        kill_keepalived(d)
    if d.runtime is not None:
        d.runtime.stop()
        d.runtime = None
    if d.ipvs is not None:
        d.ipvs.close()  # its namespace goes with the lab, and its IPVS table with it
        d.ipvs = None


class WithClient(Protocol):
    """A lab with a client namespace (the namespace pair's, or boot-net for booted boxes)."""

    @property
    def client(self) -> Netns: ...


class Talkers:
    """``count`` long-lived TCP connections to a VIP, each asking every ``period`` seconds.

    A request fails when its connection errors or closes, or when no answer comes within
    ``patience`` seconds; a slow answer (TCP retransmitting across a failover) is not a
    failure. One selector thread drives them all."""

    def __init__(
        self,
        lab: WithClient,
        vip: str,
        count: int = 50,
        period: float = 0.1,
        patience: float = 10.0,
        *,
        same_ports: int | None = None,
    ) -> None:
        """``same_ports``: connection i leaves from port same_ports + i // len(CLIENTS), so
        each port is used from every client address at once (to one backend, SNAT has to
        give all but one of them another port)."""
        self.period, self.patience = period, patience
        self.answered = 0
        self.failed = 0
        self.broken: set[int] = set()
        self.failures: list[tuple[float, int, str]] = []  # (wall clock, connection, why)
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._sent: dict[int, float] = {}
        self._next: dict[int, float] = {}
        for i in range(count):
            sock = lab.client.socket(socket.AF_INET, socket.SOCK_STREAM)
            port = 0 if same_ports is None else same_ports + i // len(CLIENTS)
            if port:  # the same port again in a later run: a closed one waits in TIME_WAIT
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((CLIENTS[i % len(CLIENTS)], port))
            sock.settimeout(5)
            sock.connect((vip, 80))
            sock.setblocking(False)
            self._socks.append(sock)
            self._sel.register(sock, selectors.EVENT_READ, i)
            self._next[i] = time.monotonic() + period * i / count
        self._thread = threading.Thread(target=self._run, daemon=True, name="talkers")
        self._thread.start()

    def _fail(self, i: int, why: str) -> None:
        self.failed += 1
        self.broken.add(i)
        self.failures.append((time.time(), i, why))
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(self._socks[i])
        self._sent.pop(i, None)
        self._next.pop(i, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for i, due in list(self._next.items()):
                if due <= now and i not in self._sent:
                    try:
                        self._socks[i].send(b"q\n")
                        self._sent[i] = now
                    except OSError as exc:
                        self._fail(i, f"send: {exc}")
            for i, sent in list(self._sent.items()):
                if now - sent > self.patience:
                    self._fail(i, f"no answer in {self.patience:g}s")
            for key, _ in self._sel.select(timeout=0.01):
                i = key.data
                try:
                    data = self._socks[i].recv(4096)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    self._fail(i, f"recv: {exc}")
                    continue
                if not data:
                    self._fail(i, "closed by the peer")
                    continue
                if i in self._sent:
                    self.answered += data.count(b"\n")
                    del self._sent[i]
                    self._next[i] = time.monotonic() + self.period

    @property
    def alive(self) -> int:
        return len(self._socks) - len(self.broken)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for sock in self._socks:
            sock.close()
        self._sel.close()


def new_connections(lab: HaLab, vip: str, seconds: float, timeout: float = 1.0) -> tuple[int, int]:
    """(succeeded, tried) new connections, one every 50 ms, during ``seconds``; each waits
    ``timeout`` seconds for its answer."""
    tried = ok = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tried += 1
        try:
            sock = lab.client.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect((vip, 80))
            sock.sendall(b"q\n")
            if sock.recv(64):
                ok += 1
            sock.close()
        except OSError:
            pass
        time.sleep(0.05)
    return ok, tried


@contextlib.contextmanager
def ha_lab(prefix: str, workdir: Path) -> Iterator[HaLab]:
    lab = build_ha_lab(prefix, workdir)
    try:
        yield lab
    finally:
        lab.close()
