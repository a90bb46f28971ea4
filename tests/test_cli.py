"""The command line on this host (whose kernel has no IPVS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from director import cli
from tests.conftest import kernel_unavailable

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "static.yaml")


def test_check_validates_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--config", EXAMPLE]) == 0
    assert "valid (8 virtual services, 24 real servers)" in capsys.readouterr().out


def test_an_invalid_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  - address: 198.51.100.1\n    port: 99999\n")
    assert cli.main(["plan", "--config", str(bad)]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"{bad}:3: services[0].port: must be an integer between 1 and 65535" in err


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
