"""The watchers against the stand-in, which sends bookmarks as kube-apiserver does: about once
a minute, and none for a resource with no writes since it started (issue 17, weakness 1)."""

from __future__ import annotations

import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from director.adapters.kube.client import NODES, KubeApi, KubeError, api_client
from director.adapters.kube.watch import Watcher
from lab.kubeapi import FakeApiServer


class Seen:
    """What the watcher told the loop, with the time it said it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[float, str, str]] = []

    def __call__(self, resource: str, kind: str, payload: Any) -> None:
        with self.lock:
            self.calls.append((time.monotonic(), resource, kind))

    def connected_after(self, start: float, timeout: float) -> float:
        """Seconds from ``start`` until the watcher said CONNECTED (or listed) again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for when, _, kind in self.calls:
                    if when > start and kind in ("CONNECTED", "RELIST"):
                        return when - start
            time.sleep(0.02)
        raise AssertionError(f"not connected {timeout:.0f} s after the API came back")


def test_a_quiet_resource_reconnects_at_once_after_a_second_outage(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """Nodes see no writes: no event and no bookmark ever arrives on their watch. A long
    outage grew the watcher's backoff; once the API is back and the watch started, the
    next outage must be retried from the short delay again, not from the grown one."""
    seen = Seen()
    kube = KubeApi(api_client(str(api.kubeconfig(tmp_path / "kc"))))
    watcher = Watcher(kube, NODES, seen, lambda obj: obj, watch_seconds=60, backoff_max=8.0)
    watcher.start()
    try:
        seen.connected_after(0, timeout=10)
        with api.outage():
            time.sleep(4.0)  # retries at about 0.5, 1, 2, 4 s: the delay has grown to 8 s
        back = time.monotonic()
        first = seen.connected_after(back, timeout=15)
        time.sleep(0.5)  # the watch is running, quietly
        with api.outage():
            time.sleep(0.1)
        back = time.monotonic()
        second = seen.connected_after(back, timeout=15)
        print(
            f"\nreconnected {first:.2f} s after the first outage, {second:.2f} s after the second"
        )
        assert second < 1.0, f"the grown backoff was kept: {second:.1f} s"
    finally:
        watcher.stop()


def test_the_watches_resume_within_seconds_of_the_end_of_a_long_outage(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """A 10 s outage grows the backoff to 8-16 s; against a real server the watches came
    back 16-19 s after a 25 s outage. The watcher looks for the server about once a second
    while it waits, and resumes when it answers."""
    seen = Seen()
    watcher = Watcher(
        KubeApi.connect(str(api.kubeconfig(tmp_path / "kc"))),
        NODES,
        seen,
        lambda obj: obj,
        watch_seconds=60,
    )
    watcher.start()
    try:
        seen.connected_after(0, timeout=10)
        with api.outage():
            time.sleep(10.0)
        back = time.monotonic()
        after = seen.connected_after(back, timeout=40)
        print(f"\nwatching again {after:.2f} s after a 10 s outage ended")
        assert after < 3.0, f"the backoff was waited out: {after:.1f} s"
    finally:
        watcher.stop()


def test_retries_are_jittered_between_half_and_all_of_the_delay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two watchers that lose the API at the same moment do not come back in lock-step."""
    with FakeApiServer() as gone:
        config = str(gone.kubeconfig(tmp_path / "kc"))
    caplog.set_level("WARNING", logger="director")
    watchers = [
        Watcher(KubeApi(api_client(config)), NODES, Seen(), lambda obj: obj) for _ in range(2)
    ]
    for watcher in watchers:
        watcher.start()
    time.sleep(2.5)  # retries after about 0.5, 1 and 2 s
    for watcher in watchers:
        watcher.stop()
    waits: dict[int | None, list[float]] = {}
    for record in caplog.records:
        text = record.getMessage()
        if "event=kube.watch_failed" in text:
            thread = record.thread
            waits.setdefault(thread, []).append(float(text.split("retry_in=")[1].split("s")[0]))
    first, second = (w[:3] for w in waits.values())
    assert len(waits) == 2 and len(first) == len(second) == 3, waits
    for sequence in (first, second):
        for wait, delay in zip(sequence, (0.5, 1.0, 2.0), strict=True):
            assert delay / 2 <= wait <= delay
    assert first != second


def test_a_watch_the_server_answers_410_is_relisted_not_retried_from_the_same_version(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """A watch request answered 410 Gone as an HTTP status (not an ERROR event in the
    stream, as kube-apiserver does when the version is long compacted away): the version
    never comes back, so the watcher lists afresh instead of asking for it forever."""

    seen = Seen()
    kube = KubeApi(api_client(str(api.kubeconfig(tmp_path / "kc"))))
    asked: list[str] = []
    watch = kube.watch

    def gone_once(resource: Any, version: str, seconds: int) -> Any:
        asked.append(version)
        if len(asked) == 1:
            raise KubeError(410, "Expired", "too old resource version: 1 (99)")
        return watch(resource, version, seconds)

    kube.watch = gone_once  # type: ignore[method-assign]
    watcher = Watcher(kube, NODES, seen, lambda obj: obj, watch_seconds=60)
    watcher.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(asked) < 2:
            time.sleep(0.02)
        relists = [kind for _, _, kind in seen.calls if kind == "RELIST"]
        assert len(asked) >= 2 and len(relists) == 2, (asked, seen.calls)
    finally:
        watcher.stop()


def test_each_page_of_a_list_is_collected_once_and_its_survivors_frozen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relist of thousands of objects is never walked whole by the cyclic collector (its
    passes held every thread, every cluster's events, for up to 135 ms): each page's
    objects are looked at once (any cycle goes, even one the collector promoted while the
    page was parsed) and the survivors frozen, page by page; the collector stays on, so
    other threads' cycles are still collected meanwhile."""
    import gc

    import director.adapters.kube.client as kube_module
    from director.adapters.kube.client import SERVICES
    from lab.kubeapi import service

    monkeypatch.setattr(kube_module, "FIRST_PAGE", 50)
    explicit: list[int] = []
    real_collect = gc.collect

    def collect(generation: int = 2) -> int:  # the generation walked
        explicit.append(generation)
        return real_collect(generation)

    enabled: list[bool] = []
    cycles_gone: list[bool] = []

    def parse(obj: dict[str, Any]) -> object:
        enabled.append(gc.isenabled())
        # what a parse keeps (many young objects), and a cycle it leaves behind
        looped: list[object] = []
        looped.append(looped)
        cycles_gone.append(False)
        weakref.finalize(_Box(looped), cycles_gone.__setitem__, len(cycles_gone) - 1, True)
        return [dict(obj) for _ in range(50)]

    with FakeApiServer() as api:
        for i in range(300):
            api.create("services", service(f"s{i}", [("http", "TCP", 80)]))
        kube = KubeApi(api_client(str(api.kubeconfig(tmp_path / "kc"))))
        frozen = gc.get_freeze_count()
        monkeypatch.setattr(kube_module.gc, "collect", collect)
        watcher = Watcher(kube, SERVICES, lambda *a: None, parse)
        items, _ = kube.list(SERVICES, watcher.parse, page=50)
    assert len(items) == 300 and enabled == [True] * 300
    assert explicit == [2] * 6, "one collection a page"
    assert gc.get_freeze_count() > frozen + 300 * 50, "the survivors are frozen"
    assert all(cycles_gone), "a cycle made while parsing is collected, not frozen"


class _Box:
    """Something a cycle holds: finalized when the cycle is collected."""

    def __init__(self, held: list[object]) -> None:
        held.append(self)
