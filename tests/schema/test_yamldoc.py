"""The one YAML reader: anchors and aliases give what the plain file gives, an error names its
line, the parser's own messages never reach the terminal, and a scalar keeps its text (issue
72: two readers disagreed, ``password: inf`` became ``.inf`` through one)."""

from __future__ import annotations

import pytest

from director.schema import yamldoc
from director.schema.config import ConfigError, parse_config


def test_anchors_and_aliases_give_what_the_plain_file_gives() -> None:
    plain = (
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services:\n"
        "  - {address: 198.51.100.1, port: 80, real_servers: [192.0.2.1:80, 192.0.2.2:80]}\n"
        "  - {address: 198.51.100.2, port: 80, real_servers: [192.0.2.1:80, 192.0.2.2:80]}\n"
    )
    aliased = (
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services:\n"
        "  - {address: 198.51.100.1, port: 80, real_servers: &pool [192.0.2.1:80, 192.0.2.2:80]}\n"
        "  - {address: 198.51.100.2, port: 80, real_servers: *pool}\n"
    )
    assert parse_config(aliased, "a.yaml").services == parse_config(plain, "p.yaml").services


def test_an_error_in_a_big_file_names_its_line() -> None:
    text = (
        "ownership: {networks: [198.51.100.0/24]}\nservices:\n"
        + "".join(f"  - {{address: 198.51.100.{i}, port: 80}}\n" for i in range(1, 200))
        + "  - {address: 198.51.100.200, port: 80, weight: 3}\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "big.yaml")
    assert str(caught.value).startswith("big.yaml:202: services[199].weight: unknown key")


def test_a_parse_error_prints_nothing_but_ours(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"^bad.yaml:3: not valid YAML"):
        parse_config("ownership:\n  networks: [198.51.100.0/24\n", "bad.yaml")
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("word", ["inf", ".inf", "0x1A2B", "12:30:45", "017", "1.", "yes", "~"])
def test_every_scalar_is_read_as_its_text(word: str) -> None:
    """No YAML 1.1 rule turns a value into something else before the schema sees it: the
    schema's fields give each its value, and a password stays what was written."""
    data, lines = yamldoc.precise(f"bgp:\n  password: {word}\n")
    assert data == {"bgp": {"password": word}}
    assert lines.of(("bgp", "password")) == 2


def test_aliases_cannot_expand_a_small_file_into_a_huge_one() -> None:
    """A billion laughs: each alias counts at its anchor's full size, so a few lines that
    would expand past MAX_VALUES are refused with the line where they would."""
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        laughs += f"{level}: &{level} [" + ", ".join([f"*{previous}"] * 10) + "]\n"
    with pytest.raises(yamldoc.YamlError, match="aliases expand to over"):
        yamldoc.precise(laughs)


def test_nesting_beyond_the_limit_is_refused_where_it_goes_too_deep() -> None:
    deep = "a: " + "[" * (yamldoc.MAX_DEPTH + 1) + "]" * (yamldoc.MAX_DEPTH + 1) + "\n"
    with pytest.raises(yamldoc.YamlError, match="nested deeper than"):
        yamldoc.precise(deep)


def test_two_documents_and_an_undefined_alias_are_refused_with_their_line() -> None:
    with pytest.raises(yamldoc.YamlError, match="a single document") as caught:
        yamldoc.precise("a: 1\n---\nb: 2\n")
    assert caught.value.line == 2
    with pytest.raises(yamldoc.YamlError, match="not valid YAML"):
        yamldoc.precise("a: *nowhere\n")
