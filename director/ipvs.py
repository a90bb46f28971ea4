"""Kernel IPVS over generic netlink: the only module that touches the kernel's IPVS.

pyroute2 resolves the IPVS generic netlink family and supplies the protocol constants.
The hot paths (encoding thousands of requests, decoding dumps of 100,000 real servers) pack
and unpack the wire format directly with ``struct``: pyroute2's per-message NLA objects cost
20-35x the kernel's own work (see ``../shared/LAB-FACTS.md``). Requests are concatenated
into ~64 KB batches, one ``send()`` each; only the last request of a batch asks for an ack,
and the kernel answers any failing request with an error carrying its sequence number, so
every failure is attributed to its operation.

Scheduler, flags and weights change in place with IPVS_CMD_SET_SERVICE / SET_DEST (pyroute2's
"update" helpers send a DELETE; nothing here uses them).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import logging
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from director.dataplane import (
    ApplyResult,
    IpvsUnavailable,
    OpError,
    errno_name,
    error_message,
    scheduler_refusals,
)
from director.logs import event
from director.model import (
    SVC_F_HASHED,
    SVC_F_PERSISTENT,
    DestKey,
    DestState,
    Family,
    Forwarding,
    KernelTable,
    Op,
    OpKind,
    Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
    Stats,
    VirtualService,
    decode_flags,
)

log = logging.getLogger("director.ipvs")

# --- netlink ---------------------------------------------------------------------------
NETLINK_GENERIC = 16
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
NLA_TYPE_MASK = 0x3FFF

_HDR = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_GENL = struct.Struct("=BBH")  # genlmsghdr: cmd, version, reserved
_NLA = struct.Struct("=HH")
_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")
_I32 = struct.Struct("=i")
_U64 = struct.Struct("=Q")
_BE16 = struct.Struct(">H")
_FLAGS = struct.Struct("=II")

# --- IPVS generic netlink (include/uapi/linux/ip_vs.h) ---------------------------------
GENL_VERSION = 1
CMD_NEW_SERVICE, CMD_SET_SERVICE, CMD_DEL_SERVICE, CMD_GET_SERVICE = 1, 2, 3, 4
CMD_NEW_DEST, CMD_SET_DEST, CMD_DEL_DEST, CMD_GET_DEST = 5, 6, 7, 8
CMD_GET_INFO = 15
CMD_ATTR_SERVICE, CMD_ATTR_DEST = 1, 2
SVC_AF, SVC_PROTOCOL, SVC_ADDR, SVC_PORT, SVC_FWMARK = 1, 2, 3, 4, 5
SVC_SCHED_NAME, SVC_FLAGS, SVC_TIMEOUT, SVC_NETMASK, SVC_STATS = 6, 7, 8, 9, 10
SVC_PE_NAME, SVC_STATS64 = 11, 12
DEST_ADDR, DEST_PORT, DEST_FWD_METHOD, DEST_WEIGHT, DEST_U_THRESH = 1, 2, 3, 4, 5
DEST_L_THRESH, DEST_ACTIVE_CONNS, DEST_INACT_CONNS, DEST_PERSIST_CONNS = 6, 7, 8, 9
DEST_STATS, DEST_ADDR_FAMILY, DEST_STATS64 = 10, 11, 12
INFO_VERSION, INFO_CONN_TAB_SIZE = 1, 2

_OP_CMD = {
    OpKind.ADD_SERVICE: CMD_NEW_SERVICE,
    OpKind.SET_SERVICE: CMD_SET_SERVICE,
    OpKind.DEL_SERVICE: CMD_DEL_SERVICE,
    OpKind.ADD_DEST: CMD_NEW_DEST,
    OpKind.SET_DEST: CMD_SET_DEST,
    OpKind.DEL_DEST: CMD_DEL_DEST,
}

BATCH_BYTES = 64 * 1024
RCVBUF = 8 * 1024 * 1024
NOT_SCHEDULERS = frozenset({"ftp", "pe_sip"})  # ip_vs_* modules that are not schedulers

UNAVAILABLE = (
    "this kernel has no IPVS support (the ip_vs module is not loaded and could not be "
    "loaded), so director cannot read or program virtual services on this host"
)


Wire = bytes | bytearray  # a datagram, or the receive buffer it is still in


# --- encoding ---------------------------------------------------------------------------
def _nla(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return _NLA.pack(size, kind) + payload + b"\0" * (-size & 3)


def _addr16(address: str) -> tuple[int, bytes]:
    if ":" in address:
        return socket.AF_INET6, socket.inet_pton(socket.AF_INET6, address)
    return socket.AF_INET, socket.inet_pton(socket.AF_INET, address) + bytes(12)


def _netmask(family: Family, prefix: int) -> bytes:
    if family is Family.INET6:
        return _U32.pack(prefix)
    return ((0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF).to_bytes(4, "big")


def encode_service_key(key: ServiceKey) -> bytes:
    """The attributes that identify a service (nested in IPVS_CMD_ATTR_SERVICE)."""
    out = _nla(SVC_AF, _U16.pack(key.family))
    if key.fwmark:
        return out + _nla(SVC_FWMARK, _U32.pack(key.fwmark))
    assert key.protocol is not None
    _, packed = _addr16(key.address)
    return (
        out
        + _nla(SVC_PROTOCOL, _U16.pack(key.protocol))
        + _nla(SVC_ADDR, packed)
        + _nla(SVC_PORT, _BE16.pack(key.port))
    )


def encode_service_config(key: ServiceKey, config: ServiceConfig) -> bytes:
    return (
        _nla(SVC_SCHED_NAME, config.scheduler.encode() + b"\0")
        + _nla(SVC_FLAGS, _FLAGS.pack(config.flag_bits(), 0xFFFFFFFF))
        + _nla(SVC_TIMEOUT, _U32.pack(config.persistence))
        + _nla(SVC_NETMASK, _netmask(key.family, config.netmask))
    )


# A real server's attributes, nested in IPVS_CMD_ATTR_DEST: address (16), port (network
# order, padded), address family, and for add/set the four u32 settings.
_DEST_KEY_FMT = "HHHH16sHHH2xHHH2x"
_DEST_FULL_FMT = _DEST_KEY_FMT + "HHIHHIHHIHHI"
_DEST_KEY_LEN = struct.calcsize("=" + _DEST_KEY_FMT)
_DEST_FULL_LEN = struct.calcsize("=" + _DEST_FULL_FMT)
_HEAD = struct.Struct("=IHHIIBBH")  # nlmsghdr + genlmsghdr


@functools.lru_cache(maxsize=64)
def _dest_message(nested_len: int, full: bool) -> struct.Struct:
    """A whole real-server request (headers, service key, dest attributes) as one struct."""
    return struct.Struct(f"=IHHIIBBH{nested_len}s{_DEST_FULL_FMT if full else _DEST_KEY_FMT}")


def pack_dest_message(
    layout: struct.Struct, family: int, seq: int, cmd: int, nested: bytes, *, rs: RealServer
) -> bytes:
    """One real-server request, packed in one call (the hot path of a full sync).

    The port goes in as ``socket.htons(port)`` in a native u16, which is network order."""
    address = rs.address
    af = socket.AF_INET6 if ":" in address else socket.AF_INET
    if cmd == CMD_DEL_DEST:
        return layout.pack(
            layout.size, family, NLM_F_REQUEST, seq, 0, cmd, GENL_VERSION, 0, nested,
            _DEST_KEY_LEN, CMD_ATTR_DEST,
            20, DEST_ADDR, socket.inet_pton(af, address), 6, DEST_PORT, socket.htons(rs.port),
            6, DEST_ADDR_FAMILY, af,
        )  # fmt: skip
    return layout.pack(
        layout.size, family, NLM_F_REQUEST, seq, 0, cmd, GENL_VERSION, 0, nested,
        _DEST_FULL_LEN, CMD_ATTR_DEST,
        20, DEST_ADDR, socket.inet_pton(af, address), 6, DEST_PORT, socket.htons(rs.port),
        6, DEST_ADDR_FAMILY, af, 8, DEST_FWD_METHOD, rs.forwarding,
        8, DEST_WEIGHT, rs.weight, 8, DEST_U_THRESH, rs.upper_threshold,
        8, DEST_L_THRESH, rs.lower_threshold,
    )  # fmt: skip


def encode_dest(rs: RealServer, full: bool) -> bytes:
    """IPVS_CMD_ATTR_DEST with its nested attributes."""
    cmd = CMD_NEW_DEST if full else CMD_DEL_DEST
    return pack_dest_message(_dest_message(0, full), 0, 0, cmd, b"", rs=rs)[_HEAD.size :]


def encode_op(op: Op) -> tuple[int, bytes]:
    """(command, genl payload) for one operation."""
    key_attrs = encode_service_key(op.key)
    if op.dest is None:
        if op.config is not None and op.kind is not OpKind.DEL_SERVICE:
            key_attrs += encode_service_config(op.key, op.config)
        return _OP_CMD[op.kind], _nla(CMD_ATTR_SERVICE, key_attrs)
    full = op.kind is not OpKind.DEL_DEST
    return _OP_CMD[op.kind], _nla(CMD_ATTR_SERVICE, key_attrs) + encode_dest(op.dest, full)


# --- decoding ---------------------------------------------------------------------------
def _attrs(data: Wire, start: int, end: int) -> dict[int, tuple[int, int]]:
    """type -> (payload offset, payload length) for the attributes in data[start:end]."""
    out: dict[int, tuple[int, int]] = {}
    unpack = _NLA.unpack_from
    while start + 4 <= end:
        size, kind = unpack(data, start)
        if size < 4:
            break
        out[kind & NLA_TYPE_MASK] = (start + 4, size - 4)
        start += (size + 3) & ~3
    return out


def _u32(data: bytes, attrs: dict[int, tuple[int, int]], kind: int) -> int:
    where = attrs.get(kind)
    return _U32.unpack_from(data, where[0])[0] if where else 0


def _stats64(data: bytes, where: tuple[int, int] | None) -> Stats:
    if where is None:
        return Stats()
    attrs = _attrs(data, where[0], where[0] + where[1])
    values = [
        _U64.unpack_from(data, attrs[i][0])[0] if i in attrs and attrs[i][1] >= 8 else 0
        for i in range(1, 11)
    ]
    return Stats(*values)


def _address(data: bytes, offset: int, family: int) -> str:
    if family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, data[offset : offset + 16])
    return socket.inet_ntop(socket.AF_INET, data[offset : offset + 4])


def _counters_length(data: Wire, start: int, end: int) -> int:
    """Bytes taken by the trailing STATS and STATS64 attributes of a service (0: not last)."""
    attrs = _attrs(data, start, end)
    if SVC_STATS not in attrs or SVC_STATS64 not in attrs:
        return 0
    stats_header = attrs[SVC_STATS][0] - 4
    stats64_end = attrs[SVC_STATS64][0] + attrs[SVC_STATS64][1]
    if (stats64_end + 3) & ~3 != end or attrs[SVC_STATS64][0] < attrs[SVC_STATS][0]:
        return 0
    return end - stats_header


def decode_service(
    data: bytes, start: int, end: int
) -> tuple[ServiceKey, ServiceConfig, tuple[int, int] | None]:
    """A nested IPVS_CMD_ATTR_SERVICE -> key, config and the STATS64 location."""
    a = _attrs(data, start, end)
    family = Family(_U16.unpack_from(data, a[SVC_AF][0])[0])
    fwmark = _u32(data, a, SVC_FWMARK)
    if fwmark:
        key = ServiceKey.mark(family, fwmark)
    else:
        proto = Protocol(_U16.unpack_from(data, a[SVC_PROTOCOL][0])[0])
        address = _address(data, a[SVC_ADDR][0], family)
        key = ServiceKey(family, proto, address, _BE16.unpack_from(data, a[SVC_PORT][0])[0])
    off, size = a[SVC_SCHED_NAME]
    scheduler = data[off : off + size].split(b"\0", 1)[0].decode()
    bits = _FLAGS.unpack_from(data, a[SVC_FLAGS][0])[0] & ~SVC_F_HASHED
    persistence = _u32(data, a, SVC_TIMEOUT) if bits & SVC_F_PERSISTENT else 0
    off = a[SVC_NETMASK][0]
    if family is Family.INET6:
        netmask = _U32.unpack_from(data, off)[0]
    else:
        netmask = int.from_bytes(data[off : off + 4], "big").bit_count()
    config = ServiceConfig(scheduler, decode_flags(scheduler, bits), persistence, netmask)
    return key, config, a.get(SVC_STATS64)


_FORWARDING = (*Forwarding, Forwarding.BYPASS, Forwarding.BYPASS, Forwarding.BYPASS)


def decode_dest(
    data: bytes, start: int, end: int, family: int, with_stats: bool
) -> tuple[RealServer, DestState | None]:
    a = _attrs(data, start, end)
    where = a.get(DEST_ADDR_FAMILY)
    if where is not None:
        family = _U16.unpack_from(data, where[0])[0]
    rs = RealServer(
        _address(data, a[DEST_ADDR][0], family),
        _BE16.unpack_from(data, a[DEST_PORT][0])[0],
        _I32.unpack_from(data, a[DEST_WEIGHT][0])[0],
        _FORWARDING[_u32(data, a, DEST_FWD_METHOD) & 0x7],
        _u32(data, a, DEST_U_THRESH),
        _u32(data, a, DEST_L_THRESH),
    )
    if not with_stats:
        return rs, None
    state = DestState(
        _u32(data, a, DEST_ACTIVE_CONNS),
        _u32(data, a, DEST_INACT_CONNS),
        _u32(data, a, DEST_PERSIST_CONNS),
        _stats64(data, a.get(DEST_STATS64)),
    )
    return rs, state


_DEST_CONFIG_ATTRS = (
    DEST_ADDR,
    DEST_PORT,
    DEST_FWD_METHOD,
    DEST_WEIGHT,
    DEST_U_THRESH,
    DEST_L_THRESH,
)


def dest_shape(data: Wire, offset: int, end: int) -> tuple[int, int, int, int] | None:
    """Where a GET_DEST reply message keeps a real server's configuration.

    (message length, end of the configuration attributes, start and end of the address
    family attribute), relative to the message. The kernel writes the configuration first,
    then the connection counters, the family and the statistics, in the same order and sizes
    for every real server; None when this message does not look like that."""
    start = offset + 20  # nlmsghdr + genlmsghdr
    alen, akind = _NLA.unpack_from(data, start)
    if akind & NLA_TYPE_MASK != CMD_ATTR_DEST or start + alen > end:
        return None
    attrs = _attrs(data, start + 4, start + alen)
    counters = attrs.get(DEST_ACTIVE_CONNS)
    if counters is None or any(
        kind not in attrs or attrs[kind][0] > counters[0] for kind in _DEST_CONFIG_ATTRS
    ):
        return None
    family = attrs.get(DEST_ADDR_FAMILY)
    fam_start = family[0] - 4 - offset if family else 0
    fam_end = family[0] + 4 - offset if family else 0
    return end - offset, counters[0] - 4 - offset, fam_start, fam_end


def _messages(data: bytes) -> list[tuple[int, int, int, int, int]]:
    """(type, flags, seq, payload start, end) for every netlink message in a datagram."""
    out = []
    offset = 0
    while offset + 16 <= len(data):
        size, kind, flags, seq, _pid = _HDR.unpack_from(data, offset)
        if size < 16:
            break
        out.append((kind, flags, seq, offset + 16, offset + size))
        offset += (size + 3) & ~3
    return out


def _error_text(data: Wire, flags: int, start: int, end: int) -> str:
    code = -_I32.unpack_from(data, start)[0]
    text = error_message(code)
    if flags & NLM_F_ACK_TLVS:
        inner_len = _HDR.unpack_from(data, start + 4)[0]
        # With NETLINK_CAP_ACK the original request is echoed as its header only.
        tlv_start = start + 4 + (16 if flags & 0x100 else inner_len)
        attrs = _attrs(data, tlv_start, end)
        if NLMSGERR_ATTR_MSG in attrs:
            off, size = attrs[NLMSGERR_ATTR_MSG]
            text += ": " + data[off : off + size].split(b"\0", 1)[0].decode(errors="replace")
    return text


# --- network namespaces -----------------------------------------------------------------
T = TypeVar("T")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def enter_netns(netns: str) -> None:
    """Move the calling thread into network namespace ``netns`` (by ``ip netns`` name)."""
    with open(f"/run/netns/{netns}") as handle:
        if _libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"setns({netns}): {os.strerror(code)}")


def in_netns(netns: str | None, fn: Callable[[], T]) -> T:
    """Run ``fn`` in network namespace ``netns`` (by ``ip netns`` name) on a helper thread.

    Sockets created there stay in that namespace after the thread ends.
    """
    if netns is None:
        return fn()
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            enter_netns(netns)
            result.append(fn())
        except BaseException as exc:  # handed back to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


# --- kernel modules ---------------------------------------------------------------------
def _modprobe(module: str) -> str | None:
    """Load a module; None on success, else why not."""
    if Path(f"/sys/module/{module}").exists():
        return None
    try:
        done = subprocess.run(
            ["modprobe", module], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.strip() or f"modprobe {module} exited {done.returncode}"
    return None


def offered_schedulers(modules: Path = Path("/lib/modules")) -> frozenset[str]:
    """Schedulers the running kernel has: loaded, built in, or available as modules.

    Under systemd's ProtectKernelModules= (the role's unit) the module tree cannot be read
    and nothing can be loaded: the schedulers loaded at boot are then the ones on offer."""
    names = {p.name[len("ip_vs_") :] for p in Path("/sys/module").glob("ip_vs_*")}
    release = os.uname().release
    moddir = modules / release / "kernel/net/netfilter/ipvs"
    with contextlib.suppress(OSError):  # EACCES in the hardened unit
        names.update(p.name.split(".", 1)[0][len("ip_vs_") :] for p in moddir.glob("ip_vs_*.ko*"))
    with contextlib.suppress(OSError):
        for line in (modules / release / "modules.builtin").read_text().splitlines():
            name = line.rsplit("/", 1)[-1]
            if name.startswith("ip_vs_"):
                names.add(name.split(".", 1)[0][len("ip_vs_") :])
    return frozenset(names - NOT_SCHEDULERS)


def resolve_family() -> int:
    """The IPVS generic netlink family id, loading ip_vs if needed."""
    from pyroute2.netlink.exceptions import NetlinkError
    from pyroute2.netlink.generic import GenericNetlinkSocket
    from pyroute2.netlink.generic.ipvs import GENL_NAME, ipvsmsg

    for attempt in range(2):
        genl = GenericNetlinkSocket()
        try:
            genl.bind(GENL_NAME, ipvsmsg)
            return int(genl.prid)
        except NetlinkError as exc:
            if exc.code != errno.ENOENT or attempt:
                raise IpvsUnavailable(f"{UNAVAILABLE} ({exc})") from None
        finally:
            genl.close()
        if _modprobe("ip_vs") is not None:
            break
    raise IpvsUnavailable(UNAVAILABLE)


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
        self._seq = 0
        self._sock = in_netns(netns, self._open)
        self._buf = bytearray(RCVBUF)
        self._schedulers: frozenset[str] | None = None
        self._dest_shape: tuple[int, int, int, int] | None = None
        # configuration bytes of a real server -> its (key, value), see _dest_configs
        self._dest_cache: dict[tuple[bytes, bytes, int], tuple[DestKey, RealServer]] = {}
        self._dest_requests: dict[ServiceKey, bytes] = {}
        self._service_cache: dict[bytes, tuple[ServiceKey, ServiceConfig]] = {}
        self._service_tail: int | None = None  # bytes of STATS + STATS64 at a service's end
        try:
            self._request(CMD_GET_INFO, b"")
        except OSError as exc:
            self.close()
            if exc.errno == errno.EPERM:
                raise IpvsUnavailable(
                    "programming IPVS needs root (CAP_NET_ADMIN); run director as root"
                ) from None
            raise IpvsUnavailable(f"{UNAVAILABLE} ({exc})") from None

    @staticmethod
    def _open() -> socket.socket:
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

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KernelIpvs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- low level ---------------------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        return self._seq

    def _message(self, cmd: int, flags: int, seq: int, payload: bytes) -> bytes:
        return (
            _HDR.pack(20 + len(payload), self.family, flags, seq, 0)
            + _GENL.pack(cmd, GENL_VERSION, 0)
            + payload
        )

    def _recv(self) -> bytes:
        size = self._sock.recv_into(self._buf)
        return bytes(self._buf[:size])

    def _request(self, cmd: int, payload: bytes) -> list[tuple[bytes, int, int]]:
        """One acknowledged request; its replies as (datagram, attrs start, attrs end).

        Raises OSError with the kernel's errno."""
        seq = self._next_seq()
        self._sock.send(self._message(cmd, NLM_F_REQUEST | NLM_F_ACK, seq, payload))
        replies: list[tuple[bytes, int, int]] = []
        while True:
            data = self._recv()
            for kind, flags, mseq, start, end in _messages(data):
                if mseq != seq:
                    continue
                if kind == NLMSG_ERROR:
                    code = -_I32.unpack_from(data, start)[0]
                    if code:
                        raise OSError(code, _error_text(data, flags, start, end))
                    return replies
                if kind == NLMSG_DONE:
                    return replies
                replies.append((data, start + 4, end))

    def _dump(self, cmd: int, payload: bytes) -> list[tuple[bytes, int, int]]:
        """(datagram, attrs start, attrs end) for every message of a dump."""
        seq = self._next_seq()
        self._sock.send(self._message(cmd, NLM_F_REQUEST | NLM_F_DUMP, seq, payload))
        out: list[tuple[bytes, int, int]] = []
        while True:
            data = self._recv()
            for kind, flags, mseq, start, end in _messages(data):
                if mseq != seq:
                    continue
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR:
                    code = -_I32.unpack_from(data, start)[0]
                    if code:
                        raise OSError(code, _error_text(data, flags, start, end))
                    return out
                out.append((data, start + 4, end))  # skip the genl header

    # -- reading -----------------------------------------------------------------------
    def _services(
        self, stats: bool
    ) -> list[tuple[ServiceKey, ServiceConfig, tuple[int, int] | None, bytes]]:
        out = []
        cache = self._service_cache
        if len(cache) > 100_000:
            cache.clear()
        for data, start, end in self._dump(CMD_GET_SERVICE, b""):
            size, kind = _NLA.unpack_from(data, start)
            off = start + 4
            if kind & NLA_TYPE_MASK != CMD_ATTR_SERVICE:
                off, size = _attrs(data, start, end)[CMD_ATTR_SERVICE]
            else:
                size -= 4
            nested_end = off + size
            # A service's attributes are its configuration, then its counters (STATS and
            # STATS64, always last): unchanged configuration bytes decode to what they did.
            tail = self._service_tail
            if tail is None:
                tail = self._service_tail = _counters_length(data, off, nested_end)
            stats_at = nested_end - tail if tail else 0
            if tail and _NLA.unpack_from(data, stats_at)[1] & NLA_TYPE_MASK == SVC_STATS:
                config_bytes = data[off:stats_at]
                hit = cache.get(config_bytes)
                if hit is None:
                    key, config, _ = decode_service(data, off, nested_end)
                    hit = cache[config_bytes] = (key, config)
                stats64 = _attrs(data, stats_at, nested_end).get(SVC_STATS64) if stats else None
                out.append((hit[0], hit[1], stats64, data))
                continue
            key, config, where = decode_service(data, off, nested_end)
            out.append((key, config, where, data))
        return out

    def _dests(
        self, key: ServiceKey, with_stats: bool
    ) -> list[tuple[RealServer, DestState | None]]:
        request = self._dest_request(key)
        out: list[tuple[RealServer, DestState | None]] = []
        family = key.family
        for data, start, end in self._dump(CMD_GET_DEST, request):
            size, kind = _NLA.unpack_from(data, start)
            nested, nested_end = start + 4, start + size
            if kind & NLA_TYPE_MASK != CMD_ATTR_DEST:
                nested, size = _attrs(data, start, end)[CMD_ATTR_DEST]
                nested_end = nested + size
            out.append(decode_dest(data, nested, nested_end, family, with_stats))
        return out

    def _dest_request(self, key: ServiceKey) -> bytes:
        request = self._dest_requests.get(key)
        if request is None:
            if len(self._dest_requests) > 100_000:
                self._dest_requests.clear()
            request = self._dest_requests[key] = _nla(CMD_ATTR_SERVICE, encode_service_key(key))
        return request

    def _dest_configs(self, key: ServiceKey) -> dict[DestKey, RealServer]:
        """One service's real servers (no counters): the hot path of a full resync.

        A real server whose configuration bytes (attribute headers included) are the same as
        in an earlier reply decodes to the same value: after the first resync, a reply costs
        two slices and a dictionary lookup, whatever the layout of the kernel's messages.
        (Measured: reading on two or three sockets from as many threads is slower.)"""
        sock, buf = self._sock, self._buf
        seq = self._next_seq()
        request = self._dest_request(key)
        sock.send(self._message(CMD_GET_DEST, NLM_F_REQUEST | NLM_F_DUMP, seq, request))
        out: dict[DestKey, RealServer] = {}
        family, genl = key.family, self.family
        header = _HDR.unpack_from
        cache = self._dest_cache
        if len(cache) > 1_000_000:
            cache.clear()
        shape = self._dest_shape
        while True:
            size = sock.recv_into(buf)
            data = bytes(memoryview(buf)[:size])
            offset = 0
            while offset + 16 <= size:
                length, kind, flags, mseq, _pid = header(data, offset)
                if length < 16:
                    break
                end = offset + length
                if mseq == seq:
                    if kind == genl:
                        if shape is None:
                            shape = self._dest_shape = dest_shape(data, offset, end)
                        if shape is not None and length == shape[0]:
                            known = (
                                data[offset + 20 : offset + shape[1]],
                                data[offset + shape[2] : offset + shape[3]],
                                family,
                            )
                            hit = cache.get(known)
                            if hit is None:
                                nested, alen = _attrs(data, offset + 20, end)[CMD_ATTR_DEST]
                                rs = decode_dest(data, nested, nested + alen, family, False)[0]
                                hit = cache[known] = ((rs.address, rs.port), rs)
                            out[hit[0]] = hit[1]
                        else:
                            nested, alen = _attrs(data, offset + 20, end)[CMD_ATTR_DEST]
                            rs = decode_dest(data, nested, nested + alen, family, False)[0]
                            out[(rs.address, rs.port)] = rs
                    elif kind == NLMSG_DONE:
                        return out
                    elif kind == NLMSG_ERROR:
                        code = -_I32.unpack_from(data, offset + 16)[0]
                        if code:
                            raise OSError(code, _error_text(data, flags, offset + 16, end))
                        return out
                offset += (length + 3) & ~3

    @_serialised
    def read(self, *, stats: bool = False) -> KernelTable:
        table = KernelTable()
        services = self._services(stats)
        if not stats:
            for key, config, _at, _data in services:
                try:
                    dests = self._dest_configs(key)
                except OSError as exc:
                    if exc.errno in (errno.ESRCH, errno.ENOENT):
                        continue  # deleted by someone else between the two dumps
                    raise
                table.services[key] = VirtualService(key, config, dests)
            return table
        for key, config, stats_at, data in services:
            try:
                with_counters = self._dests(key, True)
            except OSError as exc:
                if exc.errno in (errno.ESRCH, errno.ENOENT):
                    continue  # deleted by someone else between the two dumps
                raise
            dests = {}
            for rs, state in with_counters:
                dests[rs.key] = rs
                if state is not None:
                    table.dest_state[(key, rs.key)] = state
            table.services[key] = VirtualService(key, config, dests)
            table.service_stats[key] = _stats64(data, stats_at)
        return table

    @_serialised
    def read_service(self, key: ServiceKey) -> VirtualService | None:
        request = _nla(CMD_ATTR_SERVICE, encode_service_key(key))
        try:
            found = self._request(CMD_GET_SERVICE, request)
        except OSError as exc:
            if exc.errno in (errno.ESRCH, errno.ENOENT):
                return None
            raise
        for data, start, end in found:
            attrs = _attrs(data, start, end)
            off, size = attrs[CMD_ATTR_SERVICE]
            got, config, _ = decode_service(data, off, off + size)
            if got == key:
                dests = self._dest_configs(key)
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
        wanted = {op.config.scheduler for op in ops if op.config is not None}
        for name in wanted & offered:
            problem = _modprobe(f"ip_vs_{name}")
            if problem is not None:
                event(log, "ipvs.scheduler_unavailable", scheduler=name, reason=problem)
                offered.discard(name)
        return frozenset(offered)

    # -- writing -----------------------------------------------------------------------
    @_serialised
    def apply(self, ops: Sequence[Op]) -> ApplyResult:
        if not ops:
            return ApplyResult()
        errors: dict[int, OpError] = scheduler_refusals(ops, self._usable_schedulers(ops))
        # The hot loop of a full sync (110,000 operations at 10,000 services): one struct
        # pack per real-server message, header and attributes together.
        key_cache: dict[ServiceKey, bytes] = {}  # op.key -> nested IPVS_CMD_ATTR_SERVICE
        parts: list[bytes] = []
        indices: list[int] = []  # positions in ops of the batch's messages, in seq order
        size_now = 0
        sends = 0
        family = self.family
        head_pack = _HEAD.pack
        last_key: ServiceKey | None = None
        nested = b""

        def flush() -> None:
            nonlocal parts, indices, size_now, sends
            if not parts:
                return
            batch = bytearray(b"".join(parts))
            # Only the batch's last request asks for an ack; failures are always answered.
            last = len(batch) - len(parts[-1])
            batch[last + 6 : last + 8] = _U16.pack(NLM_F_REQUEST | NLM_F_ACK)
            first_seq = (self._seq - len(indices) + 1) & 0xFFFFFFFF
            self._send_batch(bytes(batch), first_seq, indices, ops, errors)
            sends += 1
            parts, indices, size_now = [], [], 0

        for index, op in enumerate(ops):
            if index in errors:
                continue
            rs = op.dest
            if rs is not None:
                if op.key is not last_key:  # a service's ops come together
                    last_key = op.key
                    cached = key_cache.get(last_key)
                    if cached is None:
                        cached = key_cache[last_key] = _nla(
                            CMD_ATTR_SERVICE, encode_service_key(last_key)
                        )
                    nested = cached
                layout = _dest_message(len(nested), op.kind is not OpKind.DEL_DEST)
                if size_now + layout.size > BATCH_BYTES:
                    flush()
                seq = self._seq = (self._seq + 1) & 0xFFFFFFFF
                message = pack_dest_message(layout, family, seq, _OP_CMD[op.kind], nested, rs=rs)
            else:
                cmd, payload = encode_op(op)
                if size_now + 20 + len(payload) > BATCH_BYTES:
                    flush()
                seq = self._next_seq()
                message = head_pack(20 + len(payload), family, NLM_F_REQUEST, seq, 0, cmd,
                                    GENL_VERSION, 0) + payload  # fmt: skip
            parts.append(message)
            indices.append(index)
            size_now += len(message)
        flush()
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

    def _send_batch(
        self,
        batch: bytes,
        first_seq: int,
        indices: list[int],
        ops: Sequence[Op],
        errors: dict[int, OpError],
    ) -> None:
        """Send one batch; map each error reply back to its operation by sequence number."""
        self._sock.send(batch)
        last_seq = (first_seq + len(indices) - 1) & 0xFFFFFFFF
        while True:
            data = self._recv()
            for kind, flags, seq, start, end in _messages(data):
                position = (seq - first_seq) & 0xFFFFFFFF
                if kind != NLMSG_ERROR or position >= len(indices):
                    continue
                code = -_I32.unpack_from(data, start)[0]
                if code:
                    index = indices[position]
                    errors[index] = OpError(
                        ops[index], errno_name(code), _error_text(data, flags, start, end)
                    )
                if seq == last_seq:
                    return
