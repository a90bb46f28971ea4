"""What a cluster's list process sends the director (``director.adapters.kube.intake``):
frames of pickled messages, the parsed objects in them packed so that they come back out as
the in-process parse makes them (interned names, shared port tuples), and a relist sent as
what changed since the director last saw each object.

The two ends are one program (the child is forked from the director) over a socketpair: the
pickles are never read from anywhere else.

A list is taken by a child process made for it. The director hands it what it holds of the
resource: each object's identity (``namespace/name``) and the ``resourceVersion`` it holds it
at (``Held.known``). The child (``Listing``) decodes every page of the list, but parses and
sends only the objects whose version differs (a changed object always has a new one), and
at the end the identities the list no longer holds. The director (``Held``) hands the first
list on whole (RELIST), and each later one (after 410 Gone: an etcd compaction, a restarted
API server) as the watch events that make its copy the list: ADDED or MODIFIED for what was
sent, DELETED, with the very object it holds, for what is gone. A relist of 10,000
unchanged Services costs the director nothing: another cluster's events do not wait behind
it.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import socket
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from types import MappingProxyType
from typing import Any

from director.core.cluster import NO_LABELS, NodeInfo, ServiceInfo, SliceInfo
from director.core.untrusted import shared, short

Info = ServiceInfo | SliceInfo | NodeInfo
PART = 256  # objects of a relist in one frame: a frame's decoding holds the loop briefly
MAX_FRAME = 1 << 30
_HEADER = 4


class Broken(Exception):
    """The other end broke the protocol (a key it never sent): start it afresh."""


# -- the objects ------------------------------------------------------------------------
def _fields(info: Any) -> tuple[Any, ...]:
    return tuple(getattr(info, name) for name in type(info).__match_args__)


def _proxy(items: dict[str, str]) -> Mapping[str, str]:
    return MappingProxyType(items) if items else NO_LABELS


def service(values: tuple[Any, ...]) -> ServiceInfo:
    """A Service as the in-process parse makes it: its short names one copy each, its
    ports shared (its ``ref`` is interned by its own constructor)."""
    fields = dict(zip(ServiceInfo.__match_args__, values, strict=True))
    for name in ("namespace", "type", "external_traffic_policy", "created", "cluster"):
        fields[name] = short(fields[name])
    klass = fields["load_balancer_class"]
    fields["load_balancer_class"] = None if klass is None else short(klass)
    fields["ports"] = shared(fields["ports"])
    fields["ip_families"] = shared(fields["ip_families"])
    return ServiceInfo(**fields)


def endpoint_slice(values: tuple[Any, ...]) -> SliceInfo:
    fields = dict(zip(SliceInfo.__match_args__, values, strict=True))
    for name in ("namespace", "address_type", "cluster"):
        fields[name] = short(fields[name])
    fields["service"] = sys.intern(fields["service"])  # as the Service's ref: one string
    fields["ports"] = shared(fields["ports"])
    fields["nodes"] = tuple(None if n is None else short(n) for n in fields["nodes"])
    return SliceInfo(**fields)


def node(values: tuple[Any, ...]) -> NodeInfo:
    fields = dict(zip(NodeInfo.__match_args__, values, strict=True))
    fields["cluster"] = short(fields["cluster"])
    return NodeInfo(**fields)


_TABLE: dict[type, Any] = {
    **copyreg.dispatch_table,
    MappingProxyType: lambda m: (_proxy, (dict(m),)),
    ServiceInfo: lambda i: (service, (_fields(i),)),
    SliceInfo: lambda i: (endpoint_slice, (_fields(i),)),
    NodeInfo: lambda i: (node, (_fields(i),)),
}


def dumps(value: Any) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _TABLE
    pickler.dump(value)
    return buffer.getvalue()


_ALLOWED = {
    ("director.core.cluster", "ServicePort"),
    *((__name__, name) for name in ("service", "endpoint_slice", "node", "_proxy")),
}


class _Unpickler(pickle.Unpickler):
    """Only the values this module packs: a frame that names anything else (it never comes
    from this program) is refused, not run."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise Broken(f"a frame names {module}.{name}")
        return super().find_class(module, name)


def loads(data: bytes) -> Any:
    return _Unpickler(io.BytesIO(data)).load()


# -- frames -----------------------------------------------------------------------------
def read_frame(sock: socket.socket) -> bytes | None:
    """The next frame; None when the other end has closed."""
    head = _exactly(sock, _HEADER)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_FRAME:
        raise Broken(f"a frame of {size} bytes")
    body = _exactly(sock, size)
    if body is None:
        raise Broken("the other end closed within a frame")
    return body


def send_frame(sock: socket.socket, value: Any) -> None:
    """``value`` pickled, as one frame (``read_frame`` reads it)."""
    data = dumps(value)
    sock.sendall(len(data).to_bytes(_HEADER, "big") + data)


def _exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


Listed = tuple[str, str, bytes]  # (identity, resourceVersion, the packed object)
Taken = tuple[str, str, Any]  # (identity, resourceVersion, the object decoded)


