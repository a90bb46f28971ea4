"""Static services and their real servers: a real server's port defaults to the service's,
names are addressable and unique, generic flag names load as the kernel names them."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given, settings, strategies as st

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


_ADDRESSES = ["192.0.2.1", "192.0.2.2", "2001:db8::1", "2001:db8::2", "192.0.2.300", "2001:DB8::2"]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["198.51.100.1", "2001:db8:100::1"]),
    st.sampled_from(["", "    forwarding: tun\n"]),
    st.lists(
        st.tuples(st.sampled_from(_ADDRESSES), st.sampled_from([0, 80, 8080]), st.integers(0, 3)),
        max_size=6,
    ),
)
def test_a_long_form_list_read_in_one_loop_is_what_it_is_read_item_by_item(
    vip: str, forwarding: str, servers: list[tuple[str, int, int]]
) -> None:
    """The one loop for ``{address, port, weight}`` throughout (PackedServers) gives the
    same real servers, in the same order, or the same refusal (field, reason and line)
    as the rules reading the same list item by item (a fourth key sends it there)."""

    def parsed(extra: str) -> object:
        items = "".join(
            f"      - {{address: {address!r}, port: {port}, weight: {weight}{extra}}}\n"
            for address, port, weight in servers
        )
        text = (
            HEAD + f"  - address: {vip!r}\n    port: 443\n{forwarding}"
            f"    real_servers:{' []' if not servers else ''}\n{items}"
        )
        try:
            (vs,) = parse_config(text, "rs.yaml").services.values()
        except ConfigError as exc:
            return str(exc)
        return list(vs.real_servers.values())

    one_loop = parsed("")
    assert one_loop == parsed(", upper_threshold: 0")
    if isinstance(one_loop, list):
        assert [(rs.address, rs.port) for rs in one_loop] == [
            (ipaddress.ip_address(address).compressed, port) for address, port, _ in servers
        ]


def test_a_big_long_form_list_keeps_each_real_servers_weight() -> None:
    items = "".join(
        f"      - {{address: 192.0.2.{i}, port: 80, weight: {i % 3}}}\n" for i in range(1, 60)
    )
    text = HEAD + "  - address: 198.51.100.1\n    port: 80\n    real_servers:\n" + items
    (vs,) = parse_config(text).services.values()
    assert [rs.weight for rs in vs.real_servers.values()] == [i % 3 for i in range(1, 60)]
    same = (
        HEAD
        + "  - address: 198.51.100.1\n    port: 80\n    real_servers:\n"
        + items.replace("weight: 1", "weight: 0").replace("weight: 2", "weight: 0")
    )
    (vs,) = parse_config(same).services.values()
    assert {rs.weight for rs in vs.real_servers.values()} == {0} and len(vs.real_servers) == 59
