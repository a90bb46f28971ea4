"""What a cluster's intake process sends the director (``director.adapters.kube_intake``):
frames of pickled ``(resource, kind, payload)``, the parsed objects in them packed so that
they come back out as the in-process parse makes them (interned names, shared port tuples),
and a relist sent as what changed since the last one.

The two ends are one program (the child is forked from the director) over a socketpair: the
pickles are never read from anywhere else.

The first list of each resource is sent whole. A later one (after 410 Gone: an etcd
compaction, a restarted API server) is sent as what changed since: the objects whose bytes
differ from what this process sent last (a digest of each is kept), as ADDED or MODIFIED,
and the keys of those the list no longer holds, which the director (``Mirror``: the very
objects its snapshot holds, by key) hands on as DELETED. The director's copy ends as a whole
list would leave it. A relist of 10,000 unchanged Services costs the director nothing:
another cluster's events do not wait behind it.
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import pickle
import socket
import sys
import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from director.core.cluster import NO_LABELS, NodeInfo, ServiceInfo, SliceInfo
from director.core.untrusted import shared, short

Info = ServiceInfo | SliceInfo | NodeInfo
PART = 256  # objects of a relist in one frame: each frame is decoded in well under 1 ms
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


def key_of(info: Info) -> str:
    """The object's key within its resource (as the snapshot keys it)."""
    return info.name if isinstance(info, NodeInfo) else info.ref


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


def _exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Packed(NamedTuple):
    """A parsed object as the intake process keeps it until it is sent: its key and its
    bytes (a few hundred; the object itself is let go as soon as it is packed)."""

    key: str
    data: bytes


def pack(info: Info) -> Packed:
    return Packed(key_of(info), dumps(info))


class Sender:
    """The intake process's end: ``handle`` is the watchers' callback (from their threads),
    each call one or more frames; the objects in its payloads come packed (``pack``)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._sent: dict[str, dict[str, bytes]] = {}  # resource -> key -> digest of its bytes
        self._listed: set[str] = set()  # resources listed once by this process
        self.unchanged = 0  # objects of later relists not sent: unchanged

    def send(self, message: tuple[str, str, Any]) -> None:
        data = dumps(message)
        with self._lock:
            self._sock.sendall(len(data).to_bytes(_HEADER, "big") + data)

    def handle(self, resource: str, kind: str, payload: Any) -> None:
        if kind in ("CONNECTED", "DISCONNECTED"):
            self.send((resource, kind, payload))
        elif kind == "RELIST":
            self._relist(resource, payload)
        else:
            sent = self._sent.setdefault(resource, {})
            if kind == "DELETED":
                sent.pop(payload.key, None)
            else:
                sent[payload.key] = _digest(payload.data)
            self.send((resource, kind, payload.data))

    def _relist(self, resource: str, items: Iterable[Packed]) -> None:
        before = self._sent.get(resource, {})
        now: dict[str, bytes] = {}
        if resource not in self._listed:  # the first list of this process: all of it
            self._listed.add(resource)
            part: list[bytes] = []
            for key, data in items:
                now[key] = _digest(data)
                part.append(data)
                if len(part) == PART:
                    self.send((resource, "PART", part))
                    part = []
            self._sent[resource] = now
            self.send((resource, "RELIST", part))
            return
        # A relist (410 Gone): what changed since, as the watch events that make the
        # director's copy the list; what did not change is not sent at all.
        for key, data in items:
            digest = now[key] = _digest(data)
            known = before.get(key)
            if known == digest:
                self.unchanged += 1
            else:
                self.send((resource, "MODIFIED" if known else "ADDED", data))
        gone = [key for key in before if key not in now]
        self._sent[resource] = now
        for at in range(0, len(gone), PART):
            self.send((resource, "GONE", gone[at : at + PART]))
        self.send((resource, "RELISTED", None))


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class Mirror:
    """The director's end: what the intake process sent of each resource (the objects the
    snapshot holds, not copies): a relist's removals name their keys only."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, Info]] = {}
        self._parts: dict[str, list[Info]] = {}
        self.decoded = 0  # objects decoded from their bytes
        self.relists = 0  # relists after the first list, each taken as its changes

    def take(self, resource: str, kind: str, payload: Any) -> list[tuple[str, Any]]:
        """One frame's message, as what to hand on: ``(kind, payload)`` each."""
        if kind in ("CONNECTED", "DISCONNECTED"):
            return [(kind, payload)]
        if kind in ("PART", "RELIST"):
            part = self._parts.setdefault(resource, [])
            part.extend(self._loads(item) for item in payload)
            if kind == "PART":
                return []
            items = self._parts.pop(resource)
            self._objects[resource] = {key_of(info): info for info in items}
            return [("RELIST", items)]
        held = self._objects.setdefault(resource, {})
        if kind == "GONE":
            out: list[tuple[str, Any]] = []
            for key in payload:
                info = held.pop(key, None)
                if info is None:
                    raise Broken(f"{resource}: {key} was never sent")
                out.append(("DELETED", info))
            return out
        if kind == "RELISTED":
            self.relists += 1
            return []
        info = self._loads(payload)
        if kind == "DELETED":
            held.pop(key_of(info), None)
        else:
            held[key_of(info)] = info
        return [(kind, info)]

    def _loads(self, data: bytes) -> Info:
        self.decoded += 1
        value = loads(data)
        if not isinstance(value, ServiceInfo | SliceInfo | NodeInfo):
            raise Broken(f"a {type(value).__name__} where an object was expected")
        return value

    def forget(self) -> None:
        """A new intake process: it sends everything afresh."""
        self._objects.clear()
        self._parts.clear()
