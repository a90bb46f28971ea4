"""What an operator asked through the API and the director keeps (intents): drains hold
matching real servers at weight 0, a static service's scheduler is overridden, a conflict
is refused with nothing changed, and the file they are kept in is read back or refused
whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from director.core.intents import (
    MAX_DRAINS,
    AddDrain,
    Drain,
    IntentRefused,
    Intents,
    RemoveDrain,
    SetMaintenance,
    SetScheduler,
)
from director.core.model import Forwarding, IpProtocol, RealServer, ServiceConfig, ServiceKey
from director.core.services import VirtualService

WEB = ServiceKey.inet(IpProtocol.TCP, "198.51.100.10", 80)
DNS = ServiceKey.inet(IpProtocol.UDP, "198.51.100.10", 53)


def service(key: ServiceKey, origin: str = "static/web") -> VirtualService:
    servers = {
        (address, port): RealServer(address, port, 1, Forwarding.NAT)
        for address, port in (("192.0.2.11", 8080), ("192.0.2.12", 8080), ("192.0.2.11", 53))
    }
    return VirtualService(key, ServiceConfig("rr"), servers, origin)


def test_a_drain_holds_matching_real_servers_at_weight_zero_and_nothing_else() -> None:
    intents = Intents()
    intents.change(AddDrain(Drain("192.0.2.11", 8080)))
    web = intents.apply(WEB, service(WEB))
    assert {d: rs.weight for d, rs in web.real_servers.items()} == {
        ("192.0.2.11", 8080): 0,
        ("192.0.2.12", 8080): 1,
        ("192.0.2.11", 53): 1,
    }
    only_dns = Intents()
    only_dns.change(AddDrain(Drain("192.0.2.11", None, str(DNS))))
    untouched = service(WEB)
    assert only_dns.apply(WEB, untouched) is untouched, "another service's drain"


def test_a_static_services_scheduler_is_overridden_and_a_clusters_is_not() -> None:
    intents = Intents()
    intents.change(SetScheduler("web", ("sh", frozenset({"sh-port"}))))
    assert intents.apply(WEB, service(WEB)).config.scheduler == "sh"
    kube = service(WEB, origin="shop/web:http")
    assert intents.apply(WEB, kube) is kube
    intents.change(SetScheduler("web", None))
    assert intents.apply(WEB, service(WEB)).config.scheduler == "rr"


def test_a_conflicting_intent_is_refused_and_changes_nothing() -> None:
    intents = Intents()
    drain = Drain("192.0.2.11", 8080)
    intents.change(AddDrain(drain))
    with pytest.raises(IntentRefused) as twice:
        intents.change(AddDrain(drain))
    assert twice.value.status == 409 and drain.ident in str(twice.value)
    with pytest.raises(IntentRefused) as missing:
        intents.change(RemoveDrain("000000000000"))
    assert missing.value.status == 404
    assert list(intents.drains) == [drain.id]
    for n in range(MAX_DRAINS - 1):
        intents.change(AddDrain(Drain("192.0.2.200", n + 1)))
    with pytest.raises(IntentRefused, match="undrain some first"):
        intents.change(AddDrain(Drain("192.0.2.201")))
    intents.change(RemoveDrain(drain.ident))
    assert drain.id not in intents.drains


def test_intents_are_kept_in_a_file_and_a_corrupt_one_is_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / "intents.json"
    assert Intents.load(path) == Intents(), "no file: no intents"
    intents = Intents()
    intents.change(AddDrain(Drain("2001:db8::11", 443)))
    intents.change(SetScheduler("web", ("mh", frozenset({"mh-port"}))))
    intents.change(SetMaintenance("kernel upgrade"))
    intents.save(path)
    assert Intents.load(path) == intents
    body = json.loads(path.read_text())
    body["drains"][0]["port"] = "443"
    path.write_text(json.dumps(body))
    with pytest.raises(ValueError, match="not valid"):
        Intents.load(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="cannot read"):
        Intents.load(path)
