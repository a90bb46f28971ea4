"""The sections' own keys and rules, each fault named with its line: kubernetes: and pools,
and snat: (its port range, several addresses of a family, a repeat refused)."""

from __future__ import annotations

import pytest

from director.schema.config import ConfigError, parse_config


@pytest.mark.parametrize(
    ("text", "line", "where", "reason"),
    [
        ("kubernetes: {}\n", 1, "kubernetes", "needs at least one address pool"),
        (
            "pools:\n  - {name: a, addresses: [10.0.0.0/24]}\n"
            "  - {name: b, addresses: [10.0.0.128-10.0.1.1]}\n",
            3,
            "pools[1].addresses",
            "overlaps pool 'a'",
        ),
        (
            "pools:\n  - {name: a, addresses: [10.0.0.1/24]}\n",
            2,
            "pools[0].addresses",
            "not a CIDR or an address range",
        ),
        (
            "pools:\n  - {name: a, addresses: [10.0.0.0/24]}\n"
            "kubernetes:\n  nodeport_vip: [10.1.1.1, 10.1.1.2]\n",
            4,
            "kubernetes.nodeport_vip[1]",
            "at most one nodeport_vip per address family",
        ),
        (
            "pools:\n  - {name: a, addresses: [10.0.0.0/24]}\nkubernetes:\n  backends: pods\n",
            4,
            "kubernetes.backends",
            "must be one of nodeport, pod",
        ),
    ],
)
def test_kubernetes_and_pool_errors_name_the_line(
    text: str, line: int, where: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "k.yaml")
    assert (caught.value.line, caught.value.where) == (line, where)
    assert reason in caught.value.reason


FULLNAT = """
ownership: {networks: [203.0.113.96/28]}
services:
  - {name: full, address: 203.0.113.102, port: 80, forwarding: fullnat,
     real_servers: [192.0.2.11:8080]}
snat: {addresses: [192.0.2.1]}
"""


@pytest.mark.parametrize(
    ("ports", "reason"),
    [("40001-40000", "the low end first"), ("40000", "a port range"), ("0-10", "1-65535")],
)
def test_an_snat_port_range_that_is_not_one_is_refused(ports: str, reason: str) -> None:
    text = FULLNAT.replace(
        "snat: {addresses: [192.0.2.1]}", f"snat: {{addresses: [192.0.2.1], ports: {ports}}}"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "fullnat.yaml")
    assert caught.value.where == "snat.ports" and reason in caught.value.reason


def test_an_snat_port_range_is_read() -> None:
    text = FULLNAT.replace(
        "snat: {addresses: [192.0.2.1]}", "snat: {addresses: [192.0.2.1], ports: 20000-59999}"
    )
    snat = parse_config(text, "fullnat.yaml").snat
    assert snat is not None and snat.ports == (20000, 59999)


def test_several_snat_addresses_of_a_family_are_read_and_a_repeat_is_refused() -> None:
    three = FULLNAT.replace("[192.0.2.1]", '[192.0.2.1, 192.0.2.2, "2001:db8::1"]')
    snat = parse_config(three, "fullnat.yaml").snat
    assert snat is not None and snat.addresses == ("192.0.2.1", "192.0.2.2", "2001:db8::1")
    twice = FULLNAT.replace("[192.0.2.1]", "[192.0.2.1, 192.0.2.2, 192.0.2.1]")
    with pytest.raises(ConfigError) as caught:
        parse_config(twice, "fullnat.yaml")
    assert caught.value.where == "snat.addresses[2]" and "listed twice" in caught.value.reason
