"""The admin API server's connections: counted per client address and in all (refusals said
at most once a second), handed back by the workers through a mailbox that wakes the loop,
and kept below the process's descriptor limit, raised as far as it may be."""

from __future__ import annotations

import collections
import contextlib
import logging
import resource
import socket
import time

from director.adapters.http_wire import Conn
from director.logs import event

log = logging.getLogger("director.api")


def raise_descriptor_limit() -> int:
    """The soft limit on open files raised to the hard one (systemd's default soft limit is
    1,024; the unit sets LimitNOFILE): the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


class Slots:
    """The connections open, per client address and in all, and the refusals."""

    def __init__(self, limit: int) -> None:
        self.conns: dict[int, Conn] = {}
        self.per_client: collections.Counter[str] = collections.Counter()
        self.limit = limit
        self.refused = 0  # connections refused for a cap (a figure)
        self._said = 0.0  # when a refusal was last logged

    def add(self, conn: Conn) -> None:
        self.conns[conn.fd] = conn
        self.per_client[conn.client] += 1

    def remove(self, conn: Conn) -> bool:
        """Forget ``conn``; False when it was not (or no longer) open."""
        if self.conns.get(conn.fd) is not conn:
            return False
        del self.conns[conn.fd]
        self.per_client[conn.client] -= 1
        if self.per_client[conn.client] <= 0:
            del self.per_client[conn.client]
        return True

    def say(self, name: str, reason: str, client: str = "-") -> None:
        """Log a refusal at most once a second (a flood is one line a second, not a flood)."""
        now = time.monotonic()
        if now - self._said >= 1.0:
            self._said = now
            event(
                log, name, level=logging.WARNING, refused=self.refused, client=client, reason=reason
            )


class Mailbox:
    """Connections the workers hand back to the loop, and the loop's doorbell."""

    def __init__(self) -> None:
        self.reader, self._writer = socket.socketpair()
        self.reader.setblocking(False)
        self._items: collections.deque[Conn] = collections.deque()

    def put(self, conn: Conn) -> None:
        self._items.append(conn)
        self.ring()

    def ring(self) -> None:
        with contextlib.suppress(OSError):
            self._writer.send(b"\0")

    def take(self) -> list[Conn]:
        with contextlib.suppress(OSError):
            self.reader.recv(4096)
        out = []
        while self._items:
            out.append(self._items.popleft())
        return out
