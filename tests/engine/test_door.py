"""The loop as the web and the metrics see it (``Door``): each answer read at the time of
asking from the part that holds it, so a door handed out at start sees a reload's settings
and the newest published view, and an intent comes back with the loop's reply."""

from __future__ import annotations

from director.core.intents import AddDrain, Drain
from director.engine.events import Reloaded, Reply
from director.schema.config import parse_config
from lab.wait import eventually
from tests.weblab import STATIC, WEB, Director


def test_a_door_handed_out_at_start_reads_the_settings_and_view_of_now(director: Director) -> None:
    door = director.controller.door()
    assert WEB in door.settings.services and len(door.settings.services) == 2
    smaller = parse_config(STATIC.split("  - name: dns")[0], "static.yaml")
    reply = Reply()
    director.controller.post(Reloaded(smaller, reply))
    assert reply.wait(5) and reply.ok, reply.detail
    assert door.settings is director.controller.settings
    assert list(door.settings.services) == [WEB]
    eventually(lambda: list(door.view.desired) == [WEB], what="the view after the reload")
    assert door.view is director.controller.parts.exports.view
    assert door.ipvs is director.ipvs and door.dry_run is False


def test_an_intent_through_the_door_comes_back_with_the_loops_reply(director: Director) -> None:
    reply = director.controller.door().submit_intent(AddDrain(Drain("192.0.2.11", 8080)), 5)
    assert reply.ok and reply.status == 200
    assert director.vs().real_servers[("192.0.2.11", 8080)].weight == 0
