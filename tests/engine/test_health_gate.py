"""The health gate: shared targets, quiescing, removal on failure."""

from __future__ import annotations

from director.core.checks import CheckSpec, Target
from director.core.model import IpProtocol, RealServer, ServiceKey
from director.engine.health_gate import HealthGate
from director.engine.hooks import Hooks
from director.schema.config import HealthSettings
from tests.enginelab import TCP, A, B, vs


def test_a_shared_target_is_checked_once_and_dropped_with_its_last_user() -> None:
    gate = HealthGate(HealthSettings(), Hooks())
    calls: list[tuple[set[Target], set[Target]]] = []
    gate.hooks.on_targets = lambda add, remove: calls.append((add, remove))
    target = Target(*A, CheckSpec())
    other = ServiceKey.inet(IpProtocol.TCP, "198.51.100.11", 80)
    gate.set_checks(TCP, {A: (target,)})
    gate.set_checks(other, {A: (target,)})
    assert calls == [({target}, set())]  # one check for both virtual services
    gate.forget(TCP)
    assert calls == [({target}, set())]  # still used by the other one
    gate.forget(other)
    assert calls == [({target}, set()), (set(), {target})]


def test_a_failing_real_server_is_quiesced_and_all_failing_are_kept_with_one_alarm() -> None:
    gate = HealthGate(HealthSettings(), Hooks())
    ta, tb = Target(*A, CheckSpec()), Target(*B, CheckSpec())
    gate.set_checks(TCP, {A: (ta,), B: (tb,)})
    assert gate.observe(ta, up=False) == {TCP}
    out, alarm = gate.apply(TCP, vs(TCP, A, B))
    assert (out.real_servers[A].weight, out.real_servers[B].weight, alarm) == (0, 1, False)
    gate.observe(tb, up=False)
    out, alarm = gate.apply(TCP, vs(TCP, A, B))
    assert alarm and all(rs.weight == 1 for rs in out.real_servers.values())  # kept
    assert gate.apply(TCP, vs(TCP, A, B))[1] is False  # said once
    assert gate.failing() == {TCP: frozenset({A, B})}


def test_remove_on_failure_takes_the_real_server_out() -> None:
    gate = HealthGate(HealthSettings(on_failure="remove"), Hooks())
    ta = Target(*A, CheckSpec())
    gate.set_checks(TCP, {A: (ta,)})
    gate.observe(ta, up=False)
    out, _ = gate.apply(TCP, vs(TCP, A, B))
    assert set(out.real_servers) == {B}


def test_a_sorry_server_takes_the_place_of_every_failing_real_server_and_of_none() -> None:
    """All failing: the sorry server alone, said once, and the VIP still worth announcing
    (``unserved``: failing with nothing in their place); no real server at all: the sorry
    server too; one back: the real servers again."""
    gate = HealthGate(HealthSettings(), Hooks())
    ta, tb = Target(*A, CheckSpec()), Target(*B, CheckSpec())
    gate.set_checks(TCP, {A: (ta,), B: (tb,)})
    sorry = RealServer("192.0.2.99", 8080)
    gate.set_sorry(TCP, sorry)
    gate.observe(ta, up=False)
    gate.observe(tb, up=False)
    out, alarm = gate.apply(TCP, vs(TCP, A, B))
    assert alarm and dict(out.real_servers) == {sorry.key: sorry}
    assert TCP in gate.all_down and gate.unserved == set()
    assert dict(gate.apply(TCP, vs(TCP))[0].real_servers) == {sorry.key: sorry}
    gate.observe(ta, up=True)
    out, _ = gate.apply(TCP, vs(TCP, A, B))
    assert set(out.real_servers) == {A, B} and out.real_servers[B].weight == 0
    gate.set_sorry(TCP, None)
    gate.observe(ta, up=False)
    gate.apply(TCP, vs(TCP, A, B))
    assert gate.unserved == {TCP}  # kept, but nothing serves: withdrawn under BGP
