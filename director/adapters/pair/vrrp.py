"""keepalived's ``notify_fifo`` -> this director's VRRP state. No script runs, so no shell
ever sees anything."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from director.adapters.pair.keepalived import INSTANCE
from director.logs import event

log = logging.getLogger("director.keepalived")
_FIFO_LINE = re.compile(r'^INSTANCE "([^"]+)" (MASTER|BACKUP|FAULT|STOP)\b')


class VrrpFifo:
    """Reads keepalived's notify_fifo and reports this director's VRRP state."""

    def __init__(self, path: str, on_state: Callable[[str], None]) -> None:
        self.path, self.on_state = Path(path), on_state
        self.state: str | None = None
        self._thread = threading.Thread(target=self._run, name="vrrp-fifo", daemon=True)
        self._stop = False

    def start(self) -> None:
        """Make the FIFO (or reuse ours). Raises ValueError when the path holds anything
        else: a file that is not a FIFO is never deleted to make room."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            exists = self.path.is_symlink() or self.path.exists()
            mode = self.path.lstat().st_mode if exists else None
            if mode is not None and not stat.S_ISFIFO(mode):
                raise ValueError(
                    f"ha.fifo {self.path} exists and is not a FIFO; refusing to replace it "
                    "(remove it, or choose another path)"
                )
            if mode is None:
                os.mkfifo(self.path, 0o600)
        except OSError as exc:
            raise ValueError(f"ha.fifo {self.path}: {exc.strerror or exc}") from None
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        if self._thread.ident is None:  # never started: the path may not even be ours
            return
        with contextlib.suppress(OSError):  # wake the reader
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.write(fd, b"\n")
            finally:
                os.close(fd)

    def _run(self) -> None:
        # O_RDWR: the open never blocks and reads never see EOF when keepalived restarts.
        with open(os.open(self.path, os.O_RDWR), "rb", buffering=0) as fifo:
            buffer = b""
            while not self._stop:
                chunk = fifo.read(4096)
                if not chunk:
                    continue
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    match = _FIFO_LINE.match(raw.decode(errors="replace"))
                    if match and match.group(1) == INSTANCE:
                        self.state = match.group(2)
                        event(log, "vrrp.state", state=self.state)
                        self.on_state(self.state)
