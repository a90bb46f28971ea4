"""A virtual service's real servers, packed: ``Dests`` and its edits. Pure.

A real server's key is 19 bytes (its address in 16, its port, its family), the layout the
kernel's own attributes give, so the codec builds it from a dump without making text
(``director.dataplane.codec.wire_key``; a test holds the two to one layout).
"""

from __future__ import annotations

import socket
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from functools import lru_cache
from typing import Any

from director.core.model import DestKey, Forwarding, RealServer, shown

_Attrs = tuple[int, Forwarding, int, int]  # weight, forwarding, upper and lower threshold


@lru_cache(maxsize=4096)  # bounded: weights and thresholds come from tenants
def shared_attrs(attrs: _Attrs) -> _Attrs:
    """The one tuple of these (weight, forwarding, upper, lower) every real server shares."""
    return attrs


# The packed key of a real server in ``Dests``: its address in 16 bytes (IPv4's first four,
# then zeros, as the kernel's union nf_inet_addr), its port in network order, its family.
KEY_SIZE = 19
_ZEROS = bytes(12)
_V4, _V6 = int(socket.AF_INET), int(socket.AF_INET6)
_V4_BYTE, _V6_BYTE = bytes((_V4,)), bytes((_V6,))


def packed_key(address: str, port: int) -> bytes:
    """A real server's (address, port) packed as ``Dests`` holds it. Raises ValueError if
    the address is not canonical-able text or the port is not 0-65535."""
    try:
        if ":" in address:
            return socket.inet_pton(_V6, address) + port.to_bytes(2, "big") + _V6_BYTE
        return socket.inet_pton(_V4, address) + _ZEROS + port.to_bytes(2, "big") + _V4_BYTE
    except OverflowError:
        raise ValueError(f"port {shown(port)} is not 0-65535") from None
    except (OSError, ValueError):  # ValueError: NUL bytes, lone surrogates
        raise ValueError(f"{shown(address)} is not an IPv4 or IPv6 address") from None


# An IPv4 address's text is its octets' texts joined by dots; none of "0." ... "255." is the
# beginning of another, so texts compare as the sequences of their octets' ranks among those
# 256 ("1." < "10." < "100." < "101." ... < "2." ...): an octet's byte mapped to its rank.
_IN_TEXT_ORDER = sorted(range(256), key=lambda octet: f"{octet}.")
_TEXT_RANK = bytes(sorted(range(256), key=_IN_TEXT_ORDER.__getitem__))  # octet -> its rank


def key_at(keys: bytes, at: int) -> DestKey:
    """The (address, port) of the packed key at byte ``at`` of ``keys`` (the n-th real
    server's at ``n * KEY_SIZE``)."""
    port = (keys[at + 16] << 8) | keys[at + 17]
    if keys[at + 18] == _V4:
        return socket.inet_ntop(_V4, keys[at : at + 4]), port
    return socket.inet_ntop(_V6, keys[at : at + 16]), port


@lru_cache(maxsize=4096)
def _for_all(attrs: _Attrs) -> tuple[_Attrs]:
    """The one tuple every Dests whose real servers all share ``attrs`` holds."""
    return (attrs,)


