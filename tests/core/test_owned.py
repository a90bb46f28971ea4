"""Owned state (issue 34): failures as values, the retry they earn, the ledger /readyz and the
metrics read, atomic writes, and the keeper thread that installs, reads back and repairs."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

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
from lab.wait import Clock


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
