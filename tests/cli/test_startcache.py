"""The next start's caches kept true (``director.cli.startcache``), on the host: the real
reader, the real codec (the kernel's datagrams, under a made-up family number) and the
real replay file; the kernel suite replays them on a real kernel after a reload and after
a removal (tests/system/test_replay.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from director.cli.startcache import RESOURCE, VERIFY_SECONDS, Encoder, StartCaches
from director.core.intents import Drain, Intents
from director.core.owned import Ledger
from director.core.services import Op
from director.dataplane import replay
from director.dataplane.batches import encoded_batches
from director.schema.cache import stored_key as config_key
from director.schema.reparse import Reparser

FAMILY = 0x2A


def config_text(services: int, *, api: Path | None = None) -> str:
    lines = ["ownership: {networks: [198.51.100.0/24]}", "services:"]
    lines += [
        f"  - {{name: s{i}, address: 198.51.100.{i + 1}, port: 80,"
        f" real_servers: [192.0.2.{i + 1}:8080, 192.0.2.{i + 101}:8080]}}"
        for i in range(services)
    ]
    if api is not None:
        lines.append(
            f"api: {{listen: '127.0.0.1:19999', token_file: {api / 'token'},"
            f" intents_file: {api / 'intents.json'}}}"
        )
    return "\n".join(lines) + "\n"


def encode(ops: Sequence[Op]) -> Iterator[replay.Batch]:
    """What the kernel adapter's ``encoded`` makes, with a family number of our own."""
    for batch, indices, first in encoded_batches(ops, (), FAMILY, SimpleNamespace(seq=0)):
        yield batch, first, len(indices)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Box:
    """A static box's file, its reader (as ``director run`` loads it) and its keeper."""

    def __init__(self, tmp: Path, services: int = 3, *, api: bool = False) -> None:
        self.tmp, self.file, self.cache = tmp, tmp / "d.yaml", tmp / "state" / "config.cache"
        self.cache.parent.mkdir()
        self.api = tmp if api else None
        if api:
            (tmp / "token").write_text("a-token-of-some-thirty-two-chars\n")
            (tmp / "token").chmod(0o600)
        self.file.write_text(config_text(services, api=self.api))
        self.reader = Reparser()
        self.reader.load(self.file, self.cache)
        self.intents = Intents()
        self.ready = True
        self.ledger, self.clock = Ledger(), Clock()
        self.caches = StartCaches(
            self.reader,
            self.cache,
            intents=lambda: self.intents,
            ready=lambda: self.ready,
            encoder=Encoder(encode, FAMILY),
            ledger=self.ledger,
            clock=self.clock,
        )

    @property
    def table(self) -> Path:
        return self.cache.parent / replay.FILE_NAME

    def step(self, later: float = 0.0) -> None:
        """A step of the loop ``later`` seconds on, and the writes it started, done."""
        self.clock.now += later
        self.caches.check()
        self.caches.join()

    def key(self) -> str:
        last = self.reader.last()
        assert last is not None
        return last[0]

    def services_kept(self) -> int:
        figures = self.table.read_bytes().split(b"\n", 3)[2]
        family, services, _ops = (int(part) for part in figures.split())
        assert family == FAMILY
        return services

    def state(self) -> tuple[bool, int, int]:
        state = self.ledger.get(RESOURCE)
        assert state is not None
        return state.in_sync, state.repairs, state.failures


def test_nothing_is_kept_before_the_first_sync_and_both_are_kept_after_it(tmp_path: Path) -> None:
    box = Box(tmp_path)
    box.ready = False
    box.step()
    assert not box.cache.exists() and not box.table.exists(), "a start that fails keeps nothing"
    box.ready = True
    box.step()
    assert config_key(box.cache) == box.key()
    assert replay.kept_for(str(box.table), box.key()) and box.services_kept() == 3
    assert box.state() == (True, 0, 0)
    rounds = box.caches.rounds
    box.step(VERIFY_SECONDS)
    assert box.caches.rounds == rounds, "as the next start needs them: not written again"


