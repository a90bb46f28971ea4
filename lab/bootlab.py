"""A real edge box: the Ansible role's Debian root as a disk image, booted in qemu (software
emulation) with systemd as PID 1, on a network of this machine's namespaces.

    boot-net (qemu runs here)           the edge box              boot-be
      tap0 203.0.113.1 (the client) ── eth0 203.0.113.10         192.0.2.1 API stand-in
                                        VIPs .100, .200-.209      192.0.2.11/.12 backends
      br1: tap1, bev ───────────────── eth1 192.0.2.2 ─────────── be0 (default route via .2)

The image is provisioned exactly as an operator's would be: debootstrap, then the role
through Ansible's chroot connection (``make role-test`` does the same to a tree). The lab adds
only what a harness needs and a box does not: the network's addresses (systemd-networkd), and
qemu's guest agent, through which the tests run commands on the box (no ssh, no shell on a
console).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from lab import debroot
from lab.netns import Netns, run
from lab.wait import wait_for

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / ".lab" / "boot"
ROOT = WORK / "root"
IMAGE = WORK / "disk.img"
CLIENT, FRONT, PEER = "203.0.113.1", "203.0.113.10", "203.0.113.11"  # PEER: never answers
KUBE, BACK = "192.0.2.1", "192.0.2.2"
BACKENDS = ("192.0.2.11", "192.0.2.12")
VIP, POOL = "203.0.113.100", "203.0.113.200-203.0.113.209"
KUBE_PORT, NAT_PORT, NODE_PORT = 16443, 8080, 30080
API = f"http://{BACK}:9180"
TOKEN = "boot-lab-admin-token-0123456789"
KUBE_TOKEN = "boot-lab-kube-token"
MACS = {"front": "52:54:00:d1:00:01", "back": "52:54:00:d1:00:02"}
# Scale-out on the same box: a pool announced over BGP to a router (FRR in boot-net), one
# static service in it forwarded by direct routing to boot-be (on eth1's segment, the VIP on
# its lo); replies from the VIP go straight back to the client through boot-net's br1.
EDGE_VIP, EDGE_POOL, ROUTER_ON_BE = "198.51.100.10", "198.51.100.0/28", "192.0.2.254"
BOX_ASN, ROUTER_ASN = 64512, 64500
NODE = REPO / "ansible/roles/director_node/files/director-node"


def kernel() -> tuple[Path, Path, str]:
    """The lab VM's kernel (it has IPVS), its initrd and release."""
    from lab.vm import find_kernel

    image = find_kernel()
    release = image.name[len("vmlinuz-") :]
    return image, Path(f"/boot/initrd.img-{release}"), release


def chroot(*argv: str, check: bool = True, root: Path = ROOT) -> str:
    return run(["chroot", str(root), *argv], check=check)


@contextlib.contextmanager
def bound(*roots: Path) -> Iterator[None]:
    """/proc, /sys and /dev in the roots while packages are installed into them."""
    names = ("proc", "sys", "dev")
    mounted: list[Path] = []
    try:
        for root in roots or (ROOT,):
            for name in names:
                subprocess.run(["mount", "--bind", f"/{name}", str(root / name)], check=True)
                mounted.append(root / name)
        yield
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", str(path)], check=False)


