"""The outbox: the director's writes to the cluster never wait on each other
(issue 17, weakness 3)."""

from __future__ import annotations

import threading
import time

from director.engine.events import WriteFailed
from director.engine.outbox import Outbox
from lab.wait import eventually
from tests.enginelab import Writer


class Refusing(Writer):
    """An API server that refuses Events in one namespace (being deleted: 403) and is
    briefly unable to take ``flaky``'s status (500 twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.flaky_failures = 2
        self.attempts: list[str] = []
        self.release = threading.Event()
        self.release.set()

    def patch_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        from director.adapters.kube.client import KubeError

        self.release.wait(5)
        self.attempts.append(f"status {name}")
        if name == "flaky" and self.flaky_failures:
            self.flaky_failures -= 1
            raise KubeError(500, "InternalError", "etcd leader changed")
        super().patch_status(namespace, name, ips)

    def event(
        self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
    ) -> None:
        from director.adapters.kube.client import KubeError

        self.release.wait(5)
        self.attempts.append(f"event {name}")
        if namespace == "terminating":
            raise KubeError(
                403,
                "Forbidden",
                f"unable to create new content in namespace "
                f"{namespace} because it is being terminated",
            )
        super().event(namespace, name, uid, kind=kind, reason=reason, message=message)


def test_a_refused_event_does_not_hold_back_a_later_status_write() -> None:
    writer, failures = Refusing(), []
    outbox = Outbox(writer, failures.append)
    try:
        outbox.put(
            ("event", "terminating/old", "Refused", "x"),
            lambda: writer.event(
                "terminating", "old", "u1", kind="Warning", reason="Refused", message="x"
            ),
        )
        outbox.put(
            ("status", "default/new"),
            lambda: writer.patch_status("default", "new", ("198.51.100.1",)),
        )
        eventually(outbox.idle, timeout=5, what="both writes settled")
        assert writer.status == [("default/new", ("198.51.100.1",))]
        assert writer.attempts.count("event old") == 1, "a 403 is not retried"
        assert failures == [WriteFailed("create", "events", "403", dropped=True)]
    finally:
        outbox.close()


def test_a_failing_write_is_retried_on_its_own_while_the_others_go_ahead() -> None:
    writer, failures = Refusing(), []
    outbox = Outbox(writer, failures.append)
    try:
        outbox.put(
            ("status", "default/flaky"),
            lambda: writer.patch_status("default", "flaky", ("198.51.100.2",)),
        )
        eventually(lambda: failures, timeout=5, what="the first failure")
        for name in ("a", "b", "c"):
            outbox.put(
                ("status", f"default/{name}"), lambda n=name: writer.patch_status("default", n, ())
            )
        eventually(outbox.idle, timeout=10, what="every write done")
        assert writer.attempts[:4] == ["status flaky", "status a", "status b", "status c"]
        assert writer.attempts.count("status flaky") == 3  # two 500s, then written
        assert writer.status[-1] == ("default/flaky", ("198.51.100.2",))
        assert failures == [WriteFailed("patch", "services/status", "500", dropped=False)] * 2
    finally:
        outbox.close()


def test_an_event_write_that_hangs_does_not_hold_back_status() -> None:
    """An admission webhook on Events that accepts and never answers held every new
    Service's status for as long as each hanging write took: status has a thread of its own."""
    hang = threading.Event()
    writer = Refusing()

    def hanging_event() -> None:
        hang.wait(30)  # the webhook's timeout
        writer.event("default", "e1", "u", kind="Normal", reason="R", message="m")

    outbox = Outbox(writer)
    try:
        outbox.put(("event", "default/e1", "R", "m"), hanging_event)
        eventually(lambda: not outbox._queues[1], what="the Event write under way")
        for name in ("first", "second"):
            outbox.put(
                ("status", f"default/{name}"), lambda n=name: writer.patch_status("default", n, ())
            )
        eventually(lambda: len(writer.status) == 2, timeout=5, what="status written")
        assert writer.attempts == ["status first", "status second"], "the Event still hangs"
        hang.set()
        eventually(outbox.idle, timeout=5, what="the Event written once it answered")
        assert writer.attempts[-1] == "event e1"
    finally:
        hang.set()
        outbox.close()


