"""``director decommission`` refuses while the director runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.serverlab import config


def test_decommission_refuses_while_the_director_runs(running, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    runtime, ipvs, _url, api = running
    path = tmp_path / "director.yaml"
    path.write_text(
        config(tmp_path, api).replace(
            "listen: 127.0.0.1:0", f"listen: 127.0.0.1:{runtime.api.port}"
        )
    )
    before = ipvs.read().services
    done = subprocess.run(
        [sys.executable, "-m", "director", "decommission", "--config", str(path), "--yes"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the director is running" in done.stderr and "systemctl stop director" in done.stderr
    assert ipvs.read().services == before
