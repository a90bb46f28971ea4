"""A static box's table in the kernel as soon as its file is read, on a start that has no
kept table to replay (a first boot, a file changed while the director was stopped, an
upgrade).

A restart replays the datagrams the run before kept (:mod:`director.dataplane.replay`).
A start with nothing to replay used to program its table only once the whole director was
loaded and started: the imports of the engine, the adapters and the API, the runtime's
parts, the translation, then the first sync. Here, once the file is parsed and validated
whole (in the command's first moments, or in the child that parses it into the cache,
:mod:`director.cli.ahead`), the table its first sync would build from nothing
(``static_table``: the file's services with the API's saved
intents, less full NAT's) is planned, packed and sent at once, under the same conditions
as a replay: a static box (no ``kubernetes:``), not a shadow, and a kernel that holds no
virtual service at all. It only ever adds to an empty table.

The datagrams are sent by a thread of their own while the next ones are packed: the
kernel's work (a third of the whole at 5,000 services, under the lab's emulation) runs on
one core while Python packs on the other.

The director then starts as after a replay: it reads the kernel back, finds its table there
and the first sync sends nothing; what the kernel refused, the first sync does again. A start
that fails before its first sync (a token file that does not read, a port that is taken)
removes the services sent here (``withdraw``): no table is left that no director keeps.

Whatever is imported before the send delays the table (under the lab's emulation a module of
the standard library costs tens of milliseconds), so the modules the reader and the sender
load take nothing they do not use there: ``hashlib`` (OpenSSL) only where a digest is made
(the reader's items take ``_blake2``, which is hashlib's BLAKE2 itself), ``pickle`` only
where a cache is read or written, ``ctypes`` only outside the role's unit (whose
``MALLOC_ARENA_MAX=1`` has made glibc's one heap already), and the C module ``_socket``
instead of ``socket.py``, whose enums and ``selectors`` none of them needs (its constants
are plain ints there). A test holds the modules loaded at the send
(``tests/cli/test_early.py``).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from director.core.added import OpChain
from director.core.intents import Intents
from director.core.plan import outline, outlined_ops
from director.core.services import Op, OpKind, Table
from director.dataplane.batches import encoded_batches
from director.dataplane.genl import GenlSocket
from director.dataplane.interface import scheduler_refusals
from director.dataplane.replay import Declined, empty_table
from director.schema.config import Settings

# Planned and packed a chunk at a time (a first sync's are 4,096 operations: reconcile). The
# kernel waits for the next datagram while a chunk is planned, so the chunks here are small:
# the first datagram goes once 512 operations are planned, and the packer, QUEUED datagrams
# (~1,900 operations) ahead, never has more than 1,024 to plan before it packs again. The
# packing took the same time natively (4,096 at a time against 1,024; 512 throughout 2% more).
FIRST_CHUNK_OPS = 512
CHUNK_OPS = 1024
QUEUED = 4  # datagrams packed ahead of the one being sent (~64 KB each)
# How soon the sender takes the interpreter back from the packer once the kernel has
# answered a datagram (Python's default: 5 ms, a wait before each of the datagrams, the
# kernel idle meanwhile). Python's own default again once the table is sent.
SWITCH_INTERVAL = 0.0005


def send(settings: Settings, netns: str | None) -> dict[str, object]:
    """The static table of ``settings`` sent to an empty kernel (see above). What was done:
    ``{"sent": True, "services", "ops", "refused", "seconds"}`` or ``{"sent": False,
    "reason"}``; never raises for the kernel's sake."""
    started = time.monotonic()
    if settings.in_cluster:
        return _not("a cluster's box: the first sync programs it with the cluster's Services")
    intents = Intents()
    api = settings.api
    if api is not None and api.intents_file:
        try:
            intents = Intents.load(Path(api.intents_file))
        except ValueError as exc:  # the start says so, and refuses
            return _not(f"the API's saved intents: {exc}")
    table = static_table(settings, intents)
    if not table:
        return _not("no static service")
    if os.environ.get("MALLOC_ARENA_MAX") != "1":  # the role's unit sets it: glibc has, then
        from director.dataplane.memory import one_heap  # (ctypes: 40 ms under emulation)

        one_heap()  # before the sender thread: its allocations from the one heap, as all are
    try:
        with empty_table(netns) as genl:
            ops, refused = _sent(genl, _chunks(table, settings), _usable(table))
    except Declined as exc:
        return _not(str(exc))
    except OSError as exc:
        return _not(f"the kernel: {exc.strerror or exc}")
    return {
        "sent": True,
        "services": len(table),
        "ops": ops,
        "refused": refused,
        "seconds": round(time.monotonic() - started, 3),
    }