def inventory(path: Path, kubeconfig: str) -> None:
    """The role's variables for this box: what an operator writes for one edge box."""
    host = {
        "ansible_connection": "community.general.chroot",
        "ansible_host": str(ROOT),
        "ansible_python_interpreter": "/usr/bin/python3",
        "director_wheelhouse": str(debroot.WHEELHOUSE),
        "director_vrrp_interface": "eth0",
        "director_vrrp_priority": 150,
        "director_vrrp_unicast_source": FRONT,
        "director_vrrp_peers": [PEER],
        # conntrackd beside keepalived, as a pair running full NAT has it (its peer, like
        # keepalived's, never answers here): the hardened unit is judged with it.
        "director_sync_interface": "eth0",
        "director_conntrackd_source": FRONT,
        "director_conntrackd_peer": PEER,
        "director_api_listen": f"{BACK}:9180",
        "director_api_token": TOKEN,
        "director_api_public": ["health"],
        "director_kubeconfig": kubeconfig,
        "director_forwarding_modes": ["nat", "dr"],
        "director_bgp_router_id": FRONT,
        "director_config": {
            "ownership": {"networks": ["203.0.113.96/28", EDGE_POOL]},
            "services": [
                {
                    "name": "web",
                    "address": VIP,
                    "port": 80,
                    "scheduler": "rr",
                    "real_servers": [f"{b}:{NAT_PORT}" for b in BACKENDS],
                },
                {
                    "name": "edge",
                    "address": EDGE_VIP,
                    "port": NAT_PORT,
                    "scheduler": "mh",
                    "flags": ["mh-port"],
                    "forwarding": "dr",
                    "real_servers": [f"{b}:{NAT_PORT}" for b in BACKENDS],
                },
            ],
            "pools": [
                {"name": "default", "addresses": [POOL]},
                {"name": "edge", "addresses": [EDGE_POOL], "announce": "bgp", "auto_assign": False},
            ],
            "kubernetes": {
                "lease_namespace": "lvs-director",
                "identity": "edge1",
                "lease_seconds": 5,
            },
            # Timers for an emulated box (no BFD: a starved TCG guest would flap it).
            "bgp": {
                "asn": BOX_ASN,
                "router_id": "192.0.2.99",
                "leave_seconds": 2,
                "peers": [
                    {"address": CLIENT, "asn": ROUTER_ASN, "keepalive": 3, "hold": 9, "bfd": False}
                ],
            },
        },
    }
    path.write_text(
        yaml.safe_dump({"all": {"children": {"directors": {"hosts": {"edge1": host}}}}})
    )


def kubeconfig_text() -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "lab",
            "clusters": [{"name": "lab", "cluster": {"server": f"http://{KUBE}:{KUBE_PORT}"}}],
            "users": [{"name": "director", "user": {"token": KUBE_TOKEN}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "director"}}],
        }
    )


def prepare(root: Path) -> None:
    """A fresh Debian root (debootstrap, cached) with the kernel's modules, and what a
    Debian install has that debootstrap's minimal base has not (udev: device units, the
    guest agent's port), plus qemu's guest agent: the harness's way in."""
    debroot.base()
    debroot.fresh_root(root)
    _image, _initrd, release = kernel()
    (root / "usr/lib/modules").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["cp", "-a", f"/lib/modules/{release}", str(root / "usr/lib/modules")], check=True
    )
    with bound(root):
        chroot("apt-get", "update", "-qq", root=root)
        chroot(
            "env",
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "udev",
            "qemu-guest-agent",
            root=root,
        )


def playbook(hosts: Path, log: Path, *extra: str) -> None:
    """The role's playbook on the inventory's hosts (their roots bound), its output in
    ``log``."""
    from tests.ansiblelab import ansible

    done = ansible("ansible-playbook", "-i", str(hosts), "site.yml", *extra, timeout=1800)
    with log.open("a") as out:
        out.write(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"the role failed on the image; see {log}:\n{done.stdout[-3000:]}")


def identity(root: Path, hostname: str, addresses: dict[str, str]) -> None:
    """A box's name and its networks' addresses (systemd-networkd, by MAC: mac -> address)."""
    for index, (mac, address) in enumerate(addresses.items()):
        (root / f"etc/systemd/network/1{index}-{mac.replace(':', '')}.network").write_text(
            f"[Match]\nMACAddress={mac}\n\n[Network]\nAddress={address}/24\n"
        )
    (root / "etc/hostname").write_text(f"{hostname}\n")
    (root / "etc/fstab").write_text("LABEL=root / ext4 rw,errors=remount-ro 0 1\n")
    chroot("systemctl", "enable", "systemd-networkd", "systemd-networkd-wait-online", root=root)


