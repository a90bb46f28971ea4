"""The lock ``director run`` holds on its configuration file, and what finds it:
``director decommission`` refuses while a director runs, API or not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_decommission_finds_a_director_without_an_api_by_its_lock(tmp_path: Path) -> None:
    """Issue 71, 4: without ``api:`` decommission could not tell that a director ran, and
    removed IPVS services and the nftables table under a live one. ``director run`` holds a
    lock on its file; decommission asks for it, and refuses while it is held. A director
    killed with -9 holds nothing: the kernel drops the lock with the process."""
    import signal
    import time

    from director.daemon import runlock

    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
    )
    script = (
        "import sys; import director.cli.main as cli; "
        "from director.dataplane.fake import FakeIpvs; "
        "import director.daemon.run; director.daemon.run.open_ipvs = lambda netns: FakeIpvs(); "
        f"sys.exit(cli.main(['run', '--config', {str(config)!r}]))"
    )
    director = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not runlock.running(str(config)):
            assert director.poll() is None, director.stderr.read() if director.stderr else ""
            assert time.monotonic() < deadline, "the lock was never taken"
            time.sleep(0.1)
        done = subprocess.run(
            [sys.executable, "-m", "director", "decommission", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"a director runs with {config}" in done.stderr
    finally:
        director.send_signal(signal.SIGKILL)
        director.wait(30)
    assert not runlock.running(str(config)), "kill -9 leaves no lock behind"
