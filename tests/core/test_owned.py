"""Owned state (issue 34): failures as values, the retry they earn, the ledger /readyz and the
metrics read, atomic writes, and the keeper thread that installs, reads back and repairs."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from director.adapters.worker import Keeper
from director.core.owned import (
    REFUSED,
    TRANSIENT,
    Ledger,
    Refused,
    Retry,
    Transient,
    classify,
    not_run,
    write_atomic,
)
from lab.wait import Clock, eventually


def test_a_failure_to_run_is_transient_and_a_verdict_is_a_refusal() -> None:
    assert classify(FileNotFoundError(errno.ENOENT, "No such file", "vtysh")).kind == TRANSIENT
    assert classify(OSError(errno.ENOSPC, "No space left on device")).kind == TRANSIENT
    assert classify(OSError(errno.EMFILE, "Too many open files")).kind == TRANSIENT
    assert classify(subprocess.TimeoutExpired(["keepalived", "-t"], 30)).kind == TRANSIENT
    assert classify(PermissionError(errno.EACCES, "Permission denied")).kind == TRANSIENT
    assert classify(Refused("VRID 512 not valid")).kind == REFUSED
    assert not_run("vtysh", 127) is not None and not_run("vtysh", -9) is not None
    assert not_run("vtysh", 1) is None  # its own verdict


def test_transient_failures_back_off_and_a_refusal_waits_for_new_input() -> None:
    clock = Clock()
    retry = Retry(clock, first=1.0, cap=8.0, refused_after=300.0)
    waits = [retry.failed(TRANSIENT) for _ in range(6)]
    assert all(0.5 * min(2**i, 8) <= w <= min(2**i, 8) for i, w in enumerate(waits)), waits
    retry.succeeded()
    assert retry.due()
    assert retry.failed(REFUSED) == 300.0 and not retry.due()
    retry.changed()  # new input: the refusal was of the old one
    assert retry.due()
    retry.failed(TRANSIENT)
    retry.changed()  # a failure to run stands whatever the input
    assert not retry.due()


def test_the_ledger_counts_repairs_and_says_what_is_out_of_sync() -> None:
    ledger = Ledger(wall=lambda: 1000.0)
    ledger.track("nftables")
    assert ledger.out_of_sync() == []
    ledger.drift("nftables", "the table is gone")
    out = ledger.out_of_sync()
    assert [o.resource for o in out] == ["nftables"] and out[0].since == 1000.0
    ledger.ok("nftables", repaired=True)
    state = ledger.get("nftables")
    assert state is not None and state.in_sync and state.repairs == 1 and state.failures == 0
    ledger.failed("frr", Transient("cannot run vtysh"))
    assert list(ledger.snapshot()) == ["nftables", "frr"]  # in RESOURCES order
    assert ledger.get("frr").kind == TRANSIENT  # type: ignore[union-attr]


def test_an_atomic_write_leaves_the_old_file_and_no_debris_when_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    write_atomic(path, "one\n", mode=0o640)
    assert path.read_text() == "one\n" and oct(path.stat().st_mode & 0o777) == "0o640"
    first = path.stat().st_ino
    write_atomic(path, "two\n")
    assert path.read_text() == "two\n" and path.stat().st_ino != first, "a new file each time"

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # the disk fills up during the write
    with pytest.raises(OSError):
        write_atomic(path, "three\n")
    monkeypatch.undo()
    assert path.read_text() == "two\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "state.json"
    ]


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


def test_a_program_ip_netns_exec_could_not_start_is_a_failure_to_run(tmp_path: Path) -> None:
    """keepalived and nft run through ``ip netns exec``, which exits 1 (not 127) when the
    program is not there: its words, not its status, tell it from a verdict."""
    ns = f"owned-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        done = subprocess.run(
            ["ip", "netns", "exec", ns, str(tmp_path / "keepalived"), "-t"],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    failed = not_run("keepalived -t", done.returncode, done.stderr)
    assert done.returncode == 1 and failed is not None and failed.kind == TRANSIENT
    assert not_run("keepalived -t", 1, "VRID '512' not valid") is None


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
    from director.core.owned import Refused

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
