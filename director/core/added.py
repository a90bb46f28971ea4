"""A full sync's operations without an object each: a service the kernel lacks as one
``AddedService`` (its operations made only when asked for) and a chunk of whole services'
operations as one ``OpChain``. Pure.

A first sync of 5,000 services x 10 is 55,000 operations. Made one by one, each real server
became text (its packed key read back), a ``RealServer``, an ``Op``, then bytes again (the
text packed anew for the kernel); and the kernel's order of the service was worked out a
second time for the cache. Here the order is worked out once, from the packed rows, and the
datagrams' encoder (``director.dataplane.batches``) packs each real server's message from
its row; an ``Op`` is made only for what asks for one (a refusal, a debug log, a fake).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from operator import itemgetter
from typing import overload

from director.core.dests import Dests
from director.core.model import Forwarding, ServiceConfig, ServiceKey
from director.core.services import Op, OpKind, VirtualService


class _Made(Sequence[Op]):
    """Operations made when asked for: ``_at`` makes the one at a position in range; slices
    and negative positions read as a list's."""

    __slots__ = ()

    def _at(self, index: int) -> Op:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Op: ...

    @overload
    def __getitem__(self, index: slice) -> list[Op]: ...

    def __getitem__(self, index: int | slice) -> Op | list[Op]:
        count = len(self)
        if isinstance(index, slice):
            return [self._at(i) for i in range(count)[index]]
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("operation index out of range")
        return self._at(index)


class AddedService(_Made):
    """A service the kernel lacks as the operations that add it (``added_whole`` says
    which): the service, then its real servers last first, so the kernel's list (an add
    goes to its head) ends in ``hash_order``, the order a hashing scheduler needs.
    ``applied`` is the service as the kernel then holds it (``desired`` itself when its
    real servers are in that order already)."""

    __slots__ = ("_count", "applied", "config", "key", "origin", "plain")
    key: ServiceKey
    config: ServiceConfig
    origin: str
    applied: VirtualService  # as the kernel holds it once these are applied
    # No real server asks for ``fullnat`` (refused one by one before sending), so each is
    # sent as its row says.
    plain: bool
    _count: int  # real servers

    def __init__(self, key: ServiceKey, desired: VirtualService) -> None:
        self.key, self.config, self.origin = key, desired.config, desired.origin
        dests = Dests.of(desired.real_servers)
        moved = dests.hash_ordered()
        if moved is None:
            self.applied = desired
        else:
            self.applied = VirtualService(key, desired.config, moved, desired.origin)
        self._count = len(dests)
        self.plain = Forwarding.FULLNAT not in dests.forwardings()

    @property
    def dests(self) -> Dests:
        """The real servers in the kernel's order once added (head first)."""
        return Dests.of(self.applied.real_servers)

    def __len__(self) -> int:
        return self._count + 1

    def _at(self, index: int) -> Op:
        if index == 0:
            return Op(OpKind.ADD_SERVICE, self.key, config=self.config, origin=self.origin)
        rs = self.dests.server_at(self._count - index)  # the last in the kernel's list first
        return tuple.__new__(Op, (OpKind.ADD_DEST, self.key, None, rs, self.origin))

    def __iter__(self) -> Iterator[Op]:
        make, add, key, origin = tuple.__new__, OpKind.ADD_DEST, self.key, self.origin
        yield Op(OpKind.ADD_SERVICE, key, config=self.config, origin=origin)
        for rs in reversed(list(self.dests.servers())):
            yield make(Op, (add, key, None, rs, origin))

    def rows(self) -> tuple[bytes, Sequence[tuple[int, Forwarding, int, int]]]:
        """The real servers' packed keys (``KEY_SIZE`` bytes each, in the kernel's order)
        and their (weight, forwarding, upper, lower) tuples: one for all, or one each."""
        return self.dests.packed()

    def __repr__(self) -> str:
        return f"AddedService({self.key}, {self._count} real servers)"


def added_whole(desired: VirtualService) -> bool:
    """Whether a service the kernel lacks is added as an ``AddedService``: any but an
    ``mh`` one with a quiesced (weight 0) real server, which is added at its live peers'
    weight and then quiesced (``director.core.plan``: mh keeps a real server's last weight
    above 0 in its table)."""
    if desired.config.scheduler != "mh":
        return True
    _keys, attrs = Dests.of(desired.real_servers).packed()
    return all(weight for weight, _forwarding, _upper, _lower in attrs)


class OpChain(_Made):
    """Whole services' operations, one part after another, seen as one sequence (an
    ``AddedService`` part stays one object). A position counts from the first part's first
    operation, as a plan's does."""

    __slots__ = ("_count", "_starts", "parts")

    def __init__(self, parts: Iterable[Sequence[Op]] = ()) -> None:
        self.parts: list[Sequence[Op]] = []
        self._starts: list[int] = []
        self._count = 0
        for part in parts:
            self.append(part)

    def append(self, part: Sequence[Op]) -> None:
        self.parts.append(part)
        self._starts.append(self._count)
        self._count += len(part)

    def placed(self) -> Iterator[tuple[int, Iterable[Op]]]:
        """(position of its first operation, part), in order."""
        return zip(self._starts, self.parts, strict=True)

    def __len__(self) -> int:
        return self._count

    def _at(self, index: int) -> Op:
        at = bisect_right(self._starts, index) - 1  # an empty part shares the next's start
        return self.parts[at][index - self._starts[at]]

    def __iter__(self) -> Iterator[Op]:
        return chain.from_iterable(self.parts)


def parts_of(ops: Iterable[Op]) -> Iterator[tuple[int, Iterable[Op]]]:
    """``ops`` as (position, part): an ``OpChain``'s parts, any other sequence whole."""
    if isinstance(ops, OpChain):
        return ops.placed()
    return iter(((0, ops),))


def service_ops(ops: Sequence[Op]) -> Iterator[Op]:
    """The operations of ``ops`` that carry a service's config (adds and sets), without
    making an ``AddedService``'s real servers' operations."""
    for _start, part in parts_of(ops):
        if isinstance(part, AddedService):
            yield part[0]
        else:
            yield from (op for op in part if op.config is not None)


def kinds_counted(ops: Sequence[Op]) -> Counter[OpKind]:
    """How many operations of each kind ``ops`` holds."""
    counted: Counter[OpKind] = Counter()
    for _start, part in parts_of(ops):
        if isinstance(part, AddedService):
            counted[OpKind.ADD_SERVICE] += 1
            counted[OpKind.ADD_DEST] += len(part) - 1
        else:
            counted.update(map(_KIND, part))
    return counted


_KIND = itemgetter(0)  # Op.kind, read in C
