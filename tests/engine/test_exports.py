"""Publishing the view: a failure to publish is an error survived."""

from __future__ import annotations

from typing import Any

import pytest

from director.dataplane.fake import FakeIpvs
from director.engine.loop import Controller
from director.schema.config import parse_config


def test_a_view_that_cannot_be_published_is_an_error_survived(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = parse_config("ownership: {networks: [198.51.100.0/24]}\n", "static.yaml")
    controller = Controller(FakeIpvs(), settings)
    real = controller.parts.exports.publish
    calls = {"n": 0}

    def flaky(*args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the read model")
        real(*args)

    monkeypatch.setattr(controller.parts.exports, "publish", flaky)
    controller.step(0.01)  # does not raise: counted, shown, and tried again
    assert controller.health.loop_errors == 1
    assert controller.health.last_error == "publish: RuntimeError: a bug in the read model"
    assert not controller.parts.exports.view.status.synced
    controller.step(0.01)
    assert controller.parts.exports.view.status.synced and controller.health.synced
