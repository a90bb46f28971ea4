"""The command line on this host (whose kernel has no IPVS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from director import cli
from tests.conftest import kernel_unavailable

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "static.yaml")


def test_check_validates_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--config", EXAMPLE]) == 0
    assert "valid (8 virtual services, 24 real servers)" in capsys.readouterr().out


def test_an_invalid_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  - address: 198.51.100.1\n    port: 99999\n")
    assert cli.main(["plan", "--config", str(bad)]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"{bad}:3: services[0].port: must be an integer between 1 and 65535" in err


@pytest.mark.skipif(kernel_unavailable() is None, reason="this host has IPVS")
@pytest.mark.parametrize("command", ["plan", "apply"])
def test_without_ipvs_plan_and_apply_say_so_in_one_sentence(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "director", command, "--config", EXAMPLE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == cli.EXIT_NO_IPVS
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "has no IPVS support" in lines[0] or "needs root" in lines[0]


@pytest.mark.skipif(not kernel_unavailable(), reason="checks the shadow on a kernel without IPVS")
def test_shadow_mode_runs_without_ipvs_and_writes_only_its_state_file(tmp_path: Path) -> None:
    import json
    import signal
    import time

    from lab.kubeapi import FakeApiServer, service

    with FakeApiServer() as api:
        api.create("services", service("web", [("http", "TCP", 80)]))
        config = tmp_path / "director.yaml"
        config.write_text(
            "pools: [{name: p, addresses: [198.51.100.0/29]}]\n"
            f"kubernetes: {{kubeconfig: {api.kubeconfig(tmp_path / 'kc')}}}\n"
        )
        state = tmp_path / "state.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "director", "run", "--config", str(config), "--dry-run",
             "--state-file", str(state)],
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not (state.exists() and json.loads(state.read_text())["services"]):
                assert time.monotonic() < deadline, "no state file"
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0
        body = json.loads(state.read_text())
        # A CIDR pool skips its network address (.0).
        assert body["addresses"] == {"default/web": ["198.51.100.1"]}
        assert body["services"][0]["service"] == "tcp 198.51.100.1:80"
        assert "event=ipvs.unavailable_shadow" in err
        assert 'event=ipvs.would_change op="+ service tcp 198.51.100.1:80' in err
        assert "origin=default/web:http" in err
        # Nothing was written to the cluster: no status, no event, no lease.
        assert api.get("services", "web")["status"] == {"loadBalancer": {}}
        assert api.store.list("events", None)["items"] == []
        assert api.store.list("leases", None)["items"] == []


def test_check_a_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good"
    good.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://192.0.2.1:6443'}}]\n"
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    assert cli.main(["check", "--kubeconfig", str(good)]) == 0
    assert capsys.readouterr().out.strip() == f"{good}: valid kubeconfig"
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    assert cli.main(["check", "--kubeconfig", str(bad)]) == 2
    assert f"invalid kubeconfig {bad}" in capsys.readouterr().err
    assert cli.main(["check"]) == 2


def test_keepalived_config_renders_the_static_vips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services:\n"
        "  - {address: 198.51.100.10, port: 80, real_servers: ['192.0.2.11:80']}\n"
        "  - {address: 198.51.100.10, port: 443, real_servers: ['192.0.2.11:443']}\n"
        "  - {address: 198.51.100.20, port: 53, protocol: udp, real_servers: ['192.0.2.11:53']}\n"
        "ha: {interface: eth1, router_id: edge1, priority: 150, unicast_source: 203.0.113.11,\n"
        "     peers: [203.0.113.12]}\n"
    )
    assert cli.main(["keepalived-config", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert "priority 150" in text and "203.0.113.12" in text
    vips = [line.split()[0] for line in text.splitlines() if "dev eth1" in line]
    assert vips == ["198.51.100.10/32", "198.51.100.20/32"]  # once per address
    no_ha = tmp_path / "no-ha.yaml"
    no_ha.write_text("defaults: {scheduler: rr}\n")
    assert cli.main(["keepalived-config", "--config", str(no_ha)]) == 2
    assert "no ha: section" in capsys.readouterr().err
