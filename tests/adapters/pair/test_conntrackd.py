"""conntrackd beside keepalived (``ha.conntrackd``): the file rendered and read by the real
conntrackd's parser, kept as rendered by the director, wired into keepalived's notify, and
refused with the line at fault. The pair carrying full-NAT connections across a failover
with it is tests/system/test_ha_fullnat.py (lab VM)."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

import pytest

from director.adapters.pair.conntrackd import (
    ConntrackdFile,
    ConntrackdRejected,
    parse_check,
    render_conntrackd,
)
from director.adapters.pair.keepalived import render_keepalived
from director.cli.main import main
from director.core.owned import Ledger
from director.schema.config import ConfigError, parse_config
from director.schema.ha import ConntrackdSettings
from lab.wait import eventually

# The real daemon's parser (`make system` installs conntrackd): missing, these fail, never skip.
CONNTRACKD = shutil.which("conntrackd") or "/usr/sbin/conntrackd"


def settings(
    tmp_path: Path, source: str = "192.0.2.2", peer: str = "192.0.2.3"
) -> ConntrackdSettings:
    return ConntrackdSettings(
        source=source,
        peer=peer,
        interface="back",
        config_file=str(tmp_path / "conntrackd.conf"),
        socket=str(tmp_path / "ct.sock"),
        lock_file=str(tmp_path / "ct.lock"),
        conntrackd=CONNTRACKD,
    )


PAIR = """
ownership: {networks: [203.0.113.96/28]}
services:
  - {name: full, address: 203.0.113.102, port: 80, forwarding: fullnat,
     real_servers: [192.0.2.11:8080]}
snat: {addresses: [SNAT]}
ha:
  interface: front
  router_id: d1
  priority: 150
  unicast_source: 203.0.113.11
  peers: [203.0.113.12]
  gateways: [{address: 192.0.2.1/24, interface: back}]
  conntrackd:
    source: 192.0.2.2
    peer: PEER
    interface: back
    socket: SOCKET
"""


def pair(snat: str = "192.0.2.1", peer: str = "192.0.2.3", socket: str = "/run/ct.sock") -> str:
    return PAIR.replace("SNAT", snat).replace("PEER", peer).replace("SOCKET", socket)


@pytest.mark.parametrize(
    ("source", "peer"), [("192.0.2.2", "192.0.2.3"), ("2001:db8:2::2", "2001:db8:2:0::3")]
)
def test_the_rendered_file_is_one_conntrackd_parses(tmp_path: Path, source: str, peer: str) -> None:
    ct = settings(tmp_path, source, peer)
    text = render_conntrackd(ct, "d1.yaml")
    family = "IPv4" if "." in source else "IPv6"
    assert f"{family}_address {source}" in text
    assert f"{family}_Destination_Address {ipaddress.ip_address(peer)}" in text  # canonical
    assert f"Path {tmp_path / 'ct.sock'}" in text and "Port 3780" in text
    path = tmp_path / "candidate.conf"
    path.write_text(text)
    parse_check(CONNTRACKD, path)  # raises with conntrackd's words when it refuses it


def test_conntrackd_refuses_a_broken_file_naming_its_line(tmp_path: Path) -> None:
    text = render_conntrackd(settings(tmp_path)).replace("HashSize 32768", "HashSize many")
    path = tmp_path / "broken.conf"
    path.write_text(text)
    with pytest.raises(ConntrackdRejected) as caught:
        parse_check(CONNTRACKD, path)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "HashSize many" in t)
    assert caught.value.line == line and "'many'" in str(caught.value)


def test_the_director_puts_back_a_conntrackd_file_changed_or_removed(tmp_path: Path) -> None:
    ledger = Ledger()
    keeper = ConntrackdFile(settings(tmp_path), "d1.yaml", ledger=ledger)
    keeper.verify_seconds = 0.1
    path = tmp_path / "conntrackd.conf"
    keeper.start()
    try:
        assert keeper.settle(30)
        wanted = path.read_text()
        assert wanted == keeper.text and "Sync {" in wanted
        path.write_text("General {\n}\n")  # an upgrade's default file over ours
        eventually(lambda: path.read_text() == wanted, timeout=10, what="the file put back")
        path.unlink()
        eventually(lambda: path.exists() and path.read_text() == wanted, timeout=10)
        state = eventually(lambda: (s := ledger.get("conntrackd")) and s.repairs == 2 and s, 10)
        assert state.in_sync and state.failures == 0
    finally:
        keeper.stop()


def test_keepalived_commits_the_peers_table_on_taking_over(tmp_path: Path) -> None:
    settings_ = parse_config(pair(), "pair.yaml")
    assert settings_.ha is not None
    text = render_keepalived(settings_.ha, ["203.0.113.102"])
    for state in ("primary", "backup", "fault"):
        assert (
            f"conntrackd-notify.sh /usr/sbin/conntrackd /etc/conntrackd/conntrackd.conf {state}"
            in text
        )
    assert "enable_script_security" in text
    plain = parse_config(pair().split("  conntrackd:")[0], "plain.yaml")
    assert plain.ha is not None and "notify_master" not in render_keepalived(plain.ha, [])


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        (pair(snat="192.0.2.9"), "snat.addresses[0]", "must float with them"),
        (pair(peer="2001:db8::3"), "ha.conntrackd.peer", "address family"),
        (pair(peer="192.0.2.2"), "ha.conntrackd.peer", "not this one"),
    ],
)
def test_conntrackd_settings_that_cannot_keep_a_connection_are_refused(
    text: str, where: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "pair.yaml")
    assert caught.value.where == where and reason in caught.value.reason


def test_check_names_the_line_of_a_setting_conntrackd_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_socket = "/run/" + "a" * 120 + "/ct.sock"  # a UNIX socket's path: 107 at most
    config = tmp_path / "pair.yaml"
    config.write_text(pair(socket=long_socket))
    assert main(["check", "--config", str(config), "--offline"]) == 2
    line = next(i for i, t in enumerate(config.read_text().splitlines(), 1) if "socket:" in t)
    err = capsys.readouterr().err
    assert f"{config}:{line}: ha.conntrackd.socket: conntrackd refuses" in err
    assert "longer than 107" in err
