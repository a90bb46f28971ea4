"""Each cluster's lists decoded in a process of its own (``clusters:``, ``intake: process``):
the first list of each resource and every relist after 410 Gone (an etcd compaction, a
restarted API server) are taken by a child made for that one list. The child decodes the
list's JSON and sends the director only the objects that changed since the director last saw
them, parsed and packed (``director.adapters.kube.wire``), and the ones that are gone. One
cluster's 10,000-Service relist costs the director's own interpreter almost nothing, and
another cluster's event does not wait behind it. The watch between lists, a few objects at a
time, runs on the director's threads as for ``kubernetes:``; so no process is kept for a
cluster between its lists.

- ``Zygote``: forked once while the director has a single thread (a fork of a process with
  threads may copy a lock some thread held); it forks each list process on request and hands
  back its end of a socketpair. Its children share the director's imported code with it,
  page for page, until they write to it.
- The list process (``_list_once``): SCHED_IDLE, below the director; it connects with the
  cluster's kubeconfig, lists, sends, and exits; or ends when the director's end of its
  socket closes (a stop, a removed cluster, the director's death).
- ``ChildListed``: the director's watcher of one resource (``Watcher``, its lists taken by a
  list process). A list process that fails or dies (killed, crashed) is a failed list: the
  watcher retries with its backoff, the cluster's watches count as disconnected meanwhile and
  its Services stay programmed. A zygote that is gone stops the director (its watchdog asks
  every 0.5 s; a list that finds it gone ends its thread), and systemd starts it afresh.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import pickle
import signal
import socket
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from director.adapters.kube.client import (
    RESOURCES,
    Handler,
    Json,
    KubeApi,
    KubeError,
    Resource,
    settle_page,
    short_reason,
)
from director.adapters.kube.watch import Fatal, Watcher, refusing
from director.adapters.kube.wire import Broken, Held, Listing, Taken, loads, read_frame, send_frame
from director.core.cluster import resource_name, split_resource
from director.core.cluster_parse import node_from_json, service_from_json, slice_from_json
from director.logs import event

log = logging.getLogger("director.kube")

PARSERS = {
    "services": service_from_json,
    "endpointslices": slice_from_json,
    "nodes": node_from_json,
}
# List processes run on what the box leaves idle: a task that wakes (the loop, another
# cluster's watch) takes the core at once; at nice 10 it waited out their slice, a few ms
# (``lab.bench_clusters``). Nice 19 too, should the kernel refuse the policy.
NICE, POLICY = 19, os.SCHED_IDLE


class ListSpec(NamedTuple):
    """What the zygote forks a list process with: the cluster's credentials, the resource's
    name (``prod/services``) and path. What the director holds of it goes to the list
    process itself, as its socket's first frames."""

    kubeconfig: str | None
    resource: str
    path: str


class ZygoteGone(OSError):
    """The zygote is gone: no list process can be made again."""


class Zygote:
    """The process that forks the list processes (see the module's docstring)."""

    def __init__(self) -> None:
        # What the director holds now is shared with the zygote page for page until either
        # writes to it, and a full collection writes to every object it walks: frozen, the
        # director's collector never walks it again (measured: the zygote's own memory
        # once three clusters of 5,000 were served, 21.7 MB of copied pages, went to 11).
        gc.collect()
        gc.freeze()
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the zygote
            code = 0
            try:
                ours.close()
                _zygote(theirs)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        self.pid, self._sock, self._lock = pid, ours, threading.Lock()
        self._ended = False
        event(log, "kube.intake_zygote_started", pid=pid)

    def spawn(self, spec: ListSpec) -> tuple[int, socket.socket]:
        """A new list process for ``spec``: its pid and the director's end of its socket.
        Raises OSError when the zygote is gone."""
        try:
            with self._lock:
                send_frame(self._sock, tuple(spec))
                message, fds, _flags, _addr = socket.recv_fds(self._sock, 16, 1)
        except OSError as exc:
            raise ZygoteGone(f"the zygote is gone: {exc}") from exc
        if len(message) == 4 and not fds:  # it could not fork this time (memory, limits)
            raise OSError(int.from_bytes(message, "big"), "the zygote could not fork")
        if len(message) != 4 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ZygoteGone("the zygote is gone")
        return int.from_bytes(message, "big"), socket.socket(fileno=fds[0])

    def alive(self) -> bool:
        """Whether the zygote still runs (the director's watchdog asks: one that is gone
        restarts the director while calm, not at the next relist). Reaps one that ended."""
        if self._ended:
            return False
        try:
            pid, _status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped already
            pid = self.pid
        self._ended = pid == self.pid
        return not self._ended

    def close(self) -> None:
        """The zygote ends (it reads the end of its socket); a list process under way ends
        with its own socket."""
        with contextlib.suppress(OSError):
            self._sock.close()
        if not self._ended:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self._ended = True