def test_a_reload_keeps_the_new_files_table_for_the_next_start(tmp_path: Path) -> None:
    """Before, the table was kept once, at the first sync: the reboot after a reload found
    it under the old file's key and replayed nothing (a cold start)."""
    box = Box(tmp_path)
    box.step()
    old = box.key()
    box.file.write_text(config_text(5))
    box.reader.load(box.file)  # SIGHUP: the running reader reads the file again
    box.caches.due()
    box.step()
    assert box.key() != old
    assert config_key(box.cache) == box.key(), "the parse of the file now running"
    assert replay.kept_for(str(box.table), box.key()) and box.services_kept() == 5
    assert box.state() == (True, 0, 0), "an update, not a repair: nobody else touched them"


def test_removed_or_replaced_caches_are_drift_written_again_and_counted(tmp_path: Path) -> None:
    box = Box(tmp_path)
    box.step()
    box.table.unlink()
    box.step(VERIFY_SECONDS / 2)
    assert not box.table.exists(), "looked at every VERIFY_SECONDS, not every step"
    box.step(VERIFY_SECONDS)
    assert replay.kept_for(str(box.table), box.key())
    assert box.state() == (True, 1, 0)
    kept = box.cache.read_bytes()
    box.cache.write_bytes(kept[:40])  # another hand, a damaged copy
    box.step(VERIFY_SECONDS)
    assert box.cache.read_bytes() == kept
    assert box.state() == (True, 2, 0)


def test_a_changed_intent_keeps_the_table_the_next_start_would_build(tmp_path: Path) -> None:
    box = Box(tmp_path, api=True)
    box.step()
    intents_file = tmp_path / "intents.json"
    assert replay.kept_for(str(box.table), box.key())
    box.intents = Intents(drains={"d": Drain("192.0.2.1")})
    box.intents.save(intents_file)  # as the loop stores an API's drain
    assert not replay.kept_for(str(box.table), box.key())
    box.step(VERIFY_SECONDS)
    assert replay.kept_for(str(box.table), box.key()), "kept with the intents as they are"
    assert box.state() == (True, 0, 0)


def test_a_write_that_fails_is_out_of_sync_and_tried_again(tmp_path: Path) -> None:
    box = Box(tmp_path)
    box.cache.parent.rmdir()  # the state directory gone
    box.step()
    in_sync, repairs, failures = box.state()
    assert (in_sync, repairs) == (False, 0) and failures == 1
    state = box.ledger.get(RESOURCE)
    assert state is not None and state.kind == "transient"
    box.cache.parent.mkdir()
    box.step(VERIFY_SECONDS + 60)  # past the backoff
    assert box.state()[0] is True
    assert replay.kept_for(str(box.table), box.key())


def test_a_box_that_serves_a_cluster_keeps_its_parse_but_no_table(tmp_path: Path) -> None:
    box = Box(tmp_path)
    box.file.write_text(
        config_text(2)
        + "pools: [{name: web, addresses: [198.51.100.128/26]}]\n"
        + "kubernetes: {resync_seconds: 60}\n"
    )
    box.reader.load(box.file)
    box.step()
    assert config_key(box.cache) == box.key()
    assert not box.table.exists()


@pytest.mark.parametrize("size", [0, 40])
def test_a_cache_of_another_format_names_no_key(tmp_path: Path, size: int) -> None:
    path = tmp_path / "config.cache"
    path.write_bytes(b"x" * size)
    assert config_key(path) is None
    assert config_key(tmp_path / "absent") is None


def test_a_look_that_fails_never_stops_the_loop_and_is_tried_again(tmp_path: Path) -> None:
    box = Box(tmp_path)
    failing = True

    def intents() -> Intents:
        if failing:
            raise PermissionError(13, "Permission denied", str(tmp_path / "intents.json"))
        return Intents()

    box.caches.intents = intents
    box.step()  # the loop's step: nothing raised into it
    state = box.ledger.get(RESOURCE)
    assert state is not None and not state.in_sync and "Permission denied" in str(state.last_error)
    failing = False
    box.step(VERIFY_SECONDS + 60)
    assert box.state()[0] is True and replay.kept_for(str(box.table), box.key())
