"""Operations as the datagrams the kernel is sent: each message packed once, ~64 KB a send,
only the last of a datagram asking for an ack (``director.dataplane.kernel`` sends them, the
replay of a kept table stores them)."""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from typing import Protocol

from director.core.model import ServiceKey
from director.core.services import Op, OpKind
from director.dataplane.codec import (
    CMD_ATTR_SERVICE,
    HEAD,
    OP_CMD,
    dest_message_layout,
    encode_op,
    encode_service_key,
    pack_dest_message,
)
from director.dataplane.genl import BATCH_BYTES
from director.dataplane.netlink import GENL_VERSION, NLM_F_ACK, NLM_F_REQUEST, U16, pack_nla


class Numbering(Protocol):
    """Where a batch's messages take their sequence numbers: the last one used."""

    seq: int


def encoded_batches(
    ops: Iterable[Op], skip: Container[int], family: int, numbering: Numbering
) -> Iterator[tuple[bytes, list[int], int]]:
    """``ops`` (but those at ``skip``; taken one at a time, as they come) as datagrams of at
    most BATCH_BYTES: (the datagram, the positions in ``ops`` of its messages, the first
    one's sequence number). Each message takes the next number of ``numbering``; only a
    datagram's last message asks for an ack (failures are always answered). The hot loop
    of a full sync: one struct pack per real-server message, header and attributes
    together."""
    key_cache: dict[ServiceKey, bytes] = {}  # op.key -> nested IPVS_CMD_ATTR_SERVICE
    parts: list[bytes] = []
    indices: list[int] = []  # positions in ops of the batch's messages, in seq order
    size_now = 0
    head_pack = HEAD.pack
    last_key: ServiceKey | None = None
    nested, layouts = b"", (HEAD, HEAD)  # set by each service's first real-server op
    delete, command = OpKind.DEL_DEST, OP_CMD

    def batch() -> tuple[bytes, list[int], int]:
        data = bytearray(b"".join(parts))
        last = len(data) - len(parts[-1])
        data[last + 6 : last + 8] = U16.pack(NLM_F_REQUEST | NLM_F_ACK)
        return bytes(data), indices, (numbering.seq - len(indices) + 1) & 0xFFFFFFFF

    for index, op in enumerate(ops):
        if index in skip:
            continue
        rs = op.dest
        if rs is not None:
            if op.key is not last_key:  # a service's ops come together
                last_key = op.key
                cached = key_cache.get(last_key)
                if cached is None:
                    cached = key_cache[last_key] = pack_nla(
                        CMD_ATTR_SERVICE, encode_service_key(last_key)
                    )
                nested, size = cached, len(cached)  # its layouts, by: is the op a delete?
                layouts = (dest_message_layout(size, True), dest_message_layout(size, False))
            kind = op.kind
            layout = layouts[kind is delete]
            if parts and size_now + layout.size > BATCH_BYTES:
                yield batch()
                parts, indices, size_now = [], [], 0
            seq = numbering.seq = (numbering.seq + 1) & 0xFFFFFFFF
            message = pack_dest_message(layout, family, seq, command[kind], nested, rs=rs)
        else:
            cmd, payload = encode_op(op)
            if parts and size_now + 20 + len(payload) > BATCH_BYTES:
                yield batch()
                parts, indices, size_now = [], [], 0
            seq = numbering.seq = (numbering.seq + 1) & 0xFFFFFFFF
            message = (
                head_pack(20 + len(payload), family, NLM_F_REQUEST, seq, 0, cmd, GENL_VERSION, 0)
                + payload
            )
        parts.append(message)
        indices.append(index)
        size_now += len(message)
    if parts:
        yield batch()
