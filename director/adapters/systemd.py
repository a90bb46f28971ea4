"""systemd's notify protocol (sd_notify), without libsystemd: readiness and the watchdog.

Under ``Type=notify`` the director says ``READY=1`` once its first sync is applied (units
ordered after it then start against a programmed kernel), and, with ``WatchdogSec=``, the
control loop itself sends ``WATCHDOG=1``: a loop that stops stepping (wedged, deadlocked,
stopped with SIGSTOP) stops the pings, and systemd restarts the director. Outside systemd
(no ``$NOTIFY_SOCKET``) every call does nothing.
"""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.address = env.get("NOTIFY_SOCKET") or None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        mine = not pid or (pid.isdigit() and int(pid) == os.getpid())
        # Ping at half the interval, as sd_watchdog_enabled(3) advises.
        self.every = int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 and mine else None
        self._next = 0.0

    @property
    def active(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=value`` fields; True when systemd got them."""
        if self.address is None:
            return False
        target = self.address
        if target.startswith("@"):  # an abstract socket
            target = "\0" + target[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(target)
                sock.sendall("\n".join(fields).encode())
            return True
        except OSError:
            return False

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def stopping(self) -> None:
        self.send("STOPPING=1")

    def watchdog(self) -> None:
        """From the control loop, after each step: a ping when one is due."""
        if self.every is None:
            return
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every
            self.send("WATCHDOG=1")
