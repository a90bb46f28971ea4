"""FRR's text: the network lines that change between two configurations, the file FRR boots
from, its sessions read from its JSON, and its own words when it refuses."""

from __future__ import annotations

import subprocess

from director.adapters.frr.conf import boot_text, frr_words, network_delta, parse_peers, render_frr
from director.core.announce import PeerState
from director.schema.config import parse_config
from tests.bgplab import BASE, ROUTES, VIP, config


def test_a_change_of_announced_prefixes_alone_is_a_few_vtysh_commands() -> None:
    settings = config()
    assert settings.bgp is not None
    one = render_frr(settings.bgp, {VIP: ROUTES[VIP]}, settings.pools)
    two = render_frr(settings.bgp, ROUTES, settings.pools)
    assert network_delta(one, two, 64512) == [
        "configure terminal",
        "router bgp 64512",
        "address-family ipv6 unicast",
        "network 2001:db8:100::5/128 route-map director-edge",
        "exit-address-family",
        "end",
    ]
    back = network_delta(two, one, 64512)
    assert back is not None and "no network 2001:db8:100::5/128" in back
    assert network_delta(one, one, 64512) == []
    other = parse_config(BASE.replace("asn: 64500}", "asn: 64501}", 1))
    assert other.bgp is not None
    changed_peer = render_frr(other.bgp, ROUTES, other.pools)
    assert network_delta(one, changed_peer, 64512) is None  # frr-reload.py applies that
    assert network_delta(None, one, 64512) is None


def test_frr_boots_from_a_file_that_announces_nothing() -> None:
    settings = config()
    assert settings.bgp is not None
    text = render_frr(settings.bgp, ROUTES, settings.pools)
    announces = [line for line in text.splitlines() if line.lstrip().startswith("network ")]
    assert len(announces) == sum(route.announced for route in ROUTES.values())
    booted = boot_text(text)
    assert [line for line in text.splitlines() if line not in announces] == booted.splitlines()
    assert "no bgp network import-check" in booted  # a setting, not an announcement


def test_sessions_are_read_from_frr_s_json_and_anything_else_reads_as_unknown() -> None:
    settings = config()
    assert settings.bgp is not None
    first = settings.bgp.peers[0]
    summary = {
        "ipv4Unicast": {
            "peers": {
                first.address: {"state": "Established", "peerUptimeMsec": 61500, "pfxSnt": 3},
                "203.0.113.250": {"state": "Active"},  # not ours: not shown
            }
        },
        "ipv6Unicast": "not a table",
    }
    bfd = [{"peer": first.address, "status": "up"}, "junk", {"status": "down"}]
    peers = parse_peers(settings.bgp, summary, bfd)
    assert [p.address for p in peers] == [p.address for p in settings.bgp.peers]
    assert peers[0] == PeerState(
        first.address, first.asn, "Established", 61.5, 3, "up" if first.bfd else "-"
    )
    assert all(p.state == "unknown" and p.prefixes_sent == 0 for p in peers[1:])
    nothing = parse_peers(settings.bgp, None, None)  # vtysh did not answer
    assert [(p.state, p.bfd) for p in nothing] == [("unknown", "-")] * len(settings.bgp.peers)


def test_frr_s_refusal_is_told_in_its_own_words() -> None:
    refused = subprocess.CompletedProcess(
        ["vtysh"],
        1,
        "line 2: % Unknown command: neighbour x\n"
        "\x1b[1mline 2: % Unknown command: neighbour x\x1b[0m\n",
        "% Can not configure the local system as neighbor\n",
    )
    assert frr_words(refused) == (
        "% Can not configure the local system as neighbor | line 2: % Unknown command: neighbour x"
    )
    quiet = subprocess.CompletedProcess(["vtysh"], 2, "", "")
    assert frr_words(quiet) == "exited 2"
