"""Operations as the datagrams the kernel is sent: each message packed once, ~64 KB a send,
only the last of a datagram asking for an ack (``director.dataplane.kernel`` sends them, the
replay of a kept table stores them)."""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from typing import Protocol

from director.core.added import AddedService, parts_of
from director.core.model import ServiceKey
from director.core.services import Op, OpKind
from director.dataplane.codec import (
    CMD_ATTR_SERVICE,
    CMD_NEW_SERVICE,
    HEAD,
    OP_CMD,
    dest_message_layout,
    dest_row_layout,
    encode_added_service,
    encode_op,
    encode_service_key,
    pack_added_rows,
    pack_dest_message,
)
from director.dataplane.genl import BATCH_BYTES
from director.dataplane.netlink import GENL_VERSION, NLM_F_ACK, NLM_F_REQUEST, U16, pack_nla


class Numbering(Protocol):
    """Where a batch's messages take their sequence numbers: the last one used."""

    seq: int


Batch = tuple[bytes, list[int], int]  # datagram, its messages' positions, first seq


def encoded_batches(
    ops: Iterable[Op], skip: Container[int], family: int, numbering: Numbering
) -> Iterator[Batch]:
    """``ops`` (but those at ``skip``; taken one at a time, as they come) as datagrams of at
    most BATCH_BYTES: (the datagram, the positions in ``ops`` of its messages, the first
    one's sequence number). Each message takes the next number of ``numbering``; only a
    datagram's last message asks for an ack (failures are always answered). The hot loop
    of a full sync: one struct pack per real-server message, header and attributes
    together; an ``AddedService`` part of an ``OpChain`` has its real servers' messages
    packed from their rows, with no ``Op`` made."""
    filling = _Filling(family, numbering)
    for start, part in parts_of(ops):
        rows = _added_rows(part, start, skip)
        if rows is None:
            yield from filling.each_op(part, start, skip)
            continue
        assert isinstance(part, AddedService)
        yield from filling.added(part, start, rows)
    if filling.parts:
        yield filling.take()


class _Filling:
    """The datagram being filled: its messages, their positions in the ops, its size."""

    def __init__(self, family: int, numbering: Numbering) -> None:
        self.family, self.numbering = family, numbering
        self.parts: list[bytes] = []
        self.indices: list[int] = []  # positions in ops of the batch's messages, in seq order
        self.size = 0
        self.key_cache: dict[ServiceKey, bytes] = {}  # key -> nested IPVS_CMD_ATTR_SERVICE

    def take(self) -> Batch:
        """The datagram as it is (its last message asking for the ack); a new one begun."""
        parts, indices = self.parts, self.indices
        data = bytearray(b"".join(parts))
        last = len(data) - len(parts[-1])
        data[last + 6 : last + 8] = U16.pack(NLM_F_REQUEST | NLM_F_ACK)
        self.parts, self.indices, self.size = [], [], 0
        return bytes(data), indices, (self.numbering.seq - len(indices) + 1) & 0xFFFFFFFF

    def nested(self, key: ServiceKey) -> bytes:
        cached = self.key_cache.get(key)
        if cached is None:
            cached = self.key_cache[key] = pack_nla(CMD_ATTR_SERVICE, encode_service_key(key))
        return cached

    def each_op(self, ops: Iterable[Op], start: int, skip: Container[int]) -> Iterator[Batch]:
        """``ops`` (the first at position ``start``) packed one by one."""
        numbering, family, head_pack = self.numbering, self.family, HEAD.pack
        parts, indices, size_now = self.parts, self.indices, self.size
        last_key: ServiceKey | None = None
        nested, layouts = b"", (HEAD, HEAD)  # set by each service's first real-server op
        delete, command = OpKind.DEL_DEST, OP_CMD
        for index, op in enumerate(ops, start):
            if index in skip:
                continue
            rs = op.dest
            if rs is not None:
                if op.key is not last_key:  # a service's ops come together
                    last_key = op.key
                    nested = self.nested(last_key)
                    size = len(nested)  # its layouts, by: is the op a delete?
                    layouts = (dest_message_layout(size, True), dest_message_layout(size, False))
                kind = op.kind
                layout = layouts[kind is delete]
                if parts and size_now + layout.size > BATCH_BYTES:
                    self.size = size_now
                    yield self.take()
                    parts, indices, size_now = self.parts, self.indices, 0
                seq = numbering.seq = (numbering.seq + 1) & 0xFFFFFFFF
                message = pack_dest_message(layout, family, seq, command[kind], nested, rs=rs)
            else:
                cmd, payload = encode_op(op)
                if parts and size_now + 20 + len(payload) > BATCH_BYTES:
                    self.size = size_now
                    yield self.take()
                    parts, indices, size_now = self.parts, self.indices, 0
                seq = numbering.seq = (numbering.seq + 1) & 0xFFFFFFFF
                head = head_pack(
                    20 + len(payload), family, NLM_F_REQUEST, seq, 0, cmd, GENL_VERSION, 0
                )
                message = head + payload
            parts.append(message)
            indices.append(index)
            size_now += len(message)
        self.size = size_now

    def added(self, part: AddedService, index: int, rows: range) -> Iterator[Batch]:
        """``part`` (at position ``index``): the service, then its real servers in the
        order of ``rows``, packed from their rows as many at a time as the datagram has
        room for."""
        payload, nested = encode_added_service(part.key, part.config)
        length = HEAD.size + len(payload)
        if self.parts and self.size + length > BATCH_BYTES:
            yield self.take()
        seq = self.numbering.seq = (self.numbering.seq + 1) & 0xFFFFFFFF
        head = HEAD.pack(
            length, self.family, NLM_F_REQUEST, seq, 0, CMD_NEW_SERVICE, GENL_VERSION, 0
        )
        self.parts.append(head + payload)
        self.indices.append(index)
        self.size += length
        index += 1
        layout = dest_row_layout(len(nested))
        size, packed = layout.size, part.rows()
        while rows:
            room = (BATCH_BYTES - self.size) // size
            if room < 1 and self.parts:
                yield self.take()
                room = BATCH_BYTES // size
            taken, rows = rows[: max(room, 1)], rows[max(room, 1) :]
            seq = self.numbering.seq
            self.parts += pack_added_rows(
                layout, self.family, seq, nested, packed=packed, rows=taken
            )
            self.numbering.seq = (seq + len(taken)) & 0xFFFFFFFF
            self.indices.extend(range(index, index + len(taken)))
            index += len(taken)
            self.size += size * len(taken)


def _added_rows(part: Iterable[Op], start: int, skip: Container[int]) -> range | None:
    """An added service's real-server rows in the order they are sent (the last in the
    kernel's list first), when each is sent as its row says: none skipped, none
    ``fullnat``. None: send ``part`` op by op."""
    if not isinstance(part, AddedService) or not part.plain:
        return None
    if skip and any(index in skip for index in range(start, start + len(part))):
        return None
    return range(len(part) - 2, -1, -1)
