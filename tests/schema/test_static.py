"""Static services and their real servers: a real server's port defaults to the service's,
names are addressable and unique, generic flag names load as the kernel names them."""

from __future__ import annotations

import re

import pytest

from director.core.model import Forwarding
from director.schema.config import ConfigError, parse_config
from tests.schema.test_config import HEAD


def test_real_server_port_defaults_to_the_service_port() -> None:
    settings = parse_config(
        HEAD + "  - address: 198.51.100.1\n    port: 443\n"
        "    real_servers: [{address: 192.0.2.1, forwarding: dr}]\n"
    )
    (vs,) = settings.services.values()
    (rs,) = vs.real_servers.values()
    assert (rs.port, rs.forwarding) == (443, Forwarding.DR)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ('""', "'' is not a service name"),
        ("a/b", "'a/b' is not a service name"),
        ('"web\\n"', "'web\\n' is not a service name"),
        ('" web"', "' web' is not a service name"),
    ],
)
def test_static_service_names_are_addressable(name: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(reason)):
        parse_config(HEAD + f"  - {{name: {name}, address: 198.51.100.1, port: 80}}\n", "n.yaml")


def test_a_static_service_name_is_unique() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(
            HEAD + "  - {name: web, address: 198.51.100.1, port: 80}\n"
            "  - {name: web, address: 198.51.100.2, port: 80}\n",
            "n.yaml",
        )
    assert str(caught.value) == (
        "n.yaml:5: services[1].name: the name 'web' is taken (first on line 4)"
    )


def test_generic_flag_names_load_as_the_kernel_names_them() -> None:
    settings = parse_config(
        HEAD + "  - {address: 198.51.100.1, port: 80, scheduler: sh, flags: [flag-1, flag-2]}\n"
        "  - {address: 198.51.100.2, port: 80, scheduler: mh, flags: [flag-2]}\n"
        "  - {address: 198.51.100.3, port: 80, scheduler: rr, flags: [flag-1]}\n",
        "f.yaml",
    )
    flags = {key.address: vs.config.flags for key, vs in settings.services.items()}
    assert flags == {
        "198.51.100.1": {"sh-fallback", "sh-port"},
        "198.51.100.2": {"mh-port"},
        "198.51.100.3": {"flag-1"},
    }
