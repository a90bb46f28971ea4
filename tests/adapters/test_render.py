"""The daemons' templates: found in the source tree (and in the wheel, as director/templates),
rendered without HTML escaping, and a value the template needs but was not given fails
instead of rendering an empty string into a daemon's file."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from director.adapters.render import TEMPLATES, environment


def test_the_shipped_templates_are_found() -> None:
    assert {"keepalived.conf.j2", "frr.conf.j2", "alive-check.sh"} <= {
        p.name for p in TEMPLATES.iterdir()
    }


def test_a_missing_value_fails_and_nothing_is_escaped(tmp_path: Path) -> None:
    (tmp_path / "t.j2").write_text("password {{ secret }} for <{{ name }}>\n")
    template = environment(tmp_path).get_template("t.j2")
    assert template.render(secret="a&b", name="x") == "password a&b for <x>\n"
    with pytest.raises(jinja2.UndefinedError):
        template.render(name="x")
