"""A static box's table back in the kernel within a second of ``director run``'s exec.

Once a static box serves, the director keeps its table as the very datagrams that build it
from nothing (``table.cache``, beside the parse's ``config.cache``), under the key of the
file and the code that made it. At the next start, before the rest of the director is even
loaded, those datagrams are sent as they are, if and only if:

- the cache's key is this file's and this code's (the caller computes it);
- every file it also depended on is as it was (the API's intents: a drain, a maintenance);
- the kernel numbers IPVS's generic netlink family as it did (the datagrams carry it);
- the kernel holds no virtual service at all: a replay only ever adds to an empty table (a
  restart after a crash, or anything someone else programmed, is left to the first sync).

The director then starts as ever: it reads the kernel back, finds its table there, and the
first sync sends nothing; whatever the replay did not do (a message the kernel refused, a
health verdict since), the first sync does. Nothing here can remove anything.

Light: ``os``, ``hashlib`` (for a digest), ``socket`` and ``struct`` (through
:mod:`director.dataplane.genl`), so that the kernel has the table before Python has loaded
the engine, the schema and the adapters: under emulation most of a start (see
docs/performance.md).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from director.core.planted import planted
from director.dataplane.genl import GenlSocket, open_socket
from director.dataplane.netlink import (
    CTRL_ATTR_FAMILY_NAME,
    CTRL_CMD_GETFAMILY,
    GENL_ID_CTRL,
    IPVS_GENL_NAME,
    family_id,
    pack_nla,
)

FORMAT = b"director-table-cache-1"
FILE_NAME = "table.cache"
GET_SERVICE = 4  # IPVS_CMD_GET_SERVICE (director.dataplane.codec.CMD_GET_SERVICE)

Batch = tuple[bytes, int, int]  # (datagram, first sequence number, messages)


def path_beside(config_cache: str) -> str:
    """The table's cache beside the parse's."""
    return os.path.join(os.path.dirname(config_cache), FILE_NAME)


def stored_key(path: str) -> str | None:
    """The key the cache at ``path`` was kept under (None: no cache, or not this format)."""
    try:
        with open(path, "rb") as handle:
            head = _header(handle, 2)
        return head[1].decode() if head is not None else None
    except (OSError, UnicodeDecodeError):
        return None


def _header(handle: BinaryIO, lines: int) -> list[bytes] | None:
    """The cache's first ``lines`` lines (format, key, figures, files, index), or None if it
    is not of this format."""
    head = [handle.readline().rstrip(b"\n") for _ in range(lines)]
    return head if head[0] == FORMAT else None


def digest(path: str) -> str:
    """A file's contents as one digest ("absent" for none): what the table also depended on."""
    import hashlib  # here: an early table loads this module (director.cli.early), and no digest

    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except FileNotFoundError:
        return "absent"


def kept_for(path: str, key: str) -> bool:
    """Whether the cache at ``path`` holds the table of ``key`` with every file it depended
    on as it is now (nothing to write again)."""
    try:
        with open(path, "rb") as handle:
            head = _header(handle, 4)
    except OSError:
        return False
    if head is None or head[1] != key.encode():
        return False
    return _changed(head[3].decode(errors="replace").split()) is None


def _changed(files: list[str]) -> str | None:
    """The first of ``files`` (``path=digest`` each, or ``-``) that is not as it was kept."""
    for entry in files if files != ["-"] else []:
        name, _, kept = entry.rpartition("=")
        if digest(name) != kept:
            return name
    return None


def store(
    path: str,
    key: str,
    family: int,
    batches: Iterable[Batch],
    *,
    services: int,
    depends: dict[str, str] | None = None,
) -> tuple[int, int]:
    """Keep ``batches`` (their family's id, and how many services they make) under ``key``,
    and the files it also ``depends`` on, each with its ``digest`` when the table was made
    (the API's intents: a drain, a maintenance): written whole to a new file and renamed into
    place, readable by its owner only. The datagrams are taken one at a time and spooled to
    disk as they come (the header's index, which precedes them, is known only at the end),
    so a table's worth of them never lives in memory. Returns (operations, bytes) kept;
    OSError if it cannot be."""
    files = " ".join(f"{name}={made}" for name, made in (depends or {}).items()) or "-"
    temporary, spool = f"{path}.{os.getpid()}", f"{path}.{os.getpid()}.data"
    index: list[str] = []
    ops = size = 0
    try:
        with open(spool, "w+b") as data_file:
            for data, first, count in batches:
                data_file.write(data)
                index.append(f"{len(data)}:{first}:{count}")
                ops, size = ops + count, size + len(data)
            data_file.seek(0)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(b"%s\n%s\n" % (FORMAT, key.encode()))
                handle.write(f"{family} {services} {ops}\n{files}\n{','.join(index)}\n".encode())
                while chunk := data_file.read(1 << 20):
                    handle.write(chunk)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(spool)
    return ops, size


