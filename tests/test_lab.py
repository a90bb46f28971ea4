"""The lab's own plumbing, on the host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_vm_runner_never_truncates_a_redirected_log(tmp_path: Path) -> None:
    """`make test > log`: what was written before the VM boots stays in the file, whatever
    the VM's console does with its stdout (qemu reopens it, which truncated the file)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    vng = fake / "vng"
    vng.write_text("#!/bin/sh\necho 'from the VM' > /dev/stdout\n")  # opens with O_TRUNC
    vng.chmod(0o755)
    log = tmp_path / "log"
    script = (
        "import sys; from pathlib import Path; from lab.vm import boot; "
        "print('host tests: 200 passed', flush=True); sys.exit(boot('true', Path(sys.argv[1])))"
    )
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PYTHONPATH=str(REPO))
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "rw")],
            stdout=out, stderr=subprocess.STDOUT, env=env, timeout=60, check=False,
        )  # fmt: skip
    text = log.read_text()
    assert done.returncode == 0, text
    assert "host tests: 200 passed" in text and "from the VM" in text, text
