"""Every call out of the loop goes through the one ``Hooks`` its owner holds: set after the
loop is made, a listener hears what is true from then on (nothing is lost meanwhile)."""

from __future__ import annotations

from director.core.announce import Route
from director.dataplane.fake import FakeIpvs
from director.engine.hooks import Hooks
from director.engine.loop import Controller
from director.schema.config import parse_config
from tests.enginelab import CHECKED

PAIR = (
    "ownership: {networks: [198.51.100.0/24]}\n"
    "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:8080]}]\n"
)


def test_the_loop_calls_out_through_its_hooks_once_someone_listens() -> None:
    hooks = Hooks()
    controller = Controller(FakeIpvs(), parse_config(CHECKED, "static.yaml"), hooks=hooks)
    ready: list[str] = []
    steps: list[None] = []
    targets: list[int] = []
    hooks.on_ready = ready.append
    hooks.on_step = lambda: steps.append(None)
    hooks.on_targets = lambda add, remove: targets.append(len(add) - len(remove))
    controller.step(0.01)
    controller.step(0.01)
    assert len(ready) == 1, "ready once: the first sync applied"
    assert len(steps) == 2, "after every step (systemd's watchdog)"
    assert targets == [2], "the two real servers' checks, asked for once"


def test_the_vrrp_vip_set_goes_to_keepalived_s_hook_and_no_route_to_frr_s() -> None:
    hooks = Hooks()
    controller = Controller(FakeIpvs(), parse_config(PAIR, "static.yaml"), hooks=hooks)
    controller.step(0.01)  # nobody listens yet: nothing is lost
    told: list[frozenset[str]] = []
    routes: list[dict[str, Route]] = []
    hooks.announce = told.append
    hooks.on_routes = lambda r: routes.append(dict(r))
    controller.parts.exports.vips.keys_changed()
    controller.step(0.01)
    assert told == [frozenset({"198.51.100.10"})]
    assert routes == [], "no bgp pool: no route to tell FRR"
