"""What the tests of the loop's parts share: two keys of one VIP, the owned network, two real
servers, and a virtual service of them."""

from __future__ import annotations

import ipaddress

from director.core.model import Forwarding, IpProtocol, RealServer, ServiceConfig, ServiceKey
from director.core.ownership import Ownership
from director.core.services import VirtualService

TCP = ServiceKey.inet(IpProtocol.TCP, "198.51.100.10", 80)
UDP = ServiceKey.inet(IpProtocol.UDP, "198.51.100.10", 53)
OWN = Ownership((ipaddress.ip_network("198.51.100.0/24"),))
A, B = ("192.0.2.1", 8080), ("192.0.2.2", 8080)


def vs(key: ServiceKey, *dests: tuple[str, int], weight: int = 1) -> VirtualService:
    servers = {d: RealServer(d[0], d[1], weight, Forwarding.NAT) for d in dests}
    return VirtualService(key, ServiceConfig("rr"), servers, "static/web")


# A static file with one health-checked service of two real servers.
CHECKED = (
    "ownership: {networks: [198.51.100.0/24]}\n"
    "health: {check: tcp}\n"
    "services: [{name: web, address: 198.51.100.10, port: 80, health_check: tcp,"
    " real_servers: [192.0.2.1:8080, 192.0.2.2:8080]}]\n"
)


class Writer:
    """A cluster that takes every write the outbox sends: it keeps them in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.status: list[tuple[str, tuple[str, ...]]] = []

    def patch_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        self.status.append((f"{namespace}/{name}", ips))

    def clear_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        self.status.append((f"{namespace}/{name}", ()))

    def event(
        self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
    ) -> None:
        self.events.append((f"{namespace}/{name}", reason, message))
