"""The Keeper that holds each owned resource true: it reads back and repairs drift, keeps a
value that failed until it is installed (backing off, not reading the old one back
meanwhile), and a stop waits for a value in flight but not for a refused one."""

from __future__ import annotations

import threading
import time

from director.adapters.worker import Keeper
from director.core.owned import Ledger, Refused, Transient
from lab.wait import eventually


class Thing(Keeper[str]):
    """A resource held in a dict: what someone else may change behind the keeper's back."""

    name = resource = "thing"
    verify_seconds = 0.2
    idle_seconds = 0.05  # polled more often than read back: neither starves the other

    def __init__(self) -> None:
        self.there: dict[str, str] = {}
        self.fail: Exception | None = None
        self.verified = threading.Event()
        super().__init__(Ledger())

    def install(self, value: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.there["v"] = value

    def verify(self, value: str) -> str | None:
        self.verified.set()
        return None if self.there.get("v") == value else "changed behind our back"


def test_the_keeper_repairs_drift_and_keeps_a_failed_value_until_it_is_installed() -> None:
    thing = Thing()
    thing.start()
    try:
        thing.submit("a")
        assert thing.settle(5) and thing.there == {"v": "a"}
        assert thing.verified.wait(5), "read back even while polled more often"
        thing.there["v"] = "someone else's"
        eventually(lambda: thing.there.get("v") == "a", timeout=5, what="repaired")
        eventually(lambda: thing.ledger.get("thing").repairs == 1, timeout=5)  # type: ignore[union-attr]
        thing.fail = Transient("cannot run it")
        thing.submit("b")
        eventually(lambda: thing.attempts >= 4, timeout=10, what="tried again")
        assert thing.pending == "b" and thing.there == {"v": "a"}, "kept, the old one live"
        assert not thing.ledger.get("thing").in_sync  # type: ignore[union-attr]
        thing.fail = None
        eventually(lambda: thing.there.get("v") == "b", timeout=10, what="installed at last")
        assert thing.ledger.get("thing").in_sync  # type: ignore[union-attr]
    finally:
        thing.stop()


def test_a_failing_value_backs_off_and_the_old_one_is_not_read_back_meanwhile() -> None:
    """A new value that cannot be installed backs off (0.5, 1, 2, 4 s ...): reading back the
    old, installed one every verify period must neither reset that backoff nor call the
    resource in sync (it is not what the loop wants)."""
    thing = Thing()
    thing.verify_seconds = 0.05
    thing.start()
    try:
        thing.submit("a")
        assert thing.settle(5)
        thing.fail = Transient("cannot run it")
        thing.verified.clear()
        thing.submit("b")
        time.sleep(3.0)
        assert thing.attempts <= 1 + 5, f"{thing.attempts} attempts in 3 s: no backoff"
        assert not thing.verified.is_set(), "the old value was read back while one waited"
        assert not thing.ledger.get("thing").in_sync  # type: ignore[union-attr]
    finally:
        thing.stop()


def test_a_stop_waits_for_a_value_in_flight_but_not_for_a_refused_one() -> None:
    """A stop (BGP's leave) waits until nothing is in flight. A value the daemon refused
    stays refused until the input changes: waiting for it to be installed ran out the
    whole stop timeout (150 s, the routes said to be still announced) while FRR had long
    withdrawn them on the text it runs."""

    thing = Thing()
    thing.start()
    try:
        thing.submit("a")
        assert thing.quiet(5) and thing.there == {"v": "a"}
        thing.fail = Refused("the daemon says no")
        thing.submit("b")
        started = time.monotonic()
        assert thing.quiet(10), "a refused value is not in flight"
        assert time.monotonic() - started < 5
        assert not thing.settle(0.5), "still not installed"
        thing.fail = Transient("cannot run it")
        thing.submit("c")
        assert not thing.quiet(1.0), "a value that could not run yet is tried again soon"
    finally:
        thing.stop()


def test_a_daemon_that_says_it_restarted_is_read_back_at_once() -> None:
    """Read back every hour, a drift waits for the hour; told that the daemon behind it
    changed (keepalived's VRRP process reported, perhaps a new one), the keeper reads back
    and repairs at once."""
    thing = Thing()
    thing.verify_seconds = 3600.0
    thing.idle_seconds = None
    thing.start()
    try:
        thing.submit("a")
        assert thing.settle(5)
        thing.verified.clear()
        thing.there["v"] = "a new daemon's"
        time.sleep(0.3)
        assert not thing.verified.is_set() and thing.there == {"v": "a new daemon's"}
        thing.read_back_soon()
        eventually(lambda: thing.there.get("v") == "a", timeout=5, what="repaired at once")
    finally:
        thing.stop()