def replay(path: str, key: str, netns: str | None = None) -> dict[str, object]:
    """Send the table kept at ``path`` if it was kept under ``key`` and the kernel's table is
    empty. What happened: ``{"replayed": True, services, ops, refused, seconds}``, or
    ``{"replayed": False, "reason": ...}``; never raises for the kernel's or the file's sake."""
    started = time.monotonic()
    try:
        with open(path, "rb") as handle:
            untrusted = planted(path, os.fstat(handle.fileno()))
            if untrusted is not None:  # a planted table would program the kernel
                return _skipped(f"not trusted: {untrusted}")
            head = _header(handle, 5)
            data = handle.read()
        if head is None:
            return _skipped("the cache is not of this format")
        if head[1] != key.encode():
            return _skipped("the file or the code changed since it was kept")
        family, services, ops = (int(part) for part in head[2].split())
        files = head[3].decode().split()
        index = [
            tuple(int(part) for part in entry.split(b":")) for entry in head[4].split(b",") if entry
        ]
    except FileNotFoundError:
        return _skipped("none kept yet")
    except (OSError, ValueError) as exc:
        return _skipped(f"unreadable: {exc}")
    if any(len(entry) != 3 for entry in index):
        return _skipped("unreadable: its index is not this format's")
    if sum(size for size, _, _ in index) != len(data):
        return _skipped("cut short")
    changed = _changed(files)
    if changed is not None:
        return _skipped(f"{changed} changed since it was kept")
    try:
        refused = _send(data, index, family, netns)
    except OSError as exc:
        return _skipped(f"the kernel: {exc.strerror or exc}")
    except Declined as exc:
        return _skipped(str(exc))
    seconds = round(time.monotonic() - started, 3)
    return {
        "replayed": True,
        "services": services,
        "ops": ops,
        "refused": refused,
        "seconds": seconds,
    }


class Declined(Exception):
    """The kernel is not as a replay (or a first start's early table) needs it: why."""


def _skipped(reason: str) -> dict[str, object]:
    return {"replayed": False, "reason": reason}


def _send(data: bytes, index: list[tuple[int, ...]], family: int, netns: str | None) -> int:
    """The datagrams sent, in order, on a socket of ``netns``; how many messages the kernel
    refused. Declined if the kernel is not as the cache needs it."""
    with empty_table(netns) as genl:
        if genl.family != family:
            raise Declined("the kernel numbers IPVS's netlink family differently now")
        refused = 0
        offset = 0
        for size, first, count in index:
            chunk = data[offset : offset + size]
            offset += size
            refused += sum(1 for _ in genl.batch_errors(chunk, first, count))
        return refused


@contextlib.contextmanager
def empty_table(netns: str | None) -> Iterator[GenlSocket]:
    """IPVS's generic netlink socket in ``netns`` (the family as the kernel numbers it now),
    if the kernel holds no virtual service at all; Declined otherwise, OSError from the
    kernel. Closed after."""
    if netns is None:
        sock = open_socket()
    else:
        from director.dataplane.netns import in_netns

        sock = in_netns(netns, open_socket)
    try:
        control = GenlSocket(sock, GENL_ID_CTRL)
        name = pack_nla(CTRL_ATTR_FAMILY_NAME, IPVS_GENL_NAME.encode() + b"\0")
        answers = control.request(CTRL_CMD_GETFAMILY, name)  # loads ip_vs if need be
        if not answers:
            raise Declined("the kernel did not say which family IPVS is")
        answer, start, end = answers[0]
        genl = GenlSocket(sock, family_id(answer, start - 4, end))
        if next(genl.messages(GET_SERVICE, b""), None) is not None:
            raise Declined("the kernel holds virtual services already")
        yield genl
    finally:
        sock.close()
