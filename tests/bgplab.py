"""What the BGP tests share: a file with a pool announced over BGP and one kept by the pair,
two peers, a static service in each; the VIP and its key; a kernel table of given weights;
the routes FRR is sent."""

from __future__ import annotations

import pytest

from director.core.announce import Route
from director.core.model import Forwarding, IpProtocol, RealServer, ServiceKey
from director.schema.config import ConfigError, Settings, parse_config

VIP = "198.51.100.10"


KEY = ServiceKey.inet(IpProtocol.TCP, VIP, 80)


BASE = """
pools:
  - {name: edge, addresses: [198.51.100.0/28], announce: bgp, communities: ["64512:10"],
     local_preference: 200, large_communities: ["64512:1:4294967295"]}
  - {name: pair, addresses: [203.0.113.0/28]}
bgp:
  asn: 64512
  router_id: 198.18.0.11
  peers:
    - {address: 198.18.0.1, asn: 64500}
    - {address: "2001:db8::1", asn: 64500, password: s3cret, multihop: 2, bfd: false}
"""


STATIC = """
services:
  - name: web
    address: 198.51.100.10
    port: 80
    scheduler: mh
    flags: [mh-port]
    forwarding: tun
    real_servers: ["192.0.2.11:80", "192.0.2.12:80"]
  - {name: pair, address: 203.0.113.5, port: 80, real_servers: ["192.0.2.11:80"]}
"""


def config(text: str = BASE + STATIC) -> Settings:
    return parse_config(text, "d.yaml")


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        config(text)
    return str(caught.value)


def table(*weights: int) -> dict[ServiceKey, object]:
    from director.core.model import ServiceConfig
    from director.core.services import VirtualService

    servers = {
        (f"192.0.2.{11 + i}", 80): RealServer(f"192.0.2.{11 + i}", 80, w, Forwarding.TUN)
        for i, w in enumerate(weights)
    }
    return {KEY: VirtualService(KEY, ServiceConfig("mh", frozenset({"mh-port"})), servers, "web")}


ROUTES = {
    VIP: Route(VIP, "edge", True, "serving", ("64512:10",), 200),
    "198.51.100.11": Route("198.51.100.11", "edge", False, "no healthy real server"),
    "2001:db8:100::5": Route("2001:db8:100::5", "edge", True, "serving"),
}
