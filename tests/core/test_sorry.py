"""A sorry server (keepalived's ``sorry_server``): what serves a virtual service while none of
its real servers is up, set by annotation or on a static service, refused with a reason where
it cannot be one. Health checks putting it in and taking it out:
``tests/adapters/test_prober.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from director.core.model import IpProtocol as Protocol, RealServer, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import ConfigError, parse_config
from lab.kubeapi import FakeApiServer, service
from lab.wait import eventually
from tests.kubelab import settings

STATIC = """
ownership: {{networks: [198.51.100.0/24]}}
services:
  - {{name: web, address: 198.51.100.1, port: 80, sorry_server: "{sorry}",
     real_servers: [192.0.2.11:8080]}}
"""


def test_a_static_sorry_server_is_a_real_server_of_its_service_or_refused_with_its_line() -> None:
    ok = parse_config(STATIC.format(sorry="192.0.2.99:8080"), "ok.yaml")
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80)
    assert ok.static_sorry == {key: RealServer("192.0.2.99", 8080)}
    for sorry, reason in (
        ("192.0.2.11:8080", "192.0.2.11:8080 is one of its real servers"),
        ("[2001:db8::9]:80", "the sorry server needs a port, in the service's family"),
        ("192.0.2.99", "'192.0.2.99' is not ADDRESS:PORT"),
    ):
        with pytest.raises(ConfigError) as caught:
            parse_config(STATIC.format(sorry=sorry), "bad.yaml")
        assert str(caught.value).startswith(f"bad.yaml:4: services[0].sorry_server: {reason}")


def test_a_services_sorry_server_serves_it_without_endpoints_and_a_bad_one_is_refused(
    api: FakeApiServer, tmp_path: Path
) -> None:
    ipvs = FakeIpvs()
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc")), ipvs)
    with runtime.start():
        assert runtime.wait_ready(20)
        sorry = {"lvs-director.io/sorry-server": "192.0.2.99:8080"}
        api.create("services", service("web", [("http", "TCP", 80)], annotations=sorry))
        key = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
        eventually(
            lambda: (
                (vs := ipvs.read().services.get(key)) is not None
                and set(vs.real_servers) == {("192.0.2.99", 8080)}
            ),
            what="the sorry server in the place of no endpoint",
        )
        for text, said in (
            ("nowhere", "'nowhere' is not ADDRESS:PORT"),
            ("198.51.100.3:80", "is an address of pool"),
        ):
            api.patch(
                "services",
                "web",
                {"metadata": {"annotations": {"lvs-director.io/sorry-server": text}}},
            )
            eventually(
                lambda said=said: any(  # type: ignore[misc]
                    said in e["message"] for e in api.events_for("web")
                ),
                what=f"{text} refused",
            )
            # the last valid one kept
            assert set(ipvs.read().services[key].real_servers) == {("192.0.2.99", 8080)}
