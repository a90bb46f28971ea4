"""The state file: it follows the table, and never holds back the step or the VIPs."""

from __future__ import annotations

import json
from typing import Any

from director.dataplane.fake import FakeIpvs
from director.engine.events import TargetChecked
from director.engine.hooks import Hooks
from director.engine.loop import Controller
from director.schema.config import parse_config
from lab.wait import Clock
from tests.enginelab import CHECKED, TCP, A


def test_the_state_file_follows_the_table_at_most_once_a_second(tmp_path: Any) -> None:
    state, clock = tmp_path / "state.json", Clock()
    settings = parse_config(CHECKED, "static.yaml")
    controller = Controller(FakeIpvs(), settings, state_file=state, clock=clock)

    def weights() -> list[int]:
        (svc,) = json.loads(state.read_text())["services"]
        return [rs["weight"] for rs in svc["real_servers"]]

    for _ in range(3):
        controller.step(0.01)
    assert weights() == [1, 1]
    (target,) = controller.parts.gate.checks[TCP][A]
    controller.post(TargetChecked(target, up=False))
    controller.step(0.01)
    assert controller.parts.exports.view.desired[TCP].real_servers[A].weight == 0
    assert weights() == [1, 1]  # written less than a second ago: not yet
    clock.now += 1.0
    controller.step(0.01)
    assert weights() == [0, 1]  # the loop's next step writes it
    written = state.stat().st_mtime_ns
    clock.now += 5.0
    controller.step(0.01)
    assert state.stat().st_mtime_ns == written  # nothing changed: not written again


def test_a_state_file_that_cannot_be_written_never_holds_back_the_step_or_the_vips(
    tmp_path: Any,
) -> None:
    """The state file's folder removed (or the disk full): the write fails, is tried again
    with a backoff, the step goes on (no error step, so no 5 s pause of the loop) and the
    VIP set still reaches keepalived; once the folder is back the file is written. A file
    removed by someone else is written again."""
    folder = tmp_path / "state"
    folder.mkdir()
    state, clock = folder / "state.json", Clock()
    hooks = Hooks()
    controller = Controller(
        FakeIpvs(), parse_config(CHECKED, "static.yaml"), state_file=state, clock=clock, hooks=hooks
    )
    told: list[frozenset[str]] = []
    hooks.announce = told.append
    folder.rename(tmp_path / "elsewhere")
    (tmp_path / "state").write_text("a file where the folder was")  # ENOTDIR, every try
    for _ in range(3):
        controller.step(0.01)
        clock.now += 1.0
    owned = controller.health.owned.get("state-file")
    assert owned is not None and not owned.in_sync and owned.failures >= 1
    assert controller.health.loop_errors == 0 and controller.parts.pace._failures == 0
    assert told, "the VIP set was handed on all the same"
    (tmp_path / "state").unlink()
    (tmp_path / "elsewhere").rename(folder)
    clock.now += 60.0  # past the backoff
    controller.step(0.01)
    assert (
        json.loads(state.read_text())["services"]
        and controller.health.owned.get("state-file").in_sync
    )  # type: ignore[union-attr]
    state.unlink()  # someone cleans /var/lib up
    clock.now += 10.0
    controller.step(0.01)
    clock.now += 2.0
    controller.step(0.01)
    assert state.exists() and controller.health.owned.get("state-file").repairs == 1  # type: ignore[union-attr]
