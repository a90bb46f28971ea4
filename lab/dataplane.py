"""The data path in the lab VM: real load (Debian's wrk and iperf3) through a box to real
servers (nginx), forwarded either by IPVS set up by hand with ``ipvsadm`` or by the director.

Four labs of the same shape (``lab.netns.build_lab``: a client namespace, the box, two
backends on the box's bridge) live side by side in one boot: ``bare`` holds what an operator
would type, ``dir``, ``dirfn`` and ``dirg`` what the director made from Kubernetes Services,
on a box whose file has no ``snat:``, on one whose file has it (full NAT, and every IPVS
connection tracked), and on one with ``snat:`` and the SYN guard (``guard.syn``, which the
other two turn off). Each routes the VIPs' range to itself (``local`` route), and every
backend holds the VIPs on ``lo`` (ARP quiet) so that one backend set-up serves nat, dr, tun
and full NAT.

Two virtual services on each box: ``web`` (port 80, both backends, rr: nginx answering a
few bytes) and ``bulk`` (port 5201, the first backend alone: iperf3 opens two connections
that must reach the same server). Traffic never leaves the lab's namespaces.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.netns import BACKEND_NET4, Lab, Netns, build_lab, run
from lab.wait import eventually

if TYPE_CHECKING:
    from director.daemon.runtime import Runtime
    from director.dataplane.kernel import KernelIpvs
    from lab.kubeapi import FakeApiServer

POOL = "198.51.100.0/28"
WEB, BULK, OTHER = "198.51.100.1", "198.51.100.2", "198.51.100.3"
WEB_PORT, BULK_PORT = 80, 5201
SNAT = f"{BACKEND_NET4}.1"  # the box's own address on the backends' bridge
MODES = ("nat", "dr", "tun", "fullnat")
IPVSADM_FLAG = {"nat": "-m", "fullnat": "-m", "dr": "-g", "tun": "-i"}
BENCH_MARK = 0x00400000


def ranges(count: int) -> list[str]:
    """``count`` source ranges of which only the last admits the lab's client (the worst
    place in a list; nftables' interval set finds it in one lookup)."""
    out = [f"10.{i // 250}.{i % 250}.0/24" for i in range(count - 1)]
    return [*out, "203.0.113.0/24"]


# --- the real servers ----------------------------------------------------------------------
NGINX = """worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 120s;
  server {{
    listen {port} backlog=4096;
    location / {{ return 200 "{name}\\n"; }}
  }}
}}
"""


