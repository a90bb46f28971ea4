"""The start's caches, kept true: owned state like the rest.

``director run`` keeps two files in its state directory for the next start: the file's
parse (``config.cache``, :mod:`director.schema.cache`) and, on a static box, its table as
the datagrams that build it (``table.cache``, :mod:`director.dataplane.replay`), replayed
before the rest of the director loads. Each is kept under the key of the file on disk now
(the reader's last load: the file running, or the one a refused reload read, which the next
start will run), with the API's files it depended on as they are now.

Written once at the first sync, they went stale at the first change: a reload (SIGHUP) or
an intent (a drain) left the next reboot with no replay, a cold start. And a cache someone
removed stayed removed. So they are looked at from the loop's thread after a step (at most
every ``VERIFY_SECONDS``, at once after a reload) and written again, on a thread of their
own, whenever they do not hold what the next start would need:

- not written yet, or kept for another file or other intents: written (an update, not a
  repair: nothing else touched them);
- removed or replaced since this director wrote them: drift, repaired and counted
  (``director_owned_repairs_total{resource="start-cache"}``);
- a write that fails (a full disk, the folder gone): out of sync (``/readyz``), tried again
  with a backoff.

The table a replay sends is the one a start's first sync would build from nothing: the
file's services with the API's intents, no health verdict (a restarted director has none
yet: its first sync puts every real server back at its weight), no full-NAT service (its
SNAT rule must be in force first). Nothing is kept for a box that serves a cluster's
Services (its table is not the file's alone).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from director.cli.early import static_table
from director.core.intents import Intents
from director.core.owned import Ledger, Retry, Transient, classify, file_mark
from director.core.services import Op, Table
from director.dataplane import replay
from director.logs import event
from director.schema.cache import stored_key as config_key
from director.schema.config import Settings
from director.schema.reparse import Reparser

log = logging.getLogger("director.cli")

RESOURCE = "start-cache"
VERIFY_SECONDS = 10.0
Mark = tuple[int, int, int] | None
Encode = Callable[[Sequence[Op]], Iterator[replay.Batch]]


@dataclass(frozen=True, slots=True)
class Encoder:
    """How a table becomes the datagrams a replay sends: the kernel adapter's ``encoded``,
    and its family's number (the datagrams carry it)."""

    encode: Encode
    family: int


@dataclass(frozen=True, slots=True)
class _Work:
    """One round of writes, decided on the loop's thread."""

    key: str
    settings: Settings
    config: bool  # the parse to write
    table: Table | None  # the table to write (None: nothing)
    depends: dict[str, str]
    drift: str | None  # what someone else did to them, if anything


