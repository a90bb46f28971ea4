"""A stateful fake of the IPVS adapter that enforces the kernel's rules.

It answers each operation the way net/netfilter/ipvs/ip_vs_ctl.c does (same errno), so the
engine can be tested on a host without IPVS; ``tests/dataplane/test_conformance.py`` holds it to the
real kernel's behaviour in the lab VM.
"""

from __future__ import annotations

import errno as _errno
import socket
import threading
from collections.abc import Iterable, Mapping, Sequence

from director.core.counters import Counters
from director.core.dests import DestEdit
from director.core.model import (
    KNOWN_SCHEDULERS,
    DestKey,
    Family,
    Forwarding,
    RealServer,
    ServiceConfig,
    ServiceKey,
    canonical_flags,
)
from director.core.services import (
    DestState,
    KernelTable,
    Op,
    OpKind,
    Stats,
    VirtualService,
    read_back,
)
from director.dataplane.interface import ApplyResult, OpError, error_message, scheduler_refusals
from director.dataplane.proctext import ReadCounts, Rotation, prefix_of, service_text


class FakeIpvs:
    def __init__(
        self, schedulers: Iterable[str] = KNOWN_SCHEDULERS, *, record: bool = True
    ) -> None:
        """``record``: keep ``applied``, a test hook (a bench at scale turns it off: the
        kernel keeps no log of what it was sent, and 100,000 ops would count as the
        director's memory)."""
        self._record = record
        self._schedulers = frozenset(schedulers)
        self._table: dict[ServiceKey, VirtualService] = {}
        self._conns: dict[tuple[ServiceKey, DestKey], tuple[int, int]] = {}
        self._stats: dict[ServiceKey, Stats] = {}
        self.applied: list[Op] = []  # every op the kernel accepted, in order
        self.calls = 0  # apply() calls
        self._lock = threading.RLock()  # the kernel serialises too (__ip_vs_mutex)
        # What a resync takes as read before, as the kernel adapter does: a service whose
        # text (``director.dataplane.proctext``) is unchanged keeps the real servers read
        # then, unless its share is due; what this handle changes is read in full next.
        self._rotation = Rotation()
        self._settled: dict[ServiceKey, Mapping[DestKey, RealServer]] = {}

    def elsewhere(self) -> FakeIpvs:
        """Another handle on the same table: another process's (``ipvsadm``), whose changes
        this one's reads learn only from what they read."""
        other = FakeIpvs(self._schedulers, record=False)
        other._table, other._conns, other._stats = self._table, self._conns, self._stats
        other._lock = self._lock
        return other

    # -- test hooks ----------------------------------------------------------------------
    def set_connections(self, key: ServiceKey, dest: DestKey, active: int, inactive: int) -> None:
        self._conns[(key, dest)] = (active, inactive)

    def set_stats(self, key: ServiceKey, stats: Stats) -> None:
        """A virtual service's counters and rate estimates, as the kernel would report them."""
        self._stats[key] = stats

    # -- Ipvs protocol -------------------------------------------------------------------
    def read(
        self, *, stats: bool = False, known: Mapping[ServiceKey, VirtualService] | None = None
    ) -> KernelTable:
        with self._lock:
            return self._read(stats, None if stats else known)

    def _read(
        self, stats: bool, known: Mapping[ServiceKey, VirtualService] | None = None
    ) -> KernelTable:
        if stats:
            out = KernelTable(services=dict(self._table))
        else:  # as the kernel: each service compared with the caller's as it is read
            found = (read_back(k, vs.config, vs.real_servers, known) for k, vs in self._resynced())
            out = KernelTable(services={vs.key: vs for vs in found})
        if stats:
            for key, vs in self._table.items():
                out.service_stats[key] = self._stats.get(key, Stats())
                for dkey in vs.real_servers:
                    active, inactive = self._conns.get((key, dkey), (0, 0))
                    out.dest_state[(key, dkey)] = DestState(active, inactive)
        return out

    def _resynced(self) -> list[tuple[ServiceKey, VirtualService]]:
        """Every service as a resync's read finds it: the real servers of one the text
        shows unchanged as the last read had them, unless its share is due."""
        rotation = self._rotation
        marks = None
        if rotation.wants_text():
            marks = [(prefix_of(k), hash(service_text(vs))) for k, vs in self._table.items()]
        share = rotation.plan(marks)
        settled, now = self._settled, {}
        out = []
        texted = 0
        for key, vs in self._table.items():
            kept = settled.get(key)
            seen = vs
            if kept is not None and not share.full(hash(key), key):
                texted += 1
                if kept is not vs.real_servers:
                    seen = VirtualService(key, vs.config, kept)
            out.append((key, seen))
            now[key] = seen.real_servers
        self._settled = now
        rotation.done(len(out), texted)
        return out

    def read_counters(self) -> Counters:
        """As the kernel packs them: real servers newest first, as ``read`` lists them; a
        real server's traffic counters are 0 (the fake carries no traffic)."""
        counters = Counters()
        with self._lock:
            for key, vs in self._table.items():
                for rs in vs.real_servers.values():
                    family = Family.of(rs.address)
                    active, inactive = self._conns.get((key, rs.key), (0, 0))
                    counters.add_dest(
                        socket.inet_pton(family, rs.address),
                        (rs.port, rs.weight, active, inactive, 0, 0, 0, 0, 0, 0, family),
                    )
                s = self._stats.get(key, Stats())
                counters.add_service(
                    key, (s.connections, s.packets_in, s.packets_out, s.bytes_in, s.bytes_out)
                )
        return counters

    def read_service(self, key: ServiceKey) -> VirtualService | None:
        return self._table.get(key)

    def read_dest_states(self, key: ServiceKey) -> dict[DestKey, DestState]:
        vs = self._table.get(key)
        if vs is None:
            return {}
        return {d: DestState(*self._conns.get((key, d), (0, 0))) for d in vs.real_servers}

    def schedulers(self) -> frozenset[str]:
        return self._schedulers

    @property
    def reads(self) -> ReadCounts:
        return self._rotation.counts

    def close(self) -> None:
        pass

    def apply(self, ops: Sequence[Op]) -> ApplyResult:
        with self._lock:
            return self._apply(ops)

    def _apply(self, ops: Sequence[Op]) -> ApplyResult:
        self.calls += 1
        errors = scheduler_refusals(ops, self._schedulers)
        editing: dict[ServiceKey, DestEdit] = {}  # a service's real servers, op by op
        added = 0
        for index, op in enumerate(ops):
            self._settled.pop(op.key, None)  # read in full at the next resync
            added += op.kind is OpKind.ADD_SERVICE
            if index in errors:
                continue
            if editing and op.key not in editing:
                self._finish(editing)  # a plan's ops come service by service
            code = self._apply_one(op, editing)
            if code:
                errors[index] = OpError(op, _errno.errorcode[code], error_message(code))
            elif self._record:
                self.applied.append(op)
        self._finish(editing)
        self._rotation.added(added)
        ordered = tuple(errors[i] for i in sorted(errors))
        return ApplyResult(len(ops), ordered, 0, frozenset(errors))

    def _finish(self, editing: dict[ServiceKey, DestEdit]) -> None:
        """The edited services, written back. Done before the next service's ops: a whole
        plan's edits held to the end would leave their memory scattered between the
        services written meanwhile (10,000 services: 8 MB of allocator pools kept)."""
        for key, edit in editing.items():
            vs = self._table[key]
            self._table[key] = VirtualService(key, vs.config, edit.done())
        editing.clear()

    # -- the kernel's rules --------------------------------------------------------------
    def _apply_one(self, op: Op, editing: dict[ServiceKey, DestEdit]) -> int:
        current = self._table.get(op.key)
        if op.kind is OpKind.ADD_SERVICE:
            assert op.config is not None
            if current is not None:
                return _errno.EEXIST
            if op.key.family is Family.INET6 and not 1 <= op.config.netmask <= 128:
                return _errno.EINVAL
            self._table[op.key] = VirtualService(op.key, _as_read_back(op.config), {})
            editing.pop(op.key, None)
            return 0
        if current is None:
            return _errno.ESRCH
        if op.kind is OpKind.SET_SERVICE:
            assert op.config is not None
            if op.key.family is Family.INET6 and not 1 <= op.config.netmask <= 128:
                return _errno.EINVAL
            config = _as_read_back(op.config)
            self._table[op.key] = VirtualService(op.key, config, current.real_servers)
            return 0
        if op.kind is OpKind.DEL_SERVICE:
            del self._table[op.key]
            edit = editing.pop(op.key, None)
            for dkey in current.real_servers if edit is None else edit.done():
                self._conns.pop((op.key, dkey), None)
            return 0
        edit = editing.get(op.key)
        if edit is None:
            edit = editing[op.key] = DestEdit(current.real_servers)
        return self._apply_dest(op, edit)

    def _apply_dest(self, op: Op, edit: DestEdit) -> int:
        assert op.dest is not None
        dest = op.dest
        have = edit.get(dest.key)
        if op.kind is OpKind.DEL_DEST:
            if have is None:
                return _errno.ENOENT
            edit.remove(dest.key)
            self._conns.pop((op.key, dest.key), None)
            return 0
        code = _dest_rules(op.key, dest)
        if code:
            return code
        if op.kind is OpKind.ADD_DEST and have is not None:
            return _errno.EEXIST
        if op.kind is OpKind.SET_DEST and have is None:
            return _errno.ENOENT
        if op.kind is OpKind.ADD_DEST:  # at the head of the list, as the kernel does
            edit.add(dest)
        else:
            edit.set(dest)
        return 0


def _as_read_back(config: ServiceConfig) -> ServiceConfig:
    """What the kernel reads back: flag bits, named by the scheduler (flag-1 with sh is
    sh-fallback), never the names that were sent."""
    flags = canonical_flags(config.scheduler, config.flags)
    if flags == config.flags:
        return config
    return ServiceConfig(config.scheduler, flags, config.persistence, config.netmask)


def _dest_rules(key: ServiceKey, dest: RealServer) -> int:
    if Family.of(dest.address) is not key.family and dest.forwarding is not Forwarding.TUN:
        return _errno.EINVAL  # mixed families only for tunnelling
    if dest.weight < 0 or dest.lower_threshold > dest.upper_threshold:
        return _errno.ERANGE
    return 0
