"""``director plan`` and ``apply`` on a kernel without IPVS: one sentence that says so, and
the exit status scripts rely on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from director.cli import main as cli
from tests.cli.test_main import EXAMPLE
from tests.conftest import kernel_unavailable


@pytest.mark.skipif(kernel_unavailable() is None, reason="this host has IPVS")
@pytest.mark.parametrize("command", ["plan", "apply"])
def test_without_ipvs_plan_and_apply_say_so_in_one_sentence(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "director", command, "--config", EXAMPLE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == cli.EXIT_NO_IPVS
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "has no IPVS support" in lines[0] or "needs root" in lines[0]