class StartCaches:
    """Keeps ``config.cache`` (at ``cache``) and ``table.cache`` beside it."""

    def __init__(
        self,
        reader: Reparser,
        cache: Path,
        *,
        intents: Callable[[], Intents],
        ready: Callable[[], bool],
        encoder: Encoder | None,
        ledger: Ledger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``intents``: the API's intents in force (read on the loop's thread). ``ready``:
        the first sync is applied (nothing is kept before: a start that fails keeps
        nothing). ``encoder``: None where no table is kept (not the kernel: a shadow, the
        fake)."""
        self.reader, self.cache = reader, cache
        self.table_path = Path(replay.path_beside(str(cache)))
        self.intents, self.ready, self.encoder = intents, ready, encoder
        self.ledger, self.clock = ledger, clock
        self.retry = Retry(clock)
        self._next = float("-inf")
        self._marks: dict[Path, Mark] = {}  # each file as this director last wrote or found it
        self._thread: threading.Thread | None = None
        self.rounds = 0  # rounds of writes finished (for tests and figures)
        ledger.track(RESOURCE)

    def due(self) -> None:
        """Look again at the next step (a reload was just read)."""
        self._next = float("-inf")

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Until the round of writes in flight, if any, is done."""
        if self._thread is not None:
            self._thread.join(timeout)

    def check(self) -> None:
        """The loop's thread, after a step: write what is not as the next start needs it, on
        a thread of its own (one round at a time). Never raises."""
        now = self.clock()
        if now < self._next or not self.retry.due(now) or self.busy() or not self.ready():
            return
        self._next = now + VERIFY_SECONDS
        try:
            self._round()
        except Exception as exc:  # a file unreadable now, no thread to be had: tried again
            self._failed(exc)

    def _round(self) -> None:
        work = self._wanted()
        if work is None:
            state = self.ledger.get(RESOURCE)
            if state is not None and not state.in_sync:  # put right meanwhile (by a round)
                self.ledger.ok(RESOURCE)
            return
        if work.drift is not None:
            self.ledger.drift(RESOURCE, work.drift)
            event(
                log,
                "owned.drift",
                level=logging.WARNING,
                resource=RESOURCE,
                drift=work.drift,
                action="writing it again",
            )
        self._thread = threading.Thread(
            target=self._write, args=(work,), name="start-cache", daemon=True
        )
        self._thread.start()

    def _wanted(self) -> _Work | None:
        last = self.reader.last()
        if last is None:
            return None
        key, settings = last
        moved = [path for path in (self.cache, self.table_path) if self._moved(path)]
        config = self.cache in moved or config_key(self.cache) != key
        keeps_table = self.encoder is not None and not settings.in_cluster
        table: Table | None = None
        depends: dict[str, str] = {}
        if keeps_table:
            api = settings.api
            files = (
                [api.intents_file, api.token_file, api.tls_cert, api.tls_key]
                if api is not None
                else []
            )
            depends = {name: replay.digest(name) for name in files if name}
            if self.table_path in moved or not replay.kept_for(str(self.table_path), key):
                table = static_table(settings, self.intents())
        if not config and table is None:  # as the next start needs them: found so
            self._marks.setdefault(self.cache, file_mark(self.cache))
            if keeps_table:
                self._marks.setdefault(self.table_path, file_mark(self.table_path))
            return None
        drift = "; ".join(f"{path} was removed or replaced" for path in moved) or None
        return _Work(key, settings, config, table, depends, drift)

    def _moved(self, path: Path) -> bool:
        """Whether ``path`` is no longer the file this director last wrote or found there."""
        return path in self._marks and file_mark(path) != self._marks[path]

    def _write(self, work: _Work) -> None:
        """The writes (their own thread): the parse, then the table."""
        try:
            if work.config:
                if not self.reader.save(self.cache, again=True):
                    raise Transient(
                        f"{self.cache} could not be written (see config.cache_not_saved)"
                    )
                self._marks[self.cache] = file_mark(self.cache)
            if work.table is not None:
                self._keep_table(work)
                self._marks[self.table_path] = file_mark(self.table_path)
        except Exception as exc:
            self._failed(exc)
            return
        finally:
            self.rounds += 1
        self.retry.succeeded()
        self.ledger.ok(RESOURCE, repaired=work.drift is not None)
        if work.drift is not None:
            event(log, "owned.repaired", resource=RESOURCE, drift=work.drift)

    def _keep_table(self, work: _Work) -> None:
        from director.core.added import OpChain
        from director.core.plan import outline, outlined_ops
        from director.dataplane.memory import give_back_free_memory

        assert self.encoder is not None and work.table is not None
        started = time.monotonic()
        # Encoded a datagram at a time, spooled to disk as made: the 55,000 operations of a
        # 5,000-service table (7.5 MB of datagrams) never live at once (an added service's
        # real servers are packed from their rows, as a first sync sends them).
        ownership = work.settings.ownership
        shape = outline(work.table, {}, ownership)
        ops = OpChain(planned for _key, planned in outlined_ops(shape, work.table, {}))
        try:
            kept, size = replay.store(
                str(self.table_path),
                work.key,
                self.encoder.family,
                self.encoder.encode(ops),
                services=len(work.table),
                depends=work.depends,
            )
        finally:  # this thread's heap: its free pages back to the system
            give_back_free_memory()
        event(
            log,
            "table.kept",
            path=str(self.table_path),
            services=len(work.table),
            ops=kept,
            bytes=size,
            seconds=f"{time.monotonic() - started:.3f}",
        )

    def _failed(self, exc: BaseException) -> None:
        failure = classify(exc)
        wait = self.retry.failed(failure.kind)
        self.ledger.failed(RESOURCE, failure)
        event(
            log,
            "table.not_kept",
            level=logging.WARNING,
            path=str(self.table_path),
            reason=failure.reason,
            retry_in=f"{wait:.1f}s",
        )


def chained(*calls: Callable[[], None] | None) -> Callable[[], None]:
    """One call that makes each of ``calls`` in turn (None: skipped)."""
    kept: Iterable[Callable[[], None]] = [call for call in calls if call is not None]

    def run() -> None:
        for call in kept:
            call()

    return run
