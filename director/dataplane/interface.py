"""The narrow interface between the engine and IPVS, and its error types. Pure.

Two implementations: ``director.dataplane.kernel.KernelIpvs`` (netlink, the only code that
touches the kernel) and ``director.dataplane.fake.FakeIpvs`` (a stateful fake that enforces
the kernel's rules). ``tests/dataplane/test_conformance.py`` runs one suite against both.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from director.core.added import AddedService, parts_of
from director.core.counters import Counters
from director.core.errors import DirectorError
from director.core.model import DestKey, Forwarding, ServiceKey
from director.core.services import DestState, KernelTable, Op, OpKind, VirtualService
from director.dataplane.flags import config_bits
from director.dataplane.proctext import ReadCounts


class IpvsUnavailable(DirectorError, RuntimeError):
    """The kernel cannot do IPVS here (no ip_vs support, or no permission)."""

    status = 503


@dataclass(frozen=True, slots=True)
class OpError:
    """An operation the kernel refused, and why."""

    op: Op
    errno: str  # symbolic name: "EEXIST", "ESRCH", ...
    message: str

    def describe(self) -> str:
        return f"{self.op.describe()}: {self.errno} ({self.message})"


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What applying operations did: how many, how many sends, which failed."""

    requested: int = 0
    errors: tuple[OpError, ...] = ()
    sends: int = 0  # netlink send() calls (batches); 0 for the fake
    failed: frozenset[int] = field(default=frozenset())  # positions in the op list

    @property
    def applied(self) -> int:
        return self.requested - len(self.errors)

    @property
    def ok(self) -> bool:
        return not self.errors


class Ipvs(Protocol):
    """What the engine needs from IPVS."""

    def read(
        self, *, stats: bool = False, known: Mapping[ServiceKey, VirtualService] | None = None
    ) -> KernelTable:
        """The whole table; counters too when ``stats``. ``known`` (without ``stats``): the
        caller's copy of the table; each service the kernel holds just as it does is
        returned as its object (``director.core.services.read_back``), decided as the
        service is read, so a read that finds no drift never holds a second table."""
        ...

    def read_counters(self) -> Counters:
        """Every service's counters and its real servers', in columns (a scrape's read)."""
        ...

    def read_service(self, key: ServiceKey) -> VirtualService | None:
        """One virtual service with its real servers, or None."""
        ...

    def read_dest_states(self, key: ServiceKey) -> dict[DestKey, DestState]:
        """Connection counts and counters of one service's real servers ({} if absent)."""
        ...

    def apply(self, ops: Sequence[Op]) -> ApplyResult:
        """Apply in order; every operation is attempted, each failure is reported."""
        ...

    def schedulers(self) -> frozenset[str]:
        """Schedulers this kernel offers (loaded or loadable)."""
        ...

    @property
    def reads(self) -> ReadCounts:
        """What the reads of the whole table without counters (a resync's) have done: the
        services whose real servers were read through netlink, those the kernel's text
        vouched for (``director.dataplane.proctext``), and the resyncs within which each is
        read through netlink. Updated by the reading thread; read by a scrape's."""
        ...

    def close(self) -> None: ...


def errno_name(code: int) -> str:
    return errno.errorcode.get(code, f"E{code}")


def error_message(code: int) -> str:
    return os.strerror(code)


def scheduler_refusals(ops: Sequence[Op], available: Iterable[str]) -> dict[int, OpError]:
    """Service ops naming a scheduler the kernel does not offer, or flags that have no bit,
    and real servers with the director's own ``fullnat`` (not a method IPVS has: translation
    turns it into NAT and an SNAT rule), refused before sending.

    Real servers of a service whose add is refused are refused too (the kernel would
    answer ESRCH for each; one clear reason is better).
    """
    offered = frozenset(available)
    refused: dict[int, OpError] = {}
    dead: set[ServiceKey] = set()
    for start, part in parts_of(ops):
        if isinstance(part, AddedService) and part.plain:
            _refuse(start, part[0], offered, refused, dead)
            if start not in refused:
                continue  # nothing in its real servers is refused before sending
        # (an added service refused: each of its real servers with it, below)
        for index, op in enumerate(part, start):
            _refuse(index, op, offered, refused, dead)
    return refused


def _refuse(
    index: int, op: Op, offered: frozenset[str], refused: dict[int, OpError], dead: set[ServiceKey]
) -> None:
    """``op``, at ``index``, refused if it must be (see ``scheduler_refusals``)."""
    if op.config is not None and op.config.scheduler not in offered:
        refused[index] = OpError(
            op,
            "ENOENT",
            f"scheduler {op.config.scheduler!r} is not available in this kernel "
            f"(no module ip_vs_{op.config.scheduler}); available: "
            f"{', '.join(sorted(offered))}",
        )
    elif op.config is not None:
        try:  # flag names that have no bit cannot be sent at all
            config_bits(op.config)
        except ValueError as exc:
            refused[index] = OpError(op, "EINVAL", str(exc))
    if op.dest is not None and op.dest.forwarding is Forwarding.FULLNAT:
        refused[index] = OpError(
            op,
            "EINVAL",
            "fullnat is the director's mode, not an IPVS forwarding method (sent as nat)",
        )
    if index in refused and op.kind is OpKind.ADD_SERVICE:
        dead.add(op.key)
    elif dead and op.dest is not None and op.key in dead:
        refused[index] = OpError(op, "ESRCH", f"not sent: adding {op.key} was refused")
