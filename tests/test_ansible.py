"""The Ansible role, the inventories and the Vagrant lab, checked on the host: ansible-lint,
the playbook's syntax, the variables' documentation, and the Vagrantfile (parsed by Ruby and
evaluated) against the example inventory. The role's real application to a Debian root is
tests/system/test_ansible_role.py (in the lab VM)."""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from director.schema.config import parse_config
from tests.ansiblelab import ANSIBLE, BIN as ANSIBLE_BIN, REPO, ansible, ansible_env

ROLE = ANSIBLE / "roles" / "director"
EXAMPLE = ANSIBLE / "inventory" / "example"
LAB_VARS = ANSIBLE / "inventory" / "lab" / "group_vars" / "directors.yml"
SCALE_OUT = ANSIBLE / "inventory" / "scale-out"
GROUP_VARS = [
    EXAMPLE / "group_vars" / "directors.yml",
    LAB_VARS,
    SCALE_OUT / "group_vars" / "directors.yml",
]


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def specs(role: str = "director") -> dict[str, Any]:
    spec = load(ANSIBLE / "roles" / role / "meta" / "argument_specs.yml")
    return spec["argument_specs"]["main"]["options"]  # type: ignore[no-any-return]


def example_hosts(inventory: Path = EXAMPLE) -> dict[str, dict[str, Any]]:
    return load(inventory / "hosts.yml")["all"]["children"]["directors"]["hosts"]


def test_ansible_lint_is_clean() -> None:
    done = ansible("ansible-lint", "--offline", "--nocolor", "--profile", "production")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("inventory", ["inventory/example", "inventory/lab", "inventory/scale-out"])
def test_playbook_syntax(inventory: str) -> None:
    done = ansible("ansible-playbook", "--syntax-check", "-i", inventory, "site.yml")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("role", ["director", "director_node"])
def test_every_variable_is_documented_with_its_default(role: str) -> None:
    defaults = load(ANSIBLE / "roles" / role / "defaults" / "main.yml")
    options = specs(role)
    assert set(defaults) == set(options), set(defaults) ^ set(options)
    for name, spec in options.items():
        assert name.startswith("director_")
        assert spec.get("type") and spec.get("description"), name
        if "default" in spec:
            assert spec["default"] == defaults[name], name
        else:  # computed from the inventory (director_vrrp_peers)
            assert "{{" in str(defaults[name]), name


def test_inventories_use_only_documented_variables_of_the_right_type() -> None:
    options = specs()
    kinds = {"int": int, "str": str, "list": list, "dict": dict, "bool": bool, "float": float}
    options = {**options, **specs("director_node")}
    for inventory in (EXAMPLE, SCALE_OUT):
        used: dict[str, Any] = {
            **load(inventory / "group_vars" / "directors.yml"),
            **load(LAB_VARS),
        }
        for host in example_hosts(inventory).values():
            used.update(host)
        groups = load(inventory / "hosts.yml")["all"]["children"]
        for host in groups.get("lvs_backends", {}).get("hosts", {}).values():
            used.update(host)
        used.update(groups.get("lvs_backends", {}).get("vars", {}))
        for name, value in used.items():
            if name.startswith("ansible_") or "{{" in str(value):
                continue
            assert name in options, f"{name} is not a variable of the role"
            kind = kinds[options[name]["type"]]
            assert isinstance(value, kind) or (kind is float and isinstance(value, int)), name


@pytest.mark.parametrize("source", GROUP_VARS)
def test_the_inventories_director_config_is_valid(source: Path, tmp_path: Path) -> None:
    """What the role writes: the inventory's director_config plus the api section."""
    body = dict(load(source)["director_config"])
    body["api"] = {"listen": "127.0.0.1:9180", "token_file": str(tmp_path / "token")}
    settings = parse_config(yaml.safe_dump(body), str(source))
    assert settings.kubernetes is not None and settings.pools


def test_the_scale_out_inventory_gives_three_active_boxes_their_own_router_id(
    tmp_path: Path,
) -> None:
    """Every box announces (no keepalived), each with its own router id in director.yaml."""
    group = load(SCALE_OUT / "group_vars" / "directors.yml")
    hosts = example_hosts(SCALE_OUT)
    assert len(hosts) == 3 and group["director_ha"] is False
    assert all(pool["announce"] == "bgp" for pool in group["director_config"]["pools"])
    ids = set()
    for name, host in hosts.items():
        body = dict(group["director_config"])
        body["bgp"] = {**body["bgp"], "router_id": host["director_bgp_router_id"]}
        body["api"] = {"listen": host["director_api_listen"], "token_file": str(tmp_path / "token")}
        settings = parse_config(yaml.safe_dump(body), f"{name}.yaml")
        assert settings.bgp is not None and settings.ha is None
        ids.add(settings.bgp.router_id)
    assert len(ids) == 3


