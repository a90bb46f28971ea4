"""The kernel's counters of a whole table, in columns: what a scrape formats. Pure."""

from __future__ import annotations

import socket
from array import array
from collections.abc import Iterable, Sequence

from director.core.model import DestKey, ServiceKey

# The columns of ``Counters``: a virtual service's totals, and a real server's figures.
SERVICE_COUNTERS = ("connections", "packets_in", "packets_out", "bytes_in", "bytes_out")
DEST_COUNTERS = ("port", "weight", "active", "inactive", "persistent", *SERVICE_COUNTERS, "family")
_ADDRESS_BYTES = 16  # as IPVS carries one: an IPv4 address in the first 4


def _extend_whole(column: array[int], values: Iterable[int], width: int, what: str) -> None:
    """``values`` appended to ``column``, all ``width`` of them or none (a figure that is
    not a 64-bit unsigned integer, or one too many or too few, leaves it as it was)."""
    size = len(column)
    try:
        column.extend(values)
        if len(column) != size + width:
            raise ValueError(f"{what} has {width} figures")
    except (OverflowError, TypeError, ValueError):
        del column[size:]
        raise


class Counters:
    """The kernel's counters of a whole table, in columns: what a scrape formats.

    Read as objects (a RealServer, a DestState and a Stats a real server, in dicts keyed by
    tuples), 100,000 real servers made ~70 MB of small objects, alive for the whole scrape;
    whatever the process kept meanwhile pinned the heap around them. Here a real server is
    16 bytes of address and 11 integers of 8 bytes in two buffers (10.4 MB at 100,000) that
    are freed whole. Services come in the kernel's order; a real server's address and key are
    made when asked for."""

    __slots__ = ("_addresses", "_ends", "_service_values", "_values", "services")

    def __init__(self) -> None:
        self.services: list[ServiceKey] = []
        self._service_values = array("Q")  # SERVICE_COUNTERS for each service
        self._ends = array("Q")  # where each service's real servers end
        self._addresses = bytearray()  # _ADDRESS_BYTES for each real server
        self._values = array("Q")  # DEST_COUNTERS for each real server

    # -- filled by an adapter: a service's real servers, then the service ---------------
    def add_dest(self, address: bytes, values: Iterable[int]) -> None:
        """One real server of the service being read: its address as IPVS packs it, and
        ``DEST_COUNTERS`` in order."""
        _extend_whole(self._values, values, len(DEST_COUNTERS), "a real server")
        self._addresses += address.ljust(_ADDRESS_BYTES, b"\0")[:_ADDRESS_BYTES]

    def add_service(self, key: ServiceKey, values: Iterable[int]) -> None:
        """Closes a service: the real servers added since the last one are its own."""
        _extend_whole(self._service_values, values, len(SERVICE_COUNTERS), "a service")
        self.services.append(key)
        self._ends.append(len(self._addresses) // _ADDRESS_BYTES)

    def drop_open(self) -> None:
        """Forgets the real servers added since the last service (its read failed)."""
        count = self._ends[-1] if self._ends else 0
        del self._addresses[count * _ADDRESS_BYTES :]
        del self._values[count * len(DEST_COUNTERS) :]

    # -- read by the formatter -----------------------------------------------------------
    def __len__(self) -> int:
        return len(self.services)

    def service_value(self, index: int, column: int) -> int:
        """Column ``column`` of SERVICE_COUNTERS of the service at ``index``."""
        return self._service_values[index * len(SERVICE_COUNTERS) + column]

    def dests(self, index: int) -> range:
        """The real servers of the service at ``index``, as positions."""
        return range(self._ends[index - 1] if index else 0, self._ends[index])

    def column(self, index: int, column: int) -> Sequence[int]:
        """Column ``column`` of DEST_COUNTERS for each real server of the service at
        ``index``, in order."""
        width, found = len(DEST_COUNTERS), self.dests(index)
        return self._values[found.start * width + column : found.stop * width : width]

    def hosts(self, index: int) -> list[str]:
        """The address of each real server of the service at ``index``, in order."""
        found, addresses = self.dests(index), self._addresses
        families = self.column(index, len(DEST_COUNTERS) - 1)
        return [
            socket.inet_ntop(family, addresses[at : at + (16 if family == socket.AF_INET6 else 4)])
            for at, family in zip(
                range(found.start * _ADDRESS_BYTES, found.stop * _ADDRESS_BYTES, _ADDRESS_BYTES),
                families,
                strict=True,
            )
        ]

    def value(self, dest: int, column: int) -> int:
        """Column ``column`` of DEST_COUNTERS of the real server at position ``dest``."""
        return self._values[dest * len(DEST_COUNTERS) + column]

    def address(self, dest: int) -> str:
        at = dest * _ADDRESS_BYTES
        family = self._values[dest * len(DEST_COUNTERS) + len(DEST_COUNTERS) - 1]
        size = 16 if family == socket.AF_INET6 else 4
        return socket.inet_ntop(family, self._addresses[at : at + size])

    def dest_key(self, dest: int) -> DestKey:
        return self.address(dest), self.value(dest, 0)

    def table(self) -> dict[ServiceKey, tuple[dict[str, int], dict[DestKey, dict[str, int]]]]:
        """Everything as dicts by name: for tests and small tables, not for a scrape."""
        out = {}
        for index, key in enumerate(self.services):
            service = {n: self.service_value(index, c) for c, n in enumerate(SERVICE_COUNTERS)}
            dests = {
                self.dest_key(d): {n: self.value(d, c) for c, n in enumerate(DEST_COUNTERS)}
                for d in self.dests(index)
            }
            out[key] = (service, dests)
        return out
