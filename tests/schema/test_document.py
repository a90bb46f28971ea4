"""The whole file's shape: the shipped examples load, every section in place, and a
Kubernetes file owns its pools."""

from __future__ import annotations

from director.core.model import Forwarding, IpProtocol as Protocol, ServiceKey
from director.schema.config import load_config
from tests.schema.test_config import EXAMPLE


def test_the_example_loads() -> None:
    settings = load_config(EXAMPLE)
    web = settings.services[ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)]
    assert web.config.scheduler == "rr"
    assert web.origin == "static/web-rr"
    assert len(web.real_servers) == 3
    dr = settings.services[ServiceKey.inet(Protocol.TCP, "198.51.100.20", 80)]
    assert {rs.forwarding for rs in dr.real_servers.values()} == {Forwarding.DR}
    v6 = settings.services[ServiceKey.inet(Protocol.TCP, "2001:db8:100::10", 80)]
    assert v6.config.netmask == 128
    assert ("2001:db8:2::b", 8080) in v6.real_servers


def test_the_kubernetes_example_loads_and_owns_its_pools() -> None:
    settings = load_config(EXAMPLE.with_name("kubernetes.yaml"))
    assert settings.kubernetes is not None
    assert settings.kubernetes.nodeport_vips == ("198.51.100.250",)
    assert [p.name for p in settings.pools] == ["default", "reserved"]
    owns = settings.ownership.owns
    assert owns(ServiceKey.inet(Protocol.TCP, "198.51.100.205", 80))
    assert owns(ServiceKey.inet(Protocol.TCP, "2001:db8:100::7", 80))
    assert owns(ServiceKey.inet(Protocol.TCP, "198.51.100.250", 30080))
    assert not owns(ServiceKey.inet(Protocol.TCP, "198.51.100.220", 80))