def vagrant() -> dict[str, Any]:
    if shutil.which("ruby") is None:
        pytest.fail("ruby is not installed (make setup installs it)")
    syntax = subprocess.run(
        ["ruby", "-c", "Vagrantfile"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert syntax.returncode == 0 and "Syntax OK" in syntax.stdout, syntax.stderr
    done = subprocess.run(
        ["ruby", str(REPO / "tests" / "vagrant_shim.rb"), "Vagrantfile"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    (config,) = json.loads(done.stdout)
    assert config["version"] == "2"
    return config["config"]


def machines(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["args"][0]: m["block"]["vm"] for m in config["vm"]["define()"]}


def test_vagrantfile_builds_the_lab_two_edges_k3s_and_a_client() -> None:
    boxes = machines(vagrant())
    assert set(boxes) == {"edge1", "edge2", "k3s", "client"}
    ips = {name: [n["options"]["ip"] for n in vm["network()"]] for name, vm in boxes.items()}
    assert ips["client"] == ["192.168.56.30"] and ips["k3s"] == ["192.168.57.20"]
    assert ips["edge1"] == ["192.168.56.11", "192.168.57.11"]
    assert ips["edge2"] == ["192.168.56.12", "192.168.57.12"]
    k3s_script = boxes["k3s"]["provision()"][0]["options"]["inline"]
    assert "deploy/kubernetes/rbac.yaml" in k3s_script and "mint-kubeconfig.sh" in k3s_script
    assert (REPO / "deploy/kubernetes/mint-kubeconfig.sh").stat().st_mode & 0o111


def test_vagrantfile_and_example_inventory_agree() -> None:
    boxes = machines(vagrant())
    provisioners = [
        p for vm in boxes.values() for p in vm.get("provision()", []) if p["args"] == ["ansible"]
    ]
    assert len(provisioners) == 1, "one Ansible run provisions the pair"
    ansible = provisioners[0]["block"]
    assert ansible["playbook"] == "ansible/site.yml" and ansible["limit"] == "directors"
    assert ansible["groups"] == {"directors": ["edge1", "edge2"]}
    example = example_hosts()
    assert len(example) == len(ansible["host_vars"]) == 2
    example_names = [sorted(k for k in h if not k.startswith("ansible_")) for h in example.values()]
    for name, host_vars in ansible["host_vars"].items():
        assert sorted(host_vars) in example_names, f"{name}: {sorted(host_vars)}"
        # the box's advert address is the front address Vagrant gives it
        assert (
            host_vars["director_vrrp_unicast_source"]
            == boxes[name]["network()"][0]["options"]["ip"]
        )
    options = specs()
    assert set(ansible["extra_vars"]) <= set(options)
    assert set(load(EXAMPLE / "group_vars" / "directors.yml")) <= set(ansible["extra_vars"])
    # the priorities make one master
    priorities = sorted(h["director_vrrp_priority"] for h in ansible["host_vars"].values())
    assert priorities[0] < priorities[1]


def test_the_examples_are_safe_to_copy() -> None:
    """Issue 13, item 20: the API on a management address, never every address (the VIPs
    among them), and /metrics and the status page behind the token."""
    lab = {name: edge["vars"] for name, edge in machines_vars().items()}
    for hosts in (example_hosts(), lab):
        for name, host in hosts.items():
            address = host["director_api_listen"].rpartition(":")[0].strip("[]")
            assert address not in ("0.0.0.0", "::"), name
            assert address != host["director_vrrp_unicast_source"], name
    for source in (EXAMPLE / "group_vars" / "directors.yml", LAB_VARS):
        assert load(source)["director_api_public"] == ["health"], source


def machines_vars() -> dict[str, Any]:
    """EDGES from the Vagrantfile, as the Ruby shim evaluates it."""
    provisioner = next(
        p
        for vm in machines(vagrant()).values()
        for p in vm.get("provision()", [])
        if p["args"] == ["ansible"]
    )
    return {name: {"vars": v} for name, v in provisioner["block"]["host_vars"].items()}


# -- site.yml's rollout: one box at a time, each waited for -------------------------------
def _box(tmp_path: Path, name: str, port: int) -> tuple[dict[str, Any], list[str]]:
    """A box of the inventory, reached over Ansible's local connection: its install and
    config folders hold the real ``director`` (a wrapper of this venv's) and the API token;
    the returned command runs its director (a shadow: this host has no IPVS)."""
    root = tmp_path / name
    (root / "bin").mkdir(parents=True)
    wrapper = root / "bin" / "director"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m director "$@"\n')
    wrapper.chmod(0o755)
    token = root / "api-token"
    token.write_text(f"token-of-{name}-for-the-rollout\n")
    config = root / "director.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "ownership": {"networks": ["198.51.100.0/24"]},
                "services": [
                    {
                        "name": "web",
                        "address": "198.51.100.10",
                        "port": 80,
                        "real_servers": ["192.0.2.11:8080"],
                    }
                ],
                "api": {
                    "listen": f"127.0.0.1:{port}",
                    "token_file": str(token),
                    "intents_file": str(root / "intents.json"),
                },
            }
        )
    )
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,
        "director_install_dir": str(root),
        "director_config_dir": str(root),
        "director_api_listen": f"127.0.0.1:{port}",
        "director_ready_retries": 30,
        "director_ready_delay": 1,
        "director_ready_wait": True,  # also where this test runs in a chroot (make fresh)
        "director_vrrp_unicast_source": f"127.0.0.{port % 250 + 2}",  # per box, as in any
    }
    return host, [str(wrapper), "run", "--dry-run", "--config", str(config)]


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports below the kernel's ephemeral range: no client socket and
    no port-0 listener of another test can take one between now and the late start of a
    box's director (a foreign director on it answers the box's token with 403), and every
    socket is held until all are bound, so no port comes twice."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = random.sample(range(max(1024, low - 12000), low), k=64)
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for port in candidates:
            s = stack.enter_context(socket.socket())
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            ports.append(port)
            if len(ports) == count:
                return ports
    raise AssertionError(f"no {count} free ports below {low}")


