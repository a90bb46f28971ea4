"""Each cluster's intake in a process of its own (``clusters:``): its lists and watches, the
decoding of their JSON and the parse into the director's small values run in a child, so
one cluster's 10,000-Service relist or runaway controller costs the director's own
interpreter almost nothing, and another cluster's event does not wait behind it.

- ``Zygote``: forked once while the director has a single thread (a fork of a process with
  threads may copy a lock some thread held); it forks each cluster's intake process on
  request and hands back its end of a socketpair. Its children share the director's
  imported code with it, page for page, until they write to it.
- The intake process (``_serve``): the cluster's three watchers (``Watcher``, as in the
  director for ``kubernetes:``), their callback a ``Sender``; it ends when the director's end
  of its socket closes (a stop, a removed cluster, the director's death).
- ``ClusterIntake``: the director's side, one thread per cluster reading the frames,
  putting relists together (``Mirror``) and handing each event to the loop as a
  watcher would. An intake process that ends (killed, crashed) is started again with a
  backoff; meanwhile the cluster's watches count as disconnected and its Services stay
  programmed. A zygote that is gone ends the thread: the director's watchdog stops it, and
  systemd starts it afresh.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from director.adapters.intake_wire import (
    Broken,
    Mirror,
    Packed,
    Sender,
    dumps,
    loads,
    pack,
    read_frame,
)
from director.adapters.kube import RESOURCES, Handler, KubeApi, Resource, short_reason
from director.adapters.kube_watch import Watcher
from director.core.cluster import resource_name
from director.core.cluster_parse import node_from_json, service_from_json, slice_from_json
from director.logs import event

log = logging.getLogger("director.kube")

PARSERS = {
    "services": service_from_json,
    "endpointslices": slice_from_json,
    "nodes": node_from_json,
}
RESTART_BASE, RESTART_MAX = 0.5, 30.0  # seconds before an intake process is started again
NICE = 10  # the intake processes' niceness, over the director's
STEADY = 60.0  # an intake process that ran this long starts its successor's backoff afresh


class Spec(NamedTuple):
    """What an intake process needs: the cluster's name and where its credentials are."""

    cluster: str
    kubeconfig: str | None
    watch_seconds: int


