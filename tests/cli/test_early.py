"""A first start's table sent as soon as its file is read (``director.cli.early``): the very
messages a first sync sends an empty kernel, the API's saved intents applied, nothing for a
cluster's box, and a start that fails after it takes back what it sent. The kernel's side
(an empty table, the acks) is the kernel suite's (``tests/system/test_replay.py``); here
the socket is a recording stand-in that answers as the kernel does."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from director.cli import ahead, early
from director.cli.early import static_table
from director.core.added import OpChain
from director.core.intents import Intents
from director.core.plan import outline, outlined_ops
from director.core.services import Op, OpKind
from director.dataplane.batches import encoded_batches
from director.dataplane.fake import FakeIpvs
from director.dataplane.netlink import NLMSGHDR, split_messages
from director.dataplane.replay import Declined
from director.schema.config import Settings, parse_config

FAMILY = 0x2F  # a made-up number for IPVS's family: the stand-in does not care


def box(services: int, api: str = "") -> str:
    lines = ["ownership: {networks: [198.51.100.0/24]}", "services:"]
    for i in range(services):
        lines.append(
            f"  - {{name: s{i}, address: 198.51.100.{i % 250 + 1}, port: {80 + i // 250},"
            " scheduler: wlc,"
            f" real_servers: [192.0.2.{i % 200 + 1}:8080, 192.0.2.{i % 200 + 1}:8081]}}"
        )
    return "\n".join(lines) + "\n" + api


class Kernel:
    """The socket ``early`` sends on: each datagram kept; ``refuse`` (positions counted over
    every message sent) answered with an error, ``fail_at`` (a datagram's number) raises."""

    def __init__(self, refuse: frozenset[int] = frozenset(), fail_at: int | None = None) -> None:
        self.family, self.seq = FAMILY, 0
        self.datagrams: list[bytes] = []
        self.refuse, self.fail_at = refuse, fail_at
        self.messages = 0
        self.opened = False

    def batch_errors(self, batch: bytes, first: int, count: int) -> Iterator[tuple[int, int, str]]:
        if self.fail_at is not None and len(self.datagrams) == self.fail_at:
            raise OSError(105, "No buffer space available")
        self.datagrams.append(batch)
        for position in range(count):
            if self.messages + position in self.refuse:
                yield position, 17, "File exists"
        self.messages += count


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Kernel:
    found = Kernel()

    @contextlib.contextmanager
    def empty_table(netns: str | None) -> Iterator[Kernel]:
        found.opened = True
        yield found

    monkeypatch.setattr(early, "empty_table", empty_table)
    monkeypatch.setattr(early, "_usable", lambda table: frozenset({"wlc", "rr"}))
    return found


def parsed(text: str, tmp_path: Path) -> Settings:
    path = tmp_path / "director.yaml"
    path.write_text(text)
    return parse_config(text, str(path))


def messages(datagrams: list[bytes]) -> list[tuple[int, bytes]]:
    """Each message's type and everything after its header's flags and number (the last
    message of each datagram asks for the ack; a datagram's bounds are the sender's)."""
    out = []
    for data in datagrams:
        for kind, _flags, _seq, start, end in split_messages(data):
            out.append((kind, data[start:end]))
    return out


def first_sync_messages(settings: Settings, intents: Intents) -> list[tuple[int, bytes]]:
    """What the first sync of a director started on an empty kernel sends (the
    reconciler's plan of the same table, packed as the kernel adapter packs it)."""
    table = static_table(settings, intents)
    chain = OpChain()
    for _key, part in outlined_ops(outline(table, {}, settings.ownership), table, {}):
        chain.append(part)
    number = Kernel()
    return messages([batch for batch, _, _ in encoded_batches(chain, (), FAMILY, number)])


def test_the_table_sent_early_is_what_the_first_sync_would_send(
    tmp_path: Path, kernel: Kernel
) -> None:
    """1,500 services (4,500 operations: five chunks, ten datagrams): every message, in
    order, numbered one after the other, and only each datagram's last one acked."""
    settings = parsed(box(1500), tmp_path)
    said = early.send(settings, None)
    assert said["sent"] is True and said["services"] == 1500, said
    assert said["ops"] == 4500 and said["refused"] == 0
    assert len(kernel.datagrams) >= 8  # the sender kept up with the packer, datagram by datagram
    assert messages(kernel.datagrams) == first_sync_messages(settings, Intents())
    numbers = [
        NLMSGHDR.unpack_from(data, start - 16)[3]
        for data in kernel.datagrams
        for _, _, _, start, _ in split_messages(data)
    ]
    assert numbers == list(range(1, 4501))
    for data in kernel.datagrams:
        acked = [flags & 4 for _, flags, _, _, _ in split_messages(data)]
        assert acked[-1] and not any(acked[:-1])


def test_the_kernel_is_sent_its_first_datagram_early_and_the_sender_is_not_kept_waiting(
    tmp_path: Path, kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first datagram goes to the sender once about 512 operations are planned, not the
    4,096 of a first sync's chunk (the kernel idle meanwhile), and between two datagrams the
    packer plans at most 1,024 more; the sender waits at most half a
    millisecond for the interpreter after each answer (Python's default, 5 ms a datagram,
    left the kernel idle a third of the time); and the process's own pace is given back."""
    settings = parsed(box(1500), tmp_path)
    planned, handed, paces = [0], list[int](), list[float]()

    def counted(shape: Any, table: Any, actual: Any) -> Iterator[Any]:
        for key, part in outlined_ops(shape, table, actual):
            planned[0] += len(part)
            yield key, part

    def watched(*args: Any) -> Iterator[Any]:
        for batch in encoded_batches(*args):
            handed.append(planned[0])
            yield batch

    sending = kernel.batch_errors

    def paced(batch: bytes, first: int, count: int) -> Iterator[tuple[int, int, str]]:
        paces.append(sys.getswitchinterval())
        return sending(batch, first, count)

    monkeypatch.setattr(early, "outlined_ops", counted)
    monkeypatch.setattr(early, "encoded_batches", watched)
    monkeypatch.setattr(kernel, "batch_errors", paced)
    own = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    try:
        assert early.send(settings, None)["sent"] is True
        assert sys.getswitchinterval() == pytest.approx(0.004)
    finally:
        sys.setswitchinterval(own)
    assert handed[0] <= 512 + 3 < 4096 <= handed[-1]  # a service's 3 operations past 512
    assert max(b - a for a, b in itertools.pairwise(handed)) <= 1024 + 3
    assert len(paces) == len(kernel.datagrams) >= 8
    assert max(paces) <= 0.0005


def test_the_apis_saved_intents_are_in_the_table_sent(tmp_path: Path, kernel: Kernel) -> None:
    intents = tmp_path / "intents.json"
    intents.write_text(
        json.dumps(
            {
                "schedulers": {"s1": {"scheduler": "rr", "flags": []}},
                "drains": [{"address": "192.0.2.3", "port": 8080}],
            }
        )
    )
    token = tmp_path / "token"
    api = f"api: {{listen: '127.0.0.1:9180', token_file: {token}, intents_file: {intents}}}\n"
    settings = parsed(box(5, api), tmp_path)
    assert early.send(settings, None)["sent"] is True
    saved = Intents.load(intents)
    assert messages(kernel.datagrams) == first_sync_messages(settings, saved)
    assert messages(kernel.datagrams) != first_sync_messages(settings, Intents())


def test_what_is_not_sent_early_and_why(tmp_path: Path, kernel: Kernel) -> None:
    intents = tmp_path / "intents.json"
    intents.write_text("{not json")
    api = f"api: {{listen: '127.0.0.1:9180', token_file: /t, intents_file: {intents}}}\n"
    said = early.send(parsed(box(3, api), tmp_path), None)
    assert said["sent"] is False and "the API's saved intents" in str(said["reason"])
    empty = early.send(parsed("ownership: {networks: [198.51.100.0/24]}\n", tmp_path), None)
    assert empty == {"sent": False, "reason": "no static service"}
    one: Any = object()  # a cluster's settings: only whether there is one matters here
    cluster = dataclasses.replace(parsed(box(3), tmp_path), clusters=(one,))
    assert "a cluster's box" in str(early.send(cluster, None)["reason"])
    assert not kernel.opened and kernel.datagrams == []


def test_what_the_kernel_refuses_is_counted_and_a_failed_send_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = parsed(box(1500), tmp_path)
    refusing, failing = Kernel(refuse=frozenset({0, 4400})), Kernel(fail_at=3)
    for stand_in in (refusing, failing):

        @contextlib.contextmanager
        def empty_table(netns: str | None, found: Kernel = stand_in) -> Iterator[Kernel]:
            yield found

        monkeypatch.setattr(early, "empty_table", empty_table)
        monkeypatch.setattr(early, "_usable", lambda table: frozenset({"wlc"}))
        said = early.send(settings, None)
        if stand_in is refusing:
            assert said["sent"] is True and said["refused"] == 2
    assert said == {"sent": False, "reason": "the kernel: No buffer space available"}
    assert len(failing.datagrams) == 3  # nothing after the datagram that failed


def test_a_kernel_that_holds_services_gets_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @contextlib.contextmanager
    def empty_table(netns: str | None) -> Iterator[Kernel]:
        raise Declined("the kernel holds virtual services already")
        yield Kernel()  # pragma: no cover

    monkeypatch.setattr(early, "empty_table", empty_table)
    said = early.send(parsed(box(3), tmp_path), None)
    assert said == {"sent": False, "reason": "the kernel holds virtual services already"}


def test_a_failed_start_takes_back_its_static_services_and_nothing_else(tmp_path: Path) -> None:
    settings = parsed(box(3), tmp_path)
    ipvs = FakeIpvs()
    chain = OpChain()
    table = static_table(settings, Intents())
    for _key, part in outlined_ops(outline(table, {}, settings.ownership), table, {}):
        chain.append(part)
    assert ipvs.apply(tuple(chain)).ok
    foreign = dataclasses.replace(next(iter(table)), port=81)
    ipvs.apply((Op(OpKind.ADD_SERVICE, foreign, next(iter(table.values())).config),))
    assert early.withdraw(settings, ipvs) == 3
    assert list(ipvs.read().services) == [foreign]


def test_the_child_sends_only_once_the_command_has_read_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command refused for its arguments (it never says go) leaves no table: the child
    parses and keeps the cache, and sends nothing. Told to go, it sends (here to a kernel
    that answers no, whatever this host has: its answer is the child's report)."""

    def no_kernel(netns: str | None) -> Kernel:
        raise OSError(19, "No such device")

    monkeypatch.setattr(early, "empty_table", no_kernel)  # the forked child's too
    config = tmp_path / "director.yaml"
    config.write_text(box(3))
    for told in (False, True):
        cache = tmp_path / f"config-{told}.cache"
        assert ahead.start(str(config), str(cache), [], netns=None) == {"forked": True}
        if told:
            ahead.go()
        else:
            os.close(ahead._GO.pop())  # the command exited
        ahead.sent()  # told: until its report is in; not told: nothing to wait for
        assert bool(ahead._SENT) is told
        found = ahead.wait()
        assert found["parsed"] is True and cache.exists()
        if told:
            assert found["early"]["sent"] is False  # type: ignore[index]
            assert found["early"]["reason"] == "the kernel: No such device"  # type: ignore[index]
        else:
            assert "early" not in found


def test_a_child_gone_before_the_command_says_go_stops_nothing(tmp_path: Path) -> None:
    """A fault in the file ends the child at once, often before the command has read its
    arguments: the command's go finds the pipe closed and goes on (it then parses the file
    itself and says where the fault is)."""
    config = tmp_path / "director.yaml"
    config.write_text(box(3).replace("192.0.2.1:8080", "192.0.2.300:8080"))
    assert ahead.start(str(config), str(tmp_path / "c.cache"), [], netns=None) == {"forked": True}
    os.waitid(os.P_PID, ahead._CHILD[-1][0], os.WEXITED | os.WNOWAIT)  # exited, not reaped
    ahead.go()  # the pipe is closed: no BrokenPipeError
    ahead.sent()  # nothing to wait for: it was never told
    found = ahead.wait()
    assert found["parsed"] is False and "exited 1" in str(found["reason"])
    assert "early" not in found


# Loaded before the table for no use of its own: OpenSSL (hashlib), pickle (the cache, which a
# first start has not got), socket.py (its enums and selectors: the C module is enough),
# inspect and ast (dataclasses' docstrings for classes without one, the schema's field
# docs), the API's and the cluster's libraries.
NOT_BEFORE_THE_TABLE = {
    "inspect",
    "ast",
    "dis",
    "hashlib",
    "_hashlib",
    "pickle",
    "socket",
    "selectors",
    "flask",
    "kubernetes",
}


def modules_at_send(tmp_path: Path, **env: str) -> set[str]:
    """What a real ``director run`` (no cache) has loaded when its table would go out."""
    import sys

    from lab.bench_presend import at_send

    config = tmp_path / "director.yaml"
    config.write_text(box(20))
    environment = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    return set(at_send(sys.executable, config, {**environment, **env})["loaded"])


def test_a_first_start_loads_nothing_before_its_table_that_the_table_does_not_need(
    tmp_path: Path,
) -> None:
    loaded = modules_at_send(tmp_path, MALLOC_ARENA_MAX="1")
    assert "director.schema.config" in loaded  # the file was read: this is the send
    assert not loaded & NOT_BEFORE_THE_TABLE
    assert "ctypes" not in loaded  # under the unit, glibc has one heap already


def test_the_send_makes_one_c_heap_unless_the_environment_has(
    tmp_path: Path, kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    from director.dataplane import memory

    made: list[bool] = []

    def one_heap() -> bool:
        made.append(True)
        return True

    monkeypatch.setattr(memory, "one_heap", one_heap)
    settings = parsed(box(3), tmp_path)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")  # the role's unit
    assert early.send(settings, None)["sent"] is True
    assert made == []
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    assert early.send(settings, None)["sent"] is True
    assert made == [True]
