"""Pools: what a pool holds (never an address that cannot be a service address), how a bad
definition is refused, and which Services a pool serves."""

from __future__ import annotations

import ipaddress

import pytest

from director.core.pools import Allocation, LabelSelector, Pool, PoolError

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (["198.51.100.1/24"], "not a CIDR or an address range"),
        (["198.51.100.9-198.51.100.1"], "ends before it starts"),
        (["198.51.100.1-2001:db8::1"], "mixes IPv4 and IPv6"),
        ([], "at least one"),
    ],
)
def test_bad_pool_definitions(entries: list[str], message: str) -> None:
    with pytest.raises(PoolError, match=message):
        Pool.parse("p", entries)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("127.0.0.0/30", "loopback"),
        ("169.254.1.0-169.254.1.9", "link-local"),
        ("224.0.0.5", "multicast"),
        ("::ffff:192.0.2.1", "IPv4-mapped"),
        ("fe80::/126", "link-local"),
    ],
)
def test_a_pool_never_holds_an_address_that_cannot_be_a_vip(entry: str, why: str) -> None:
    with pytest.raises(PoolError, match=rf"includes .*\({why}.*cannot be a load-balancer address"):
        Pool.parse("p", [entry])


def test_an_ipv4_cidr_gives_out_neither_network_nor_broadcast_unless_asked() -> None:
    pool = Pool.parse("p", ["198.51.100.0/30", "2001:db8::/127"])
    assert not pool.contains(ip("198.51.100.0")) and not pool.contains(ip("198.51.100.3"))
    assert pool.contains(ip("198.51.100.1")) and pool.contains(ip("2001:db8::"))
    assert pool.size() == 2 + 2
    whole = Pool.parse("p", ["198.51.100.0/30"], all_addresses=True)
    assert whole.contains(ip("198.51.100.0")) and whole.size() == 4
    assert [str(n) for n in whole.networks()] == ["198.51.100.0/30"]


def test_a_pool_serves_the_namespaces_and_labels_it_selects() -> None:
    web = LabelSelector((("tier", "web"),))
    not_batch = LabelSelector(expressions=(("team", "NotIn", ("batch",)), ("app", "Exists", ())))
    allocation = Allocation(namespaces=frozenset({"shop"}), service_selectors=(web, not_batch))
    assert allocation.admits("shop", {"tier": "web"})
    assert allocation.admits("shop", {"app": "x", "team": "core"})
    assert not allocation.admits("shop", {"app": "x", "team": "batch"})
    assert not allocation.admits("other", {"tier": "web"})
    assert allocation.describe() == (
        "namespaces shop and Services labelled [tier=web] or [team NotIn (batch), app Exists]"
    )
    assert Allocation().admits("any", {}) and Allocation().describe() == "every Service"