def test_a_server_answering_429_is_asked_once_per_backoff_step_not_once_per_event() -> None:
    """5,000 distinct Events (a tenant value in each message) against a server answering
    429: the Events queue waits as a whole, so the attempts are a handful, not thousands;
    no more than MAX_EVENTS wait, the oldest giving way; the status queue goes on."""
    from director.adapters.kube.client import KubeError
    from director.engine.outbox import MAX_EVENTS

    attempts: list[str] = []

    class Busy(Writer):
        def event(
            self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
        ) -> None:
            attempts.append(message)
            raise KubeError(429, "TooManyRequests", "slow down")

    writer, failures = Busy(), []
    outbox = Outbox(writer, failures.append)
    try:
        for i in range(5000):
            outbox.put(
                ("event", f"default/s{i}", "Bad", f"tenant value {i}"),
                lambda i=i: writer.event(
                    "default",
                    f"s{i}",
                    "u",
                    kind="Warning",
                    reason="Bad",
                    message=f"tenant value {i}",
                ),
            )
        outbox.put(("status", "default/web"), lambda: writer.patch_status("default", "web", ()))
        eventually(lambda: writer.status, timeout=5, what="the status written all the same")
        time.sleep(3)
        assert 1 <= len(attempts) <= 12, f"{len(attempts)} attempts in 3 s"
        overflowed = [f for f in failures if f.code == "overflow"]
        assert len(overflowed) == 5000 - MAX_EVENTS and outbox.dropped == len(overflowed)
        assert len(outbox._events) == MAX_EVENTS
    finally:
        outbox.close()


def test_an_event_not_written_in_time_is_dropped_as_stale() -> None:
    from director.engine.outbox import EVENT_MAX_AGE

    now = [1000.0]

    class Down(Writer):
        def event(
            self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
        ) -> None:
            raise ConnectionRefusedError("no API server")

    writer, failures = Down(), []
    outbox = Outbox(writer, failures.append, clock=lambda: now[0])
    try:
        outbox.put(
            ("event", "default/web", "R", "m"),
            lambda: writer.event("default", "web", "u", kind="Normal", reason="R", message="m"),
        )
        eventually(lambda: failures, timeout=5, what="the first failure")
        now[0] += EVENT_MAX_AGE + 1  # the API server is back hours later: nothing stale sent
        with outbox._cv:
            outbox._cv.notify()
        eventually(outbox.idle, timeout=5, what="the stale Event dropped")
        assert failures[-1] == WriteFailed("create", "events", "stale", dropped=True)
    finally:
        outbox.close()


def test_a_status_write_that_hangs_does_not_hold_back_another_service_s() -> None:
    """Issue 71, 4: a webhook that never answered on one Service's status held the next
    three new Services' status for 30-120 s. Status is written by several threads, one
    target at a time: the others go ahead, and a newer write for the hanging Service waits
    for the one in flight instead of racing it."""
    hang = threading.Event()
    writer = Refusing()
    written: list[str] = []

    def hanging(label: str) -> None:
        hang.wait(30)  # the webhook's timeout
        written.append(label)

    outbox = Outbox(writer)
    try:
        outbox.put(("status", "default/stuck"), lambda: hanging("stuck first"))
        eventually(lambda: ("status", "default/stuck") in outbox._inflight, what="under way")
        outbox.put(("status", "default/stuck"), lambda: written.append("stuck second"))
        for name in ("a", "b", "c"):
            outbox.put(
                ("status", f"default/{name}"), lambda n=name: writer.patch_status("default", n, ())
            )
        eventually(lambda: len(writer.status) == 3, timeout=5, what="the others written")
        assert written == [], "the newer write for the stuck Service waits for the first"
        hang.set()
        eventually(outbox.idle, timeout=5, what="both of the stuck Service's written")
        assert written == ["stuck first", "stuck second"]
    finally:
        hang.set()
        outbox.close()


def test_a_later_event_of_the_same_service_and_reason_replaces_one_waiting() -> None:
    """Issue 71, 4: 3,000 distinct messages of one Service while the server answered 429
    were kept and all written once it recovered. One waits per Service and reason."""
    writer = Refusing()
    writer.release.clear()  # the server does not answer yet
    outbox = Outbox(writer)
    try:
        outbox.put(
            ("event", "default/hold", "Hold"),
            lambda: writer.event("default", "hold", "u", kind="Normal", reason="Hold", message="m"),
        )
        eventually(lambda: ("event", "default/hold", "Hold") in outbox._inflight, what="sent")
        for n in range(3000):
            outbox.put(
                ("event", "default/web", "InvalidEndpoint"),
                lambda n=n: writer.event(
                    "default", "web", "u", kind="Warning", reason="InvalidEndpoint", message=f"{n}"
                ),
            )
        writer.release.set()
        eventually(outbox.idle, timeout=10, what="written")
        assert writer.attempts.count("event web") == 1
    finally:
        writer.release.set()
        outbox.close()
