"""The file's pools: never an address that cannot be a service address, and a CIDR's network
and broadcast addresses kept back unless asked; whom a pool serves, as written."""

from __future__ import annotations

import re

import pytest

from director.core.ipam import Allocator, Request
from director.schema.config import ConfigError, parse_config


@pytest.mark.parametrize(
    ("addresses", "reason"),
    [
        ("0.0.0.0/0", "includes 0.0.0.0/8 (this-network addresses)"),
        ("127.0.0.0/24", "includes 127.0.0.0/8 (loopback)"),
        ("224.0.0.1-224.0.0.9", "includes 224.0.0.0/4 (multicast)"),
        ("169.254.0.0/16", "includes 169.254.0.0/16 (link-local)"),
        ("255.255.255.255/32", "includes 240.0.0.0/4 (reserved, with the broadcast address)"),
        ('"::/0"', "includes ::/128 (the unspecified address)"),
        ('"::ffff:198.51.100.0/120"', "includes ::ffff:0:0/96 (IPv4-mapped)"),
        ('"ff02::/16"', "includes ff00::/8 (multicast)"),
    ],
)
def test_pools_cannot_hold_addresses_that_are_no_service_address(
    addresses: str, reason: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(reason)):
        parse_config(f"pools: [{{name: p, addresses: [{addresses}]}}]\n", "p.yaml")


def test_a_cidr_pool_keeps_its_network_and_broadcast_addresses_back_unless_asked() -> None:
    def first_and_count(line: str) -> tuple[str, int]:
        settings = parse_config(f"pools: [{line}]\n", "p.yaml")
        alloc = Allocator(settings.pools)
        got = [alloc.assign(Request(f"a/{i}", (4,), frozenset())) for i in range(20)]
        ok = [o.addresses[0] for o in got if o.ok]
        return str(ok[0]), len(ok)

    assert first_and_count("{name: p, addresses: [198.51.100.64/28]}") == ("198.51.100.65", 14)
    assert first_and_count("{name: p, addresses: [198.51.100.64/28], all_addresses: true}") == (
        "198.51.100.64",
        16,
    )
    assert first_and_count("{name: p, addresses: [198.51.100.64/31]}") == ("198.51.100.64", 2)
    assert first_and_count("{name: p, addresses: [198.51.100.64-198.51.100.79]}") == (
        "198.51.100.64",
        16,
    )


def test_a_pool_s_allocation_is_read_as_written() -> None:
    settings = parse_config(
        "pools:\n"
        "  - name: shop\n"
        "    addresses: [198.51.100.0/28]\n"
        "    allocate_to:\n"
        "      priority: 5\n"
        "      namespaces: [shop, cart]\n"
        "      service_selectors:\n"
        "        - match_labels: {tier: web}\n"
        "        - match_expressions: [{key: team, operator: NotIn, values: [batch]}]\n",
        "p.yaml",
    )
    (pool,) = settings.pools
    assert pool.allocation.priority == 5
    assert pool.allocation.namespaces == {"shop", "cart"}
    assert pool.allocation.admits("shop", {"tier": "web"})
    assert pool.allocation.admits("cart", {"team": "core"})
    assert not pool.allocation.admits("cart", {"team": "batch"})
    assert not pool.allocation.admits("other", {"tier": "web"})
