"""The Ansible role applied for real, twice, to a Debian 12 root: a debootstrap'd tree
(lab/debroot.py), reached through Ansible's chroot connection from this host. A chroot is
how images are built, and the role treats it so: the preflight checks the kernel installed
in the image (Debian's linux-image-amd64, the lab VM's kernel, bind-mounted as the image's
/lib/modules), modules and sysctls are written for boot rather than applied to this host's
kernel (which has no IPVS), units are enabled, not started.

The last test runs in the lab VM (marked kernel): what the role wrote, applied the way boot
applies it, on a kernel with IPVS.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from director import __version__
from director.adapters.pair.processes import LIMIT_US
from lab import debroot
from lab.debroot import ROOT, WHEELHOUSE
from tests.ansiblelab import REPO, ansible

TOKEN = "s3cret-token-for-the-test"
KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {
            "name": "lab",
            "cluster": {"server": "https://192.0.2.50:6443", "insecure-skip-tls-verify": True},
        }
    ],
    "users": [{"name": "lvs-director", "user": {"token": "abc.def"}}],
    "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lvs-director"}}],
    "current-context": "lab",
}


PLACES: dict[str, Path] = {}  # the inventory and folders the applied fixture made


@dataclass
class Upgrade:
    upgrade: Run
    upgraded_to: str  # director --version after it
    releases: str  # director-release list after it
    rollback: Run
    rolled_back_to: str


@pytest.fixture(scope="module")
def upgraded(applied: tuple[Run, Run, Run]) -> Upgrade:
    """An upgrade to a newer release, then a role run with the earlier wheelhouse again."""
    inventory, results = PLACES["inventory"], PLACES["results"]
    newer = debroot.wheelhouse(PLACES["work"] / "wheelhouse-upgrade", release=UPGRADE)
    with bind_mounts(kernel_release(), "dev", read_only=True):
        up = play(inventory, results / "ansible-upgrade.log", "-e", f"director_wheelhouse={newer}")
        up_version = chroot("/opt/director/bin/director", "--version").stdout.strip()
        listed = chroot("/usr/local/sbin/director-release", "list").stdout
        back = play(inventory, results / "ansible-rollback.log")
        back_version = chroot("/opt/director/bin/director", "--version").stdout.strip()
    return Upgrade(up, up_version, listed, back, back_version)


@dataclass
class Run:
    output: str
    recap: dict[str, int]


def chroot(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["chroot", str(ROOT), *argv], capture_output=True, text=True, check=check, timeout=120
    )


def play(inventory: Path, log: Path, *extra: str) -> Run:
    done = ansible(
        "ansible-playbook", "-i", str(inventory), "site.yml", "--diff", *extra, timeout=1800
    )
    log.write_text(done.stdout + done.stderr)
    found = re.search(r"^debian-root\s*:\s*(.*)$", done.stdout, re.M)
    assert done.returncode == 0 and found, (
        f"ansible-playbook failed; see {log}:\n" + (done.stdout + done.stderr)[-6000:]
    )
    recap = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}
    return Run(done.stdout, recap)


@contextlib.contextmanager
def bind_mounts(release: str, *extra: str, read_only: bool = False) -> Iterator[None]:
    """This machine's /proc, /sys (and ``extra`` folders) and the kernel ``release``'s
    modules, bind-mounted into the tree: the chroot then runs on this kernel."""
    pairs = [(f"/{name}", name) for name in ("proc", "sys", *extra)]
    pairs.append((f"/lib/modules/{release}", f"usr/lib/modules/{release}"))
    mounted: list[Path] = []
    try:
        for source, target in pairs:
            (ROOT / target).mkdir(parents=True, exist_ok=True)
            options = ["-o", "ro"] if read_only else []
            subprocess.run(["mount", "--bind", *options, source, str(ROOT / target)], check=True)
            mounted.append(ROOT / target)
        yield
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", "-l", str(target)], check=False)


def kernel_release() -> str:
    from lab.vm import find_kernel

    return find_kernel().name[len("vmlinuz-") :]


UPGRADE = debroot.next_release()  # the release the upgrade test installs, then leaves


def legacy_virtualenv() -> None:
    """What a box installed before releases holds: one virtualenv in /opt/director itself,
    its bin/director a script (the role must turn it into a release and remove the rest)."""
    venv = ROOT / "opt/director"
    (venv / "lib/python3.11/site-packages/director").mkdir(parents=True)
    (venv / "include").mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.2\n")
    (venv / "bin").mkdir()
    (venv / "bin/python").symlink_to("/usr/bin/python3")
    (venv / "bin/pip").write_text("#!/opt/director/bin/python\n")
    (venv / "bin/director").write_text("#!/opt/director/bin/python\nprint('old layout')\n")


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, Run, Run]]:
    debroot.base()  # debootstrap, cached in .lab/debian-base
    debroot.fresh_root()
    debroot.wheelhouse()
    legacy_virtualenv()
    work = tmp_path_factory.mktemp("ansible")
    # The VRRP interface the configuration names (keepalived -t looks it up).
    subprocess.run(
        ["ip", "link", "add", "edge0", "type", "veth", "peer", "name", "edge0p"],
        capture_output=True,
        check=False,
    )
    inventory = work / "hosts.yml"
    host_vars = {
        "ansible_connection": "community.general.chroot",
        "ansible_host": str(ROOT),
        "ansible_python_interpreter": "/usr/bin/python3",
        "director_wheelhouse": str(WHEELHOUSE),
        "director_vrrp_interface": "edge0",
        "director_vrrp_priority": 150,
        "director_vrrp_unicast_source": "192.0.2.11",
        "director_vrrp_peers": ["192.0.2.12"],
        "director_sync_interface": "edge0",
        "director_nat_gateways": [{"address": "10.1.0.1/24", "interface": "edge0"}],
        "director_conntrackd_source": "10.1.0.2",
        "director_conntrackd_peer": "10.1.0.3",
        "director_forwarding_modes": ["nat", "dr"],
        "director_ipvs_rate_estimation": False,
        "director_api_token": TOKEN,
        "director_kubeconfig": yaml.safe_dump(KUBECONFIG),
    }
    group_vars = yaml.safe_load(
        (REPO / "ansible/inventory/example/group_vars/directors.yml").read_text()
    )
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "directors": {"hosts": {"debian-root": host_vars}, "vars": group_vars},
                        # The same root is a real server too: the director_node role beside.
                        "lvs_backends": {
                            "hosts": {"debian-root": {}},
                            "vars": {"director_node_vips": ["198.51.100.10"]},
                        },
                    }
                }
            }
        )
    )
    results = REPO / ".lab" / "role-test"
    results.mkdir(parents=True, exist_ok=True)
    try:
        with bind_mounts(kernel_release(), "dev", read_only=True):
            first = play(inventory, results / "ansible-first.log")
            second = play(inventory, results / "ansible-second.log")
            checked = play(inventory, results / "ansible-check.log", "--check")
        PLACES.update(inventory=inventory, work=work, results=results)
        yield first, second, checked
    finally:
        subprocess.run(["ip", "link", "del", "edge0"], capture_output=True, check=False)


@pytest.mark.role
def test_second_run_changes_nothing(applied: tuple[Run, Run, Run]) -> None:
    first, second, _checked = applied
    print(f"\nansible first run: {first.recap}\nansible second run: {second.recap}")
    assert first.recap["failed"] == 0 and first.recap["changed"] >= 10
    assert second.recap["failed"] == 0 and second.recap["changed"] == 0, second.output[-4000:]


@pytest.mark.role
def test_check_mode_runs_the_preflight_and_finds_nothing_to_change(
    applied: tuple[Run, Run, Run],
) -> None:
    """ansible-playbook --check --diff on the provisioned box: it completes, probes the
    kernel for IPVS as a real run does (read-only probes run in check mode), changes nothing."""
    _first, _second, checked = applied
    print(f"\nansible --check: {checked.recap}")
    assert checked.recap["failed"] == 0 and checked.recap["changed"] == 0, checked.output[-4000:]
    probe = checked.output.split("TASK [director : Check the kernel has IPVS")[1].split("TASK [")[0]
    assert "ok: [debian-root]" in probe and "skipping" not in probe, probe


@pytest.mark.role
def test_a_box_installed_before_releases_becomes_a_release(applied: tuple[Run, Run, Run]) -> None:
    opt = ROOT / "opt/director"
    left = [name for name in ("pyvenv.cfg", "lib", "include") if (opt / name).exists()]
    assert left == [], f"the old virtualenv's {left} are still there"
    assert sorted(p.name for p in (opt / "bin").iterdir()) == ["director"]
    assert os.readlink(opt / "bin/director") == "../current/bin/director"
    assert os.readlink(opt / "current") == f"releases/{__version__}"
    assert chroot("/opt/director/bin/director", "--version").stdout.strip() == (
        f"director {__version__}"
    )


@pytest.mark.role
def test_an_upgrade_keeps_the_release_before_and_a_role_run_goes_back(upgraded: Upgrade) -> None:
    print(f"\nansible upgrade: {upgraded.upgrade.recap}, rollback: {upgraded.rollback.recap}")
    assert upgraded.upgraded_to == f"director {UPGRADE}"
    assert sorted(upgraded.releases.splitlines()) == sorted([f"* {UPGRADE}", f"  {__version__}"])
    assert upgraded.rolled_back_to == f"director {__version__}"
    assert os.readlink(ROOT / "opt/director/current") == f"releases/{__version__}"
    # Going back installs nothing: the release was still there, only the link moved.
    out = upgraded.rollback.output
    for task in ("Install the director from the wheels", "Install the pinned dependencies"):
        status = re.search(rf"TASK \[director : {task}.*?\n(ok|changed|skipping):", out, re.S)
        assert status is not None and status[1] == "ok", (task, out[-3000:])
    moved = re.search(r"TASK \[director : Make the release current.*?\n(ok|changed):", out, re.S)
    assert moved is not None and moved[1] == "changed"


@pytest.mark.role
def test_director_release_lists_switches_and_refuses_what_is_not_there(upgraded: Upgrade) -> None:
    tool = "/usr/local/sbin/director-release"
    used = chroot(tool, "use", UPGRADE)  # nothing runs in an image: nothing is started
    assert f"{UPGRADE} is current; the director is not running" in used.stdout, used.stdout
    assert chroot("/opt/director/bin/director", "--version").stdout.strip() == f"director {UPGRADE}"
    assert f"* {UPGRADE}" in chroot(tool, "list").stdout.splitlines()
    missing = chroot(tool, "use", "9.9.9", check=False)
    assert missing.returncode == 2 and "no release 9.9.9" in missing.stderr
    assert chroot(tool, "use", __version__, "--no-restart").returncode == 0
    assert os.readlink(ROOT / "opt/director/current") == f"releases/{__version__}"


@pytest.mark.role
def test_keepalived_accepts_the_rendered_config(applied: tuple[Run, Run, Run]) -> None:
    conf = (ROOT / "etc/keepalived/keepalived.conf").read_text()
    assert "priority 150" in conf and "192.0.2.12" in conf
    assert "lvs_sync_daemon edge0 director id 51" in conf
    assert "10.1.0.1/24 dev edge0" in conf  # the floating NAT gateway
    checked = chroot("keepalived", "-t", "-f", "/etc/keepalived/keepalived.conf", check=False)
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert (ROOT / "etc/default/keepalived").read_text().count('DAEMON_ARGS="--vrrp"') == 1


@pytest.mark.role
def test_conntrackd_gets_the_directors_file_and_runs_beside_keepalived(
    applied: tuple[Run, Run, Run],
) -> None:
    conf = (ROOT / "etc/conntrackd/conntrackd.conf").read_text()
    assert "IPv4_address 10.1.0.2" in conf and "IPv4_Destination_Address 10.1.0.3" in conf
    assert "Interface edge0" in conf and "Systemd on" in conf  # Debian's unit is Type=notify
    parsed = chroot("conntrackd", "-C", "/etc/conntrackd/conntrackd.conf", "-s", check=False)
    assert "can't connect" in parsed.stderr + parsed.stdout, parsed.stderr  # parsed, not running
    keepalived = (ROOT / "etc/keepalived/keepalived.conf").read_text()
    assert "conntrackd-notify.sh /usr/sbin/conntrackd /etc/conntrackd/conntrackd.conf primary" in (
        keepalived
    )
    wants = ROOT / "etc/systemd/system/multi-user.target.wants"
    assert (wants / "conntrackd.service").is_symlink()
    unit = (ROOT / "etc/systemd/system/director.service").read_text()
    assert "ReadWritePaths=-/etc/conntrackd" in unit  # the director keeps the file
    assert "DisableExternalCache On" in conf  # the peer's entries go straight to the kernel
    # conntrackd binds to the box's address: it waits for the network, and retries.
    drop_in = (ROOT / "etc/systemd/system/conntrackd.service.d/director.conf").read_text()
    assert "After=network-online.target" in drop_in and "Restart=on-failure" in drop_in


@pytest.mark.role
def test_director_config_token_and_kubeconfig(applied: tuple[Run, Run, Run]) -> None:
    config = yaml.safe_load((ROOT / "etc/director/director.yaml").read_text())
    assert config["ha"]["interface"] == "edge0" and config["ha"]["peers"] == ["192.0.2.12"]
    assert config["kubernetes"]["kubeconfig"] == "/etc/director/kubeconfig"
    assert config["api"]["token_file"] == "/etc/director/api-token"
    assert config["pools"][0]["addresses"] == ["10.0.0.200-10.0.0.239"]
    token = ROOT / "etc/director/api-token"
    assert token.read_text().strip() == TOKEN
    for secret in (token, ROOT / "etc/director/kubeconfig"):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    # The installed director (from the wheelhouse, in its virtualenv) reads both.
    checked = chroot(  # an image, not the box: its interfaces and addresses are not here
        "/opt/director/bin/director",
        "check",
        "--offline",
        "--config",
        "/etc/director/director.yaml",
        "--kubeconfig",
        "/etc/director/kubeconfig",
    )
    assert "director.yaml: valid" in checked.stdout and "kubeconfig: valid" in checked.stdout


@pytest.mark.role
def test_unit_is_valid_hardened_and_enabled(applied: tuple[Run, Run, Run]) -> None:
    unit = ROOT / "etc/systemd/system/director.service"
    text = unit.read_text()
    bounding = "CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_BIND_SERVICE CAP_KILL CAP_SYS_NICE"
    assert bounding in text  # CAP_SYS_NICE, and no RestrictRealtime=: keepalived's VRRP priority
    assert not [line for line in text.splitlines() if line.startswith("RestrictRealtime=")]
    assert "ProtectSystem=strict" in text and "StateDirectory=director" in text
    assert "LimitNOFILE=65536" in text  # not the default soft limit of 1,024
    # A start, a reboot's too, is one Python process: `director run` refuses a bad file itself
    # (the role checked it before installing it), with no `director check` before it.
    starts = [line for line in text.splitlines() if line.startswith("ExecStart")]
    assert len(starts) == 1 and " run --config /etc/director/director.yaml" in starts[0], starts
    verify = chroot(
        "systemd-analyze", "verify", "/etc/systemd/system/director.service", check=False
    )
    assert verify.returncode == 0, verify.stderr
    security = chroot(
        "systemd-analyze",
        "security",
        "--offline=true",
        "/etc/systemd/system/director.service",
        check=False,
    )
    level = re.search(
        r"Overall exposure level for director.service: ([\d.]+) (\w+)", security.stdout
    )
    assert level, security.stdout + security.stderr
    print(f"\nsystemd-analyze security: {level.group(1)} {level.group(2)}")
    assert float(level.group(1)) <= 3.0, security.stdout  # systemd's "OK" band
    wants = ROOT / "etc/systemd/system/multi-user.target.wants"
    assert (wants / "director.service").is_symlink()
    assert (wants / "keepalived.service").is_symlink()
    drop_in = ROOT / "etc/systemd/system/keepalived.service.d/director.conf"
    assert "After=director.service" in drop_in.read_text()
    assert "Restart=on-failure" in drop_in.read_text(), "a keepalived that died is started again"
    # keepalived starts real-time (its VRRP process is never ordinary), with the limit the
    # director keeps on that process once it adopts it
    realtime = ROOT / "etc/systemd/system/keepalived.service.d/realtime.conf"
    lines = realtime.read_text().splitlines()
    for line in ("CPUSchedulingPolicy=rr", "CPUSchedulingPriority=50", f"LimitRTTIME={LIMIT_US}"):
        assert line in lines, realtime.read_text()


@pytest.mark.role
def test_the_node_role_installs_director_node_for_every_boot(applied: tuple[Run, Run, Run]) -> None:
    script = ROOT / "usr/local/sbin/director-node"
    assert script.stat().st_mode & 0o111, "executable"
    unit = ROOT / "etc/systemd/system/director-node.service"
    assert "ExecStart=/usr/local/sbin/director-node --tun --vip 198.51.100.10" in unit.read_text()
    verify = chroot(
        "systemd-analyze", "verify", "/etc/systemd/system/director-node.service", check=False
    )
    assert verify.returncode == 0, verify.stderr
    assert (ROOT / "etc/systemd/system/multi-user.target.wants/director-node.service").is_symlink()
    assert "ipip" in (ROOT / "etc/modules-load.d/director-node.conf").read_text().split()
    usage = chroot("/usr/local/sbin/director-node", "--vip", "nope", check=False)
    assert usage.returncode == 2 and "not an IPv4 address" in usage.stderr


def module_list() -> list[str]:
    """The modules of modules-load.d/director.conf, as systemd-modules-load reads it."""
    text = (ROOT / "etc/modules-load.d/director.conf").read_text()
    return [line.strip() for line in text.splitlines() if line.strip()[:1] not in ("", "#")]


EXPECTED_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.vs.conntrack": "0",
    "net.ipv4.vs.expire_nodest_conn": "1",
    "net.ipv4.vs.expire_quiescent_template": "1",
    "net.ipv4.vs.sync_threshold": "3 10",
    "net.ipv4.vs.run_estimation": "0",  # director_ipvs_rate_estimation: false
    "net.ipv4.conf.all.arp_ignore": "1",  # dr is among the forwarding modes
    "net.ipv4.conf.edge0.arp_announce": "2",
}


@pytest.mark.role
def test_kernel_modules_and_sysctls_are_written_for_boot(applied: tuple[Run, Run, Run]) -> None:
    modules = module_list()
    assert modules[0] == "ip_vs" and {"ip_vs_mh", "ip_vs_sh", "ip_vs_ovf"} <= set(modules)
    sysctl_file = (ROOT / "etc/sysctl.d/90-director.conf").read_text()
    for name, value in EXPECTED_SYSCTLS.items():
        assert re.search(rf"^{re.escape(name)}\s*=\s*{value}$", sysctl_file, re.M), name
    assert "nf_conntrack_max" not in sysctl_file, "no full NAT: conntrack's table untouched"
    # IPVS's connection table sized for the box's memory: 64 buckets per MiB, 2^12 to 2^20
    memory_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    bits = max(12, min(20, int(math.log2(memory_mb * 64))))
    options = (ROOT / "etc/modprobe.d/director.conf").read_text()
    assert f"options ip_vs conn_tab_bits={bits}\n" in options


@pytest.mark.role
def test_preflight_refuses_an_image_without_ipvs(tmp_path: Path) -> None:
    """The preflight alone, against a kernel that lacks a scheduler module."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "directors": {
                            "hosts": {
                                "debian-root": {
                                    "ansible_connection": "community.general.chroot",
                                    "ansible_host": str(ROOT),
                                    "ansible_python_interpreter": "/usr/bin/python3",
                                    "director_ha": False,
                                    "director_schedulers": ["rr", "nosuch"],
                                }
                            }
                        }
                    }
                }
            }
        )
    )
    done = ansible(
        "ansible-playbook", "-i", str(inventory), "site.yml", "--tags", "director_preflight"
    )
    assert done.returncode != 0
    assert "in this image lacks IPVS modules" in done.stdout, done.stdout[-3000:]
    assert "ip_vs_nosuch" in done.stdout


