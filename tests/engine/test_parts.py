"""The loop's parts have one holder: what the translator shapes with is what the programmer
programs with and what the loop reports from (issue 72: three objects held the same parts,
each handed in separately, and could come to differ)."""

from __future__ import annotations

import dataclasses

import pytest

from director.dataplane.fake import FakeIpvs
from director.engine.loop import Controller
from director.schema.config import parse_config


def test_the_translator_and_the_programmer_work_with_the_loop_s_own_parts() -> None:
    settings = parse_config(
        "ownership: {networks: [192.0.2.0/24]}\n"
        "services:\n  - {name: web, address: 192.0.2.1, port: 80, real_servers: [10.0.0.1:80]}\n",
        "static.yaml",
    )
    controller = Controller(FakeIpvs(), settings)
    assert controller.programmer.parts is controller.parts
    assert controller.programmer.translator.parts is controller.parts
    with pytest.raises(dataclasses.FrozenInstanceError):
        controller.parts.table = controller.parts.table  # type: ignore[misc]
