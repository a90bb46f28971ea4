"""The watchers against the stand-in, which sends bookmarks as kube-apiserver does: about once
a minute, and none for a resource with no writes since it started (issue 17, weakness 1)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from director.adapters.kube import NODES, KubeApi, KubeError, KubeWriter, Watcher, api_client
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


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


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


def test_the_director_s_writes_are_its_own_in_managed_fields(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """managedFields say who owns a Service's status: lvs-director, not the client
    library's default (OpenAPI-Generator), for status patches, Events and the Lease."""
    from director.adapters.kube import KubeWriter
    from lab.kubeapi import service

    api.create("services", service("web", [("http", "TCP", 80)]))
    writer = KubeWriter(
        KubeApi(api_client(str(api.kubeconfig(tmp_path / "kc")))), "lvs-director", "box-a"
    )
    writer.patch_status("default", "web", ("198.51.100.1",))
    writer.event("default", "web", "uid", kind="Normal", reason="AddressAssigned", message="m")
    assert writer.acquire_lease("default", "lvs-director", 15)
    status = [
        f
        for f in api.get("services", "web")["metadata"]["managedFields"]
        if f.get("subresource") == "status"
    ]
    assert [f["manager"] for f in status] == ["lvs-director"]
    event = api.events_for("web")[0]
    lease = api.get("leases", "lvs-director")
    for obj in (event, lease):
        assert [f["manager"] for f in obj["metadata"]["managedFields"]] == ["lvs-director"]


def test_a_watch_the_server_answers_410_is_relisted_not_retried_from_the_same_version(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """A watch request answered 410 Gone as an HTTP status (not an ERROR event in the
    stream, as kube-apiserver does when the version is long compacted away): the version
    never comes back, so the watcher lists afresh instead of asking for it forever."""
    from director.adapters.kube import KubeError

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


def test_a_rotated_token_is_read_again_without_a_restart(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """Bound ServiceAccount tokens expire: the token a running director was started with
    stops working. A kubeconfig rewritten with the new token is read at the next request; a
    token file the kubeconfig names is read again when the server answers 401."""
    kubeconfig = api.kubeconfig(tmp_path / "kc")
    kube = KubeApi.connect(str(kubeconfig))
    kube.STAT_EVERY = 0.0
    assert kube.request("GET", "/api/v1/nodes")["items"] == []
    api.rotate_token("second")
    time.sleep(0.01)  # a new modification time for the rewritten file
    api.kubeconfig(kubeconfig)  # what the operator's rotation writes
    assert kube.request("GET", "/api/v1/nodes")["items"] == []
    assert kube.reloads == 1

    token_file = tmp_path / "token"
    token_file.write_text("second")
    config = json.loads(kubeconfig.read_text())
    config["users"][0]["user"] = {"tokenFile": str(token_file)}
    kubeconfig.write_text(json.dumps(config))
    writer = KubeWriter(KubeApi.connect(str(kubeconfig)), "lvs-director", "a")
    assert writer.acquire_lease("default", "lvs-director", 15)
    api.rotate_token("third")
    token_file.write_text("third")  # the kubeconfig itself does not change
    assert writer.acquire_lease("default", "lvs-director", 15), "renewed with the new token"
    assert writer.kube.reloads == 1

    api.rotate_token("fourth")  # a token nobody has: refused, said as 401
    with pytest.raises(KubeError) as refused:
        writer.acquire_lease("default", "lvs-director", 15)
    assert refused.value.status == 401
