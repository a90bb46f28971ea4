"""A static box's kept table, on the host (no IPVS here; the kernel suite replays it on a
real kernel, tests/system/test_replay.py): kept whole and private, read back only under its
key, and a start that cannot replay says why and goes on."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.dataplane import codec, replay


def kept(path: Path, key: str = "k1", depends: tuple[str, ...] = ()) -> None:
    batches = [(b"\x01" * 40, 1, 2), (b"\x02" * 24, 3, 1)]
    made = {name: replay.digest(name) for name in depends}
    replay.store(str(path), key, 33, batches, services=2, depends=made)


def test_the_table_is_kept_whole_private_and_under_its_key(tmp_path: Path) -> None:
    path = tmp_path / replay.FILE_NAME
    kept(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert replay.stored_key(str(path)) == "k1"
    header, key, figures, files, index, rest = path.read_bytes().split(b"\n", 5)
    assert (header, key, figures, files) == (replay.FORMAT, b"k1", b"33 2 3", b"-")
    assert index == b"40:1:2,24:3:1"
    assert rest == b"\x01" * 40 + b"\x02" * 24
    assert list(tmp_path.iterdir()) == [path], "no temporary file left"
    assert replay.path_beside("/var/lib/director/config.cache") == ("/var/lib/director/table.cache")


def test_a_replay_never_sends_what_another_file_or_code_kept(tmp_path: Path) -> None:
    path = tmp_path / replay.FILE_NAME
    assert replay.replay(str(path), "k1") == {"replayed": False, "reason": "none kept yet"}
    kept(path)
    said = replay.replay(str(path), "k2")
    assert said == {"replayed": False, "reason": "the file or the code changed since it was kept"}
    path.write_bytes(path.read_bytes()[:-5])
    assert replay.replay(str(path), "k1") == {"replayed": False, "reason": "cut short"}
    header, key, figures, files, _, rest = path.read_bytes().split(b"\n", 5)
    path.write_bytes(b"\n".join((header, key, figures, files, b"40:1,24:3:1", rest)))
    assert replay.replay(str(path), "k1")["reason"] == "unreadable: its index is not this format's"
    path.write_bytes(b"something else\n")
    assert replay.stored_key(str(path)) is None
    assert replay.replay(str(path), "k1")["reason"] == "the cache is not of this format"


def test_a_kernel_that_cannot_take_it_is_a_reason_not_a_failure(tmp_path: Path) -> None:
    """This host's kernel has no IPVS: the replay says so and the start goes on."""
    path = tmp_path / replay.FILE_NAME
    kept(path)
    said = replay.replay(str(path), "k1")
    assert said["replayed"] is False
    assert str(said["reason"]).startswith(("the kernel", "the kernel numbers"))


def test_the_dump_asked_for_is_the_codecs_service_dump() -> None:
    assert replay.GET_SERVICE == codec.CMD_GET_SERVICE


def test_a_table_made_with_the_apis_intents_is_replayed_only_with_them_unchanged(
    tmp_path: Path,
) -> None:
    """A drain or a maintenance set through the API since: the first sync decides, not the
    kept table."""
    path, intents = tmp_path / replay.FILE_NAME, tmp_path / "intents.json"
    intents.write_text('{"drains": []}')
    kept(path, depends=(str(intents),))
    assert replay.kept_for(str(path), "k1") and not replay.kept_for(str(path), "k2")
    intents.write_text('{"drains": ["static/web 192.0.2.1:80"]}')
    assert not replay.kept_for(str(path), "k1"), "written again with the intents as they are"
    assert replay.replay(str(path), "k1")["reason"] == f"{intents} changed since it was kept"
    intents.unlink()
    kept(path, depends=(str(intents),))  # none yet, as on a new box: none is what it needs
    assert replay.kept_for(str(path), "k1")
    intents.write_text("{}")
    assert replay.replay(str(path), "k1")["reason"] == f"{intents} changed since it was kept"


def test_the_datagrams_are_written_as_they_come_and_a_failure_leaves_nothing(
    tmp_path: Path,
) -> None:
    """A 5,000-service table is 7.5 MB of datagrams: each is on disk before the next is
    made (each is ~64 KB, past any write buffer), so a running box never holds them all.
    A table whose datagrams stop coming midway (here the encoding raises ENOSPC after the
    first) leaves neither the cache nor a temporary file."""
    path = tmp_path / replay.FILE_NAME
    on_disk: list[int] = []
    BIG = 60_000  # noqa: N806  # a datagram's size (BATCH_BYTES ~64 KB)

    def made() -> Iterator[replay.Batch]:
        for n in range(1, 4):
            spooled = [p for p in tmp_path.iterdir() if p.name.endswith(".data")]
            on_disk.append(sum(p.stat().st_size for p in spooled))
            yield bytes([n]) * BIG, n, 1

    assert replay.store(str(path), "k1", 33, made(), services=3) == (3, 3 * BIG)
    assert on_disk == [0, BIG, 2 * BIG], "each datagram written before the next was made"
    assert path.read_bytes().split(b"\n", 5)[4:] == [
        f"{BIG}:1:1,{BIG}:2:1,{BIG}:3:1".encode(),
        b"\x01" * BIG + b"\x02" * BIG + b"\x03" * BIG,
    ]

    def failing() -> Iterator[replay.Batch]:
        yield b"\x01" * 40, 1, 1
        raise OSError(28, "No space left on device")

    path.unlink()
    with pytest.raises(OSError, match="No space left"):
        replay.store(str(path), "k1", 33, failing(), services=1)
    assert list(tmp_path.iterdir()) == [], "no cache, no temporary file"


def test_a_table_another_user_could_have_written_is_never_sent(tmp_path: Path) -> None:
    """Issue 71, 6: a table.cache changed in place (its size and time put back) was replayed
    into the kernel. One writable by another user, or owned by one, is not read at all."""
    import os

    path = tmp_path / replay.FILE_NAME
    kept(path)
    path.chmod(0o666)
    assert replay.replay(str(path), "k1") == {
        "replayed": False,
        "reason": "not trusted: writable by other users",
    }
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    assert replay.replay(str(path), "k1")["reason"].startswith("not trusted: owned by uid 65534")
