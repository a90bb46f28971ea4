"""The health gate: shared targets, quiescing, removal on failure."""

from __future__ import annotations

from director.core.checks import CheckSpec, Target
from director.core.model import IpProtocol, ServiceKey
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
