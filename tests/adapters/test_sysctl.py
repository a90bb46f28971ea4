"""The kernel parameters the director needs are owned state: set at start, read back, set
again when changed behind its back, and a failure to set one is transient and shown."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.adapters.sysctl import Sysctls
from director.core.owned import Ledger
from director.dataplane.netns import in_netns
from lab.wait import eventually

FORWARD = "net.ipv4.ip_forward"


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"sy-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def value(netns: str, name: str = FORWARD) -> str:
    path = Path("/proc/sys") / name.replace(".", "/")
    return in_netns(netns, lambda: path.read_text().strip())


def write(netns: str, text: str, name: str = FORWARD) -> None:
    path = Path("/proc/sys") / name.replace(".", "/")
    in_netns(netns, lambda: path.write_text(text))


def test_a_parameter_changed_behind_the_directors_back_is_set_again(netns: str) -> None:
    ledger = Ledger()
    keeper = Sysctls(netns, {FORWARD: ("1", "nothing is forwarded")}, ledger=ledger)
    keeper.verify_seconds = 0.1
    assert value(netns) == "0"  # a new namespace forwards nothing
    keeper.start()
    try:
        assert value(netns) == "1", "in force once start returns (before the first sync)"
        write(netns, "0")  # sysctl --system with a file that says otherwise
        eventually(lambda: value(netns) == "1", timeout=10, what="ip_forward set again")
        state = eventually(lambda: (s := ledger.get("sysctls")) and s.repairs == 1 and s, 10)
        assert state.in_sync and state.failures == 0
    finally:
        keeper.stop()


def test_a_parameter_that_cannot_be_set_is_a_failure_shown_and_tried_again(
    netns: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The IPVS module's parameters are not there before it is loaded (this host has no
    IPVS): logged with what breaks, out of sync in the ledger, and the others still set."""
    ledger = Ledger()
    wanted = {
        "net.ipv4.vs.conntrack": ("1", "full-NAT replies are not translated back"),
        FORWARD: ("1", "nothing is forwarded"),
    }
    keeper = Sysctls(netns, wanted, ledger=ledger)
    keeper.start()
    try:
        state = eventually(lambda: (s := ledger.get("sysctls")) and not s.in_sync and s, 10)
        assert state.kind == "transient" and "net.ipv4.vs.conntrack" in (state.last_error or "")
        assert value(netns) == "1", "the parameters that can be set are"
        logged = [r.getMessage() for r in caplog.records if "sysctl.not_set" in r.getMessage()]
        assert logged and "effect=" in logged[0] and "not translated back" in logged[0]
    finally:
        keeper.stop()
