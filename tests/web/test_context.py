"""What every route shares (``ApiContext``): the kernel's counters read at most once a
second whatever the request rate, and a write handed to the loop or the cluster answered
with why it did not happen (refused, not taken in time, shadow mode, no cluster, the API
server's own refusal)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from director.core.intents import AddDrain, Drain
from director.dataplane.fake import FakeIpvs
from director.engine.events import Reply
from director.web.context import ApiContext
from director.web.errors import Problem


class Loop:
    """A loop that answers each intent with ``answer`` (None: never in time)."""

    def __init__(self, answer: tuple[int, str] | None = None, dry_run: bool = False) -> None:
        self.answer, self.dry_run = answer, dry_run
        self.timeouts: list[float] = []

    def submit_intent(self, intent: Any, timeout: float = 10.0) -> Reply:
        self.timeouts.append(timeout)
        reply = Reply()
        if self.answer is not None:
            reply.resolve(*self.answer)
        return reply


class Counting(FakeIpvs):
    def __init__(self) -> None:
        super().__init__()
        self.stat_reads = 0

    def read(self, stats: bool = False):  # type: ignore[no-untyped-def]
        self.stat_reads += 1
        return super().read(stats=stats)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    now = [1000.0]
    monkeypatch.setattr("director.web.context.time.monotonic", lambda: now[0])
    yield now


def test_the_counters_are_read_once_a_second_whatever_the_request_rate(clock: list[float]) -> None:
    ipvs = Counting()
    ctx = ApiContext(Loop(), ipvs, None, None)  # type: ignore[arg-type]
    first = ctx.counters()
    clock[0] += 0.9
    assert ctx.counters() is first and ipvs.stat_reads == 1
    clock[0] += 0.2
    ctx.counters()
    assert ipvs.stat_reads == 2


def drain() -> AddDrain:
    return AddDrain(Drain("192.0.2.11"))


def test_a_write_the_loop_takes_returns_and_one_it_refuses_keeps_its_status() -> None:
    ApiContext(Loop((201, "")), FakeIpvs(), None, None).intent(drain())  # type: ignore[arg-type]
    refused = ApiContext(Loop((409, "drained already")), FakeIpvs(), None, None)  # type: ignore[arg-type]
    with pytest.raises(Problem) as caught:
        refused.intent(drain())
    assert (caught.value.status, str(caught.value)) == (409, "drained already")


def test_a_write_the_loop_does_not_take_in_time_is_a_503_that_says_nothing_changed() -> None:
    """Issue 71, 1: the loop drops an intent whose asker gave up (``Reply.abandon``), so the
    503 says nothing was changed, and nothing will be."""
    loop = Loop(None)
    with pytest.raises(Problem) as caught:
        ApiContext(loop, FakeIpvs(), None, None).intent(drain())  # type: ignore[arg-type]
    assert caught.value.status == 503 and "nothing was changed" in str(caught.value)
    assert loop.timeouts == [10.0]


class Refusing:
    def patch_annotations(self, namespace: str, name: str, values: dict[str, str | None]) -> None:
        raise RuntimeError("HTTP 422: metadata.annotations: Invalid value")


@pytest.mark.parametrize(
    ("loop", "writer", "status", "words"),
    [
        (Loop(dry_run=True), Refusing(), 409, "shadow mode"),
        (Loop(), None, 409, "no Kubernetes connection"),
        (Loop(), Refusing(), 503, "did not accept the change: HTTP 422"),
    ],
)
def test_a_choice_stored_on_the_service_says_why_it_was_not(
    loop: Loop, writer: Refusing | None, status: int, words: str
) -> None:
    ctx = ApiContext(loop, FakeIpvs(), writer, None)  # type: ignore[arg-type]
    with pytest.raises(Problem) as caught:
        ctx.annotate("shop/cart", {"lvs.director/scheduler": "sh"})
    assert caught.value.status == status and words in str(caught.value)
