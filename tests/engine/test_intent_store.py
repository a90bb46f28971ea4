"""The intents file and the intents: rewritten when removed, refused one by one."""

from __future__ import annotations

import json
from typing import Any

from director.core.intents import AddDrain, Drain
from director.dataplane.fake import FakeIpvs
from director.engine.events import IntentPosted, Reply
from director.engine.loop import Controller
from director.schema.config import parse_config
from lab.wait import Clock
from tests.enginelab import CHECKED


def test_an_intents_file_removed_behind_the_directors_back_is_written_again(tmp_path: Any) -> None:
    from director.core.intents import SetMaintenance

    path, clock = tmp_path / "intents.json", Clock()
    controller = Controller(
        FakeIpvs(), parse_config(CHECKED, "static.yaml"), intents_file=path, clock=clock
    )
    controller.step(0.01)
    reply = Reply()
    controller.post(IntentPosted(SetMaintenance("kernel upgrade"), reply))
    controller.step(0.01)
    assert reply.ok and json.loads(path.read_text())["maintenance"] == "kernel upgrade"
    path.unlink()
    clock.now += 10.0
    controller.step(0.01)
    assert json.loads(path.read_text())["maintenance"] == "kernel upgrade"
    assert controller.health.owned.get("intents-file").repairs == 1  # type: ignore[union-attr]


def test_an_intent_is_refused_on_its_own() -> None:
    reply = Reply()
    assert not reply.ok
    reply.resolve(409, "already drained")
    reply.resolve(200)  # resolved once
    assert (reply.status, reply.detail, reply.ok) == (409, "already drained", False)
    posted = IntentPosted(AddDrain(Drain("192.0.2.1", None, None)), reply)
    assert posted.reply is reply


def test_a_change_answered_as_not_made_is_never_made_later(tmp_path: Any) -> None:
    """Issue 71, 1: a command reported as failed (the API stopped waiting; ``ctl`` exited 5)
    took effect later, answering a client that had gone; in a rolling restart a box came
    back withdrawn. An intent whose asker gave up is dropped by the loop, not applied."""
    from director.core.intents import SetMaintenance

    path = tmp_path / "intents.json"
    controller = Controller(
        FakeIpvs(), parse_config(CHECKED, "static.yaml"), intents_file=path, clock=Clock()
    )
    controller.step(0.01)
    reply = controller.submit_intent(SetMaintenance("kernel upgrade"), timeout=0)
    assert not reply.ok  # the loop was not stepping: the asker gave up
    controller.step(0.01)
    assert controller.parts.store.current.maintenance is None
    assert not path.exists() or json.loads(path.read_text()).get("maintenance") is None
    taken = Reply()
    assert taken.take() and not taken.abandon(), "taken first: the asker waits for its answer"
