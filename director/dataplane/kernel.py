"""Kernel IPVS over generic netlink: the only module that touches the kernel's IPVS.

Every request, the lookup of the IPVS generic netlink family included, is packed by
``director.dataplane.codec`` (no netlink library is loaded at run time; tests hold the codec
to pyroute2's), and they are concatenated into ~64 KB batches, one ``send()`` each; only
the last request of a batch asks for an ack, and the kernel answers any failing request with
an error carrying its sequence number, so every failure is attributed to its operation.

Scheduler, flags and weights change in place with IPVS_CMD_SET_SERVICE / SET_DEST (pyroute2's
"update" helpers send a DELETE; nothing here uses them).
"""

from __future__ import annotations

import errno
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from director.core.added import service_ops
from director.core.counters import SERVICE_COUNTERS, Counters
from director.core.dests import Dests
from director.core.model import DestKey, RealServer, ServiceConfig, ServiceKey
from director.core.services import DestState, KernelTable, Op, VirtualService, read_back
from director.dataplane.batches import Batch, Numbering, encoded_batches
from director.dataplane.codec import (
    CMD_ATTR_DEST,
    CMD_ATTR_SERVICE,
    CMD_GET_DEST,
    CMD_GET_INFO,
    CMD_GET_SERVICE,
    decode_dest,
    decode_service,
    decode_stats64,
    encode_service_key,
)
from director.dataplane.genl import GenlSocket, open_socket
from director.dataplane.interface import (
    ApplyResult,
    IpvsUnavailable,
    OpError,
    errno_name,
    scheduler_refusals,
)
from director.dataplane.layouts import (
    Layout,
    counter_layout,
    decode_dest_counters,
    decode_dest_row,
    decode_service_row,
    dest_counters,
    dest_layout,
    service_layout,
)
from director.dataplane.modules import UNAVAILABLE, load_module, offered_schedulers, resolve_family
from director.dataplane.netlink import NLA, NLA_TYPE_MASK, pack_nla, parse_attrs
from director.dataplane.netns import in_netns
from director.dataplane.proctext import ReadCounts
from director.dataplane.replies import DestReplies, dest_request_of
from director.dataplane.tabletext import TableText
from director.logs import event

log = logging.getLogger("director.ipvs")

F = TypeVar("F", bound=Callable[..., object])


def _serialised(method: F) -> F:
    """One request/reply exchange at a time on the socket: the controller, the API and
    the drain checks share one KernelIpvs, and interleaved replies would be lost."""

    @functools.wraps(method)
    def locked(self: KernelIpvs, *args: object, **kwargs: object) -> object:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]


