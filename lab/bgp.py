"""The scale-out lab: a router running FRR spreads a VIP over three active directors by ECMP.

    client 203.0.113.2-9 ── router (FRR, AS 64500, ECMP, L4 hash) ── front 198.18.0.0/24
                              │ 192.0.2.1                               d1 .11  d2 .12  d3 .13
                              │                                         (FRR, AS 64512, BFD)
                              └──────────── back 192.0.2.0/24 ───────── d1 .2   d2 .3   d3 .4
                                                                         be1-be10 .11-.20

Each director runs ``director.daemon.runtime.Runtime`` (two static services in a ``bgp`` pool,
Maglev hashing: the VIP .10 by tun, .11 by direct routing on the back segment) against the
IPVS of its namespace, with its admin API on loopback, and its own FRR (zebra, bfdd, bgpd,
each with ``-N`` so pid files and sockets stay per namespace). The director renders
frr.conf and applies it with ``frr-reload.py``; FRR boots from the same file the way
frrinit does (``vtysh -b``). Where a test kills the director (kill -9), it runs as a
process of its own instead (``director run --netns``), as systemd runs it.
Backends are set up by the ``director_node`` role's ``director-node``, as a node would be:
they decapsulate IPIP (the tun VIP on ``tunl0``), hold the dr VIP on ``lo`` (ARP quiet),
and answer the client directly through the router. A probe host on the front
segment reaches one director at a time (a host route), to compare the directors' choices
flow by flow.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.error import HTTPError

from director.daemon.runtime import Runtime
from director.dataplane.kernel import KernelIpvs
from director.schema.config import parse_config
from lab.ha import veth
from lab.netns import Backend, BackendServers, Netns, run

VIP, PORT = "198.51.100.10", 80
DR_VIP = "198.51.100.11"  # the same backends by direct routing (directors and backends share brb)
# The same backends by full NAT: each director leaves for them from its own back address.
FULLNAT_VIP = "198.51.100.12"
NODE = Path(__file__).resolve().parent.parent / "ansible/roles/director_node/files/director-node"
ROUTER_ASN, DIRECTOR_ASN = 64500, 64512
ROUTER_FRONT, ROUTER_BACK = "198.18.0.1", "192.0.2.1"
PROBE = "198.18.0.50"
BFD_MS = 300  # both sides, the director's default: a dead director is noticed within 0.9 s
TOKEN = "bgp-lab-admin-api-token-0123"
API_PORTS = {"d1": 9181, "d2": 9182, "d3": 9183}  # a director run as a process listens here
NOBODY = "198.18.0.99"  # a peer that never answers: the director serves on without it
FRONT_NET = "198.18.0"
CLIENTS = [f"203.0.113.{2 + i}" for i in range(8)]
DAEMONS = ("zebra", "bfdd", "bgpd")
FRR = Path("/usr/lib/frr")


@dataclass
class BgpDirector:
    name: str
    ns: Netns
    front: str
    back: str
    workdir: Path
    runtime: Runtime | None = None
    ipvs: KernelIpvs | None = None
    process: subprocess.Popen[bytes] | None = None  # run as a process (to be killed)

    @property
    def frr_conf(self) -> Path:
        return Path("/etc/frr") / self.ns.name / "frr.conf"

    @property
    def token_file(self) -> Path:
        return self.workdir / "token"

    @property
    def url(self) -> str:
        """The director's admin API (in-process: its port; as a process: API_PORTS)."""
        if self.runtime is not None and self.runtime.api is not None:
            return f"http://127.0.0.1:{self.runtime.api.port}"
        return f"http://127.0.0.1:{API_PORTS[self.name]}"


@dataclass
class BgpLab:
    prefix: str
    switch: Netns
    client: Netns
    router: Netns
    probe: Netns
    directors: list[BgpDirector]
    backends: list[Backend]
    namespaces: list[Netns] = field(default_factory=list)
    servers: BackendServers | None = None
    dr_vips: tuple[str, ...] = ()
    tun_vips: tuple[str, ...] = ()

    def close(self) -> None:
        if self.servers is not None:
            self.servers.close()
        for d in self.directors:
            stop_director(d)
            kill_frr(d.ns)
        kill_frr(self.router)
        for ns in reversed(self.namespaces):
            ns.close()

    def nexthops(self, vip: str = VIP) -> set[str]:
        return nexthops(self.router, vip)


