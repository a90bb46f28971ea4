"""Configuration: valid files load; invalid ones fail with the file, line, field and reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from director.core.model import Forwarding, IpProtocol as Protocol, ServiceKey
from director.schema.config import ConfigError, load_config, parse_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "static.yaml"

HEAD = """\
ownership:
  networks: [198.51.100.0/24, "2001:db8:100::/64"]
services:
"""


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


@pytest.mark.parametrize(
    ("body", "line", "where", "reason"),
    [
        (
            "  - address: 198.51.100.1\n    port: eighty\n",
            5,
            "services[0].port",
            "must be an integer between 1 and 65535 (got 'eighty')",
        ),
        (
            "  - address: 198.51.100.1\n    port: 80\n    schedular: rr\n",
            6,
            "services[0].schedular",
            "unknown key",
        ),
        (
            "  - address: 198.51.100.1\n    port: 80\n    scheduler: fastest\n",
            6,
            "services[0].scheduler",
            "must be one of rr, wrr",
        ),
        ("  - address: 10.0.0.1\n    port: 80\n", 4, "services[0]", "outside the owned ranges"),
        (
            "  - address: 198.51.100.1\n    port: 80\n    real_servers:\n      - 192.0.2.1:80\n"
            "      - {address: 192.0.2.2, weight: -1}\n",
            8,
            "services[0].real_servers[1].weight",
            "between 0 and 65535 (got -1)",
        ),
        (
            "  - address: 198.51.100.1\n    port: 80\n"
            "    real_servers: [192.0.2.1:80, 192.0.2.1:80]\n",
            6,
            "services[0].real_servers[1]",
            "declared twice (first on line 6)",
        ),
        (
            "  - address: 198.51.100.1\n    port: 80\n  - address: 198.51.100.1\n    port: 80\n",
            6,
            "services[1]",
            "declared twice (first on line 4)",
        ),
        (
            "  - address: 198.51.100.1\n    port: 80\n    scheduler: rr\n    flags: [sh-port]\n",
            7,
            "services[0].flags",
            "'sh-port' is not valid with scheduler 'rr'",
        ),
        (
            "  - address: 2001:db8:100::1\n    port: 80\n    real_servers: [192.0.2.1:80]\n",
            6,
            "services[0].real_servers[0]",
            "mixing families only works with forwarding: tun",
        ),
        (
            "  - address: 198.51.100.1\n    port: 80\n    real_servers:\n"
            "      - {address: 192.0.2.1, lower_threshold: 5}\n",
            7,
            "services[0].real_servers[0].lower_threshold",
            "needs an upper_threshold",
        ),
        (
            "  - address: 198.51.100.1\n    port: 80\n    port: 81\n",
            6,
            "services[0].port",
            "duplicate key (first given on line 5)",
        ),
        (
            "  - address: 198.51.100.1\n    port: 53\n    flags: [onepacket]\n",
            6,
            "services[0].flags",
            "only applies to UDP",
        ),
        ("  - address: 198.51.100.1\n    port: [80\n", 6, "", "not valid YAML"),
    ],
)
def test_invalid_files_fail_with_line_field_and_reason(
    body: str, line: int, where: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(HEAD + body, "director.yaml")
    error = caught.value
    assert (error.line, error.where) == (line, where), str(error)
    assert reason in error.reason
    assert str(error).startswith(f"director.yaml:{line}: ")


def test_a_missing_file_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read"):
        load_config("nope.yaml")


def test_real_server_port_defaults_to_the_service_port() -> None:
    settings = parse_config(
        HEAD + "  - address: 198.51.100.1\n    port: 443\n"
        "    real_servers: [{address: 192.0.2.1, forwarding: dr}]\n"
    )
    (vs,) = settings.services.values()
    (rs,) = vs.real_servers.values()
    assert (rs.port, rs.forwarding) == (443, Forwarding.DR)


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


# -- hostile and careless files (issue 13, items 13, 15, 16, 19, 25) ------------------------
def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"ownership:\n  networks: [198.51.100.0/24]\n# caf\xe9\n")
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    assert str(caught.value) == f"{bad}:3: not UTF-8 text"


@pytest.mark.parametrize(
    "text",
    ["[" * 5000 + "]" * 5000, "a:\n" + "".join(f"{'  ' * i}b{i}:\n" for i in range(1, 60))],
    ids=["flow", "block"],
)
def test_absurd_nesting_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match=r"nested|not valid YAML"):
        parse_config(text, "deep.yaml")


def test_a_control_character_is_a_config_error_with_its_line() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("ownership:\n  networks: [198.51.100.0/24]\nx: \x07\n", "bell.yaml")
    assert str(caught.value).startswith("bell.yaml:3: not valid YAML")


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


def test_a_zone_never_reaches_the_nft_renderer() -> None:
    """ipaddress takes any text after an IPv6 zone's %, braces and newlines included: the
    renderer's own guard refuses it, whatever the callers checked."""
    from director.core.firewall import clean_ranges, render_nft

    key = ServiceKey.inet(Protocol.TCP, "2001:db8::1", 80)
    hostile = "fe80::1%x } accept\nflush ruleset"
    assert clean_ranges(key, [hostile, "2001:db8::/32"]) == ["2001:db8::/32"]
    assert "flush ruleset" not in render_nft({key: (hostile,)})


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