def _quiet_signals() -> None:
    """A child of the director: the director's handlers are not its own. SIGTERM ends it;
    a reload's SIGHUP and a terminal's Ctrl-C are the director's to act on (the end of its
    socket ends the child)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def _zygote(sock: socket.socket) -> None:
    # Nothing the director had open is held here (its API's listening socket, its kernel
    # sockets): a restarted director must be able to take them again. Their objects are
    # frozen first, never finalized here, so none closes a number reused since.
    gc.freeze()
    os.closerange(3, sock.fileno())
    os.closerange(sock.fileno() + 1, os.sysconf("SC_OPEN_MAX"))
    _quiet_signals()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its children are reaped by the kernel
    while True:
        frame = read_frame(sock)
        if frame is None:  # the director closed its end, or is gone
            return
        spec = ListSpec(*loads(frame))
        try:
            ours, theirs = socket.socketpair()
            try:
                pid = os.fork()
            except OSError:
                ours.close()
                theirs.close()
                raise
        except OSError as exc:  # this once (memory, a limit): the watcher backs off
            socket.send_fds(sock, [(exc.errno or 0).to_bytes(4, "big")], [])
            continue
        if pid == 0:  # the list process
            code = 0
            try:
                sock.close()
                ours.close()
                _list_once(theirs, spec)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        socket.send_fds(sock, [pid.to_bytes(4, "big")], [ours.fileno()])
        ours.close()


class _DirectorGone(Exception):
    pass


def _list_once(sock: socket.socket, spec: ListSpec) -> None:
    """The list process: one list of one resource, sent as it is decoded; then it exits."""
    gc.freeze()  # what it shares with the director is never walked (nor copied) by its GC
    _quiet_signals()
    with contextlib.suppress(OSError):  # below the director (see POLICY)
        os.nice(NICE)
    with contextlib.suppress(OSError):
        os.sched_setscheduler(0, POLICY, os.sched_param(0))
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a kubeconfig's exec plugin is waited for

    def send(message: Any) -> None:
        try:
            send_frame(sock, message)
        except OSError as exc:
            raise _DirectorGone from exc

    known: dict[str, int | str] = {}  # what the director holds of the resource, in parts
    while (frame := read_frame(sock)) is not None and (part := loads(frame)) is not None:
        known.update(part)
    if frame is None:  # the director is gone
        return
    resource = Resource(spec.resource, spec.path)
    cluster, plural = split_resource(spec.resource)
    parse = refusing(partial(PARSERS[plural], cluster=cluster), resource)
    listing = Listing(known, send)
    try:
        api = KubeApi.connect(spec.kubeconfig)
        api.api.configuration.retries = False  # the watcher has its own backoff
        _, version = api.list(resource, partial(listing.take, parse=parse))
        listing.done(version)
    except _DirectorGone:
        return
    except Exception as exc:  # the director's watcher says it, and backs off
        status = exc.status if isinstance(exc, KubeError) else 0
        with contextlib.suppress(_DirectorGone):
            send(("FAILED", status, short_reason(exc)))


def cluster_watchers(
    api: KubeApi,
    cluster: str,
    handler: Handler,
    watch_seconds: int,
    *,
    zygote: Zygote | None = None,
    kubeconfig: str | None = None,
) -> list[Watcher]:
    """A cluster's watcher of each resource (``prod/services`` and the like for a named
    cluster, its objects carrying its name); with a ``zygote``, their lists taken by list
    processes that connect with ``kubeconfig``."""
    out: list[Watcher] = []
    for resource in RESOURCES:
        base = PARSERS[resource.name]
        parse: Callable[[Json], Any] = partial(base, cluster=cluster) if cluster else base
        named = Resource(resource_name(cluster, resource.name), resource.path)
        if zygote is None:
            out.append(Watcher(api, named, handler, parse, watch_seconds=watch_seconds))
        else:
            out.append(
                ChildListed(
                    api,
                    named,
                    handler,
                    parse,
                    zygote=zygote,
                    kubeconfig=kubeconfig,
                    watch_seconds=watch_seconds,
                )
            )
    return out


class ChildListed(Watcher):
    """A watcher whose lists are taken by list processes (see the module's docstring)."""

    def __init__(
        self,
        kube: KubeApi,
        resource: Resource,
        handler: Handler,
        parse: Callable[[Json], Any],
        *,
        zygote: Zygote,
        kubeconfig: str | None,
        watch_seconds: int = 300,
    ) -> None:
        super().__init__(kube, resource, handler, parse, watch_seconds=watch_seconds)
        self.zygote, self.kubeconfig = zygote, kubeconfig
        self.held = Held()
        self.pid: int | None = None  # the list process under way, if any
        self.lists = 0  # list processes made
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def stop(self) -> None:
        """Stop; a list under way ends with its process."""
        super().stop()
        self._end_list(kill=True)

    def list_all(self) -> str:
        spec = ListSpec(self.kubeconfig, self.resource.name, self.resource.path)
        try:
            pid, sock = self.zygote.spawn(spec)
        except ZygoteGone as exc:
            raise Fatal(f"no process can take its lists: {short_reason(exc)}") from exc
        with self._lock:
            self.pid, self._sock = pid, sock
        self.lists += 1
        if self._stop.is_set():  # stopped while it was being made
            self._end_list(kill=True)
        try:
            # What it holds, a part at a time: one pickle of 10,000 versions would hold the
            # interpreter from another cluster's event for as long as it takes.
            for part in self.held.known_parts():
                send_frame(sock, part)
            send_frame(sock, None)
            taken, version, gone = self._read(sock)
            handed = self.held.listed(taken, gone)
        except KubeError:  # the server's answer, passed on: the process exits on its own
            self._end_list(kill=False)
            raise
        except (Broken, pickle.UnpicklingError, ValueError, TypeError) as exc:
            self._end_list(kill=True)  # never from this program's child
            raise OSError(f"its list process broke the protocol: {exc}") from None
        except BaseException:  # it died, the director stops, the socket broke
            self._end_list(kill=True)
            raise
        self._end_list(kill=False)  # it exits on its own once its list is sent
        self._set_connected(True)
        for kind, payload in handed:
            self.handler(self.resource.name, kind, payload)
        sent = len(taken)
        del handed, taken
        # As after each page of a list decoded here: what was made since the last freeze
        # collected, and what survives frozen (full collections never walk what the director
        # holds: they held every thread, another cluster's events too).
        settle_page()
        event(
            log,
            "kube.listed",
            resource=self.resource.name,
            items=len(self.held),
            sent=sent,
            gone=len(gone),
            rv=version,
            pid=pid,
        )
        return version

    def watched(self, kind: str, obj: Json) -> None:
        info = self.parse(obj)
        if info is not None:
            self.held.watched(kind, obj, info)
            self.handler(self.resource.name, kind, info)

    def _read(self, sock: socket.socket) -> tuple[list[Taken], str, list[str]]:
        """What the list process sends, until its list is done: the objects it sent
        (decoded as they come), the version to watch from, and the identities gone.
        Raises as a list would (KubeError, OSError), or Broken."""
        taken: list[Taken] = []
        while True:
            frame = read_frame(sock)
            if frame is None:
                raise OSError("its list process ended before the list did")
            message = loads(frame)
            if not isinstance(message, tuple) or not message:
                raise Broken(f"a {type(message).__name__} where a message was expected")
            kind, *rest = message
            if kind == "PART" and len(rest) == 1 and isinstance(rest[0], list):
                taken.extend(self.held.decode(rest[0]))
            elif kind == "DONE" and len(rest) == 2 and isinstance(rest[1], list):
                return taken, str(rest[0]), [str(ident) for ident in rest[1]]
            elif kind == "FAILED" and len(rest) == 2:
                status, reason = int(rest[0]), str(rest[1])
                if status:
                    raise KubeError(status, "", reason)
                raise OSError(reason)
            else:
                raise Broken(f"a message {str(kind)[:40]!r}")

    def _end_list(self, *, kill: bool) -> None:
        """The list under way, if any, done with: its socket closed, and (``kill``) its
        process killed (a stop, a broken list)."""
        with self._lock:
            pid, sock, self.pid, self._sock = self.pid, self._sock, None, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if kill and pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