def provision(log: Path) -> None:
    """debootstrap (cached), the kernel's modules, the role, then the harness's additions."""
    log.unlink(missing_ok=True)
    prepare(ROOT)
    debroot.wheelhouse()
    hosts = WORK / "hosts.yml"
    inventory(hosts, kubeconfig_text())
    # Two releases on the box, this tree's current: the next one first (as if the box had
    # been upgraded, then the role run again with this tree's wheelhouse), so the boot test
    # can go to the other release and back with director-release.
    newer = debroot.wheelhouse(WORK / "wheelhouse-next", release=debroot.next_release())
    with bound(ROOT):
        for extra in (["-e", f"director_wheelhouse={newer}"], []):
            playbook(hosts, log, *extra)
    identity(ROOT, "edge1", {MACS["front"]: FRONT, MACS["back"]: BACK})


def build_image(size: str = "4G", root: Path = ROOT, image: Path = IMAGE) -> Path:
    image.unlink(missing_ok=True)
    run(["truncate", "-s", size, str(image)])
    run(["mke2fs", "-q", "-t", "ext4", "-L", "root", "-d", str(root), "-F", str(image)])
    return image


# -- the network ----------------------------------------------------------------------------
class Responder:
    """Backends in boot-be: each line on a connection is answered with the backend's name."""

    def __init__(
        self, ns: Netns, addresses: tuple[str, ...], ports: tuple[int, ...], name: str | None = None
    ) -> None:
        self._stop = threading.Event()
        self._threads = []
        self._socks = []
        for address in addresses:
            for port in ports:
                sock = ns.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((address, port))
                sock.listen(64)
                sock.settimeout(0.5)
                self._socks.append(sock)
                said = name or f"be{BACKENDS.index(address) + 1}"
                thread = threading.Thread(target=self._serve, args=(sock, said), daemon=True)
                thread.start()
                self._threads.append(thread)

    def _serve(self, sock: socket.socket, name: str) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._talk, args=(conn, name), daemon=True).start()

    def _talk(self, conn: socket.socket, name: str) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(600)
            while not self._stop.is_set():
                data = conn.recv(4096)
                if not data:
                    return
                conn.sendall(f"{name}\n".encode() * data.count(b"\n"))

    def close(self) -> None:
        self._stop.set()
        for sock in self._socks:
            sock.close()


@contextlib.contextmanager
def linked() -> Iterator[tuple[Netns, Netns]]:
    """boot-net (where qemu runs) and boot-be, joined by a veth: bev in boot-net, on bridge
    br1 (the back network), and be0 in boot-be."""
    made: list[Netns] = []
    for leftover in ("boot-net", "boot-be"):  # a run killed before its teardown left them
        if leftover in run(["ip", "netns", "list"]).split():
            print(f"bootlab: removing the namespace {leftover} an earlier run left", flush=True)
            run(["ip", "netns", "del", leftover])
    try:
        net = Netns("boot-net")
        made.append(net)
        be = Netns("boot-be")
        made.append(be)
        run(["ip", "link", "add", "bev", "netns", net.name, "type", "veth", "peer", "name",
             "be0", "netns", be.name])  # fmt: skip
        net.ip(
            "link set lo up",
            "link add br1 type bridge",
            "link set br1 up",
            "link set bev master br1",
            "link set bev up",
        )
        be.ip("link set lo up", "link set be0 up")
        yield net, be
    finally:
        for ns in reversed(made):
            ns.close()


@contextlib.contextmanager
def network() -> Iterator[tuple[Netns, Netns]]:
    """boot-net (qemu, the client) and boot-be (backends, the API stand-in)."""
    with linked() as (net, be):
        be.ip(
            f"addr add {KUBE}/24 dev be0",
            *(f"addr add {b}/24 dev be0" for b in BACKENDS),
            f"route add default via {BACK}",
        )
        # Direct routing: the VIP on lo with ARP quiet (director-node, as the director_node
        # role runs it on a real server); replies from it go to the client through boot-net's
        # br1, not back through the box (which holds the VIP itself).
        be.exec([str(NODE), "--vip", EDGE_VIP])
        be.ip(
            f"rule add from {EDGE_VIP} table 100", f"route add default via {ROUTER_ON_BE} table 100"
        )
        net.ip(f"addr add {ROUTER_ON_BE}/24 dev br1")
        net.sysctls({f"net.ipv4.conf.{name}.rp_filter": 0 for name in ("all", "default", "br1")})
        yield net, be


