"""keepalived's notify FIFO read back as this director's VRRP state."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from director.adapters.pair.vrrp import VrrpFifo
from lab.wait import eventually


def test_the_notify_fifo_reports_state(tmp_path: Path) -> None:
    seen: list[str] = []
    fifo = VrrpFifo(str(tmp_path / "run" / "k.fifo"), seen.append)
    fifo.start()
    try:
        fd = os.open(fifo.path, os.O_WRONLY)
        os.write(fd, b'INSTANCE "director" BACKUP 150\nINSTANCE "other" MASTER 100\n')
        os.write(fd, b'INSTANCE "director" MAS')
        time.sleep(0.05)
        os.write(fd, b'TER 150\nGROUP "g" FAULT\n')
        os.close(fd)
        eventually(lambda: seen == ["BACKUP", "MASTER"], what="two states")
    finally:
        fifo.stop()


def test_a_path_that_is_not_a_fifo_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """The fifo path holding a file (someone's log, a typo in ha.fifo) is refused at start
    with the reason, never deleted to make room for the FIFO."""
    taken = tmp_path / "k.fifo"
    taken.write_text("someone's data\n")
    fifo = VrrpFifo(str(taken), lambda state: None)
    with pytest.raises(ValueError, match="exists and is not a FIFO; refusing to replace it"):
        fifo.start()
    fifo.stop()  # never started: touches nothing
    assert taken.read_text() == "someone's data\n"