class KernelIpvs:
    """IPVS of one network namespace (the current one, or ``netns``). Thread-safe."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._lock = threading.RLock()
        self.family = resolve_family()
        self._genl = GenlSocket(in_netns(netns, open_socket), self.family)
        self._schedulers: frozenset[str] | None = None
        self._dest_layout: Layout | None = None  # see _dest_configs
        self._replies = DestReplies()  # see _dest_configs
        # Each service's real servers as the last whole read found them, with the mark of
        # the reply they were decoded from (see _dest_configs).
        self._settled: dict[ServiceKey, tuple[int, Dests]] = {}
        # Which services a resync reads in full, by the kernel's text of the table
        # (``director.dataplane.proctext``); the text read through a file opened in the
        # namespace (None: this kernel prints none).
        self._text = TableText(netns)
        self._counter_layout: Layout | None = None  # see _dest_counters
        self._service_layouts: dict[int, Layout] = {}  # by length; see _services
        try:
            self._genl.request(CMD_GET_INFO, b"")
        except OSError as exc:
            self.close()
            if exc.errno == errno.EPERM:
                raise IpvsUnavailable(
                    "programming IPVS needs root (CAP_NET_ADMIN); run director as root"
                ) from None
            raise IpvsUnavailable(f"{UNAVAILABLE} ({exc})") from None

    @property
    def reads(self) -> ReadCounts:
        return self._text.rotation.counts

    def close(self) -> None:
        self._genl.close()
        self._text.close()

    def __enter__(self) -> KernelIpvs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------
    def _service_messages(self) -> list[tuple[bytes, int, int]]:
        """The dump of every service, not decoded: (datagram, message start, message end).
        The datagrams hold the services packed (~170 bytes each), so a read decodes each
        one (``_service``) as it reads its real servers and never holds every service
        decoded at once."""
        return list(self._genl.messages(CMD_GET_SERVICE, b""))

    def _service(
        self, data: bytes, offset: int, end: int
    ) -> tuple[ServiceKey, ServiceConfig, tuple[int, ...]]:
        """One service's message: its key, configuration and counters
        (model.SERVICE_COUNTERS), decoded as real servers are: by the layout of the first
        message of its length (a service's length follows its scheduler's name), one struct
        call; a message laid out otherwise is decoded in full. Nothing decoded is kept
        between reads (a cache of decoded services held ~4 MiB at 10,000, made a resync's
        read no faster than this)."""
        layouts = self._service_layouts
        layout = layouts.get(end - offset)
        found = decode_service_row(data, offset, layout) if layout is not None else None
        if found is None:
            nested, size = parse_attrs(data, offset + 20, end)[CMD_ATTR_SERVICE]
            key, config, where = decode_service(data, nested, nested + size)
            stats = decode_stats64(data, where)
            found = key, config, tuple(getattr(stats, n) for n in SERVICE_COUNTERS)
            learnt = service_layout(data, offset, end)
            if learnt is not None and len(layouts) < 64:  # bounded: shapes, not services
                layouts[end - offset] = learnt
        return found

    def _dests(
        self, key: ServiceKey, with_stats: bool
    ) -> list[tuple[RealServer, DestState | None]]:
        request = self._dest_request(key)
        out: list[tuple[RealServer, DestState | None]] = []
        family = key.family
        for data, start, end in self._genl.dump(CMD_GET_DEST, request):
            size, kind = NLA.unpack_from(data, start)
            nested, nested_end = start + 4, start + size
            if kind & NLA_TYPE_MASK != CMD_ATTR_DEST:
                nested, size = parse_attrs(data, start, end)[CMD_ATTR_DEST]
                nested_end = nested + size
            out.append(decode_dest(data, nested, nested_end, family, with_stats))
        return out

    @staticmethod
    def _dest_request(key: ServiceKey) -> bytes:
        return pack_nla(CMD_ATTR_SERVICE, encode_service_key(key))

    def _dest_configs(
        self,
        key: ServiceKey,
        settled: tuple[int, Dests] | None = None,
        request: bytes | None = None,
    ) -> tuple[Dests, int | None]:
        """One service's real servers (no counters), and the mark of the reply they were
        read from (``DestReplies``): the hot path of a full resync.

        ``settled``: (mark, real servers) as an earlier read found them. A reply with the
        same mark holds the same configuration, its counters aside: those real servers are
        the answer, and nothing is decoded. Otherwise the kernel lays every real server's
        message out alike: once the first is learnt, a reply decodes with one struct call
        and no walk of its attributes (a message laid out otherwise is decoded in full),
        straight into the packed rows of a ``Dests``, with no RealServer and no address text
        made. (Measured: reading on two or three sockets from as many threads is slower.)
        ``request``: the dump's request, if made already (``dest_request_of``)."""
        messages, mark = self._replies.read(self._genl, request or self._dest_request(key))
        if settled is not None and mark is not None and settled[0] == mark:
            return settled[1], mark
        rows: list[Any] = []
        family = key.family
        layout = self._dest_layout
        for data, offset, end in messages:
            if layout is None:
                layout = self._dest_layout = dest_layout(data, offset, end)
            row = (
                decode_dest_row(data, offset, layout)
                if layout is not None and end - offset == layout.length
                else None
            )
            if row is None:
                nested, alen = parse_attrs(data, offset + 20, end)[CMD_ATTR_DEST]
                rs = decode_dest(data, nested, nested + alen, family, False)[0]
                row = Dests.row(rs)
            rows += row
        return Dests.from_rows(rows), mark

    def _dest_counters(self, key: ServiceKey, counters: Counters) -> None:
        """One service's real servers with their counters, into ``counters``: laid out as
        ``_dest_configs`` reads them (one struct call each), nothing made a real server."""
        layout = self._counter_layout
        for data, offset, end in self._genl.messages(CMD_GET_DEST, self._dest_request(key)):
            if layout is None:
                layout = self._counter_layout = counter_layout(data, offset, end)
            found = (
                decode_dest_counters(data, offset, layout)
                if layout is not None and end - offset == layout.length
                else None
            )
            if found is None:
                found = dest_counters(data, offset, end, key.family)
            counters.add_dest(*found)

    @_serialised
    def read(
        self, *, stats: bool = False, known: Mapping[ServiceKey, VirtualService] | None = None
    ) -> KernelTable:
        table = KernelTable()
        if not stats:
            try:
                self._read_configs(table, known)
            except BaseException:
                self._text.rotation.forget()  # what was read part way is read in full next
                raise
            return table
        for data, start, end in self._genl.dump(CMD_GET_SERVICE, b""):  # rates too: in full
            nested, size = parse_attrs(data, start, end)[CMD_ATTR_SERVICE]
            key, config, where = decode_service(data, nested, nested + size)
            try:
                with_counters = self._dests(key, True)
            except OSError as exc:
                if exc.errno in (errno.ESRCH, errno.ENOENT):
                    continue  # deleted by someone else between the two dumps
                raise
            servers: dict[DestKey, RealServer] = {}
            for rs, state in with_counters:
                servers[rs.key] = rs
                if state is not None:
                    table.dest_state[(key, rs.key)] = state
            table.services[key] = VirtualService(key, config, servers)
            table.service_stats[key] = decode_stats64(data, where)
        return table

    def _read_configs(
        self, table: KernelTable, known: Mapping[ServiceKey, VirtualService] | None
    ) -> None:
        """The whole table without counters, into ``table``: a resync's read. A service the
        kernel's text shows as the last resync found it keeps the real servers read then,
        unless its share is due (``director.dataplane.proctext``); every other service's
        are read through netlink (``_dest_configs``)."""
        share = self._text.share()  # read before anything it vouches for
        settled: dict[ServiceKey, tuple[int, Dests]] = self._settled
        now: dict[ServiceKey, tuple[int, Dests]] = {}
        texted = 0
        for message in self._service_messages():
            key, config, _counts = self._service(*message)
            kept = settled.get(key)
            if kept is not None and not share.full(kept[0], key):
                vs = table.services[key] = read_back(key, config, kept[1], known)
                now[key] = (kept[0], Dests.of(vs.real_servers))  # the table's own object
                texted += 1
                continue
            salt = hash(key)  # mixed into the mark: services alike fall in different shares
            request = dest_request_of(*message)
            try:
                dests, mark = self._dest_configs(
                    key, None if kept is None else (kept[0] ^ salt, kept[1]), request
                )
            except OSError as exc:
                if exc.errno in (errno.ESRCH, errno.ENOENT):
                    continue  # deleted by someone else between the two dumps
                raise
            vs = read_back(key, config, dests, known)
            table.services[vs.key] = vs
            if mark is not None:  # the table's own object (the same, in the same order)
                now[vs.key] = (mark ^ salt, Dests.of(vs.real_servers))
        self._settled = now  # services gone since are forgotten
        self._text.rotation.done(len(table.services), texted)

    @_serialised
    def read_counters(self) -> Counters:
        counters = Counters()
        for message in self._service_messages():
            key, _config, counts = self._service(*message)
            try:
                self._dest_counters(key, counters)
            except OSError as exc:
                counters.drop_open()
                if exc.errno in (errno.ESRCH, errno.ENOENT):
                    continue  # deleted by someone else between the two dumps
                raise
            counters.add_service(key, counts)
        return counters

    @_serialised
    def read_service(self, key: ServiceKey) -> VirtualService | None:
        request = pack_nla(CMD_ATTR_SERVICE, encode_service_key(key))
        try:
            found = self._genl.request(CMD_GET_SERVICE, request)
        except OSError as exc:
            if exc.errno in (errno.ESRCH, errno.ENOENT):
                return None
            raise
        for data, start, end in found:
            attrs = parse_attrs(data, start, end)
            off, size = attrs[CMD_ATTR_SERVICE]
            got, config, _ = decode_service(data, off, off + size)
            if got == key:
                dests = self._dest_configs(key)[0]
                return VirtualService(key, config, dests)
        return None

    @_serialised
    def read_dest_states(self, key: ServiceKey) -> dict[DestKey, DestState]:
        try:
            found = self._dests(key, True)
        except OSError as exc:
            if exc.errno in (errno.ESRCH, errno.ENOENT):
                return {}
            raise
        return {rs.key: state for rs, state in found if state is not None}

    # -- schedulers --------------------------------------------------------------------
    def schedulers(self) -> frozenset[str]:
        if self._schedulers is None:
            self._schedulers = offered_schedulers()
        return self._schedulers

    def _usable_schedulers(self, ops: Sequence[Op]) -> frozenset[str]:
        """Offered schedulers, after loading the modules of those the ops use."""
        offered = set(self.schedulers())
        wanted = {op.config.scheduler for op in service_ops(ops) if op.config is not None}
        for name in wanted & offered:
            problem = load_module(f"ip_vs_{name}")
            if problem is not None:
                event(log, "ipvs.scheduler_unavailable", scheduler=name, reason=problem)
                offered.discard(name)
        return frozenset(offered)

    # -- writing -----------------------------------------------------------------------
    def _batches(
        self, ops: Sequence[Op], numbering: Numbering
    ) -> tuple[dict[int, OpError], Iterator[Batch]]:
        """What ``apply`` refuses before sending (by position), and the rest as datagrams
        numbered by ``numbering``: one decision for what is sent and what is kept."""
        refused = scheduler_refusals(ops, self._usable_schedulers(ops))
        return refused, encoded_batches(ops, refused, self.family, numbering)

    @_serialised
    def apply(self, ops: Sequence[Op]) -> ApplyResult:
        if not ops:
            return ApplyResult()
        genl = self._genl
        self._text.changing(ops, self._settled)
        errors, batches = self._batches(ops, genl)
        sends = 0
        for batch, indices, first_seq in batches:
            for position, code, text in genl.batch_errors(batch, first_seq, len(indices)):
                index = indices[position]
                errors[index] = OpError(ops[index], errno_name(code), text)
            sends += 1
        ordered = tuple(errors[i] for i in sorted(errors))
        for failure in ordered:
            event(
                log,
                "ipvs.op_failed",
                op=failure.op.describe(),
                errno=failure.errno,
                reason=failure.message,
                origin=failure.op.origin or "-",
            )
        return ApplyResult(len(ops), ordered, sends, frozenset(errors))
