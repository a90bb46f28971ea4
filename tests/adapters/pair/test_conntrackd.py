"""conntrackd beside keepalived (``ha.conntrackd``): the file rendered and read by the real
conntrackd's parser, kept as rendered by the director, wired into keepalived's notify, and
refused with the line at fault. The pair carrying full-NAT connections across a failover
with it is tests/system/test_ha_fullnat.py (lab VM)."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.adapters.pair.conntrackd import (
    ConntrackdFile,
    ConntrackdRejected,
    ConntrackdStats,
    box_table_max,
    parse_check,
    parse_stats,
    read_stats,
    render_conntrackd,
)
from director.adapters.pair.keepalived import render_keepalived
from director.cli.main import main
from director.core.owned import Ledger
from director.dataplane.netns import conntrack_stats
from director.schema.config import ConfigError, parse_config
from director.schema.ha import ConntrackdSettings
from lab.netns import Netns
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


def test_conntrackds_cache_holds_twice_the_boxs_conntrack_table(tmp_path: Path) -> None:
    """conntrackd's own documentation: HashLimit at least twice nf_conntrack_max. The role
    sizes nf_conntrack_max for the box's memory (a million entries on 16 GiB): a fixed
    limit below it left every connection past it unsynced, broken by a takeover."""
    text = render_conntrackd(settings(tmp_path), table_max=1_048_576)
    assert "HashLimit 2097152" in text
    path = tmp_path / "candidate.conf"
    path.write_text(text)
    parse_check(CONNTRACKD, path)
    limit = tmp_path / "nf_conntrack_max"
    limit.write_text("524288\n")
    assert box_table_max(limit) == 524288
    limit.write_text("")  # conntrack not loaded, or unreadable: the role's floor
    assert box_table_max(limit) == 262144 and box_table_max(tmp_path / "absent") == 262144


# What conntrackd 1.4.7 says (DisableExternalCache: the peer's entries go straight into the
# kernel, counted under "external inject"), and the older layout (an external cache, and
# "Pckts mfrm"/"Pckts lost").
STATS_1_4 = """cache internal:
current active connections:\t           7
connections created:\t\t          12\tfailed:\t           1
connections updated:\t\t           3\tfailed:\t           0
connections destroyed:\t\t           5\tfailed:\t           0

external inject:
connections created:\t\t           9\tfailed:\t           2
connections updated:\t\t           0\tfailed:\t           1
connections destroyed:\t\t           0\tfailed:\t           0

traffic processed:
                   0 Bytes                         0 Pckts

UDP traffic (active device=back):
                 824 Bytes sent                  612 Bytes recv
                  22 Pckts sent                   17 Pckts recv
                   4 Error send                    1 Error recv

message tracking:
                   2 Malformed msgs                    6 Lost msgs

"""
STATS_OLD = """cache internal:
current active connections:               4
connections created:                      4    failed:            0
connections updated:                      0    failed:            0
connections destroyed:                    0    failed:            0

cache external:
current active connections:               3
connections created:                      3    failed:            5
connections updated:                      0    failed:            0
connections destroyed:                    0    failed:            0

multicast traffic:
                  352 Bytes sent                    0 Bytes recv
                   22 Pckts sent                    0 Pckts recv
                    0 Error send                    3 Error recv

multicast sequence tracking:
                    1 Pckts mfrm                    8 Pckts lost
"""


def test_conntrackds_report_is_read_in_either_layout() -> None:
    assert parse_stats(STATS_1_4) == ConntrackdStats(
        internal=7, cache_failed=1, inject_failed=3, send_errors=4, recv_errors=1,
        malformed=2, lost=6,
    )  # fmt: skip
    assert parse_stats(STATS_OLD) == ConntrackdStats(
        internal=4, cache_failed=0, inject_failed=5, send_errors=0, recv_errors=3,
        malformed=1, lost=8,
    )  # fmt: skip
    assert parse_stats("") is None
    assert parse_stats("some other daemon's words\n") is None


@pytest.fixture
def pair_namespaces() -> Iterator[tuple[Netns, Netns, Netns]]:
    """Two boxes joined by a sync link (192.0.2.2, .3), and a client of the first."""
    tag = os.getpid()
    a, b, c = Netns(f"cta{tag}"), Netns(f"ctb{tag}"), Netns(f"ctc{tag}")
    try:
        a.exec(
            ["ip", "link", "add", "sync", "type", "veth", "peer", "name", "sync", "netns", b.name]
        )
        a.exec(["ip", "link", "add", "cli", "type", "veth", "peer", "name", "cli", "netns", c.name])
        a.ip("link set lo up", "addr add 192.0.2.2/24 dev sync", "link set sync up")
        a.ip("addr add 10.9.0.1/24 dev cli", "link set cli up")
        b.ip("link set lo up", "addr add 192.0.2.3/24 dev sync", "link set sync up")
        c.ip("link set lo up", "addr add 10.9.0.2/24 dev cli", "link set cli up")
        # conntrack tracks a namespace's connections once a rule there asks for it
        rules = "add table inet t; add chain inet t c { type filter hook input priority 0; }"
        a.exec(["nft", f"{rules}; add rule inet t c ct state established accept"])
        yield a, b, c
    finally:
        for ns in (c, b, a):
            ns.close()


def test_the_running_conntrackds_say_what_they_sent_and_the_peer_holds_it(
    tmp_path: Path, pair_namespaces: tuple[Netns, Netns, Netns]
) -> None:
    """The figures the metrics show come from the real daemons: a client's connection to the
    first box is in its conntrackd's internal cache, the second box's kernel holds the entry,
    nothing lost; a conntrackd that is gone reads as down, never as zeros."""
    a, b, c = pair_namespaces
    files, daemons = {}, []
    try:
        for ns, source, peer in ((a, "192.0.2.2", "192.0.2.3"), (b, "192.0.2.3", "192.0.2.2")):
            ct = settings(tmp_path / ns.name, source, peer)
            ct = dataclasses.replace(ct, interface="sync")
            (tmp_path / ns.name).mkdir()
            files[ns.name] = Path(ct.config_file)
            files[ns.name].write_text(render_conntrackd(ct, table_max=4096))
            daemons.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns.name, CONNTRACKD, "-C", ct.config_file],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        eventually(lambda: all(read_stats(CONNTRACKD, f) for f in files.values()), timeout=20)
        held_before = conntrack_stats(b.name).get("entries", 0)
        server = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        client = c.socket(socket.AF_INET, socket.SOCK_STREAM)
        with server, client:
            server.bind(("10.9.0.1", 8080))
            server.listen()
            client.connect(("10.9.0.1", 8080))
            accepted, _ = server.accept()
            with accepted:
                client.sendall(b"q")
                assert accepted.recv(1) == b"q"
                sent = eventually(
                    lambda: (s := read_stats(CONNTRACKD, files[a.name])) and s.internal >= 1 and s,
                    timeout=20,
                    what="the client's connection in the first box's conntrackd",
                )
                eventually(
                    lambda: conntrack_stats(b.name).get("entries", 0) > held_before,
                    timeout=20,
                    what="the connection in the second box's kernel",
                )
        assert (sent.send_errors, sent.lost, sent.malformed, sent.cache_failed) == (0, 0, 0, 0)
        received = read_stats(CONNTRACKD, files[b.name])
        assert received is not None and (received.recv_errors, received.lost) == (0, 0)
        assert received.inject_failed == 0
        daemons[0].kill()
        daemons[0].wait()
        assert read_stats(CONNTRACKD, files[a.name]) is None
    finally:
        for daemon in daemons:
            daemon.kill()
            daemon.wait()
