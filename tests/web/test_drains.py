"""Drains through the API: a real server held at weight 0 until its connections end, then
undrained; bad drains refused with a reason."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from lab.wait import eventually
from tests.weblab import AUTH, WEB, Director, is_problem


def test_drain_until_connections_end_then_undrain(director: Director, client: FlaskClient) -> None:
    a = ("192.0.2.11", 8080)
    director.ipvs.set_connections(WEB, a, active=2, inactive=0)
    created = client.post(
        "/api/v1/drains", json={"address": "192.0.2.11", "port": 8080}, headers=AUTH
    )
    assert created.status_code == 201
    ident = created.get_json()["id"]
    eventually(lambda: director.vs().real_servers[a].weight == 0, what="weight 0")
    assert director.vs().real_servers[("192.0.2.12", 8080)].weight == 1, "only that one"
    progress = client.get("/api/v1/drains", headers=AUTH).get_json()["items"][0]
    assert (
        progress["real_servers"]
        == [
            {
                "service": "tcp 198.51.100.10:80",
                "weight": 0,
                "active_connections": 2,
                "inactive_connections": 0,
            }
        ]
        and progress["done"] is False
    )
    view = client.get("/api/v1/static/web", headers=AUTH).get_json()
    assert view["real_servers"][0]["state"] == "draining"
    director.ipvs.set_connections(WEB, a, active=0, inactive=0)
    assert client.get("/api/v1/drains", headers=AUTH).get_json()["items"][0]["done"] is True
    is_problem(
        client.post("/api/v1/drains", json={"address": "192.0.2.11", "port": 8080}, headers=AUTH),
        409,
        "already drained",
    )
    assert client.delete(f"/api/v1/drains/{ident}", headers=AUTH).status_code == 200
    eventually(lambda: director.vs().real_servers[a].weight == 1, what="weight back")
    is_problem(client.delete(f"/api/v1/drains/{ident}", headers=AUTH), 404)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"address": "not-an-ip"}, 400, ("not an IPv4 or IPv6 address",)),
        ({"address": "192.0.2.11", "port": 0}, 400, ("port must be an integer",)),
        ({"address": "192.0.2.11", "port": True}, 400, ("port must be an integer",)),
        ({"address": "192.0.2.11", "service": "tcp 203.0.113.1:1"}, 404, ("no virtual service",)),
        ({"port": 80}, 400, ("missing field(s) address",)),
        (
            {"address": "::ffff:192.0.2.11"},
            400,
            ("an IPv4 address written as IPv6", "write 192.0.2.11"),
        ),
    ],
)
def test_bad_drains_are_refused(
    client: FlaskClient, body: object, status: int, words: tuple[str, ...]
) -> None:
    is_problem(client.post("/api/v1/drains", json=body, headers=AUTH), status, *words)
