"""Source filtering: a refused ruleset holds its services back and is tried again."""

from __future__ import annotations

from director.core.firewall import FakeFirewall
from director.engine.source_filter import SourceFilter
from director.engine.view import LoopStatus
from lab.wait import Clock
from tests.enginelab import TCP


def test_a_refused_ruleset_holds_back_and_is_tried_again_after_five_seconds() -> None:
    firewall, clock, status = FakeFirewall(), Clock(), LoopStatus()
    sf = SourceFilter(firewall, status, clock, dry_run=False)
    sf.want("default/web", {TCP: ("203.0.113.0/24",)})
    firewall.fail = "Could not process rule"
    assert sf.enforce() == {TCP}  # not in force: closed, not open
    failed = sf.ledger.get("nftables")
    assert failed is not None and failed.failures == 1 and failed.kind == "refused"
    assert "Could not process rule" in (status.last_error or "")
    firewall.fail = None
    assert sf.enforce() == {TCP} and firewall.applies == 0  # not yet due
    clock.now += 5
    assert sf.enforce() == set() and firewall.rules == {TCP: ("203.0.113.0/24",)}
    sf.want("default/web", {})
    assert sf.enforce() == set() and firewall.rules == {}