class Zygote:
    """The process that forks the intake processes (see the module's docstring)."""

    def __init__(self) -> None:
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
        event(log, "kube.intake_zygote_started", pid=pid)

    def spawn(self, spec: Spec) -> tuple[int, socket.socket]:
        """A new intake process for ``spec``: its pid and the director's end of its socket.
        Raises OSError when the zygote is gone."""
        data = dumps(tuple(spec))
        with self._lock:
            self._sock.sendall(len(data).to_bytes(4, "big") + data)
            message, fds, _flags, _addr = socket.recv_fds(self._sock, 16, 1)
        if len(message) != 4 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError("the intake zygote is gone")
        return int.from_bytes(message, "big"), socket.socket(fileno=fds[0])

    def close(self) -> None:
        """The zygote ends (it reads the end of its socket); its intake processes end with
        their own sockets."""
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _quiet_signals() -> None:
    """A child of the director: the director's handlers are not its own. SIGTERM ends it;
    a reload's SIGHUP and a terminal's Ctrl-C are the director's to act on (the end of its
    socket ends the child)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def _zygote(sock: socket.socket) -> None:
    # Nothing the director had open is held here (its API's listening socket, its kernel
    # sockets, an API stand-in's): a restarted director must be able to take them again.
    # The objects that owned them are frozen first, never finalized here, so none closes a
    # number reused since.
    gc.freeze()
    os.closerange(3, sock.fileno())
    os.closerange(sock.fileno() + 1, os.sysconf("SC_OPEN_MAX"))
    _quiet_signals()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its children are reaped by the kernel
    while True:
        frame = read_frame(sock)
        if frame is None:  # the director closed its end, or is gone
            return
        spec = Spec(*loads(frame))
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the intake process
            code = 0
            try:
                sock.close()
                ours.close()
                _serve(theirs, spec)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        socket.send_fds(sock, [pid.to_bytes(4, "big")], [ours.fileno()])
        ours.close()


def _serve(sock: socket.socket, spec: Spec) -> None:
    """The intake process: the cluster's watchers, until the director's end closes."""
    gc.freeze()  # what it shares with the director is never walked (nor copied) by its GC
    _quiet_signals()
    # Below the director: a cluster's bulk (a relist decoded, a runaway controller) never
    # takes a core from the loop that programs the kernel; among themselves the intake
    # processes are equal, and one woken for a single event runs before a busy one.
    with contextlib.suppress(OSError):
        os.nice(NICE)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a kubeconfig's exec plugin is waited for
    sender = Sender(sock)

    def handle(resource: str, kind: str, payload: Any) -> None:
        try:
            sender.handle(resource, kind, payload)
        except OSError:  # the director is gone
            os._exit(0)

    try:
        api = KubeApi.connect(spec.kubeconfig)
    except Exception as exc:
        event(
            log,
            "kube.intake_failed",
            level=logging.ERROR,
            cluster=spec.cluster,
            error=short_reason(exc),
        )
        return
    api.api.configuration.retries = False  # the watchers have their own backoff
    for watcher in cluster_watchers(api, spec.cluster, handle, spec.watch_seconds, packed=True):
        watcher.start()
    with contextlib.suppress(OSError):
        while sock.recv(4096):
            pass


def cluster_watchers(
    api: KubeApi, cluster: str, handler: Handler, watch_seconds: int, *, packed: bool = False
) -> list[Watcher]:
    """A cluster's watcher of each resource (``prod/services`` and the like for a named
    cluster, its objects carrying its name); ``packed``: each object packed as soon as it
    is parsed (an intake process holds a list of 10,000 as their bytes)."""
    out = []
    for resource in RESOURCES:
        parse = PARSERS[resource.name]
        out.append(
            Watcher(
                api,
                Resource(resource_name(cluster, resource.name), resource.path),
                handler,
                partial(_packed, parse, cluster)
                if packed
                else partial(parse, cluster=cluster)
                if cluster
                else parse,
                watch_seconds=watch_seconds,
            )
        )
    return out


def _packed(parse: Callable[..., Any], cluster: str, obj: Any) -> Packed:
    return pack(parse(obj, cluster=cluster))


class ClusterIntake:
    """One cluster's intake process, seen from the director (see the module's docstring):
    started, stopped and listed as the cluster's watchers would be."""

    def __init__(self, zygote: Zygote, spec: Spec, submit: Handler) -> None:
        self.zygote, self.spec, self.submit = zygote, spec, submit
        self.pid: int | None = None
        self.starts = 0  # intake processes started for this cluster
        self.mirror = Mirror()
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"intake-{spec.cluster}", daemon=True
        )

    @property
    def cluster(self) -> str:
        return self.spec.cluster

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """The intake process ends (its socket closes) and this thread with it."""
        self._stop.set()
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _run(self) -> None:
        delay = RESTART_BASE
        while not self._stop.is_set():
            try:
                self.pid, sock = self.zygote.spawn(self.spec)
            except OSError as exc:  # the zygote is gone: this thread ends, the director too
                event(
                    log,
                    "kube.intake_zygote_gone",
                    level=logging.CRITICAL,
                    cluster=self.cluster,
                    error=short_reason(exc),
                )
                return  # the director's watchdog sees this thread end, and stops it
            self.starts += 1
            self._sock, started = sock, time.monotonic()
            self.mirror.forget()
            event(log, "kube.intake_started", cluster=self.cluster, pid=self.pid)
            if self._stop.is_set():  # stopped while it was being started
                sock.close()
                return
            try:
                reason = self._read(sock)
            finally:
                self._sock = None
                sock.close()
            if self._stop.is_set():
                return
            if time.monotonic() - started >= STEADY:
                delay = RESTART_BASE
            event(
                log,
                "kube.intake_ended",
                level=logging.ERROR,
                cluster=self.cluster,
                pid=self.pid,
                reason=reason,
                retry_in=f"{delay:.1f}s",
            )
            for resource in RESOURCES:  # its Services stay programmed meanwhile
                self.submit(
                    resource_name(self.cluster, resource.name),
                    "DISCONNECTED",
                    f"intake process ended: {reason}",
                )
            self._stop.wait(delay)
            delay = min(delay * 2, RESTART_MAX)

    def _read(self, sock: socket.socket) -> str:
        """Hand on every event the intake process sends, until it ends; why it ended."""
        try:
            while True:
                frame = read_frame(sock)
                if frame is None:
                    return "its socket closed (the process ended)"
                resource, kind, payload = loads(frame)
                for handed in self.mirror.take(resource, kind, payload):
                    self.submit(resource, *handed)
        except Broken as exc:  # never from a process of this program; start it afresh
            self._kill()
            return f"protocol: {exc}"
        except OSError as exc:
            self._kill()
            return short_reason(exc)

    def _kill(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
