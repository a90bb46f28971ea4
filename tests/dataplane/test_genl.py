"""One generic netlink socket: a batch's failures are each matched to their request by
sequence number, and the batch is read until its last request is answered."""

from __future__ import annotations

import errno
import socket
import struct
from typing import cast

from director.dataplane.genl import GenlSocket
from tests.dataplane.test_codec import ScriptedSocket


def ack(seq: int, code: int = 0) -> bytes:
    """NLMSG_ERROR for request ``seq``: 0 is an ack, else the kernel's -errno."""
    return struct.pack("=IHHIIi", 36, 2, 0, seq, 0, -code) + bytes(16)


def test_a_batch_s_failures_are_told_by_position_until_its_last_request_is_answered() -> None:
    sock = ScriptedSocket()
    genl = GenlSocket(cast(socket.socket, sock), 0x21)
    sock.datagrams = [
        ack(11, errno.EEXIST) + ack(13, errno.ENOENT),  # 10 and 12 succeeded (no ack asked)
        ack(99, errno.EINVAL) + ack(14),  # another request's answer is not this batch's
    ]
    failures = list(genl.batch_errors(b"five requests", 10, 5))
    assert [(position, code) for position, code, _ in failures] == [
        (1, errno.EEXIST),
        (3, errno.ENOENT),
    ]
    assert sock.sent == [b"five requests"] and sock.datagrams == []


def test_sequence_numbers_wrap_around_as_the_kernel_s_do() -> None:
    genl = GenlSocket(cast(socket.socket, ScriptedSocket()), 0x21)
    genl.seq = 0xFFFFFFFF
    assert genl.next_seq() == 0
