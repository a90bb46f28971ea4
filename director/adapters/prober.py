"""Active health checks of real servers: one checker thread that runs thousands of checks
with a selector (what to check and the up/down state machine are ``director.core.checks``).

The checker runs in the director's own network namespace and never starts a thread
per backend.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from director.core.checks import Health, Target
from director.core.model import format_endpoint
from director.logs import event

log = logging.getLogger("director.health")


@dataclass
class _Probe:
    """One health check in flight: its target, socket and stage."""

    target: Target
    sock: socket.socket
    started: float
    fd: int = -1  # kept: wrapping in TLS detaches ``sock`` from its descriptor
    stage: str = "connect"  # connect | handshake | send | receive
    tls: ssl.SSLSocket | None = None
    request: bytes = b""
    reply: bytearray = field(default_factory=bytearray)


class _Waker:
    """Wakes the checker's ``select`` from another thread (a socket pair in its selector)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        selector.register(self._read, selectors.EVENT_READ, None)

    def ping(self) -> None:
        with contextlib.suppress(OSError):
            self._write.send(b"x")

    def drain(self) -> None:
        with contextlib.suppress(OSError):
            self._read.recv(4096)


class Checker:
    """Runs every target's check on its interval from one thread, in ``netns`` if given.

    ``on_change(target, health)`` is called (on the checker thread) whenever a target goes
    up or down; ``on_result`` after every check (metrics)."""

    def __init__(
        self,
        on_change: Callable[[Target, Health], None],
        *,
        netns: str | None = None,
        on_result: Callable[[Target, Health], None] | None = None,
        max_in_flight: int = 512,
    ) -> None:
        self.on_change, self.on_result = on_change, on_result
        self.max_in_flight = max_in_flight
        self.state: dict[Target, Health] = {}
        self._lock = threading.Lock()
        self._wanted: set[Target] = set()
        self._queue: list[tuple[float, int, Target]] = []  # (due, tiebreak, target)
        self._serial = 0
        self._sel = selectors.DefaultSelector()
        self._probes: dict[int, _Probe] = {}
        self._next_expire = 0.0
        self._stop = threading.Event()
        self._waker = _Waker(self._sel)
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE  # a health check, not a trust decision
        self._thread = threading.Thread(target=self._run, args=(netns,), name="health", daemon=True)

    # -- control (any thread) ------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)

    def update(self, add: Iterable[Target] = (), remove: Iterable[Target] = ()) -> None:
        """Start checking ``add`` (at once, spread over one interval), stop ``remove``."""
        with self._lock:
            for target in remove:
                self._wanted.discard(target)
                self.state.pop(target, None)
            for target in add:
                if target in self._wanted:
                    continue
                self._wanted.add(target)
                self.state[target] = Health()
                self._serial += 1
                # Spread the first checks over one interval: no thundering herd.
                offset = (self._serial % 97) / 97 * target.spec.interval
                heapq.heappush(self._queue, (time.monotonic() + offset, self._serial, target))
        self._wake()

    def health(self, target: Target) -> Health | None:
        with self._lock:
            return self.state.get(target)

    def _wake(self) -> None:
        self._waker.ping()

    # -- the thread ----------------------------------------------------------------------
    def _run(self, netns: str | None) -> None:
        if netns:
            from director.dataplane.netns import enter_netns

            enter_netns(netns)
        try:
            while not self._stop.is_set():
                try:
                    self._cycle()
                except Exception as exc:  # a bug must not silence every check: log, go on
                    event(log, "health.checker_error", level=logging.ERROR, error=repr(exc)[:300])
                    time.sleep(0.1)
        finally:
            self._close_in_flight()

    def _close_in_flight(self) -> None:
        """Close the connections of checks still under way: a stopped checker must not leave
        a real server holding a half-open check (a server that reads its TLS handshake in
        accept() would wait on it for ever)."""
        for probe in list(self._probes.values()):
            self._probes.pop(probe.fd, None)
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(probe.fd)
            with contextlib.suppress(OSError):
                (probe.tls or probe.sock).close()

    def _cycle(self) -> None:
        now = time.monotonic()
        self._start_due(now)
        if now >= self._next_expire:  # timeouts need no finer grain than 20 ms
            self._next_expire = now + 0.02
            self._expire(now)
        with self._lock:
            due = self._queue[0][0] if self._queue else now + 1.0
        wait = max(0.0, min(due - now, 0.1 if self._probes else 1.0))
        for key, mask in self._sel.select(timeout=wait):
            if key.data is None:
                self._waker.drain()
                continue
            probe = self._probes.get(key.data)
            if probe is not None:
                self._advance(probe, mask)

    def _start_due(self, now: float) -> None:
        while len(self._probes) < self.max_in_flight:
            with self._lock:
                if not self._queue or self._queue[0][0] > now:
                    return
                _due, _serial, target = heapq.heappop(self._queue)
                if target not in self._wanted:
                    continue
                self._serial += 1
                heapq.heappush(self._queue, (now + target.spec.interval, self._serial, target))
            self._begin(target, now)

    def _begin(self, target: Target, now: float) -> None:
        family = socket.AF_INET6 if ":" in target.address else socket.AF_INET
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            self._finish(_Probe(target, socket.socket(), now), False, f"socket: {exc}")
            return
        sock.setblocking(False)
        probe = _Probe(target, sock, now, sock.fileno())
        code = sock.connect_ex((target.address, target.port))
        if code not in (0, errno.EINPROGRESS):
            self._finish(probe, False, f"connect: {errno.errorcode.get(code, code)}")
            return
        self._probes[probe.fd] = probe
        self._sel.register(probe.fd, selectors.EVENT_WRITE, probe.fd)

    def _advance(self, probe: _Probe, mask: int) -> None:
        sock = probe.sock
        target = probe.target
        try:
            if probe.stage == "connect":
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    self._finish(probe, False, f"connect: {errno.errorcode.get(code, code)}")
                    return
                if target.spec.kind == "tcp":
                    self._finish(probe, True, "tcp connect ok")
                    return
                host = target.spec.host or format_endpoint(target.address, target.port)
                probe.request = (
                    f"GET {target.spec.path} HTTP/1.1\r\nHost: {host}\r\n"
                    "User-Agent: lvs-director-health\r\nConnection: close\r\n\r\n"
                ).encode()
                if target.spec.kind == "https":  # SNI: the virtual host (none for an address)
                    probe.tls = self._tls.wrap_socket(
                        sock, do_handshake_on_connect=False, server_hostname=target.spec.host
                    )
                    probe.stage = "handshake"
                else:
                    probe.stage = "send"
            if probe.stage == "handshake":
                assert probe.tls is not None
                try:
                    probe.tls.do_handshake()
                except ssl.SSLWantReadError:
                    self._sel.modify(probe.fd, selectors.EVENT_READ, probe.fd)
                    return
                except ssl.SSLWantWriteError:
                    self._sel.modify(probe.fd, selectors.EVENT_WRITE, probe.fd)
                    return
                probe.stage = "send"
            channel = probe.tls or sock
            if probe.stage == "send":
                sent = channel.send(probe.request)
                probe.request = probe.request[sent:]
                if probe.request:
                    self._sel.modify(probe.fd, selectors.EVENT_WRITE, probe.fd)
                    return
                probe.stage = "receive"
                self._sel.modify(probe.fd, selectors.EVENT_READ, probe.fd)
                return
            if probe.stage == "receive":
                try:
                    chunk = channel.recv(4096)
                except (ssl.SSLWantReadError, BlockingIOError):
                    return
                probe.reply += chunk
                line_end = probe.reply.find(b"\r\n")
                if line_end < 0 and chunk and len(probe.reply) < 8192:
                    return
                status_line = bytes(probe.reply[: max(line_end, 0)]).decode(errors="replace")
                parts = status_line.split()
                if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                    self._finish(probe, False, f"not an HTTP answer: {status_line[:60]!r}")
                    return
                code = int(parts[1])
                low, high = target.spec.expect
                self._finish(probe, low <= code <= high, f"HTTP {code}")
        except (OSError, ssl.SSLError) as exc:
            self._finish(probe, False, f"{type(exc).__name__}: {exc}"[:120])

    def _expire(self, now: float) -> None:
        for probe in list(self._probes.values()):
            if now - probe.started > probe.target.spec.timeout:
                self._finish(probe, False, f"timeout after {probe.target.spec.timeout:g}s")

    def _finish(self, probe: _Probe, ok: bool, reason: str) -> None:
        if self._probes.pop(probe.fd, None) is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(probe.fd)
        (probe.tls or probe.sock).close()
        now = time.monotonic()
        with self._lock:
            health = self.state.get(probe.target)
            if health is None:
                return  # no longer wanted
            changed = health.observe(ok, reason, probe.target.spec, now, now - probe.started)
        if self.on_result is not None:
            self.on_result(probe.target, health)
        if changed:
            level = logging.INFO if health.up else logging.WARNING  # a backend going down
            event(
                log,
                "health.changed",
                level,
                target=probe.target.describe(),
                state="up" if health.up else "down",
                reason=reason,
                successes=health.successes,
                failures=health.failures,
            )
            self.on_change(probe.target, health)
