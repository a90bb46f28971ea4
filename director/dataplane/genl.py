"""One generic netlink socket of one family: requests acknowledged one at a time, dumps read
as they arrive, and batches sent whole, each reply matched to its request by sequence number.
No netlink library: ``director.dataplane.codec`` packs and parses the messages."""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator

from director.dataplane.netlink import (
    GENL_VERSION,
    GENLMSGHDR,
    I32,
    NETLINK_CAP_ACK,
    NETLINK_EXT_ACK,
    NETLINK_GENERIC,
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSGHDR,
    SOL_NETLINK,
    error_text,
    split_messages,
)

BATCH_BYTES = 64 * 1024
RCVBUF = 8 * 1024 * 1024  # the socket's queue in the kernel (a big batch's acks wait there)
# What one recv can hold. The kernel sends no netlink datagram above 32 KiB (a dump's are
# capped at SKB_WITH_OVERHEAD(32768), its replies and acks are smaller), so twice that is
# room enough; a larger one is refused (EMSGSIZE), never read cut short. A buffer the size
# of RCVBUF cost the process 8 MiB of resident zeros per socket.
RECV_BYTES = 64 * 1024


def received(size: int, buf: bytearray) -> int:
    """``size`` (a datagram's whole length: recv with MSG_TRUNC) if it fit in ``buf``."""
    if size > len(buf):
        raise OSError(
            errno.EMSGSIZE,
            f"a netlink reply of {size} bytes did not fit the {len(buf)}-byte receive buffer",
        )
    return size


def open_socket() -> socket.socket:
    """A generic netlink socket with room for a big batch's acks, extended acks asked for."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
    for option, value in ((NETLINK_CAP_ACK, 1), (NETLINK_EXT_ACK, 1)):
        # Older kernels lack these: full acks, no extended messages.
        with contextlib.suppress(OSError):
            sock.setsockopt(SOL_NETLINK, option, value)
    for force, plain, size in (
        (33, socket.SO_RCVBUF, RCVBUF),  # SO_RCVBUFFORCE needs CAP_NET_ADMIN
        (32, socket.SO_SNDBUF, 4 * BATCH_BYTES),
    ):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, size)
    sock.bind((0, 0))
    return sock


class GenlSocket:
    """``sock`` speaking to the generic netlink family ``family``; ``seq``: the last
    sequence number used (a batch's messages take the next ones in turn)."""

    def __init__(self, sock: socket.socket, family: int) -> None:
        self.sock, self.family, self.seq = sock, family, 0
        self._buf = bytearray(RECV_BYTES)

    def close(self) -> None:
        self.sock.close()

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        return self.seq

    def message(self, cmd: int, flags: int, seq: int, payload: bytes) -> bytes:
        return (
            NLMSGHDR.pack(20 + len(payload), self.family, flags, seq, 0)
            + GENLMSGHDR.pack(cmd, GENL_VERSION, 0)
            + payload
        )

    def recv(self) -> bytes:
        size = received(self.sock.recv_into(self._buf, 0, socket.MSG_TRUNC), self._buf)
        return bytes(memoryview(self._buf)[:size])

    def request(self, cmd: int, payload: bytes) -> list[tuple[bytes, int, int]]:
        """One acknowledged request; its replies as (datagram, attrs start, attrs end).

        Raises OSError with the kernel's errno."""
        seq = self.next_seq()
        self.sock.send(self.message(cmd, NLM_F_REQUEST | NLM_F_ACK, seq, payload))
        replies: list[tuple[bytes, int, int]] = []
        while True:
            data = self.recv()
            for kind, flags, mseq, start, end in split_messages(data):
                if mseq != seq:
                    continue
                if kind == NLMSG_ERROR:
                    code = -I32.unpack_from(data, start)[0]
                    if code:
                        raise OSError(code, error_text(data, flags, start, end))
                    return replies
                if kind == NLMSG_DONE:
                    return replies
                replies.append((data, start + 4, end))

    def dump(self, cmd: int, payload: bytes) -> list[tuple[bytes, int, int]]:
        """(datagram, attrs start, attrs end) for every message of a dump."""
        return [(data, offset + 20, end) for data, offset, end in self.messages(cmd, payload)]

    def messages(self, cmd: int, payload: bytes) -> Iterator[tuple[bytes, int, int]]:
        """(datagram, message start, message end) for every message of a dump, as each
        datagram arrives: the hot path of reading 100,000 real servers (no list of every
        message)."""
        seq = self.send_dump(cmd, payload)
        while True:
            found: list[tuple[bytes, int, int]] = []
            ended = self.dump_part(self.recv(), seq, found)
            yield from found
            if ended:
                return

    def send_dump(self, cmd: int, payload: bytes) -> int:
        """Ask for a dump; its sequence number (``dump_part`` reads its replies)."""
        seq = self.next_seq()
        self.sock.send(self.message(cmd, NLM_F_REQUEST | NLM_F_DUMP, seq, payload))
        return seq

    def dump_part(
        self, data: bytes, seq: int, found: list[tuple[bytes, int, int]], start: int = 0
    ) -> bool:
        """The messages of dump ``seq`` in the datagram ``data`` (from ``start``) added to
        ``found``; True once the dump has ended (its NLMSG_DONE, or an ack). Raises OSError
        with the kernel's errno for an error. Messages of other requests are passed over."""
        genl = self.family
        header = NLMSGHDR.unpack_from
        size = len(data)
        offset = start
        while offset + 16 <= size:
            length, kind, flags, mseq, _pid = header(data, offset)
            if length < 16:
                break
            end = offset + length
            if mseq == seq:
                if kind == genl:
                    found.append((data, offset, end))
                elif kind == NLMSG_DONE:
                    return True
                elif kind == NLMSG_ERROR:
                    code = -I32.unpack_from(data, offset + 16)[0]
                    if code:
                        raise OSError(code, error_text(data, flags, offset + 16, end))
                    return True
            offset += (length + 3) & ~3
        return False

    def batch_errors(
        self, batch: bytes, first_seq: int, count: int
    ) -> Iterator[tuple[int, int, str]]:
        """Send ``count`` requests (numbered from ``first_seq``, the last one acked) as one
        datagram; (position, errno, the kernel's words) of each that failed, until the last
        one is answered."""
        self.sock.send(batch)
        last_seq = (first_seq + count - 1) & 0xFFFFFFFF
        while True:
            data = self.recv()
            for kind, flags, seq, start, end in split_messages(data):
                position = (seq - first_seq) & 0xFFFFFFFF
                if kind != NLMSG_ERROR or position >= count:
                    continue
                code = -I32.unpack_from(data, start)[0]
                if code:
                    yield position, code, error_text(data, flags, start, end)
                if seq == last_seq:
                    return
