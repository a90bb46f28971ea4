"""The OpenAPI document against the running API: schemathesis, driven by the document the
routes register, finds no server error and no answer outside the document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.weblab import TOKEN


def test_schemathesis_finds_no_server_error_and_no_schema_violation(running) -> None:  # type: ignore[no-untyped-def]
    _runtime, _ipvs, url, _api = running
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{url}/api/v1/openapi.json",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--checks",
            "all",
            "--max-examples",
            "30",
            "--no-color",
            "--seed",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = [line for line in done.stdout.splitlines() if "generated" in line]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    print("schemathesis:", *summary)
