"""The rules across the file's objects: what ``director run`` would break on is refused at
load, with the line and the reason."""

from __future__ import annotations

import pytest

from director.schema.config import ConfigError, parse_config

# -- what run would break on, refused by check (issue 34, item 15) ----------------------------
HA = (
    "ha: {interface: eth0, router_id: d1, priority: 100, unicast_source: 203.0.113.2,\n"
    "     peers: [203.0.113.3],\n"
    "     gateways: [{address: 192.0.2.1/24, interface: eth1}]}\n"
)
BGP = (
    "bgp:\n  asn: 64512\n  router_id: 198.18.0.11\n  peers:\n"
    "    - {address: 198.18.0.1, asn: 64500, source: 198.18.0.11}\n"
)


FULLNAT = (
    "ownership: {networks: [192.0.2.0/24, 10.0.0.0/8]}\nservices:\n  - {name: web, "
    "address: 192.0.2.9, port: 80, forwarding: fullnat, real_servers: [10.0.0.1:80]}\n"
)


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        (
            "pools:\n  - {name: p, addresses: [203.0.113.0/28]}\n" + HA,
            "pools[0].addresses",
            "holds 203.0.113.2, this box's own address (ha.unicast_source)",
        ),
        (
            "pools:\n  - {name: p, addresses: [203.0.113.3-203.0.113.9]}\n" + HA,
            "pools[0].addresses",
            "holds 203.0.113.3, this box's own address (ha.peers[0])",
        ),
        (
            "pools:\n  - {name: p, addresses: [192.0.2.0/28]}\n" + HA,
            "pools[0].addresses",
            "holds 192.0.2.1, this box's own address (ha.gateways[0])",
        ),
        (
            "pools:\n  - {name: p, addresses: [198.18.0.0/24], announce: bgp}\n" + BGP,
            "pools[0].addresses",
            "holds 198.18.0.11, this box's own address (bgp.router_id)",
        ),
        (
            "pools:\n  - {name: p, addresses: [198.18.0.0/31], announce: bgp, "
            "all_addresses: true}\n"
            + BGP.replace(", source: 198.18.0.11", "").replace("198.18.0.11", "198.18.1.1"),
            "pools[0].addresses",
            "holds 198.18.0.1, this box's own address (bgp.peers[0].address)",
        ),
        (
            "ownership: {networks: [198.51.100.0/24]}\n"
            "api: {token_file: /t, listen: 198.51.100.1:9180}\n"
            "pools:\n  - {name: p, addresses: [198.51.100.0/28]}\n",
            "pools[0].addresses",
            "holds 198.51.100.1, this box's own address (api.listen)",
        ),
        (
            "ownership: {networks: [198.51.100.0/24]}\n" + BGP + "  config_file: /etc/d.yaml\n",
            "bgp.config_file",
            "/etc/d.yaml is also the configuration file itself",
        ),
        (
            "api: {token_file: /etc/director/token}\n"
            + HA.replace("}\n", ", config_file: /etc/director/token}\n"),
            "ha.config_file",
            "/etc/director/token is also api.token_file",
        ),
        (  # issue 71, 2: conntrackd unlinks its socket's path before binding
            "api: {token_file: /etc/director/token, intents_file: /var/lib/d/intents.json}\n"
            + HA.replace(
                "}\n",
                ", conntrackd: {source: 10.9.0.1, peer: 10.9.0.2, interface: eth2, "
                "socket: /var/lib/d/intents.json}}\n",
            ),
            "ha.conntrackd.socket",
            "/var/lib/d/intents.json is also api.intents_file",
        ),
        (  # conntrackd makes and removes its lock file
            "api: {token_file: /etc/director/token}\n"
            + HA.replace(
                "}\n",
                ", conntrackd: {source: 10.9.0.1, peer: 10.9.0.2, interface: eth2, "
                "lock_file: /etc/director/token}}\n",
            ),
            "ha.conntrackd.lock_file",
            "/etc/director/token is also api.token_file",
        ),
        (
            "pools:\n  - {name: p, addresses: [198.51.100.0/28], announce: bgp, "
            'communities: ["64512:70000"]}\n' + BGP,
            "pools[0].communities[0]",
            "each half 0 to 65535",
        ),
        ('ownership: {networks: ["fe80::1%x/128"]}\n', "ownership.networks[0]", "no zone"),
        (
            "defaults: {forwarding: fullnat}\n",
            "defaults.forwarding",
            "fullnat needs snat.addresses",
        ),
        (
            "pools:\n  - {name: p, addresses: [198.51.100.0/28]}\n"
            "snat: {addresses: [198.51.100.5]}\n",
            "pools[0].addresses",
            "holds 198.51.100.5, this box's own address (snat.addresses[0])",
        ),
        (
            "pools:\n  - {name: p, addresses: [198.51.100.0/28], forwarding: fullnat}\n",
            "pools[0].forwarding",
            "fullnat needs snat.addresses",
        ),
        (
            "pools:\n  - {name: p, addresses: [198.51.100.0/28], announce: bgp, forwarding: nat}\n"
            + BGP,
            "pools[0].forwarding",
            "nat cannot serve an address announced over BGP",
        ),
        (  # issue 71, 3: the nftables table marks and SNATs address . proto . port only
            "ownership: {networks: [10.0.0.0/8], fwmarks: [7]}\n"
            "snat: {addresses: [10.0.0.254]}\n"
            "services:\n  - {name: marked, fwmark: 7, family: ipv4, forwarding: fullnat, "
            "real_servers: [10.0.0.1:80]}\n",
            "services[0]",
            "fullnat cannot serve a firewall-mark service",
        ),
        (
            FULLNAT + "snat: {addresses: [192.0.2.9]}\n",
            "snat.addresses[0]",
            "192.0.2.9 is the address of static/web",
        ),
        (
            FULLNAT + 'snat: {addresses: ["2001:db8::1"]}\n',
            "services[0]",
            "fullnat needs an IPv4 address in snat.addresses",
        ),
        (
            FULLNAT.replace("[10.0.0.1:80]", "[10.0.0.1:80, {address: 10.0.0.2, forwarding: dr}]")
            + "snat: {addresses: [10.0.0.254]}\n",
            "services[0].real_servers",
            "fullnat is the whole service's",
        ),
    ],
)
def test_what_run_would_break_on_is_refused_with_its_line(
    text: str, where: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "/etc/d.yaml")
    assert caught.value.where == where, caught.value
    assert reason in caught.value.reason, caught.value
