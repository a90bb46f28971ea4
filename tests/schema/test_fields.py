"""Each field's reader: no validator takes a trailing newline, and numbers are ASCII digits
only (``int()`` takes ``8_0`` and other scripts' digits; no operator means those)."""

from __future__ import annotations

import re

import pytest

from director.schema.config import ConfigError, parse_config


@pytest.mark.parametrize(
    ("section", "where"),
    [
        (
            'ha:\n  interface: "eth0\\n"\n  router_id: a\n  priority: 100\n'
            "  unicast_source: 192.0.2.1\n  peers: [192.0.2.2]\n",
            "ha.interface",
        ),
        (
            'ha:\n  interface: eth0\n  router_id: "a\\n"\n  priority: 100\n'
            "  unicast_source: 192.0.2.1\n  peers: [192.0.2.2]\n",
            "ha.router_id",
        ),
        ('pools:\n  - {name: "p\\n", addresses: [198.51.100.0/28]}\n', "pools[0].name"),
        (
            "pools: [{name: p, addresses: [198.51.100.0/28]}]\n"
            'kubernetes:\n  load_balancer_class: "example.com/lb\\n"\n',
            "kubernetes.load_balancer_class",
        ),
        ('api:\n  token_file: "/etc/director/token\\n"\n', "api.token_file"),
    ],
    ids=["interface", "router-id", "pool", "class", "path"],
)
def test_a_trailing_newline_is_not_accepted_by_any_validator(section: str, where: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(where)):
        parse_config(section, "nl.yaml")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "services:\n  - {address: 198.51.100.1, port: '8_0', real_servers: [192.0.2.1:80]}\n",
            "services[0].port",
        ),
        (
            "services:\n  - {address: 198.51.100.1, port: '\u0668\u0660', "
            "real_servers: [192.0.2.1:80]}\n",
            "services[0].port",
        ),
        (
            "services:\n  - {address: 198.51.100.1, port: 80, real_servers: ['192.0.2.1:8_0']}\n",
            "services[0].real_servers[0]",
        ),
        ("health: {interval: '1_0'}\n", "health.interval"),
        ("api: {token_file: /t, listen: '127.0.0.1:9\u0661\u0668\u0660'}\n", "api.listen"),
    ],
)
def test_numbers_are_ascii_digits_only(text: str, where: str) -> None:
    """int() and float() take 8_0 and other scripts' digits; no operator means those."""
    with pytest.raises(ConfigError) as caught:
        parse_config("ownership: {networks: [198.51.100.0/24]}\n" + text, "d.yaml")
    assert caught.value.where == where, caught.value
