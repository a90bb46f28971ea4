"""What ``director run`` would refuse at start, found by ``director check`` first, and
refused by ``run`` in one line: a token file it could not use, an API address that is not
the box's own, a port in use (a note for check, a clean exit for run), a missing TLS
certificate, a regular file where the FIFO goes (never replaced)."""

from __future__ import annotations

from pathlib import Path

import pytest

from director.cli import main as cli
from tests.cli.test_main import api_config, run_director


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "No such file or directory"),
        ("", "the token must be at least 16 characters"),
        ("first-line-of-a-token\nsecond-line-of-it\n", "the token must be one line"),
        ("a token with spaces in it\n", "the token may hold only letters, digits and -._~+/="),
    ],
    ids=["missing", "empty", "two-lines", "spaces"],
)
def test_check_refuses_the_token_files_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], token: str | None, reason: str
) -> None:
    config = api_config(tmp_path, token)
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert reason in capsys.readouterr().err
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and reason in done.stderr
    assert "Traceback" not in done.stderr


def test_an_api_address_that_is_not_the_boxs_own_fails_check_and_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = api_config(tmp_path, listen="192.0.2.254:9180")  # not an address of this host
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert f"{config}:3: api.listen: 192.0.2.254:9180: Cannot assign requested address" in (
        capsys.readouterr().err
    )  # the line and the field, as for a fault of the file's own
    assert cli.main(["check", "--offline", "--config", str(config)]) == 0, "an image build"
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"director: invalid configuration: {config}: api.listen 192.0.2.254:9180: "
        "Cannot assign requested address"
    )


def test_a_port_in_use_is_a_note_for_check_and_a_clean_exit_for_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = api_config(tmp_path, listen=f"127.0.0.1:{port}")
        assert cli.main(["check", "--config", str(config)]) == 0
        assert "the port is in use now" in capsys.readouterr().out
        done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr
    assert f"api.listen 127.0.0.1:{port}: Address already in use" in done.stderr


def test_a_missing_tls_certificate_fails_check_and_run_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = api_config(
        tmp_path, tls_cert=str(tmp_path / "no-cert.pem"), tls_key=str(tmp_path / "no-key.pem")
    )
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert f"{config}:3: api.tls_cert: cannot load it with api.tls_key" in capsys.readouterr().err
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr
    assert "api.tls_cert/tls_key: cannot load" in done.stderr


def test_a_regular_file_at_the_fifo_path_is_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("an operator's file\n")
    config = api_config(tmp_path)
    config.write_text(
        config.read_text()
        + "ha: {interface: eth1, router_id: edge1, priority: 150, unicast_source: 203.0.113.11,\n"
        f"     peers: [203.0.113.12], fifo: {precious}, config_file: {tmp_path}/k.conf,\n"
        f"     keepalived: /bin/true}}\n"
    )
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert f"{config}:5: ha.fifo: {precious} exists and is not a FIFO" in capsys.readouterr().err
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr
    assert f"ha.fifo {precious} exists and is not a FIFO" in done.stderr
    assert precious.read_text() == "an operator's file\n"


def test_a_mistyped_interface_fails_check_on_the_box_and_passes_an_image_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 71, 2: a mistyped ha.interface or track_interfaces passed ``director check`` on
    the box (the role's validation step), and keepalived then refused every file rendered
    with it. On the box each interface the pair's files name must exist; --offline (an
    image build) cannot tell."""
    config = api_config(tmp_path)
    fifo = tmp_path / "k.fifo"
    config.write_text(
        config.read_text()
        + "ha: {interface: lo, router_id: edge1, priority: 150, unicast_source: 203.0.113.11,\n"
        f"     peers: [203.0.113.12], fifo: {fifo}, config_file: {tmp_path}/k.conf,\n"
        "     track_interfaces: [lo, etho0], keepalived: /bin/true}\n"
    )
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "ha.track_interfaces[1]: etho0: no such interface on this box" in err, err
    assert "ha.interface" not in err  # lo is there
    assert cli.main(["check", "--offline", "--config", str(config)]) == 0


def test_a_pool_holding_one_of_the_box_s_own_addresses_fails_check_on_the_box(
    tmp_path: Path,
) -> None:
    """Issue 71, 2: a pool holding the box's management address (not named in the file)
    passed check, and a tenant's Service could be given it (the box's SSH taken). On the
    box, check names the address and its interface. Host routes (/32, the VIPs keepalived
    adds) are not the box's own."""
    import os
    import subprocess
    import sys

    ns = f"pf-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for command in (
            ["link", "add", "mgmt0", "type", "veth", "peer", "name", "mgmt1"],
            ["link", "set", "mgmt0", "up"],
            ["address", "add", "198.51.100.7/24", "dev", "mgmt0"],
            ["address", "add", "198.51.100.40/32", "dev", "mgmt0"],  # a VIP, as keepalived adds
        ):
            subprocess.run(["ip", "-n", ns, *command], check=True)
        config = tmp_path / "director.yaml"
        config.write_text(
            "ownership: {networks: [198.51.100.0/24]}\n"
            "pools: [{name: tenants, addresses: [198.51.100.0/26], announce: bgp}]\n"
            "bgp:\n  asn: 64512\n  router_id: 192.0.2.11\n  peers:\n"
            "    - {address: 192.0.2.1, asn: 64500}\n"
        )
        command = ["ip", "netns", "exec", ns, sys.executable, "-m", "director", "check"]
        done = subprocess.run(
            [*command, "--config", str(config)],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == cli.EXIT_CONFIG, done.stdout + done.stderr
        assert "pools[0].addresses: holds 198.51.100.7 (mgmt0), this box's own address" in (
            done.stderr
        )
        assert "198.51.100.40" not in done.stderr
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
