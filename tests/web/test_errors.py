"""Errors as ``application/problem+json``: media type, size, unknown routes and methods,
and what a bad value is named as."""

from __future__ import annotations

import json

from flask.testing import FlaskClient

from tests.weblab import AUTH, is_problem


def test_media_type_size_route_and_method_errors(client: FlaskClient) -> None:
    put = "/api/v1/static/web/scheduler"
    is_problem(client.put(put, data="scheduler=sh", headers=AUTH), 415, "application/json")
    is_problem(
        client.put(put, data="{not json", headers=AUTH, content_type="application/json"), 400
    )
    huge = json.dumps({"scheduler": "rr", "flags": ["x" * 70_000]})
    is_problem(client.put(put, data=huge, headers=AUTH, content_type="application/json"), 413)
    is_problem(
        client.put("/api/v1/static/nope/scheduler", json={"scheduler": "rr"}, headers=AUTH),
        404,
        "no static service named 'nope'",
    )
    is_problem(client.get("/api/v1/nothing-here", headers=AUTH), 404)
    is_problem(client.post("/api/v1/status", headers=AUTH), 405)
    is_problem(client.get("/api/v1/services/default/web", headers=AUTH), 404, "no Service")


def test_a_bad_address_is_named_safely(client: FlaskClient) -> None:
    reply = client.post("/api/v1/drains", json={"address": "192.0.2.1/x"}, headers=AUTH)
    is_problem(reply, 400, "'192.0.2.1/x' is not an IPv4 or IPv6 address")
    reply = client.post(
        "/api/v1/drains", data=b'{"address": "\xff"}', headers=AUTH, content_type="application/json"
    )
    is_problem(reply, 400, "not UTF-8")