def router_config() -> str:
    """FRR in boot-net: the box's BGP peer (it learns the VIPs the box announces)."""
    return f"""frr defaults traditional
hostname router
service integrated-vtysh-config
!
router bgp {ROUTER_ASN}
 bgp router-id {CLIENT}
 bgp log-neighbor-changes
 no bgp ebgp-requires-policy
 neighbor {FRONT} remote-as {BOX_ASN}
 neighbor {FRONT} timers 3 9
 neighbor {FRONT} timers connect 2
exit
!
"""


@contextlib.contextmanager
def router(net: Netns) -> Iterator[None]:
    """FRR (zebra, bfdd, bgpd) running in boot-net for as long as the block lasts."""
    from lab.bgp import kill_frr, start_frr

    try:
        start_frr(net, router_config())
        yield
    finally:
        kill_frr(net)
        for folder in (Path("/etc/frr") / net.name, Path("/run/frr") / net.name):
            shutil.rmtree(folder, ignore_errors=True)


def router_nexthops(net: Netns, prefix: str = EDGE_VIP) -> list[str]:
    """The next hops boot-net's kernel holds for ``prefix`` (installed by FRR's zebra)."""
    text = net.exec(["ip", "-o", "route", "show", f"{prefix}/32"])
    return re.findall(r"via (\S+)", text)