def _rollout(
    tmp_path: Path, hosts: dict[str, Any], on_line: Callable[[str], None] | None = None
) -> subprocess.CompletedProcess[str]:
    """``site.yml --tags director_ready``: the rollout's wait alone, box after box.
    ``on_line`` sees each line of Ansible's output as it comes."""
    inventory = tmp_path / "hosts.yml"
    group = {"hosts": hosts, "vars": {"director_ha": False}}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"directors": group}}}))
    argv = ["ansible-playbook", "-i", str(inventory), "site.yml", "--tags", "director_ready"]
    if on_line is None:
        return ansible(*argv, timeout=300)
    # Unbuffered: each line as Ansible prints it (a pipe would otherwise hold it to the end).
    proc = subprocess.Popen(
        [str(ANSIBLE_BIN / argv[0]), *argv[1:]],
        cwd=ANSIBLE,
        env=dict(ansible_env(), PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    timer = threading.Timer(300, proc.kill)
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            on_line(line)
    finally:
        timer.cancel()
    return subprocess.CompletedProcess(argv, proc.wait(), "".join(lines), "")


def _waits(output: str) -> list[list[str]]:
    """The hosts of each run of the wait task, in order (one list per batch)."""
    runs = re.split(r"^TASK \[Wait until the director is ready[^\n]*\n", output, flags=re.M)[1:]
    return [
        re.findall(
            r"^(?:ok|fatal|changed): \[([\w-]+)\]",
            r.split("\nTASK ")[0].split("\nPLAY RECAP")[0],
            re.M,
        )
        for r in runs
    ]


def test_site_yml_rolls_out_one_box_at_a_time_and_waits_for_each(tmp_path: Path) -> None:
    """The rollout's wait, run for real against two running directors: box-a's starts only
    once its wait has failed a first time (however long Ansible takes to get there), so the
    wait retries until it is ready; box-b's turn comes only after box-a's (serial: 1), in a
    batch of its own."""
    port_a, port_b = _free_ports(2)
    (a, run_a), (b, run_b) = _box(tmp_path, "box-a", port_a), _box(tmp_path, "box-b", port_b)
    director_b = subprocess.Popen(run_b, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    director_a: list[subprocess.Popen[bytes]] = []

    def late(line: str) -> None:  # box-a's director, once its wait has retried
        if "FAILED - RETRYING: [box-a]" in line and not director_a:
            director_a.append(
                subprocess.Popen(run_a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )

    try:
        done = _rollout(tmp_path, {"box-a": a, "box-b": b}, on_line=late)
    finally:
        for process in [director_b, *director_a]:
            process.terminate()
            process.wait(timeout=30)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert _waits(out) == [["box-a"], ["box-b"]], out[-4000:]
    assert "FAILED - RETRYING: [box-a]" in out  # it waited for box-a's director
    assert "RETRYING: [box-b]" not in out  # already ready when its turn came


def test_a_box_that_never_gets_ready_stops_the_rollout_before_the_next(tmp_path: Path) -> None:
    """box-a's director runs but is not a VRRP MASTER or BACKUP (director_ha: the pair's
    keepalived is not there): its wait gives up, the play fails, and box-b is never
    touched, though its director is ready."""
    port_a, port_b = _free_ports(2)
    (a, run_a), (b, run_b) = _box(tmp_path, "box-a", port_a), _box(tmp_path, "box-b", port_b)
    a.update(director_ready_retries=3, director_ha=True)
    directors = [
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for cmd in (run_a, run_b)
    ]
    try:
        done = _rollout(tmp_path, {"box-a": a, "box-b": b})
    finally:
        for process in directors:
            process.terminate()
            process.wait(timeout=30)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-4000:]
    assert _waits(out) == [["box-a"]], out[-4000:]
    assert "standalone" in out  # why: its VRRP role, in the last answer shown
    assert not re.search(r"^box-b\s*:", out, re.M)  # box-b is not in the recap: untouched


@pytest.mark.parametrize("name", ["../../x", "../../x/", "-h", "", ".."])
def test_director_release_takes_a_release_name_never_a_path(tmp_path: Path, name: str) -> None:
    """``director-release use`` makes a release current: a path out of releases/ (an
    executable bin/director anywhere on the box: here ../../x from releases/) is refused,
    and nothing changes."""
    tool = ROLE / "files" / "director-release"
    root = tmp_path / "root"
    (root / "releases" / "1.0" / "bin").mkdir(parents=True)
    outside = tmp_path / "x" / "bin"
    outside.mkdir(parents=True)
    for place in (outside, root / "releases" / "1.0" / "bin"):
        (place / "director").write_text("#!/bin/sh\nexit 0\n")
        (place / "director").chmod(0o755)
    env = {"DIRECTOR_ROOT": str(root), "PATH": "/usr/bin:/bin", "DIRECTOR_CONFIG": "/nonexistent"}
    done = subprocess.run(
        ["sh", str(tool), "use", name, "--no-restart"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert not (root / "current").exists()
    good = subprocess.run(
        ["sh", str(tool), "use", "1.0", "--no-restart"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert good.returncode == 0 and (root / "current").resolve().name == "1.0"


def test_the_role_names_each_clusters_kubeconfig_in_the_file_it_writes(tmp_path: Path) -> None:
    """With several clusters, director.yaml as the role's template writes it: each cluster
    whose kubeconfig the role installs points at it; the file is one the director takes."""

    from tests.ansiblelab import ansible

    variables = {
        "director_config_dir": "/etc/director",
        "director_api_listen": "127.0.0.1:9180",
        "director_api_public": ["health"],
        "director_api_tls_cert_file": "",
        "director_ha": False,
        "director_bgp": False,
        "director_syn_guard": "auto",
        "director_kubeconfig": "",
        "director_cluster_kubeconfigs": {"prod": "apiVersion: v1", "lab": "apiVersion: v1"},
        "director_config": {
            "pools": [{"name": "p", "addresses": ["198.51.100.0/28"]}],
            "clusters": [
                {"name": "prod", "pools": ["p"]},
                {"name": "lab", "pools": ["p"], "kubeconfig": "/elsewhere"},
                {"name": "own", "pools": ["p"], "kubeconfig": "/srv/own.kubeconfig"},
            ],
        },
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    out = tmp_path / "director.yaml"
    template = ANSIBLE / "roles/director/templates/director.yaml.j2"
    run = ansible(
        "ansible",
        "localhost",
        "-c",
        "local",
        "-m",
        "ansible.builtin.template",
        "-a",
        f"src={template} dest={out}",
        "-e",
        f"@{tmp_path / 'vars.json'}",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    written = yaml.safe_load(out.read_text())
    kubeconfigs = {c["name"]: c.get("kubeconfig") for c in written["clusters"]}
    assert kubeconfigs == {
        "prod": "/etc/director/kubeconfig-prod",
        "lab": "/etc/director/kubeconfig-lab",
        "own": "/srv/own.kubeconfig",
    }
    settings = parse_config(out.read_text().replace("/etc/director/api-token", "/t"), str(out))
    assert [k.cluster for k in settings.served] == ["prod", "lab", "own"]
