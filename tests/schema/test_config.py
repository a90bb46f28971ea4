"""Configuration: valid files load; invalid ones fail with the file, line, field and reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from director.schema.config import ConfigError, load_config, parse_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "static.yaml"


HEAD = """\
ownership:
  networks: [198.51.100.0/24, "2001:db8:100::/64"]
services:
"""


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
