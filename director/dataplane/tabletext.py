"""The kernel's text of the IPVS table, read for the kernel adapter: which services a
resync reads in full (``director.dataplane.proctext`` decides; this reads and forgets)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from typing import TypeVar

from director.core.added import AddedService, parts_of
from director.core.model import ServiceKey
from director.core.services import Op, OpKind
from director.dataplane.netns import in_netns
from director.dataplane.proctext import Rotation, Share, marks_of

TEXT = "/proc/thread-self/net/ip_vs"  # the calling thread's namespace's
V = TypeVar("V")


class TableText:
    """``/proc/net/ip_vs`` of one namespace, opened there once (a file of /proc/net shows
    the namespace it was opened in), and the rotation it feeds."""

    def __init__(self, netns: str | None, *, opened: bool = True) -> None:
        """``opened`` False: as a kernel that prints no text (every resync in full)."""
        self.rotation = Rotation()
        self._fd: int | None = in_netns(netns, _open) if opened else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def read(self) -> bytes | None:
        """The whole text (None: this kernel prints none)."""
        chunks = self.chunks()
        return None if chunks is None else b"".join(chunks)

    def chunks(self) -> Iterator[bytes] | None:
        """The text from its start, 64 KiB at a time, as it is read (None: no text). Small
        reads: a whole text of 3 MB read at once is taken from the heap, and kept there."""
        fd = self._fd
        if fd is None:
            return None
        os.lseek(fd, 0, os.SEEK_SET)
        return iter(functools.partial(os.read, fd, 1 << 16), b"")

    def share(self) -> Share:
        """A resync's choice of the services read in full, the text read now (before
        anything it vouches for is read) if the table is big enough to need it."""
        rotation = self.rotation
        chunks = self.chunks() if rotation.wants_text() else None
        return rotation.plan(None if chunks is None else marks_of(chunks))

    def changing(self, ops: Sequence[Op], settled: dict[ServiceKey, V]) -> None:
        """What the director changes is read in full at the next resync: each service's
        real servers as read before are forgotten (a threshold it sets shows in no text),
        and the services it adds counted."""
        added = 0
        for _start, part in parts_of(ops):
            if isinstance(part, AddedService):
                added += 1
                settled.pop(part.key, None)
                continue
            for op in part:
                added += op.kind is OpKind.ADD_SERVICE
                if settled:
                    settled.pop(op.key, None)
        self.rotation.added(added)


def _open() -> int | None:
    try:
        return os.open(TEXT, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
