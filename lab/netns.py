"""Test hosts as network namespaces: build a topology, talk through it, always tear it down.

Sockets are created *inside* a namespace by a worker thread that has entered it, so one
Python process (the single pytest process in the lab VM, or the demo) can be client,
backend and director at once without starting more interpreters (slow in the VM).
"""

from __future__ import annotations

import contextlib
import queue
import selectors
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from director.dataplane.netns import enter_netns

if TYPE_CHECKING:
    from director.dataplane.kernel import KernelIpvs

T = TypeVar("T")


def run(cmd: list[str], stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


class Netns:
    """One namespace and a worker thread living inside it."""

    def __init__(self, name: str) -> None:
        self.name = name
        run(["ip", "netns", "add", name])
        self._jobs: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]] | None] = queue.Queue()
        ready: queue.Queue[BaseException | None] = queue.Queue()
        self._thread = threading.Thread(
            target=self._work, args=(ready,), daemon=True, name=f"netns-{name}"
        )
        self._thread.start()
        failure = ready.get()
        if failure is not None:
            raise failure

    def _work(self, ready: queue.Queue[BaseException | None]) -> None:
        try:
            enter_netns(self.name)
        except BaseException as exc:
            ready.put(exc)
            return
        ready.put(None)
        while (job := self._jobs.get()) is not None:
            fn, reply = job
            try:
                reply.put((True, fn()))
            except BaseException as exc:
                reply.put((False, exc))

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` inside the namespace and return its result."""
        reply: queue.Queue[Any] = queue.Queue()
        self._jobs.put((fn, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def socket(self, family: int, kind: int) -> socket.socket:
        return self.call(lambda: socket.socket(family, kind))

    def ip(self, *lines: str) -> None:
        """Run ``ip`` commands (one per line, without the leading ``ip``) in one process."""
        run(["ip", "-n", self.name, "-batch", "-"], stdin="\n".join(lines) + "\n")

    def sysctls(self, pairs: dict[str, str | int]) -> None:
        self.exec(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in pairs.items())])

    def exec(self, cmd: list[str], check: bool = True) -> str:
        return run(["ip", "netns", "exec", self.name, *cmd], check=check)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)
        run(["ip", "netns", "del", self.name], check=False)


# --- the standard lab --------------------------------------------------------------------
# Documentation ranges only (RFC 5737 / RFC 3849); nothing leaves the namespaces.
CLIENT_NET4, CLIENT_NET6 = "203.0.113", "2001:db8:1::"
BACKEND_NET4, BACKEND_NET6 = "192.0.2", "2001:db8:2::"
VIP_NET4, VIP_NET6 = "198.51.100", "2001:db8:100::"
CLIENT_SOURCES = 8  # the client holds .2 - .9, so source-hash schedulers can show a spread

NAT_PORT, DR_PORT, UDP_NAT_PORT, UDP_PORT = 8080, 80, 5353, 53


@dataclass
class Backend:
    name: str
    ns: Netns
    ipv4: str
    ipv6: str


@dataclass
class Lab:
    """client ns -- lvs ns (IPVS, router, bridge) -- backend namespaces on the bridge.

    The lvs namespace is the director; backends route through it (the LVS-NAT return path),
    hold the DR VIPs on ``lo`` (ARP quiet) and the TUN VIPs on ``tunl0``/``ip6tnl0``.
    """

    prefix: str
    client: Netns
    lvs: Netns
    backends: list[Backend]
    dr_vips: tuple[str, ...]
    tun_vips: tuple[str, ...]
    namespaces: list[Netns] = field(default_factory=list)
    servers: BackendServers | None = None

    @property
    def client_sources4(self) -> list[str]:
        return [f"{CLIENT_NET4}.{2 + i}" for i in range(CLIENT_SOURCES)]

    def close(self) -> None:
        if self.servers is not None:
            self.servers.close()
        for ns in reversed(self.namespaces):
            ns.close()

    def add_vips(self, vips: Iterable[str]) -> None:
        """Make addresses local to the director (so IPVS sees traffic to them)."""
        self.lvs.ip(*(f"addr add {_host(v)} dev vips" for v in vips))


def _host(address: str) -> str:
    return f"{address}/128 nodad" if ":" in address else f"{address}/32"


def build_lab(
    prefix: str = "lab",
    backends: int = 3,
    vips: Iterable[str] = (),
    dr_vips: Iterable[str] = (),
    tun_vips: Iterable[str] = (),
) -> Lab:
    """Build the standard lab. ``vips`` are added to the director; ``dr_vips`` and
    ``tun_vips`` also to every backend (on lo / on the tunnel devices)."""
    run(["modprobe", "-a", "ip_vs", "ipip", "ip6_tunnel", "dummy", "veth", "bridge"], check=False)
    dr_vips, tun_vips = tuple(dr_vips), tuple(tun_vips)
    made: list[Netns] = []
    try:
        client = Netns(f"{prefix}-client")
        made.append(client)
        lvs = Netns(f"{prefix}-lvs")
        made.append(lvs)
        run(
            [
                "ip",
                "link",
                "add",
                "c0",
                "netns",
                client.name,
                "type",
                "veth",
                "peer",
                "name",
                "to-client",
                "netns",
                lvs.name,
            ]
        )
        lvs.ip(
            "link set lo up",
            "link set to-client up",
            f"addr add {CLIENT_NET4}.1/24 dev to-client",
            f"addr add {CLIENT_NET6}1/64 dev to-client nodad",
            "link add br0 type bridge",
            "link set br0 up",
            f"addr add {BACKEND_NET4}.1/24 dev br0",
            f"addr add {BACKEND_NET6}1/64 dev br0 nodad",
            "link add vips type dummy",
            "link set vips up",
        )
        lvs.sysctls(
            {
                "net.ipv4.ip_forward": 1,
                "net.ipv6.conf.all.forwarding": 1,
                "net.ipv4.conf.all.rp_filter": 0,
                "net.ipv4.conf.default.rp_filter": 0,
                # DR/TUN replies come back through the director with a VIP (local) source.
                "net.ipv4.conf.all.accept_local": 1,
                "net.ipv4.conf.br0.accept_local": 1,
                "net.ipv4.vs.conntrack": 0,
            }
        )
        client.ip(
            "link set lo up",
            "link set c0 up",
            *(
                f"addr add {a}/24 dev c0"
                for a in [f"{CLIENT_NET4}.{2 + i}" for i in range(CLIENT_SOURCES)]
            ),
            f"addr add {CLIENT_NET6}2/64 dev c0 nodad",
            f"route add default via {CLIENT_NET4}.1",
            f"route add default via {CLIENT_NET6}1",
        )
        members: list[Backend] = []
        for index in range(backends):
            name = f"be{index + 1}"
            ns = Netns(f"{prefix}-{name}")
            made.append(ns)
            v4, v6 = f"{BACKEND_NET4}.{11 + index}", f"{BACKEND_NET6}{11 + index:x}"
            run(
                [
                    "ip",
                    "link",
                    "add",
                    "eth0",
                    "netns",
                    ns.name,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    f"to-{name}",
                    "netns",
                    lvs.name,
                ]
            )
            lvs.ip(f"link set to-{name} master br0", f"link set to-{name} up")
            ns.ip(
                "link set lo up",
                "link set eth0 up",
                f"addr add {v4}/24 dev eth0",
                f"addr add {v6}/64 dev eth0 nodad",
                f"route add default via {BACKEND_NET4}.1",
                f"route add default via {BACKEND_NET6}1",
                *(f"addr add {_host(v)} dev lo" for v in dr_vips),
                "link set tunl0 up",
                "link set ip6tnl0 up",
                *(
                    f"addr add {_host(v)} dev {'ip6tnl0' if ':' in v else 'tunl0'}"
                    for v in tun_vips
                ),
            )
            ns.sysctls(
                {
                    "net.ipv4.conf.all.arp_ignore": 1,
                    "net.ipv4.conf.all.arp_announce": 2,
                    "net.ipv4.conf.all.rp_filter": 0,
                    "net.ipv4.conf.default.rp_filter": 0,
                    "net.ipv4.conf.tunl0.rp_filter": 0,
                }
            )
            members.append(Backend(name, ns, v4, v6))
        lab = Lab(prefix, client, lvs, members, dr_vips, tun_vips, made)
        lab.add_vips([*vips, *dr_vips, *tun_vips])
        return lab
    except BaseException:
        for ns in reversed(made):
            ns.close()
        raise


@contextlib.contextmanager
def lab_topology(**kwargs: Any) -> Iterator[Lab]:
    lab = build_lab(**kwargs)
    try:
        yield lab
    finally:
        lab.close()


# --- traffic -------------------------------------------------------------------------------
class BackendServers:
    """Every backend answers each line (TCP) or datagram (UDP) with its name.

    One selector thread serves all sockets of all backends. UDP sockets are bound per local
    address so that replies leave from the address the request was sent to (a DR/TUN VIP).
    """

    def __init__(self, lab: Lab, tcp_ports: Iterable[int], udp_ports: Iterable[int]) -> None:
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self.peers: list[tuple[str, str]] = []  # (backend, the client address it saw), TCP
        self._sockets: list[socket.socket] = []
        self._listeners: dict[tuple[str, int], socket.socket] = {}
        for be in lab.backends:
            for port in tcp_ports:
                self._listen(be, port)
            for port in udp_ports:
                for address in (be.ipv4, be.ipv6, *lab.dr_vips, *lab.tun_vips):
                    self._udp(be, address, port)
        self._thread = threading.Thread(target=self._serve, daemon=True, name="backends")
        self._thread.start()

    def _listen(self, be: Backend, port: int) -> None:
        def make() -> socket.socket:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("::", port))
            sock.listen(512)
            sock.setblocking(False)
            return sock

        sock = be.ns.call(make)
        self._sockets.append(sock)
        self._listeners[(be.name, port)] = sock
        self._sel.register(sock, selectors.EVENT_READ, ("accept", be.name))

    def stop_listening(self, be: Backend, port: int) -> None:
        """The backend's server dies on that port: new connections are refused."""
        sock = self._listeners.pop((be.name, port))
        self._sel.unregister(sock)
        sock.close()

    def start_listening(self, be: Backend, port: int) -> None:
        self._listen(be, port)

    def _udp(self, be: Backend, address: str, port: int) -> None:
        def make() -> socket.socket:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.bind((address, port))
            sock.setblocking(False)
            return sock

        sock = be.ns.call(make)
        self._sockets.append(sock)
        self._sel.register(sock, selectors.EVENT_READ, ("udp", be.name))

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.2):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                role, name = key.data
                try:
                    if role == "accept":
                        conn, peer = sock.accept()
                        # a dual-stack socket names an IPv4 client ::ffff:a.b.c.d
                        self.peers.append((name, str(peer[0]).removeprefix("::ffff:")))
                        conn.setblocking(False)
                        self._sel.register(conn, selectors.EVENT_READ, ("conn", name))
                    elif role == "udp":
                        _, peer = sock.recvfrom(2048)
                        sock.sendto(f"{name}\n".encode(), peer)
                    else:
                        data = sock.recv(65536)
                        if not data:
                            self._sel.unregister(sock)
                            sock.close()
                            continue
                        sock.sendall(f"{name}\n".encode() * data.count(b"\n"))
                except OSError:
                    with contextlib.suppress(Exception):
                        self._sel.unregister(sock)
                    sock.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()


def start_servers(
    lab: Lab,
    tcp_ports: Iterable[int] = (NAT_PORT, DR_PORT),
    udp_ports: Iterable[int] = (UDP_NAT_PORT, UDP_PORT),
) -> BackendServers:
    lab.servers = BackendServers(lab, tcp_ports, udp_ports)
    return lab.servers


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


class Connection:
    """A long-lived TCP connection from the client namespace; ``ask()`` sends one line."""

    def __init__(
        self, ns: Netns, address: str, port: int, source: str | None = None, timeout: float = 3.0
    ) -> None:
        self.sock = ns.socket(_family(address), socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        if source:
            self.sock.bind((source, 0))
        self.sock.connect((address, port))
        self._file = self.sock.makefile("rb")

    def ask(self) -> str:
        self.sock.sendall(b"q\n")
        line = self._file.readline()
        if not line:
            raise ConnectionError("connection closed by peer")
        return line.decode().strip()

    def close(self) -> None:
        self._file.close()
        self.sock.close()


def ask_tcp(
    ns: Netns, address: str, port: int, source: str | None = None, timeout: float = 3.0
) -> str:
    conn = Connection(ns, address, port, source, timeout)
    try:
        return conn.ask()
    finally:
        conn.close()


def connect_attempts(
    ns: Netns, address: str, port: int, source: str, count: int, *, wait: float = 0.3
) -> tuple[int, float]:
    """``count`` connection attempts from ``source`` to ``address``:``port`` at once: how
    many were answered within ``wait`` (an accept or a reset: the SYN got through; too short
    for TCP to send a SYN again), and the seconds they took in all."""

    def one() -> bool:
        with ns.socket(_family(address), socket.SOCK_STREAM) as s:
            s.bind((source, 0))
            s.settimeout(wait)
            try:
                s.connect((address, port))
            except ConnectionRefusedError:
                return True
            except TimeoutError:
                return False
            return True

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=count) as pool:
        answered = sum(pool.map(lambda _: one(), range(count)))
    return answered, time.monotonic() - started


def ask_udp(
    ns: Netns, address: str, port: int, source: str | None = None, timeout: float = 3.0
) -> str:
    sock = ns.socket(_family(address), socket.SOCK_DGRAM)
    try:
        sock.settimeout(timeout)
        if source:
            sock.bind((source, 0))
        sock.connect((address, port))
        sock.send(b"q\n")
        return sock.recv(2048).decode().strip()
    finally:
        sock.close()


def fresh_namespace(name: str) -> tuple[Netns, KernelIpvs]:
    """A new network namespace: its own IPVS, with an empty table and an empty dest trash.

    Fresh for every contender: after a mass delete the kernel keeps removed real servers in
    a trash list for a while and every add scans it, so a contender that ran second in a
    just-flushed namespace would pay for the first one (measured: 188 s instead of 9 s).
    """
    from director.dataplane.kernel import KernelIpvs

    ns = Netns(name)
    ns.ip("link set lo up")
    return ns, KernelIpvs(netns=name)


class Prober:
    """New connections to ``vip``:80 from ``client`` in the background, one every ``period``
    seconds, each asking once and waiting ``timeout`` seconds for its answer: how many were
    answered, and when the answered and the failed ones were."""

    def __init__(
        self,
        client: Netns,
        vip: str,
        source: str | None = None,
        *,
        period: float = 0.1,
        timeout: float = 3.0,
    ) -> None:
        self.client, self.vip, self.source = client, vip, source
        self.period, self.timeout = period, timeout
        self.tried = self.ok = 0
        self.answered_at: list[float] = []
        self.failed_at: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="prober")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.tried += 1
            try:
                sock = self.client.socket(socket.AF_INET, socket.SOCK_STREAM)
                with sock:
                    sock.settimeout(self.timeout)
                    if self.source:
                        sock.bind((self.source, 0))
                    sock.connect((self.vip, 80))
                    sock.sendall(b"q\n")
                    if not sock.recv(64):
                        raise OSError("closed unanswered")
                self.ok += 1
                self.answered_at.append(time.monotonic())
            except OSError:
                self.failed_at.append(time.monotonic())

    def close(self) -> tuple[int, int]:
        """Stop; (answered, tried)."""
        self._stop.set()
        self._thread.join(10)
        return self.ok, self.tried

    @property
    def failed_window(self) -> float:
        """Seconds from the first failed connection to the last (0 when none or one)."""
        return self.failed_at[-1] - self.failed_at[0] if self.failed_at else 0.0
