"""The Runtime that ``director run`` starts: a dead loop thread ends the process with a
nonzero status, and any essential thread that dies is reported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from lab.kubeapi import FakeApiServer, service
from lab.wait import eventually
from tests.kubelab import settings


def test_a_dead_loop_thread_ends_the_process_with_a_nonzero_status(tmp_path: Path) -> None:
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
    )
    # The loop thread dies of something no guard catches (a BaseException), a while after
    # the director started: the process must exit non-zero so that systemd restarts it.
    script = textwrap.dedent(f"""
        import sys, time
        import director.engine.loop as c
        import director.cli.main as cli
        from director.dataplane.fake import FakeIpvs
        import director.daemon.run; director.daemon.run.open_ipvs = lambda netns: FakeIpvs()
        steps = []
        real = c.Controller.step
        def step(self, wait=0.5):
            steps.append(1)
            if len(steps) > 3:
                raise SystemExit("the loop thread is killed")
            return real(self, 0.05)
        c.Controller.step = step
        sys.exit(cli.main(["run", "--config", {str(config)!r}]))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)),
    )
    assert done.returncode == 4, done.stderr[-3000:]
    assert "event=director.fatal" in done.stderr and "thread controller ended" in done.stderr
    assert "director: stopped: thread controller ended" in done.stderr


def test_the_runtime_reports_any_essential_thread_that_dies(
    api: FakeApiServer, tmp_path: Path
) -> None:
    reasons: list[str] = []
    runtime = Runtime(
        settings(api.kubeconfig(tmp_path / "kc")), FakeIpvs(), on_fatal=reasons.append
    )
    with runtime.start():
        assert runtime.wait_ready(20)
        watcher = runtime.served.watchers[0]
        watcher._stop.set()  # the services watch ends as if its thread had crashed
        api.create("services", service("wake", [("http", "TCP", 80)]))  # at its next event
        eventually(lambda: reasons, what="the death to be noticed")
        assert reasons == ["thread watch-services ended"]
        assert runtime.failed == "thread watch-services ended"