class Dests(Mapping[DestKey, RealServer]):
    """A virtual service's real servers, in order: an immutable mapping by (address, port).

    Kept packed: one bytes of 19 a real server (its address in 16, port, family), and its
    weight, forwarding and thresholds as one tuple shared by every real server alike (one
    for all when they all share it). 10 real servers cost ~330 bytes where a dict of
    RealServer costs ~2,800 and a tuple of address strings ~900, so 100,000 real servers
    hold ~3.3 MB. A RealServer, its key and its address text are made when asked for. Two
    tables of the same real servers in the same order compare as two bytes (a no-op resync
    compares the kernel's read with what it wants without making a string). A lookup by
    key searches the bytes (in C); the one that follows the last found is tried first, so
    ``dict(dests)`` and ``{**dests}`` stay linear.

    Equal to any mapping with the same real servers, in any order (as a dict is)."""

    __slots__ = ("_attrs", "_keys", "_next")
    _keys: bytes
    _attrs: tuple[_Attrs, ...]  # one per real server, or one for all
    _next: int

    def __init__(self, servers: Iterable[RealServer] = ()) -> None:
        unique = {rs.key: rs for rs in servers}.values()
        self._keys, self._attrs = Dests._packed(unique)
        self._next = 0

    @staticmethod
    def row(rs: RealServer) -> tuple[bytes, _Attrs]:
        """A real server's row: its packed key and its ``shared_attrs`` tuple."""
        return (packed_key(rs[0], rs[1]), shared_attrs(rs[2:]))

    @staticmethod
    def _packed(servers: Iterable[RealServer]) -> tuple[bytes, tuple[_Attrs, ...]]:
        rows = [Dests.row(rs) for rs in servers]
        return b"".join(key for key, _ in rows), Dests._one_or_each([a for _, a in rows])

    @staticmethod
    def _one_or_each(attrs: Sequence[_Attrs]) -> tuple[_Attrs, ...]:
        if attrs and attrs.count(attrs[0]) == len(attrs):
            return _for_all(attrs[0])
        return tuple(attrs)

    @classmethod
    def from_rows(cls, rows: Sequence[Any]) -> Dests:
        """Real servers given flat (packed key, ``shared_attrs`` tuple, ...), each key once:
        as the kernel adapter decodes them, with no RealServer and no text made."""
        return cls.from_packed(b"".join(rows[0::2]), rows[1::2])

    @classmethod
    def from_packed(cls, keys: bytes, attrs: Sequence[_Attrs]) -> Dests:
        """Real servers given as their packed keys, joined (each key once), and each one's
        ``shared_attrs`` tuple, in the same order."""
        out = cls.__new__(cls)
        out._keys, out._attrs = keys, Dests._one_or_each(attrs)
        out._next = 0
        return out

    @classmethod
    def of(cls, servers: Mapping[DestKey, RealServer] | Iterable[RealServer]) -> Dests:
        """``servers`` as Dests: itself if it is one; a mapping's values, in its order."""
        if isinstance(servers, Dests):
            return servers
        if isinstance(servers, Mapping):
            out = cls.__new__(cls)
            out._keys, out._attrs = Dests._packed(servers.values())
            out._next = 0
            return out
        return cls(servers)

    def _find(self, key: object) -> int:
        if not isinstance(key, tuple) or len(key) != 2:
            return -1
        address, port = key
        if not isinstance(address, str) or not isinstance(port, int):
            return -1
        try:
            needle = packed_key(address, port)
        except ValueError:
            return -1
        keys, at = self._keys, self._next
        if keys.startswith(needle, at):
            return at
        at = 0
        while True:
            at = keys.find(needle, at)
            if at < 0 or at % KEY_SIZE == 0:
                return at
            at += 1

    def _attr(self, at: int) -> _Attrs:
        attrs = self._attrs
        return attrs[0] if len(attrs) == 1 else attrs[at // KEY_SIZE]

    def _server(self, at: int) -> RealServer:
        address, port = key_at(self._keys, at)
        return RealServer(address, port, *self._attr(at))

    def server_at(self, row: int) -> RealServer:
        """The real server in row ``row`` (from 0, in order)."""
        if not 0 <= row < len(self):
            raise IndexError("real server row out of range")
        return self._server(row * KEY_SIZE)

    def packed(self) -> tuple[bytes, tuple[_Attrs, ...]]:
        """The packed keys, joined (``KEY_SIZE`` bytes each, in order), and the (weight,
        forwarding, upper, lower) tuples: one for all of them, or one each."""
        return self._keys, self._attrs

    def __getitem__(self, key: DestKey) -> RealServer:
        at = self._find(key)
        if at < 0:
            raise KeyError(key)
        self._next = at + KEY_SIZE  # a hint, no more: a race between readers only costs a scan
        return self._server(at)

    def get(self, key: DestKey, default: Any = None) -> Any:
        at = self._find(key)
        return default if at < 0 else self._server(at)

    def __contains__(self, key: object) -> bool:
        return self._find(key) >= 0

    def __len__(self) -> int:
        return len(self._keys) // KEY_SIZE

    def __iter__(self) -> Iterator[DestKey]:
        keys, ntop = self._keys, socket.inet_ntop  # key_at's work, no call made for each key
        return iter(
            [
                (
                    ntop(_V4, keys[at : at + 4])
                    if keys[at + 18] == _V4
                    else ntop(_V6, keys[at : at + 16]),
                    (keys[at + 16] << 8) | keys[at + 17],
                )
                for at in range(0, len(keys), KEY_SIZE)
            ]
        )

    def hash_rows(self) -> list[int]:
        """The rows in ``hash_order`` (by address text, then port) without making the text
        of every address where all are IPv4: each address's octets mapped to their text's
        rank (``_TEXT_RANK``), then its port, sort as the text and port do."""
        keys = self._keys
        if _V6 in keys[KEY_SIZE - 1 :: KEY_SIZE]:
            texts = list(self)
            return sorted(range(len(texts)), key=texts.__getitem__)
        ranked = keys.translate(_TEXT_RANK)  # the ports and families too: those are not read
        order = [
            ranked[at : at + 4] + keys[at + 16 : at + 18] for at in range(0, len(keys), KEY_SIZE)
        ]
        return sorted(range(len(order)), key=order.__getitem__)

    def servers(self) -> Iterator[RealServer]:
        attrs, make = self._attrs, tuple.__new__  # RealServer's own __new__ costs as much
        if len(attrs) == 1:
            one = attrs[0]
            for address, port in self:
                yield make(RealServer, (address, port, *one))
        else:
            for (address, port), each in zip(self, attrs, strict=True):
                yield make(RealServer, (address, port, *each))

    def reordered(self, order: Sequence[DestKey], now: Sequence[DestKey] | None = None) -> Dests:
        """These real servers in ``order`` (every key of these, each once), their rows moved
        as they are: no RealServer, text or packing made (the kernel's order of a first sync's
        100,000 real servers, ``director.core.plan.as_applied``). ``now``: their keys in
        their present order, when the caller has made them already."""
        at = {key: row for row, key in enumerate(self if now is None else now)}
        rows = [at[key] for key in order]
        if len(rows) != len(at) or len(set(rows)) != len(rows):
            raise ValueError("an order must name every real server once")
        return self.moved(rows)

    def moved(self, rows: Sequence[int]) -> Dests:
        """These real servers with their rows in the order ``rows`` gives (each row's
        number, from 0, once), moved as they are."""
        if sorted(rows) != list(range(len(self._keys) // KEY_SIZE)):
            raise ValueError("an order must name every real server once")
        return self._moved(rows)

    def hash_ordered(self) -> Dests | None:
        """These real servers in ``hash_order`` (``hash_rows``), or None when they are in it
        already (the rows a sort gave are each row once: not checked again)."""
        rows = self.hash_rows()
        if rows == list(range(len(rows))):
            return None
        return self._moved(rows)

    def _moved(self, rows: Sequence[int]) -> Dests:
        keys, attrs = self._keys, self._attrs
        out = Dests.__new__(Dests)
        out._keys = b"".join([keys[row * KEY_SIZE : (row + 1) * KEY_SIZE] for row in rows])
        out._attrs = attrs if len(attrs) == 1 else tuple(attrs[row] for row in rows)
        out._next = 0
        return out

    def items(self) -> ItemsView[DestKey, RealServer]:
        return _DestItems(self)

    def forwardings(self) -> frozenset[Forwarding]:
        """The forwarding methods its real servers use, read without making a RealServer
        (one tuple to look at when they all share their attributes)."""
        return frozenset(attrs[1] for attrs in self._attrs) if self._keys else frozenset()

    def values(self) -> ValuesView[RealServer]:
        return _DestValues(self)

    def _set(self) -> frozenset[tuple[bytes, _Attrs]]:
        keys = self._keys
        return frozenset(
            (keys[at : at + KEY_SIZE], self._attr(at)) for at in range(0, len(keys), KEY_SIZE)
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Dests):
            if self.same_order(other):
                return True
            return len(self._keys) == len(other._keys) and self._set() == other._set()
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def same_order(self, other: Mapping[DestKey, RealServer]) -> bool:
        """The same real servers, in the same order (the kernel's list order matters to the
        hashing schedulers; ``==`` does not look at it)."""
        if isinstance(other, Dests):
            return self._keys == other._keys and self._attrs == other._attrs
        return list(self.values()) == list(other.values())

    def covers(self, other: Mapping[DestKey, RealServer]) -> bool:
        """Every real server of ``other`` is one of these (by key): at the cost of comparing
        two bytes when both hold the same keys in the same order."""
        if isinstance(other, Dests) and other._keys == self._keys:
            return True
        return all(key in self for key in other)

    def __repr__(self) -> str:
        return f"Dests({dict(self.items())!r})"


class _DestItems(ItemsView[DestKey, RealServer]):
    _mapping: Dests

    def __iter__(self) -> Iterator[tuple[DestKey, RealServer]]:
        for rs in self._mapping.servers():
            yield (rs[0], rs[1]), rs


class _DestValues(ValuesView[RealServer]):
    _mapping: Dests

    def __iter__(self) -> Iterator[RealServer]:
        return self._mapping.servers()


class DestEdit:
    """A service's real servers changed one operation at a time, as the kernel's list
    changes: an added real server goes to the head, a changed one stays where it is. Kept
    in reverse, so an add costs a dict insert however long the list."""

    __slots__ = ("_reversed",)

    def __init__(self, dests: Mapping[DestKey, RealServer]) -> None:
        self._reversed = dict(reversed(list(dests.items())))

    def get(self, key: DestKey) -> RealServer | None:
        return self._reversed.get(key)

    def add(self, rs: RealServer) -> None:
        self._reversed.pop(rs.key, None)
        self._reversed[rs.key] = rs

    def set(self, rs: RealServer) -> None:
        if rs.key in self._reversed:
            self._reversed[rs.key] = rs
        else:  # at the tail
            self._reversed = {rs.key: rs, **self._reversed}

    def remove(self, key: DestKey) -> None:
        self._reversed.pop(key, None)

    def done(self) -> Dests:
        return Dests.of(dict(reversed(self._reversed.items())))


# Schedulers whose choice is a table the kernel builds by walking the real servers in the
# order its list holds them (ip_vs_sh.c, ip_vs_dh.c, ip_vs_mh.c), where a real server added
# goes to the head. Two directors with the same real servers choose alike only when their
# lists hold them in one order, so the director keeps these in ``hash_order``.
HASHING_SCHEDULERS = frozenset({"sh", "dh", "mh"})
# What every director of a BGP fleet schedules with unless told otherwise: Maglev hashing of
# address and port chooses alike on each box, so a flow ECMP moves keeps its real server.
# mh-fallback: the kernel's Maglev table keeps the slots of a real server quiesced at weight
# 0 (a failed health check, a drain), and without the flag a new connection hashed to one
# finds no destination and is refused (ip_vs_mh.c); with it, the next slot's server takes it.
BGP_SCHEDULER = ("mh", frozenset({"mh-port", "mh-fallback"}))
NAT_OVER_BGP = (
    "nat cannot serve an address announced over BGP: the replies would have to come back "
    "through the one director that saw the connection start; use tun or dr"
)


def hash_order(keys: Iterable[DestKey]) -> list[DestKey]:
    """The order (head first) in which the kernel's list holds a hashing service's real
    servers: by canonical address text, then port (any order will do if every director
    keeps the same one, whatever the order in which it saw them come and go)."""
    return sorted(keys)
