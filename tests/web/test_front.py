"""The front: /healthz, /readyz and /metrics answered before Flask's router, the same gate and
the same answers as the admin app gives; every other request handed to the admin app."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterable
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import EnvironBuilder

from director.web.app import create_app
from director.web.front import OPEN_SLOTS, Front, Wsgi
from tests.weblab import AUTH, TOKEN, Director


def call(app: Wsgi, method: str, path: str, headers: dict[str, str] | None = None) -> Any:
    """One request straight to a WSGI app: (status, headers, body)."""
    environ = EnvironBuilder(method=method, path=path, headers=headers).get_environ()
    said: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        said[:] = [status, dict(headers)]

    body: Iterable[bytes] = app(environ, start_response)
    return int(said[0].split()[0]), said[1], b"".join(body)


@pytest.fixture
def front(director: Director) -> tuple[Front, list[int]]:
    """A front whose admin app (a real one) counts the requests it is handed."""
    made: list[int] = []
    door = director.controller.door()
    slots = threading.BoundedSemaphore(OPEN_SLOTS)
    flask = create_app(door, TOKEN, metrics=director.scrape, slots=slots, front=False)

    def admin(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        made.append(1)
        return flask(environ, start_response)  # type: ignore[no-any-return]

    return Front(door, director.scrape, TOKEN, ("health",), made=admin, slots=slots), made


def test_health_and_scrapes_never_reach_the_admin_app(front: tuple[Front, list[int]]) -> None:
    app, made = front
    assert call(app, "GET", "/healthz")[0] == 200
    status, headers, body = call(app, "GET", "/readyz")
    assert (status, headers["Content-Type"], body) == (
        200,
        "application/json",
        b'{"status":"ready"}\n',
    )
    status, headers, body = call(app, "GET", "/metrics", {**AUTH, "Accept-Encoding": "gzip"})
    assert (status, headers["Content-Encoding"], headers["Vary"]) == (
        200,
        "gzip",
        "Accept-Encoding",
    )
    assert b"# TYPE director_sync_duration_seconds" in gzip.decompress(body)
    assert (
        b"# TYPE director_sync_duration_seconds" in call(app, "GET", "/metrics", AUTH)[2]
    )  # plain, unpacked
    assert not made
    status, _, _ = call(app, "GET", "/api/v1/status", AUTH)
    assert status == 200 and made == [1]


def test_the_gate_comes_before_the_method_and_the_method_before_the_route(
    front: tuple[Front, list[int]],
) -> None:
    """As the admin app answers: a refusal first (401 without the token, 403 with a wrong
    one, where api.public does not open the route), then 405 with the methods allowed."""
    app, made = front
    status, headers, body = call(app, "GET", "/metrics")
    assert (status, headers["Content-Type"]) == (401, "application/problem+json")
    assert headers["WWW-Authenticate"] == 'Bearer realm="director"' and b"Bearer" in body
    assert call(app, "POST", "/metrics", {"Authorization": "Bearer nope"})[0] == 403
    status, headers, _ = call(app, "DELETE", "/healthz")
    assert (status, headers["Allow"]) == (405, "GET, HEAD, OPTIONS")
    assert call(app, "OPTIONS", "/readyz")[1]["Allow"] == "GET, HEAD, OPTIONS"
    assert not made


def test_the_routes_open_to_all_share_a_few_workers_with_the_admin_apps(
    director: Director, client: FlaskClient
) -> None:
    """While every open worker is taken, the front's open routes and the admin app's (the
    status page's data) say 503 busy; the token's routes still answer."""
    front = director.app.wsgi_app
    assert isinstance(front, Front)
    for _ in range(OPEN_SLOTS):
        assert front.slots.acquire(blocking=False)
    try:
        for path in ("/healthz", "/ui/status"):
            busy = client.get(path)
            assert (busy.status_code, busy.headers["Retry-After"]) == (503, "1"), path
        assert client.get("/api/v1/status", headers=AUTH).status_code == 200
    finally:
        for _ in range(OPEN_SLOTS):
            front.slots.release()
    assert client.get("/healthz").status_code == 200


def test_a_stalled_loop_is_unhealthy(front: tuple[Front, list[int]], monkeypatch: Any) -> None:
    app, _ = front
    monkeypatch.setattr(app, "loop", type("Stalled", (), {"last_step": -1e9})())
    status, headers, body = call(app, "GET", "/healthz")
    assert (status, headers["Content-Type"]) == (503, "application/problem+json")
    assert b"has not run for" in body


def test_a_scanners_guess_is_a_404_without_the_admin_app(
    front: tuple[Front, list[int]], client: FlaskClient
) -> None:
    """A path the admin app has no route for is answered 404 by the front, in the admin
    app's words, whatever the method: a scanner never makes it load Flask."""
    app, made = front
    flask_says = client.get("/wp-login.php")
    for method, path in (("GET", "/wp-login.php"), ("POST", "/.env"), ("GET", "/metricsz")):
        status, headers, body = call(app, method, path)
        assert (status, headers["Content-Type"]) == (404, "application/problem+json")
        assert json.loads(body) == flask_says.get_json()
    assert not made
