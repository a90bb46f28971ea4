"""The read model the API serves from without the loop's lock."""

from __future__ import annotations

import gc
import threading
from typing import Any

from director.core.intents import AddDrain, Drain
from director.dataplane.fake import FakeIpvs
from director.engine.events import TargetChecked
from director.engine.loop import Controller
from director.schema.config import parse_config
from director.web.app import create_app
from lab.wait import eventually
from tests.enginelab import CHECKED, TCP, A


def test_the_api_answers_from_the_view_while_the_loop_holds_its_lock() -> None:
    settings = parse_config(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80,"
        " real_servers: [192.0.2.1:8080]}]\n",
        "static.yaml",
    )
    controller = Controller(FakeIpvs(), settings)
    stop = threading.Event()
    loop = threading.Thread(target=controller.run, args=(stop, 0.05), daemon=True)
    loop.start()
    try:
        eventually(lambda: controller.health.synced, what="the first sync")
        client = create_app(controller.door(), "t0ken-for-the-admin-api").test_client()
        auth = {"Authorization": "Bearer t0ken-for-the-admin-api"}
        before = controller.parts.exports.view.version
        answers: list[Any] = []
        with controller.lock:  # the loop is busy: it cannot step
            reader = threading.Thread(
                target=lambda: answers.append(client.get("/api/v1/status", headers=auth))
            )
            reader.start()
            reader.join(5)
            assert answers, "the API waited for the loop's lock"
        assert answers[0].get_json()["counts"]["virtual_services"] == 1
        # An intent is answered once the view shows it.
        reply = controller.submit_intent(AddDrain(Drain("192.0.2.1", None, None)))
        assert reply.ok and controller.parts.exports.view.version > before
        assert len(controller.parts.exports.view.intents.drains) == 1
    finally:
        stop.set()
        loop.join(5)


def test_a_check_verdict_reaches_the_view_without_any_other_change() -> None:
    controller = Controller(FakeIpvs(), parse_config(CHECKED, "static.yaml"))
    for _ in range(3):
        controller.step(0.01)
    assert (
        controller.parts.exports.view.status.synced
        and controller.parts.exports.view.unhealthy == {}
    )
    before = controller.parts.exports.view
    (target,) = controller.parts.gate.checks[TCP][A]
    controller.post(TargetChecked(target, up=False))
    controller.step(0.01)
    assert controller.parts.exports.view.unhealthy == {TCP: frozenset({A})}
    assert controller.parts.exports.view.desired[TCP].real_servers[A].weight == 0  # quiesced
    assert before.desired[TCP].real_servers[A].weight == 1  # an older view is unchanged
    controller.post(TargetChecked(target, up=True))
    controller.step(0.01)
    assert controller.parts.exports.view.unhealthy == {}
    assert controller.parts.exports.view.desired[TCP].real_servers[A].weight == 1


def test_the_views_fresh_copy_of_the_table_is_out_of_the_young_generation_after_its_step() -> None:
    """Once a step changes more than ~sqrt(2n) virtual services, the view copies the whole
    desired table. The loop moves that copy to the old generation right after the step, so
    no later event's young collection has to walk it (a 10,000-entry dict at 10,000
    Services)."""
    services = ", ".join(
        f"{{name: web{port}, address: 198.51.100.10, port: {port}, health_check: tcp,"
        " real_servers: [192.0.2.1:8080, 192.0.2.2:8080]}"
        for port in range(1, 101)
    )
    config = CHECKED.split("services:", maxsplit=1)[0] + f"services: [{services}]\n"
    controller = Controller(FakeIpvs(), parse_config(config, "static.yaml"))
    for _ in range(3):
        controller.step(0.01)
    assert len(controller.parts.exports.view.desired) == 100
    target = controller.parts.gate.checks[TCP][A][0]  # checks 192.0.2.1:8080, for all 100
    for up in (False, True, False):
        before = controller.parts.exports.view.desired
        controller.post(TargetChecked(target, up))
        controller.step(0.01)
        desired = controller.parts.exports.view.desired
        assert desired.rebased(before)  # 100 virtual services changed: a fresh copy
        assert {vs.real_servers[A].weight for vs in desired.values()} == {int(up)}
        base = gc.get_referents(desired)[0]
        assert base == dict(controller.parts.table.desired)
        assert any(obj is base for obj in gc.get_objects(generation=2))