def static_table(settings: Settings, intents: Intents) -> Table:
    """What a start's first sync builds from nothing on a static box: the file's services
    with the API's intents (no health verdict yet, no drain in progress), less full NAT's."""
    return {
        key: intents.apply(key, vs)
        for key, vs in settings.services.items()
        if key not in settings.static_snat
    }


def withdraw(settings: Settings, ipvs: object) -> int:
    """Remove the static services an early send added, after a start that failed before
    its first sync (``ipvs``: the kernel adapter, whose ``apply`` takes the operations);
    how many the kernel removed. Those the kernel does not hold are passed over."""
    apply = getattr(ipvs, "apply", None)
    if apply is None:
        return 0
    keys = static_table(settings, Intents())  # the intents change no key
    ops = tuple(Op(OpKind.DEL_SERVICE, key, origin="startup.withdrawn") for key in keys)
    if not ops:
        return 0
    result = apply(ops)
    return len(ops) - len(result.errors)


def _not(reason: str) -> dict[str, object]:
    return {"sent": False, "reason": reason}


def _usable(table: Table) -> frozenset[str]:
    """The schedulers the table names: the kernel loads a scheduler's module itself when a
    service names it, and refuses one it does not have (counted as refused; the first sync
    then refuses it before sending, and says why). Looking first (the module tree, a
    modprobe each) is the kernel adapter's way: a tenth of a second and more here, at no
    gain. Only what has no bit at all (unknown flags) is left out before sending."""
    return frozenset(vs.config.scheduler for vs in table.values())


def _chunks(table: Table, settings: Settings) -> Iterator[OpChain]:
    """The table's operations against an empty kernel, whole services, CHUNK_OPS or so at a
    time, FIRST_CHUNK_OPS the first (an added service's real servers packed from its rows
    when sent, never made)."""
    shape = outline(table, {}, settings.ownership)
    chunk, size = OpChain(), FIRST_CHUNK_OPS
    for _key, part in outlined_ops(shape, table, {}):
        chunk.append(part)
        if len(chunk) >= size:
            yield chunk
            chunk, size = OpChain(), CHUNK_OPS
    if len(chunk):
        yield chunk


def _sent(genl: GenlSocket, chunks: Iterable[OpChain], usable: frozenset[str]) -> tuple[int, int]:
    """Every chunk packed here and sent by a thread of its own, in order; (operations,
    how many the kernel refused or were refused before sending)."""
    pending: queue.Queue[tuple[bytes, int, int] | None] = queue.Queue(QUEUED)
    refused, failure = [0], list[OSError]()  # the sender's (it alone adds to them)

    def sender() -> None:
        while (item := pending.get()) is not None:
            if failure:
                continue  # drained, not sent: the packer stops at its next datagram
            try:
                refused[0] += sum(1 for _ in genl.batch_errors(*item))
            except OSError as exc:
                failure.append(exc)

    thread = threading.Thread(target=sender, name="early-send", daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL))
    thread.start()
    ops = before_sending = 0
    try:
        for chunk in chunks:
            skipped = scheduler_refusals(chunk, usable)
            before_sending += len(skipped)
            ops += len(chunk)
            for batch, indices, first in encoded_batches(chunk, skipped, genl.family, genl):
                if failure:
                    break
                pending.put((batch, first, len(indices)))
            if failure:
                break
    finally:
        pending.put(None)
        thread.join()
        sys.setswitchinterval(interval)
    if failure:
        raise failure[0]
    return ops, refused[0] + before_sending