# -- the box ----------------------------------------------------------------------------------
class Box:
    """qemu with systemd as PID 1 on the image, its console in a file, its guest agent."""

    def __init__(
        self,
        net: Netns,
        memory: str = "2G",
        *,
        name: str = "box",
        image: Path = IMAGE,
        macs: dict[str, str] = MACS,
        taps: tuple[str, str] = ("tap0", "tap1"),
        front: str | None = None,
        cpus: int = 2,
    ) -> None:
        """``front``: the bridge in ``net`` the box's first network joins (None: a link of its
        own to the client, CLIENT on it); its second joins br1 (the backends')."""
        self.net, self.name = net, name
        self.console = WORK / f"{name}-console.log"
        self.qga = WORK / f"{name}-qga.sock"
        self.qga.unlink(missing_ok=True)
        qemu_log = WORK / f"{name}-qemu.log"
        kernel_image, initrd, _release = kernel()
        nics: list[str] = []
        for (role, mac), tap in zip(macs.items(), taps, strict=True):
            nics += [
                "-netdev",
                f"tap,id={role},ifname={tap},script=no,downscript=no",
                "-device",
                f"virtio-net-pci,netdev={role},mac={mac}",
            ]
        cmd = [
            "ip",
            "netns",
            "exec",
            net.name,
            "qemu-system-x86_64",
            "-accel",
            "tcg",
            "-m",
            memory,
            "-smp",
            str(cpus),
            "-display",
            "none",
            "-monitor",
            "none",
            "-kernel",
            str(kernel_image),
            "-initrd",
            str(initrd),
            "-append",
            "root=LABEL=root rw console=ttyS0 net.ifnames=0 panic=-1",
            "-drive",
            f"file={image},if=virtio,format=raw,cache=unsafe",
            *nics,
            "-chardev",
            f"socket,id=qga,path={self.qga},server=on,wait=off",
            "-device",
            "virtio-serial",
            "-device",
            "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
            "-serial",
            f"file:{self.console}",
        ]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=qemu_log.open("wb"), stderr=subprocess.STDOUT
        )
        started = wait_for(lambda: taps[1] in net.exec(["ip", "-o", "link"]), 60)
        if started is None:
            raise RuntimeError(f"qemu did not start; see {qemu_log}")
        front_tap, back_tap = taps
        net.ip(
            f"addr add {CLIENT}/24 dev {front_tap}"
            if front is None
            else f"link set {front_tap} master {front}",
            f"link set {front_tap} up",
            f"link set {back_tap} master br1",
            f"link set {back_tap} up",
        )

    # -- the guest agent (qemu-ga's JSON protocol on a virtio port) --------------------------
    def _qga(self, command: dict[str, Any], timeout: float = 30) -> Any:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(self.qga))
            nonce = int.from_bytes(os.urandom(3), "big")
            # 0xFF resets the agent's parser (a request cut off by a reboot, say); the
            # delimited sync answers after a 0xFF of its own, past anything stale.
            sync = {"execute": "guest-sync-delimited", "arguments": {"id": nonce}}
            sock.sendall(b"\xff" + json.dumps(sync).encode() + b"\n")
            reader = sock.makefile("rb")
            while True:  # skip what an earlier, cut-off exchange left behind
                line = reader.readline()
                if not line:
                    raise ConnectionError("the guest agent hung up")
                with contextlib.suppress(ValueError, AttributeError):
                    if json.loads(line.lstrip(b"\xff")).get("return") == nonce:
                        break
            sock.sendall(json.dumps(command).encode() + b"\n")
            answer = json.loads(reader.readline())
        if "error" in answer:
            raise RuntimeError(f"guest agent: {answer['error']}")
        return answer.get("return")

    def up(self, timeout: float = 600) -> float | None:
        """Seconds until the guest agent answers (the box booted), or None."""

        def ping() -> bool:
            try:
                self._qga({"execute": "guest-ping"}, timeout=5)
                return True
            except (OSError, ValueError, RuntimeError, ConnectionError):
                return False

        return wait_for(ping, timeout, step=1.0)

    def sh(self, script: str, timeout: float = 120, check: bool = True) -> str:
        """Run a shell script on the box as root; its output (stdout and stderr)."""
        pid = self._qga(
            {
                "execute": "guest-exec",
                "arguments": {"path": "/bin/sh", "arg": ["-c", script], "capture-output": True},
            }
        )["pid"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self._qga({"execute": "guest-exec-status", "arguments": {"pid": pid}})
            if status.get("exited"):
                out = base64.b64decode(status.get("out-data", "")).decode(errors="replace")
                err = base64.b64decode(status.get("err-data", "")).decode(errors="replace")
                if check and status.get("exitcode") != 0:
                    raise RuntimeError(
                        f"on the box: {script!r} exited {status.get('exitcode')}:\n{out}{err}"
                    )
                return out + err
            time.sleep(0.5)
        raise TimeoutError(f"on the box: {script!r} still running after {timeout}s")

    def settled(self, timeout: float = 300) -> None:
        """The boot is over: systemd done starting units (the director's start is one)."""

        def done() -> bool:
            state = self.sh("systemctl is-system-running || true").strip()
            return state in ("running", "degraded")

        if wait_for(done, timeout, step=2.0) is None:
            raise AssertionError(self.sh("systemctl list-jobs; systemctl --failed", check=False))

    def boot_id(self) -> str:
        """This boot's id ("" while the box is going down or not up yet)."""
        try:
            return self.sh("cat /proc/sys/kernel/random/boot_id", timeout=10).strip()
        except (OSError, RuntimeError, TimeoutError, ValueError):
            return ""

    def reboot(self) -> None:
        """What an operator types: `systemctl reboot` (not waited for: the agent goes down)."""
        self._qga(
            {"execute": "guest-exec", "arguments": {"path": "/bin/systemctl", "arg": ["reboot"]}}
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def build(log: Path) -> Path:
    """The whole image from scratch: debootstrap (cached), the role, the disk."""
    WORK.mkdir(parents=True, exist_ok=True)
    if ROOT.exists():
        shutil.rmtree(ROOT)
    provision(log)
    return build_image()