@pytest.mark.kernel
def test_what_the_role_wrote_works_on_an_ipvs_kernel() -> None:
    """In the lab VM: the Debian root the role provisioned (above, on the host), applied the
    way boot applies it (systemd-modules-load, systemd-sysctl) on a kernel with IPVS."""
    modules_file = ROOT / "etc/modules-load.d/director.conf"
    if not modules_file.exists():
        pytest.fail("the role has not provisioned .lab/debian-root: run `make role-test` first")
    modules = module_list()
    loaded = subprocess.run(
        ["modprobe", "--all", *modules], capture_output=True, text=True, check=False
    )
    assert loaded.returncode == 0, loaded.stderr
    assert all(Path("/sys/module", m).exists() for m in modules)
    subprocess.run(["ip", "link", "add", "edge0", "type", "dummy"], check=True)
    try:
        done = subprocess.run(
            ["sysctl", "-p", str(ROOT / "etc/sysctl.d/90-director.conf")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        for name, value in EXPECTED_SYSCTLS.items():
            live = Path("/proc/sys", *name.split(".")).read_text().split()
            assert live == value.split(), (name, live)
    finally:
        subprocess.run(["ip", "link", "del", "edge0"], check=False)
    # The director installed in the image, from its wheels, sees the kernel's schedulers.
    with bind_mounts(os.uname().release):
        offered = chroot("/opt/director/bin/director", "schedulers").stdout.split()
    assert {"rr", "wlc", "sh", "mh", "ovf"} <= set(offered), offered