@dataclass
class Servers:
    """nginx on every backend (port 80), iperf3 on the first (port 5201)."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dp-")))

    def start(self, lab: Lab) -> None:
        for be in lab.backends:
            self.nginx(be.ns, f"{lab.prefix}-{be.name}", be.name, WEB_PORT)
        self._spawn(lab.backends[0].ns, ["iperf3", "-s", "-p", str(BULK_PORT)])
        listening(lab.backends[0].ns, BULK_PORT, "iperf3")

    def nginx(self, ns: Netns, label: str, name: str, port: int) -> None:
        """nginx in ``ns`` on ``port``, answering ``name`` and a newline to every request."""
        folder = self.workdir / label
        folder.mkdir(parents=True)
        conf = folder / "nginx.conf"
        conf.write_text(NGINX.format(dir=folder, name=name, port=port))
        self._spawn(ns, ["nginx", "-c", str(conf), "-p", str(folder), "-e", "stderr"])
        ns.sysctls({"net.core.somaxconn": 4096, "net.ipv4.tcp_max_syn_backlog": 4096})
        listening(ns, port, "nginx")

    def _spawn(self, ns: Netns, argv: list[str]) -> None:
        self.procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", ns.name, *argv],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def listening(ns: Netns, port: int, what: str) -> None:
    eventually(lambda: f":{port} " in ns.exec(["ss", "-Hltn"]), what=what)


def box_lab(prefix: str) -> Lab:
    """One lab: the VIPs' range routed to the box, the VIPs on every backend's ``lo``, the
    client free to open many connections."""
    lab = build_lab(prefix=prefix, backends=2)
    lab.lvs.ip(f"route add local {POOL} dev lo")
    for be in lab.backends:
        be.ns.ip(*(f"addr add {vip}/32 dev lo" for vip in (WEB, BULK, OTHER)))
    lab.client.sysctls({"net.ipv4.ip_local_port_range": "1024 65000", "net.ipv4.tcp_tw_reuse": 1})
    return lab


# --- bare IPVS, by hand --------------------------------------------------------------------
def bare(lab: Lab, mode: str) -> None:
    """What an operator types for ``mode``; full NAT is IPVS masquerading with
    ``vs.conntrack=1`` and a SNAT of what is bound for the VIPs (kube-proxy's way)."""
    flag = IPVSADM_FLAG[mode]
    a, b = lab.backends[0].ipv4, lab.backends[1].ipv4
    lab.lvs.exec(["ipvsadm", "-C"])
    lines = [
        f"-A -t {WEB}:{WEB_PORT} -s rr",
        f"-a -t {WEB}:{WEB_PORT} -r {a}:{WEB_PORT} {flag}",
        f"-a -t {WEB}:{WEB_PORT} -r {b}:{WEB_PORT} {flag}",
        f"-A -t {BULK}:{BULK_PORT} -s rr",
        f"-a -t {BULK}:{BULK_PORT} -r {a}:{BULK_PORT} {flag}",
    ]
    run(["ip", "netns", "exec", lab.lvs.name, "ipvsadm", "-R"], stdin="\n".join(lines) + "\n")
    lab.lvs.exec(["nft", "delete table ip bare"], check=False)
    lab.lvs.sysctls({"net.ipv4.vs.conntrack": 1 if mode == "fullnat" else 0})
    if mode == "fullnat":
        mark = f"0x{BENCH_MARK:08x}"
        lab.lvs.exec(
            [
                "nft",
                "add table ip bare; "
                "add chain ip bare pre { type filter hook prerouting priority -150 ; } ; "
                f"add rule ip bare pre ip daddr . tcp dport {{ {WEB} . {WEB_PORT}, "
                f"{BULK} . {BULK_PORT} }} meta mark set {mark} ; "
                "add chain ip bare post { type nat hook postrouting priority srcnat ; } ; "
                f"add rule ip bare post meta mark {mark} snat to {SNAT}",
            ]
        )


# --- the director, from Kubernetes Services ------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One way the director serves ``web`` and ``bulk``."""

    name: str
    mode: str  # the Services' forwarding
    source_ranges: int = 0  # loadBalancerSourceRanges on both Services
    other_fullnat: bool = False  # a third Service, full NAT, elsewhere on the box
    guard: bool = False  # the SYN guard (guard.syn) on the box, the Services guarded

    @property
    def bare(self) -> str:
        """The bare IPVS set-up it is compared with."""
        return self.mode

    @property
    def snat(self) -> bool:
        """Served by the box whose file has ``snat:`` (full NAT possible: IPVS's connections
        tracked by conntrack, ``vs.conntrack=1``); the others by a box without it."""
        return self.mode == "fullnat" or self.other_fullnat


VARIANTS = (
    Variant("nat", "nat"),
    Variant("dr", "dr"),
    Variant("tun", "tun"),
    Variant("fullnat", "fullnat"),
    Variant("nat+ranges1000", "nat", source_ranges=1000),
    Variant("fullnat+ranges1000", "fullnat", source_ranges=1000),
    Variant("nat+conntrack", "nat", other_fullnat=True),
    Variant("nat+guard", "nat", guard=True),
    Variant("fullnat+guard", "fullnat", guard=True),
)


def director_config(kubeconfig: Path, snat: bool, guard: bool = False) -> str:
    """The shipped defaults (a TCP health check of every real server, as in production),
    the VIPs' pool and, for full NAT, the box's SNAT address; the SYN guard (on by default
    for a box on its own) only with ``guard``: it tracks every connection of the box."""
    full = f"snat:\n  addresses: [{SNAT}]\n" if snat else ""
    full += "" if guard else "guard:\n  syn: off\n"
    return f"""
pools:
  - name: default
    addresses: [{POOL}]
{full}kubernetes:
  kubeconfig: {kubeconfig}
  identity: director-a
  lease_seconds: 2
"""


def _service(name: str, vip: str, port: int, forwarding: str, sources: int) -> dict[str, Any]:
    from lab.kubeapi import service

    obj = service(
        name,
        [("p", "TCP", port)],
        annotations={"lvs-director.io/backends": "pod", "lvs-director.io/forwarding": forwarding},
    )
    obj["spec"]["loadBalancerIP"] = vip
    if sources:
        obj["spec"]["loadBalancerSourceRanges"] = ranges(sources)
    return obj


class DirectorBox:
    """The director running in-process on the ``director`` lab's box, fed by the API
    stand-in; ``serve(variant)`` changes the Services and waits until the kernel and the
    nftables table hold them."""

    def __init__(
        self, lab: Lab, api: FakeApiServer, workdir: Path, snat: bool, guard: bool = False
    ) -> None:
        from director.daemon.runtime import Runtime
        from director.dataplane.kernel import KernelIpvs
        from director.schema.config import parse_config

        self.lab, self.api = lab, api
        self.ipvs: KernelIpvs = KernelIpvs(netns=lab.lvs.name)
        text = director_config(api.kubeconfig(workdir / f"{lab.prefix}.kubeconfig"), snat, guard)
        self.settings = parse_config(text, "dataplane.yaml")
        self.runtime: Runtime = Runtime(self.settings, self.ipvs)
        self.present: set[str] = set()
        self.runtime.start()
        if not self.runtime.wait_ready(120):
            raise RuntimeError("the director did not become ready")

    def serve(self, variant: Variant) -> None:
        from lab.kubeapi import endpoint_slice

        a, b = self.lab.backends[0].ipv4, self.lab.backends[1].ipv4
        wanted = {
            "web": (WEB, WEB_PORT, variant.mode, [a, b]),
            "bulk": (BULK, BULK_PORT, variant.mode, [a]),
        }
        if variant.other_fullnat:
            wanted["other"] = (OTHER, WEB_PORT, "fullnat", [a])
        for name in self.present - set(wanted):
            self.api.delete("services", name)
            self.api.delete("endpointslices", f"{name}-abcde")
        for name, (vip, port, forwarding, members) in wanted.items():
            obj = _service(name, vip, port, forwarding, variant.source_ranges)
            if name in self.present:
                sources = obj["spec"].get("loadBalancerSourceRanges")
                change = {"annotations": obj["metadata"]["annotations"]}
                self.api.patch(
                    "services",
                    name,
                    {"metadata": change, "spec": {"loadBalancerSourceRanges": sources}},
                )
            else:
                self.api.create("services", obj)
                slice_ = endpoint_slice(
                    name, [(m, None, True, False) for m in members], [("p", "TCP", port)]
                )
                self.api.create("endpointslices", slice_)
        self.present = set(wanted)
        eventually(lambda: self._holds(variant, wanted), timeout=120, what=variant.name)

    def _holds(self, variant: Variant, wanted: dict[str, tuple[str, int, str, list[str]]]) -> bool:
        from director.core.model import IpProtocol, ServiceKey

        kernel = {"nat": "nat", "fullnat": "nat", "dr": "dr", "tun": "tun"}  # what IPVS keeps
        for vip, port, forwarding, members in wanted.values():
            held = self.ipvs.read_service(ServiceKey.inet(IpProtocol.TCP, vip, port))
            if held is None or len(held.real_servers) != len(members):
                return False
            if any(
                rs.forwarding.name.lower() != kernel[forwarding]
                for rs in held.real_servers.values()
            ):
                return False
        table = self.lab.lvs.exec(["nft", "list", "table", "inet", "director"], check=False)
        filtered = "svc4_" in table
        marked = self.lab.lvs.exec(
            ["nft", "list", "set", "inet", "director", "fullnat4"], check=False
        )
        fullnat = f"{WEB} . tcp . {WEB_PORT}" in marked
        others = f"{OTHER} . tcp . {WEB_PORT}" in marked
        guarded = self.lab.lvs.exec(
            ["nft", "list", "set", "inet", "director", "guard4"], check=False
        )
        return (
            filtered == bool(variant.source_ranges)
            and fullnat == (variant.mode == "fullnat")
            and others == variant.other_fullnat
            and (f"{WEB} . tcp . {WEB_PORT}" in guarded) == variant.guard
        )

    def close(self) -> None:
        from director.engine.reconcile import Reconciler

        self.runtime.stop()
        Reconciler(self.ipvs, self.settings.ownership).full_sync({})
        self.ipvs.close()


# --- the load ------------------------------------------------------------------------------
@dataclass
class Figures:
    """One run of each load against one set-up."""

    cps: float  # new connections a second (wrk, Connection: close: one request each)
    rps: float  # requests a second over kept connections (wrk)
    gbps: float  # iperf3, one stream
    p99_ms: float  # wrk's 99th percentile on kept connections
    p99_new_ms: float  # ... and with a connection per request
    errors: int  # wrk's socket errors and non-2xx answers, both runs

    def as_dict(self) -> dict[str, float]:
        return {k: round(float(v), 3) for k, v in self.__dict__.items()}


_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def parse_wrk(text: str) -> tuple[float, float, int]:
    """Requests a second, the 99th percentile in ms and the errors from wrk's report."""
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    p99_ms = float(p99.group(1)) * _UNIT[p99.group(2)] if p99 else float("nan")
    errors = 0
    found = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if found:
        errors += sum(int(n) for n in found.groups())
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if bad:
        errors += int(bad.group(1))
    return rate, p99_ms, errors


def requests_done(text: str) -> int:
    """How many requests wrk completed."""
    found = re.search(r"(\d+) requests in", text)
    return int(found.group(1)) if found else 0


def wrk_argv(vip: str, seconds: float, connections: int, close: bool, port: int) -> list[str]:
    threads = min(2, connections)
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s"]
    argv += ["--latency", "--timeout", "5s"]
    if close:
        argv += ["-H", "Connection: close"]
    return [*argv, f"http://{vip}:{port}/"]


def wrk(
    client: Netns, vip: str, seconds: float, connections: int, *, close: bool, port: int = WEB_PORT
) -> str:
    return client.exec(wrk_argv(vip, seconds, connections, close, port))


def iperf(client: Netns, vip: str, seconds: float) -> float:
    out = client.exec(
        ["iperf3", "-c", vip, "-p", str(BULK_PORT), "-t", str(max(1, round(seconds))), "-J"]
    )
    end = json.loads(out)["end"]
    return float(end["sum_received"]["bits_per_second"]) / 1e9


def measure(lab: Lab, seconds: float, connections: int = 32) -> Figures:
    """New connections, kept connections and one bulk stream, one after the other."""
    cps, p99_new, err_new = parse_wrk(wrk(lab.client, WEB, seconds, connections, close=True))
    rps, p99, err = parse_wrk(wrk(lab.client, WEB, seconds, connections, close=False))
    gbps = iperf(lab.client, BULK, seconds)
    return Figures(cps, rps, gbps, p99, p99_new, err_new + err)


def served_by(lab: Lab) -> dict[str, int]:
    """Connections IPVS scheduled to each real server (``ipvsadm`` stats): proof that the
    load went through IPVS to both. The kernel sums its per-CPU counters into these on its
    estimator's timer, every 2 s: read them 2 s after the load to see all of it."""
    out = lab.lvs.exec(["ipvsadm", "-Ln", "--stats", "-t", f"{WEB}:{WEB_PORT}"])
    seen: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["->"] and ":" in parts[1] and parts[1][0].isdigit():
            seen[parts[1].rsplit(":", 1)[0]] = int(parts[2])
    return seen


@dataclass
class Boxes:
    """The bare box, and three director boxes: one whose file has no ``snat:`` (nat, dr,
    tun), one with it (full NAT, and nat beside it), and one with both and the SYN guard."""

    bare: Lab
    plain: DirectorBox
    fullnat: DirectorBox
    guarded: DirectorBox

    def director(self, variant: Variant) -> DirectorBox:
        if variant.guard:
            return self.guarded
        return self.fullnat if variant.snat else self.plain


@contextlib.contextmanager
def labs(workdir: Path) -> Iterator[Boxes]:
    """The four labs with their servers, each director beside an API stand-in of its own."""
    from lab.kubeapi import FakeApiServer

    run(
        ["modprobe", "-a", "ip_vs_rr", "nf_conntrack", "nft_chain_nat", "nft_synproxy"], check=False
    )
    made: list[Lab] = []
    servers = Servers()
    with contextlib.ExitStack() as stack:

        def close_labs() -> None:
            for lab in made:
                lab.close()

        stack.callback(close_labs)
        stack.callback(servers.close)
        for prefix in ("bare", "dir", "dirfn", "dirg"):
            made.append(box_lab(prefix))
            servers.start(made[-1])
        boxes = []
        for lab, snat, guard in (
            (made[1], False, False),
            (made[2], True, False),
            (made[3], True, True),
        ):
            api = stack.enter_context(FakeApiServer())
            box = DirectorBox(lab, api, workdir, snat, guard)
            stack.callback(box.close)
            boxes.append(box)
        yield Boxes(made[0], boxes[0], boxes[1], boxes[2])


STATS_LAG = 2.5  # seconds: the IPVS estimator's period (2 s), and a margin


def settle(seconds: float = 1.0) -> None:
    """Let the last run's connections leave TIME_WAIT's busiest moment before the next."""
    time.sleep(seconds)
