"""This box's own addresses, read from ``ip`` in a namespace of the test's own: what is the
box's (a management address) and what is not (a VIP as keepalived adds it, link-local),
and the watch that says so when they change."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping

import pytest

from director.adapters.box import BoxWatch, parse_addresses, read_addresses


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"box-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for command in (
            ["link", "add", "mgmt0", "type", "veth", "peer", "name", "mgmt1"],
            ["link", "set", "mgmt0", "up"],
            ["link", "set", "lo", "up"],
            ["address", "add", "203.0.113.7/24", "dev", "mgmt0"],
            ["address", "add", "203.0.113.40/32", "dev", "mgmt0"],  # a VIP
            ["address", "add", "2001:db8:7::7/64", "dev", "mgmt0", "nodad"],
        ):
            subprocess.run(["ip", "-n", name, *command], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_the_box_s_own_addresses_are_its_interfaces_less_host_routes(netns: str) -> None:
    found = read_addresses(netns)
    assert found is not None
    assert found["203.0.113.7"] == "mgmt0" and found["2001:db8:7::7"] == "mgmt0"
    assert found["127.0.0.1"] == "lo"
    assert "203.0.113.40" not in found  # a VIP keepalived or the director added
    assert not [a for a in found if a.startswith("fe80:")]  # link-local: never a VIP


def test_an_answer_that_is_not_ip_s_is_no_answer() -> None:
    assert parse_addresses("not json") is None
    assert parse_addresses('{"a": 1}') is None
    assert (
        parse_addresses('[{"ifname": "x", "addr_info": [{"local": "junk", "prefixlen": 8}]}]') == {}
    )


def test_the_watch_says_what_changed_and_only_then(netns: str) -> None:
    said: list[Mapping[str, str]] = []
    watch = BoxWatch(said.append, netns, every=3600)
    watch.start()
    try:
        assert len(said) == 1 and "203.0.113.7" in said[0]
        watch.look()
        assert len(said) == 1, "nothing changed: nothing said"
        subprocess.run(
            ["ip", "-n", netns, "address", "add", "198.51.100.9/24", "dev", "mgmt0"], check=True
        )
        watch.look()
        assert len(said) == 2 and said[1]["198.51.100.9"] == "mgmt0"
    finally:
        watch.stop()
    broken = BoxWatch(said.append, netns, read=lambda _ns: None)
    broken.look()  # could not run: said as a warning, nothing handed to the loop
    assert len(said) == 2
