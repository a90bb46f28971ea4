"""The Kubernetes client: credentials read again when they change, without a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from director.adapters.kube.client import KubeApi, KubeError
from director.adapters.kube.write import KubeWriter
from lab.kubeapi import FakeApiServer


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


def test_a_token_file_that_ends_in_a_newline_is_trimmed_and_no_credential_is_logged(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """Issue 71, 4: ``kubectl create token ... > file`` ends the file in a newline; every
    request then failed before it was sent (an invalid header) and the token's text was
    logged at every retry. It is trimmed as client-go and kubectl do; and whatever an error
    quotes of an Authorization header, the log line says ``<redacted>``."""
    import logging

    from director.logs import Formatter

    token_file = tmp_path / "token"
    token_file.write_text(api.token + "\n")
    kubeconfig = api.kubeconfig(tmp_path / "kc")
    config = json.loads(kubeconfig.read_text())
    config["users"][0]["user"] = {"tokenFile": str(token_file)}
    kubeconfig.write_text(json.dumps(config))
    assert KubeApi.connect(str(kubeconfig)).request("GET", "/api/v1/nodes")["items"] == []
    error = ValueError(f"Invalid header value b'Bearer {api.token}\\n'")
    record = logging.LogRecord("director.kube", logging.ERROR, "", 0, "%s", (error,), None)
    line = Formatter().format(record)
    assert api.token not in line and "Bearer <redacted>" in line, line


def test_a_watch_is_cut_at_once_but_never_after_its_connection_went_back_to_the_pool() -> None:
    """``WatchStream.shutdown`` (a stopping watcher's) cuts a live watch; once the watch has
    ended and its connection is back in the pool, another request may be using it: it is
    left alone."""
    from director.adapters.kube.client import WatchStream

    class Response:
        def __init__(self, lines: list[bytes]) -> None:
            self.lines, self.calls = lines, []

        def stream(self, *args: object, **kwargs: object) -> object:
            return iter(self.lines)

        def read_chunked(self, *args: object, **kwargs: object) -> object:
            return iter(self.lines)

        def shutdown(self) -> None:
            self.calls.append("shutdown")

        def release_conn(self) -> None:
            self.calls.append("release")

    live = Response([b'{"type": "ADDED", "object": {"metadata": {"name": "a"}}}\n'])
    stream = WatchStream(live)
    stream.shutdown()
    assert live.calls == ["shutdown"]
    ended = Response([])
    stream = WatchStream(ended)
    assert list(stream) == []
    stream.shutdown()
    assert ended.calls == ["release"], "a pooled connection is never cut"


def test_a_lists_pages_are_sized_by_their_bytes_so_no_decoding_holds_the_others_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's JSON is decoded in one call no other thread can interrupt: pages of big
    objects (EndpointSlices of many endpoints) get fewer objects, about PAGE_BYTES each,
    and every object still comes, in order."""
    import director.adapters.kube.client as kube_module
    from director.adapters.kube.client import SERVICES, api_client
    from lab.kubeapi import service

    monkeypatch.setattr(kube_module, "PAGE_BYTES", 256 * 1024)
    with FakeApiServer() as server:
        for i in range(400):
            big = service(f"s{i:03}", [("http", "TCP", 80)], annotations={"note": "x" * 4000})
            server.create("services", big)
        api = KubeApi(api_client(str(server.kubeconfig(tmp_path / "kc"))))
        pages: list[tuple[int, int]] = []  # (limit asked, bytes answered)
        send = api._send

        def recorded(method: str, path: str, query: list[tuple[str, object]] | None, *a, **kw):  # type: ignore[no-untyped-def]
            response = send(method, path, query, *a, **kw)
            limit = dict(query or []).get("limit")
            if limit is not None:
                pages.append((int(str(limit)), len(response.data)))
            return response

        monkeypatch.setattr(api, "_send", recorded)
        items, _ = api.list(SERVICES, lambda obj: obj["metadata"]["name"])
    assert items == [f"s{i:03}" for i in range(400)]
    assert pages[0][0] == kube_module.FIRST_PAGE  # about 450 KB: then sized down
    assert all(30 < limit < 80 for limit, _ in pages[1:]), pages
    assert all(size < 1.5 * 256 * 1024 for _, size in pages[1:-1]), pages
