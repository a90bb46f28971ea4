"""The admin API's token gate: every request but the open endpoints needs the token, the
scheme in any case, and ``api.public`` narrowing what is open."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from director.schema.config import parse_config
from director.web.app import create_app
from tests.weblab import AUTH, STATIC, TOKEN, Director, is_problem


def test_every_api_request_needs_the_token(client: FlaskClient) -> None:
    missing = client.get("/api/v1/services")
    is_problem(missing, 401, "Bearer")
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    is_problem(client.get("/api/v1/services", headers={"Authorization": "Bearer nope"}), 403)
    is_problem(client.get("/api/v1/openapi.json"), 401)
    # Health, readiness, metrics and the status page are open (bind the API to a safe place).
    for path in ("/healthz", "/readyz", "/metrics", "/", "/ui/status"):
        assert client.get(path).status_code == 200, path


def test_the_bearer_scheme_is_case_insensitive(client: FlaskClient) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        reply = client.get("/api/v1/status", headers={"Authorization": f"{scheme} {TOKEN}"})
        assert reply.status_code == 200, scheme
    is_problem(client.get("/api/v1/status", headers={"Authorization": f"Basic {TOKEN}"}), 401)
    is_problem(client.get("/api/v1/status", headers={"Authorization": "Bearer"}), 401)


def test_open_endpoints_can_require_the_token(tmp_path: Path) -> None:
    d = Director(parse_config(STATIC, "static.yaml"), tmp_path / "i.json")
    app = create_app(d.controller.door(), TOKEN, metrics=d.scrape, public=("health",))
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    for path in ("/metrics", "/ui/status"):
        is_problem(client.get(path), 401)
        assert client.get(path, headers=AUTH).status_code in (200, 503), path
    page = client.get("/")  # the page holds no data: it asks for the token for /ui/status
    assert page.status_code == 200 and b'id="login"' in page.data
    with pytest.raises(ValueError, match=r"api\.public: unknown everything"):
        create_app(d.controller.door(), TOKEN, public=("everything",))
