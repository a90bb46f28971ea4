"""The announce decision: a VIP is announced only while this director can serve it, with
the reason either way; routes go to FRR when one flips and only then; the pair's VIPs go to
keepalived; the loop end to end on the fake dataplane."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from director.core.announce import Route
from director.core.intents import AddDrain, Drain
from director.core.model import IpProtocol, ServiceKey
from director.dataplane.fake import FakeIpvs
from director.engine.announcer import VipAnnouncer
from director.engine.events import IntentPosted, Reply
from director.engine.hooks import Hooks
from director.engine.loop import Controller
from tests.bgplab import KEY, VIP, config, table


def announcer() -> tuple[VipAnnouncer, list[Mapping[str, Route]]]:
    heard: list[Mapping[str, Route]] = []
    vips = VipAnnouncer(Hooks(), config().bgp_pools)
    vips.hooks.on_routes = heard.append
    return vips, heard


def test_a_vip_is_announced_only_while_this_director_can_serve_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vips, heard = announcer()
    caplog.set_level(logging.INFO, "director.announce")
    vips.update([KEY], table(1, 1), ready=False)
    assert heard[-1][VIP].announced is False
    assert "first sync" in heard[-1][VIP].reason
    vips.update([KEY], table(1, 1), ready=True)
    assert heard[-1][VIP].announced and "2 real servers" in heard[-1][VIP].reason
    assert heard[-1][VIP].communities == ("64512:10",)
    assert f"event=bgp.announce vip={VIP} announced=True pool=edge" in caplog.text
    vips.touched([KEY])
    vips.update([KEY], table(0, 0), ready=True)  # drained, or quiesced by health checks
    assert not heard[-1][VIP].announced and "no healthy real server" in heard[-1][VIP].reason
    vips.touched([KEY])
    vips.update([KEY], table(1, 0), ready=True, down={KEY})  # all down, kept in the table
    assert not vips.routes[VIP].announced
    vips.touched([KEY])
    vips.update([KEY], {}, ready=True)  # wanted, but the kernel does not hold it
    assert "not programmed" in vips.routes[VIP].reason
    vips.touched([KEY])
    vips.update([KEY], table(1), ready=True)
    assert heard[-1][VIP].announced
    vips.update([KEY], table(1), ready=True, maintenance="operator")
    assert not heard[-1][VIP].announced and heard[-1][VIP].reason == "maintenance: operator"
    vips.keys_changed()
    vips.update([], {}, ready=True, maintenance="operator")  # the service is gone, its route too
    assert VIP not in heard[-1]
    assert 'reason="gone: no virtual service has this address"' in caplog.text


def test_routes_go_to_frr_when_an_announcement_flips_and_only_then() -> None:
    vips, heard = announcer()
    vips.update([KEY], table(1, 1), ready=True)
    assert len(heard) == 1
    vips.touched([KEY])
    vips.update([KEY], table(1, 1, 1), ready=True)  # a third real server: still announced
    vips.update([KEY], table(1, 1, 1), ready=True)  # nothing touched
    assert len(heard) == 1
    assert "3 real servers" in vips.routes[VIP].reason  # the status shows the new reason


def test_vrrp_vips_go_to_keepalived_and_bgp_vips_do_not() -> None:
    vips, _ = announcer()
    told: list[frozenset[str]] = []
    vips.hooks.announce = told.append
    pair = ServiceKey.inet(IpProtocol.TCP, "203.0.113.5", 80)
    vips.update([KEY, pair], table(1), ready=True)
    assert told == [frozenset({"203.0.113.5"})]


# -- the loop ---------------------------------------------------------------------------------
def test_the_loop_announces_a_static_vip_once_programmed_and_withdraws_it_when_drained() -> None:
    ipvs = FakeIpvs()
    hooks = Hooks()
    controller = Controller(ipvs, config(), hooks=hooks)
    heard: list[Mapping[str, Route]] = []
    hooks.on_routes = heard.append
    told: list[frozenset[str]] = []
    hooks.announce = told.append
    controller.step(0.01)
    assert heard and heard[-1][VIP].announced
    assert told == [frozenset({"203.0.113.5"})]
    for address in ("192.0.2.11", "192.0.2.12"):
        controller.post(IntentPosted(AddDrain(Drain(address, 80, None)), Reply()))
    controller.step(0.01)
    assert not heard[-1][VIP].announced
    assert "no healthy real server" in heard[-1][VIP].reason