def nexthops(router: Netns, vip: str = VIP) -> set[str]:
    """The next hops ``router``'s kernel holds for ``vip`` (installed by zebra)."""
    text = router.exec(["ip", "-4", "route", "show", f"{vip}/32"], check=False)
    return {w.split()[0] for w in text.split(" via ")[1:]}

    def director_of(self, address: str) -> BgpDirector:
        return next(d for d in self.directors if d.front == address)


# -- FRR in a namespace ----------------------------------------------------------------------
def start_frr(ns: Netns, config: str | None = None) -> None:
    """zebra, bfdd and bgpd in ``ns`` (pathspace ``ns.name``), then the configuration loaded
    from /etc/frr/NS/frr.conf as frrinit does (``vtysh -b``). ``config``: write it first."""
    etc, rundir = Path("/etc/frr") / ns.name, Path("/run/frr") / ns.name
    for folder in (etc, rundir):
        folder.mkdir(parents=True, exist_ok=True)
        run(["chown", "frr:frr", str(folder)])
    (etc / "vtysh.conf").touch()
    if config is not None:
        (etc / "frr.conf").write_text(config)
    for daemon in DAEMONS:
        (etc / f"{daemon}.conf").touch()
    procs = [
        run_bg(
            [
                "ip",
                "netns",
                "exec",
                ns.name,
                str(FRR / daemon),
                "-N",
                ns.name,
                "-d",
                "-A",
                "127.0.0.1",
                "-f",
                str(etc / f"{daemon}.conf"),
            ]
        )
        for daemon in DAEMONS
    ]
    for proc in procs:  # -d: each returns once its daemon is up
        proc.wait(timeout=120)
    if (etc / "frr.conf").exists():
        run(["vtysh", "-N", ns.name, "-b"], check=False)


def frr_daemons_alive(ns: Netns) -> int:
    """How many of zebra, bfdd and bgpd run in ``ns`` (by their pid files)."""
    alive = 0
    for daemon in DAEMONS:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((Path("/run/frr") / ns.name / f"{daemon}.pid").read_text().split()[0]), 0)
            alive += 1
    return alive


def restore(lab: BgpLab, d: BgpDirector) -> bool:
    """``d`` serving again if a test left it dead (its director killed, maybe its FRR too):
    True when it had to be started."""
    if d.runtime is not None or d.process is not None:
        return False
    alive = frr_daemons_alive(d.ns)
    if 0 < alive < len(DAEMONS):  # half an FRR: start it whole
        kill_frr(d.ns)
        time.sleep(1)
        alive = 0
    start_director(lab, d, frr=alive == 0)
    return True


