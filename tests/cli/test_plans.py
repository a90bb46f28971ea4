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


def test_apply_refuses_a_static_full_nat_service_and_touches_nothing(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 71, 3: ``director apply`` programmed a static full-NAT service at once as plain
    NAT, with no SNAT rule (the one-shot commands keep no firewall). It is refused, and the
    kernel is never opened."""
    from pathlib import Path

    from director.cli import main as entry

    opened: list[object] = []
    monkeypatch.setattr(entry, "open_ipvs", opened.append)
    config = Path(str(tmp_path)) / "director.yaml"
    config.write_text(
        "ownership: {networks: [192.0.2.0/24, 10.0.0.0/8]}\n"
        "snat: {addresses: [10.0.0.254]}\n"
        "services:\n  - {name: web, address: 192.0.2.9, port: 80, forwarding: fullnat, "
        "real_servers: [10.0.0.1:80]}\n"
    )
    assert cli.main(["apply", "--config", str(config)]) == cli.EXIT_CONFIG
    assert opened == []