def identity(obj: Any) -> tuple[str, str]:
    """An object's identity within its resource (``namespace/name``; ``/name`` for a Node)
    and the ``resourceVersion`` it came at ("" if it has none), from its JSON."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return "", ""
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    version = meta.get("resourceVersion") or ""
    return f"{namespace}/{name}", version if isinstance(version, str) else str(version)


class Listing:
    """The list process's end of one list: ``take`` each object's JSON as the list decodes
    it, ``done`` at its end. ``known``: the identities the director holds and their
    versions (empty for a first list: everything is sent)."""

    def __init__(self, known: Mapping[str, int | str], send: Callable[[Any], None]) -> None:
        self._known, self._send = known, send
        self._seen: set[str] = set()
        self._part: list[Listed] = []
        self.unchanged = 0  # objects the director holds as listed: not parsed, not sent

    def take(self, obj: Any, parse: Callable[[Any], Any]) -> None:
        """One object of the list; ``parse``: its value or None (refused, and said so)."""
        ident, version = identity(obj)
        self._seen.add(ident)
        if version and self._known.get(ident) == compact(version):
            self.unchanged += 1  # the director holds it as it is: not even parsed
            return
        info = parse(obj)
        if info is None:
            return
        self._part.append((ident, version, dumps(info)))
        if len(self._part) == PART:
            self._send(("PART", self._part))
            self._part = []

    def done(self, version: str) -> None:
        """The list's end: what is left of it, the version to watch from, and the identities
        it no longer holds."""
        if self._part:
            self._send(("PART", self._part))
            self._part = []
        gone = [ident for ident in self._known if ident not in self._seen]
        self._send(("DONE", version, gone))


class Held:
    """What the director holds of one resource whose lists are taken by list processes: each
    object's identity, its version and its value (the object the snapshot holds, not a
    copy). ``known_parts`` go to the next list's process; ``listed`` turns what it sent into
    what to hand on; ``watched`` keeps up with the watch in between."""

    def __init__(self) -> None:
        self._objects: dict[str, Info] = {}
        # Each one's version, beside it (same keys; as an int where it is one, as
        # kube-apiserver's are: 28 bytes where its text takes 57).
        self._versions: dict[str, int | str] = {}
        self._first = True
        self.decoded = 0  # objects decoded from their bytes
        self.relists = 0  # lists after the first, each taken as its changes

    def known_parts(self, size: int = PART) -> Iterator[dict[str, int | str]]:
        """The identities held and their versions (``compact``), ``size`` at a time (none
        until a first list was handed on: the next list is sent whole). A part is a slice
        of the mapping itself: nothing is made for each object."""
        if self._first:
            return
        items = iter(self._versions.items())
        while part := dict(islice(items, size)):
            yield part

    def __len__(self) -> int:
        return len(self._objects)

    def decode(self, part: Iterable[Listed]) -> list[Taken]:
        """A part of a list as sent, its objects decoded (as each frame arrives: a list's
        bytes are never all held at once)."""
        return [(ident, version, self._loads(data)) for ident, version, data in part]

    def listed(self, taken: list[Taken], gone: Iterable[str]) -> list[tuple[str, Any]]:
        """A list's objects as sent and decoded (``taken``: what changed, all of it for a
        first list) and the identities it no longer holds, as what to hand on: ``(kind,
        payload)`` each."""
        missing = [ident for ident in gone if ident not in self._objects]
        if missing:  # checked before anything changes: a broken list changes nothing
            raise Broken(f"{missing[0]} was never listed")
        if self._first:
            self._first = False
            for ident, version, info in taken:
                self._keep(ident, version, info)
            return [("RELIST", [info for _, _, info in taken])]
        self.relists += 1
        out: list[tuple[str, Any]] = []
        for ident, version, info in taken:
            out.append(("MODIFIED" if ident in self._objects else "ADDED", info))
            self._keep(ident, version, info)
        for ident in gone:
            del self._versions[ident]
            out.append(("DELETED", self._objects.pop(ident)))
        return out

    def watched(self, kind: str, obj: Any, info: Info) -> None:
        """A watch event the director handed on (``obj``: its JSON, ``info``: its value)."""
        ident, version = identity(obj)
        if kind == "DELETED":
            self._objects.pop(ident, None)
            self._versions.pop(ident, None)
        else:
            self._keep(ident, version, info)

    def _keep(self, ident: str, version: str, info: Info) -> None:
        self._objects[ident] = info
        self._versions[ident] = compact(version)

    def _loads(self, data: bytes) -> Info:
        self.decoded += 1
        value = loads(data)
        if not isinstance(value, ServiceInfo | SliceInfo | NodeInfo):
            raise Broken(f"a {type(value).__name__} where an object was expected")
        return value


def compact(version: str) -> int | str:
    """A version as an int where it reads back as the same text (kube-apiserver's do)."""
    if version.isascii() and version.isdigit() and version[0] != "0" and len(version) < 19:
        return int(version)
    return version