def run_bg(cmd: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_frr(ns: Netns, sig: int = signal.SIGKILL) -> None:
    for daemon in DAEMONS:
        with contextlib.suppress(OSError, ValueError):
            pid = int((Path("/run/frr") / ns.name / f"{daemon}.pid").read_text().split()[0])
            os.kill(pid, sig)


def vtysh(ns: Netns, command: str) -> str:
    return run(["vtysh", "-N", ns.name, "-c", command], check=False)


def router_config(log: Path) -> str:
    """``log``: bgpd's session changes, to the millisecond (see bfd_down_after)."""
    peers = "\n".join(
        f" neighbor {FRONT_NET}.{11 + i} remote-as {DIRECTOR_ASN}\n"
        f" neighbor {FRONT_NET}.{11 + i} timers 1 3\n"
        f" neighbor {FRONT_NET}.{11 + i} timers connect 1\n"
        f" neighbor {FRONT_NET}.{11 + i} bfd\n"
        f" neighbor {FRONT_NET}.{11 + i} bfd profile fast"
        for i in range(3)
    )
    return f"""frr defaults traditional
hostname router
log syslog informational
log file {log} informational
log timestamp precision 3
service integrated-vtysh-config
!
router bgp {ROUTER_ASN}
 bgp router-id {ROUTER_FRONT}
 bgp log-neighbor-changes
 no bgp ebgp-requires-policy
{peers}
 address-family ipv4 unicast
  maximum-paths 16
 exit-address-family
exit
!
bfd
 profile fast
  transmit-interval {BFD_MS}
  receive-interval {BFD_MS}
  detect-multiplier 3
 exit
exit
!
"""


# -- the topology ----------------------------------------------------------------------------
def director_namespace(switch: Netns, prefix: str, index: int) -> Netns:
    """Director ``index``'s namespace, plugged into both segments: as a box boots, with an
    empty IPVS table and nothing on ``lo``."""
    ns = Netns(f"{prefix}-d{index}")
    for ifname, bridge, port in (("front", "brf", f"p-d{index}f"), ("back", "brb", f"p-d{index}b")):
        veth(ns, ifname, switch, port)
        switch.ip(f"link set {port} master {bridge}", f"link set {port} up")
    front, back = f"{FRONT_NET}.{10 + index}", f"192.0.2.{1 + index}"
    ns.ip(
        "link set lo up",
        "link set front up",
        "link set back up",
        f"addr add {front}/24 dev front",
        f"addr add {back}/24 dev back",
        f"route add default via {ROUTER_FRONT}",
    )
    ns.sysctls(
        {
            "net.ipv4.conf.all.rp_filter": 0,
            "net.ipv4.conf.default.rp_filter": 0,
            "net.ipv4.conf.all.arp_ignore": 1,
            "net.ipv4.conf.all.arp_announce": 2,
            "net.ipv4.vs.conntrack": 0,
        }
    )
    return ns


def build_bgp_lab(prefix: str, workdir: Path, backends: int = 10) -> BgpLab:
    run(["modprobe", "-a", "ip_vs", "ip_vs_mh", "ipip", "veth", "bridge"], check=False)
    made: list[Netns] = []

    def netns(name: str) -> Netns:
        ns = Netns(f"{prefix}-{name}")
        made.append(ns)
        return ns

    try:
        switch = netns("sw")
        switch.ip(
            "link set lo up",
            "link add brf type bridge",
            "link add brb type bridge",
            "link set brf up",
            "link set brb up",
        )

        def plug(ns: Netns, ifname: str, bridge: str, port: str) -> None:
            veth(ns, ifname, switch, port)
            switch.ip(f"link set {port} master {bridge}", f"link set {port} up")

        client, router, probe = netns("client"), netns("router"), netns("probe")
        veth(client, "c0", router, "rclient")
        client.ip(
            "link set lo up",
            "link set c0 up",
            *(f"addr add {a}/24 dev c0" for a in CLIENTS),
            "route add default via 203.0.113.1",
        )
        plug(router, "rfront", "brf", "p-rf")
        plug(router, "rback", "brb", "p-rb")
        router.ip(
            "link set lo up",
            "link set rclient up",
            "link set rfront up",
            "link set rback up",
            "addr add 203.0.113.1/24 dev rclient",
            f"addr add {ROUTER_FRONT}/24 dev rfront",
            f"addr add {ROUTER_BACK}/24 dev rback",
        )
        router.sysctls(
            {
                "net.ipv4.ip_forward": 1,
                "net.ipv4.conf.all.rp_filter": 0,
                "net.ipv4.conf.default.rp_filter": 0,
                "net.ipv4.conf.rback.rp_filter": 0,
                "net.ipv4.conf.rfront.rp_filter": 0,
                "net.ipv4.fib_multipath_hash_policy": 1,
            }
        )
        plug(probe, "eth0", "brf", "p-probe")
        probe.ip(
            "link set lo up",
            "link set eth0 up",
            f"addr add {PROBE}/24 dev eth0",
            f"route add default via {ROUTER_FRONT}",
        )
        directors = []
        for index in range(1, 4):
            ns = director_namespace(switch, prefix, index)
            made.append(ns)
            front, back = f"{FRONT_NET}.{10 + index}", f"192.0.2.{1 + index}"
            d = BgpDirector(f"d{index}", ns, front, back, workdir / f"d{index}")
            d.workdir.mkdir(parents=True, exist_ok=True)
            directors.append(d)
        servers = []
        for index in range(backends):
            ns = netns(f"be{index + 1}")
            plug(ns, "eth0", "brb", f"p-be{index + 1}")
            address = f"192.0.2.{11 + index}"
            ns.ip(
                "link set lo up",
                "link set eth0 up",
                f"addr add {address}/24 dev eth0",
                f"route add default via {ROUTER_BACK}",
            )
            ns.sysctls({"net.ipv4.conf.all.rp_filter": 1})  # strict, as many distributions
            ns.exec([str(NODE), "--tun", "--vip", VIP])  # what the node role runs at boot
            ns.exec([str(NODE), "--vip", DR_VIP])
            servers.append(Backend(f"be{index + 1}", ns, address, ""))
        lab = BgpLab(
            prefix,
            switch,
            client,
            router,
            probe,
            directors,
            servers,
            made,
            tun_vips=(VIP,),
            dr_vips=(DR_VIP,),
        )
        lab.servers = BackendServers(lab, (PORT,), ())  # type: ignore[arg-type]
        start_frr(router, router_config(router_log(router)))
        return lab
    except BaseException:
        for ns in reversed(made):
            kill_frr(ns)
            ns.close()
        raise


def director_config(
    d: BgpDirector,
    backends: list[Backend],
    poll: int = 1,
    extra_peer: str | None = None,
    *,
    api_port: int = 0,
    tools: Path | None = None,
    load_port: int | None = None,
) -> str:
    """``tools``: a folder with the vtysh and frr-reload.py the director is to run (the
    chaos suite's stand-ins, which it can take away and put back); ``load_port``: one more
    tun service on the VIP, at that port, to the same backends (a load bench's web servers)."""
    real = ", ".join(f"{{address: {be.ipv4}, port: {PORT}}}" for be in backends)
    load = ", ".join(f"{{address: {be.ipv4}, port: {load_port}}}" for be in backends)
    load_service = f"""  - name: web-load
    address: {VIP}
    port: {load_port}
    scheduler: mh
    flags: [mh-port]
    forwarding: tun
    real_servers: [{load}]
"""
    d.token_file.write_text(TOKEN + "\n")
    # Health checks quick enough for a test: down after 2 failed checks 0.5 s apart.
    return f"""
pools:
  - {{name: edge, addresses: [198.51.100.0/28], announce: bgp, communities: ["{DIRECTOR_ASN}:10"],
     large_communities: ["{DIRECTOR_ASN}:1:4294967295"]}}
services:
  - name: web
    address: {VIP}
    port: {PORT}
    scheduler: mh
    flags: [mh-port]
    forwarding: tun
    real_servers: [{real}]
  - name: web-dr
    address: {DR_VIP}
    port: {PORT}
    scheduler: mh
    flags: [mh-port]
    forwarding: dr
    real_servers: [{real}]
  - name: web-full
    address: {FULLNAT_VIP}
    port: {PORT}
    scheduler: mh
    flags: [mh-port]
    forwarding: fullnat
    real_servers: [{real}]
{load_service if load_port else ""}\
snat: {{addresses: [{d.back}]}}
health: {{check: tcp, interval: 0.5, timeout: 0.4, rise: 1, fall: 2}}
api:
  listen: 127.0.0.1:{api_port}
  token_file: {d.token_file}
  intents_file: {d.workdir / "intents.json"}
bgp:
  asn: {DIRECTOR_ASN}
  router_id: {d.front}
  hostname: {d.name}
  pathspace: {d.ns.name}
  config_file: {d.frr_conf}
  poll_seconds: {poll}
  leave_seconds: 2
{f"  vtysh: {tools}/vtysh{chr(10)}  reload: {tools}/frr-reload{chr(10)}" if tools else ""}\
  peers:
    - {{address: {ROUTER_FRONT}, asn: {ROUTER_ASN}, keepalive: 1, hold: 3, bfd: true,
       bfd_interval_ms: {BFD_MS}}}
    - {{address: {NOBODY}, asn: {ROUTER_ASN}, bfd: false}}
""" + (f"    - {{address: {extra_peer}, asn: {ROUTER_ASN}, bfd: false}}\n" if extra_peer else "")


def start_director(
    lab: BgpLab,
    d: BgpDirector,
    backends: list[Backend] | None = None,
    frr: bool = True,
    extra_peer: str | None = None,
    *,
    load_port: int | None = None,
) -> None:
    """FRR (with whatever frr.conf the director left; ``frr``: it is not running), then the
    director itself (``backends``: its real servers, in this order in its file;
    ``extra_peer``: one more BGP peer)."""
    if frr:
        start_frr(d.ns)
    text = director_config(
        d,
        lab.backends if backends is None else backends,
        extra_peer=extra_peer,
        load_port=load_port,
    )
    d.ipvs = KernelIpvs(netns=d.ns.name)
    d.runtime = Runtime(parse_config(text, f"{d.name}.yaml"), d.ipvs, netns=d.ns.name).start()
    if not d.runtime.wait_ready(60):
        raise RuntimeError(f"{d.name}: the director never synced")


def start_director_process(
    lab: BgpLab, d: BgpDirector, tools: Path | None = None, load_port: int | None = None
) -> None:
    """The director as systemd runs it: a process of its own (``director run --netns``),
    ready once its API says so."""
    config = d.workdir / "director.yaml"
    config.write_text(
        director_config(
            d, lab.backends, api_port=API_PORTS[d.name], tools=tools, load_port=load_port
        )
    )
    log = (d.workdir / "director.log").open("ab")
    d.process = subprocess.Popen(
        [sys.executable, "-m", "director", "run", "--config", str(config), "--netns", d.ns.name],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    # Python and pyroute2 start slowly under emulation (a starved VM took over 300 s once)
    deadline = time.monotonic() + 600
    last = "no answer yet"
    while time.monotonic() < deadline:
        if d.process.poll() is not None:
            raise RuntimeError(f"{d.name}: director run exited {d.process.returncode}")
        try:
            with urllib.request.urlopen(f"{d.url}/readyz", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError as exc:  # refused (not listening yet), or 503 with the reason
            body = exc.read().decode(errors="replace") if isinstance(exc, HTTPError) else ""
            last = f"{exc} {body}"[:300]
        time.sleep(0.5)
    said = (d.workdir / "director.log").read_text(errors="replace")[-1500:]
    raise RuntimeError(
        f"{d.name}: the director process never became ready (last /readyz: {last}); its "
        f"log ends:\n{said}"
    )


def kill_director_process(d: BgpDirector) -> None:
    """kill -9 of the director's process: no goodbye; its IPVS table and VIPs stay."""
    if d.process is not None:
        d.process.send_signal(signal.SIGKILL)
        d.process.wait(timeout=30)
        d.process = None


def ctl(d: BgpDirector, *args: str) -> str:
    """``director ctl ARGS`` against ``d``'s admin API, as an operator runs it."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "director",
            "ctl",
            "--url",
            d.url,
            "--token-file",
            str(d.token_file),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,  # a new Python process and one request: over 120 s on a starved VM once
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"director ctl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def stop_director(d: BgpDirector, leave: bool = False) -> None:
    """The director's process ends (its IPVS table and its VIP stay). ``leave``: as
    ``systemctl stop`` does, withdrawing its routes first; otherwise as kill -9."""
    kill_director_process(d)
    if d.runtime is not None:
        d.runtime.stop(leave=leave)
        d.runtime = None
    if d.ipvs is not None:
        d.ipvs.close()
        d.ipvs = None


def wait_nexthops(
    lab: BgpLab, count: int, timeout: float, vip: str = VIP, since: float | None = None
) -> float | None:
    """Seconds until the router holds ``count`` next hops for ``vip`` (None: never), counted
    from now or from ``since`` (a time.monotonic() taken when the fault was injected)."""
    started = time.monotonic() if since is None else since
    while time.monotonic() - started < timeout:
        if len(lab.nexthops(vip)) == count:
            return time.monotonic() - started
        time.sleep(0.05)
    return None


def router_log(router: Netns) -> Path:
    return Path("/run/frr") / router.name / "frr.log"  # the run folder FRR may write


def session_down_after(router: Netns, address: str, since: float) -> tuple[float, str] | None:
    """Seconds from ``since`` (a time.time()) until ``router``'s bgpd logged the session with
    ``address`` down, and why: the NOTIFICATION it sent then ("Cease/BFD Down": bfdd told it;
    the hold timer would say "Hold Timer Expired"), else the reason of its ADJCHANGE line.
    This is the detection; zebra and the kernel rewriting the route come after it."""
    stamp = r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}) "
    down = re.compile(stamp + r".*ADJCHANGE: neighbor " + re.escape(address) + r"\b.* Down (.*)$")
    sent = re.compile(
        stamp
        + r".*NOTIFICATION(?:\(.*?\))?: sent to neighbor "
        + re.escape(address)
        + r"\b.*?\((.*?)\)"
    )
    log = router_log(router)
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    why = ""
    for line in lines:
        found = sent.match(line) or down.match(line)
        if found is None:
            continue
        at = datetime.datetime.strptime(found[1], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        if at < since - 0.001:
            continue
        why = why or found[2].strip()
        if found.re is down:
            return round(at - since, 3), why
    return None


TRIES = 3  # a probe that times out (a starved emulated machine) is tried again


def probe_flows(lab: BgpLab, d: BgpDirector, ports: range, vip: str = VIP) -> dict[int, str]:
    """Which backend answers each flow (the probe's source port) sent through ``d`` alone;
    "error: ..." for a flow that got no answer in TRIES tries: a probe that timed out, never
    a disagreement (see ``agreement``)."""
    lab.probe.ip(f"route replace {vip}/32 via {d.front}")
    out: dict[int, str] = {}
    try:
        for port in ports:
            for _ in range(TRIES):
                out[port] = _probe(lab, vip, port)
                if not out[port].startswith("error"):
                    break
    finally:
        lab.probe.ip(f"route del {vip}/32 via {d.front}")
    return out


def _probe(lab: BgpLab, vip: str, port: int) -> str:
    sock = lab.probe.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # RST on close: no TIME_WAIT, so the next director can carry the same flow.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.settimeout(3)
        sock.bind((PROBE, port))
        sock.connect((vip, PORT))
        sock.sendall(b"q\n")
        return sock.recv(64).decode().strip()
    except OSError as exc:
        return f"error: {exc}"
    finally:
        sock.close()


def agreement(seen: dict[str, dict[int, str]], ports: range) -> tuple[int, int, list[str]]:
    """(flows every director answered, of those the ones they all sent to the same backend,
    the flows some director never answered: probes that timed out, told apart)."""
    errors = [
        f"{name}:{port}:{got[port]}"
        for name, got in seen.items()
        for port in ports
        if got[port].startswith("error")
    ]
    answered = [
        port for port in ports if not any(got[port].startswith("error") for got in seen.values())
    ]
    agree = sum(1 for port in answered if len({got[port] for got in seen.values()}) == 1)
    return len(answered), agree, errors


def connections_per_director(lab: BgpLab, vip: str = VIP) -> dict[str, int]:
    """Established connections to ``vip`` in each director's IPVS table."""
    out = {}
    for d in lab.directors:
        text = d.ns.exec(["ipvsadm", "-Lnc"], check=False)
        out[d.name] = sum(
            1 for line in text.splitlines() if "ESTABLISHED" in line and f"{vip}:{PORT}" in line
        )
    return out


@contextlib.contextmanager
def bgp_lab(prefix: str, workdir: Path, backends: int = 10) -> Iterator[BgpLab]:
    lab = build_bgp_lab(prefix, workdir, backends)
    try:
        yield lab
    finally:
        lab.close()


def upload(ns: Netns, vip: str, size: int, timeout: float = 30) -> tuple[str, float]:
    """Send ``size`` bytes in full-size segments to ``vip`` (a backend answers its name once
    it has them all): the answer and the seconds it took."""
    sock = ns.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        started = time.monotonic()
        sock.connect((vip, PORT))
        sock.sendall(b"x" * size + b"\n")
        answer = sock.recv(64).decode().strip()
        return answer, time.monotonic() - started
    finally:
        sock.close()


def path_mtu(ns: Netns, vip: str) -> str:
    """What ``ns``'s kernel learned of the path to ``vip`` (``mtu 1480`` after an ICMP
    "fragmentation needed"), or "-"."""
    text = ns.exec(["ip", "-4", "route", "get", vip], check=False)
    words = text.split()
    return words[words.index("mtu") + 1] if "mtu" in words else "-"
