"""A service's real servers as the kernel sends them (a GET_DEST dump), read whole and marked.

A resync reads every service's real servers back; most of the time they are what the read
before found. Each reply is marked: the hash of every byte of its messages but their headers
and what traffic changes (connection counts and counters; ``layouts.dest_settled``), in
their order. The same mark, the same configuration: ``KernelIpvs`` then takes the real
servers it read before and decodes nothing (decoding was a third of a no-op resync, see
``bench/HISTORY.md``). Two different replies share a mark by
a 64-bit hash collision alone: Python's hash of bytes is keyed at random per process, so a
cluster's objects cannot aim at one.
"""

from __future__ import annotations

import struct

from director.dataplane.codec import CMD_ATTR_SERVICE, CMD_GET_DEST
from director.dataplane.genl import GenlSocket
from director.dataplane.layouts import dest_settled
from director.dataplane.netlink import NLA, NLA_TYPE_MASK

Message = tuple[bytes, int, int]  # datagram, message start, message end

DONE_BYTES = 20  # an NLMSG_DONE: its header and an errno
MAX_RUNS = 256  # message counts kept a struct for (a datagram holds a hundred-odd at most)


def dest_request_of(data: bytes, offset: int, end: int) -> bytes | None:
    """The GET_DEST request for the service of the GET_SERVICE reply message at ``offset``:
    the service's attribute as the kernel wrote it, sent back whole. The kernel takes a
    service's key from it (its family, and its mark or its protocol, address and port:
    ``ip_vs_genl_parse_service`` asked for no full entry) and reads nothing else, so the key is
    not encoded anew for every service of a resync."""
    start = offset + 20  # nlmsghdr + genlmsghdr
    alen, kind = NLA.unpack_from(data, start)
    if kind & NLA_TYPE_MASK != CMD_ATTR_SERVICE or start + alen > end:
        return None
    return data[start : start + alen]


class DestReplies:
    """GET_DEST dumps read whole, each with its mark. What it learns from the first reply
    (the pieces a real server's message is marked by) holds for every later one of the same
    length; a message of another length or shape leaves its reply unmarked (decoded, never
    taken as read before)."""

    def __init__(self) -> None:
        self.settled: struct.Struct | None = None  # layouts.dest_settled of the first
        self._runs: dict[int, tuple[struct.Struct, struct.Struct]] = {}

    def read(self, genl: GenlSocket, request: bytes) -> tuple[list[Message], int | None]:
        """The dump asked for by ``request``: its messages, and its mark (None when one of
        them is not laid out as the first one learnt).

        A datagram of nothing but messages of the learnt length (and perhaps the dump's
        NLMSG_DONE) is taken whole: one struct call checks every message's length, type
        and sequence number, one takes every message's pieces. Any other is split message by
        message, as ``GenlSocket.dump_part`` reads any dump."""
        seq = genl.send_dump(CMD_GET_DEST, request)
        messages: list[Message] = []
        pieces: list[bytes] = []
        laid_out = True
        while True:
            data = genl.recv()
            start = self._whole(data, genl.family, seq, messages, pieces)
            if start < 0:
                continue
            before = len(messages)
            ended = genl.dump_part(data, seq, messages, start)
            for got, offset, end in messages[before:]:
                settled = self.settled
                if settled is None:
                    settled = self.settled = dest_settled(got, offset, end)
                if settled is None or end - offset != settled.size:
                    laid_out = False
                    continue
                pieces += settled.unpack_from(got, offset)
            if ended:
                return messages, hash(tuple(pieces)) if laid_out else None

    def _whole(
        self, data: bytes, family: int, seq: int, messages: list[Message], pieces: list[bytes]
    ) -> int:
        """Take ``data`` whole if it is a run of messages of the learnt length: -1 when it
        held nothing else, else where the rest begins (0: none of it taken)."""
        settled = self.settled
        if settled is None:
            return 0
        size = settled.size
        count, rest = divmod(len(data), size)
        if not count or rest not in (0, DONE_BYTES):
            return 0
        runs = self._runs_of(count, settled)
        if runs is None or runs[0].unpack_from(data) != (size, family, seq) * count:
            return 0
        messages += [(data, at, at + size) for at in range(0, count * size, size)]
        pieces += runs[1].unpack_from(data)
        return count * size if rest else -1

    def _runs_of(
        self, count: int, settled: struct.Struct
    ) -> tuple[struct.Struct, struct.Struct] | None:
        """For ``count`` messages of the learnt length in a row: a struct of each one's
        (length, type, sequence number), and one of each one's pieces, in turn."""
        found = self._runs.get(count)
        if found is None:
            if len(self._runs) >= MAX_RUNS:
                return None
            head = f"I H 2x I {settled.size - 12}x "  # length, type, flags, seq, the rest
            found = self._runs[count] = (
                struct.Struct("=" + head * count),
                struct.Struct("=" + settled.format.lstrip("=") * count),
            )
        return found
