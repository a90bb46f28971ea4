"""The errors the director raises on purpose carry the HTTP status they stand for; the API
answers with it, and one with no status of its own is the director's fault (500)."""

from __future__ import annotations

from flask import Flask

from director.core.errors import DirectorError
from director.web.errors import register


class Conflict(DirectorError):
    status = 409


def test_an_error_answers_with_its_own_status_and_without_one_is_a_500() -> None:
    app = Flask("errors")
    register(app, max_body=1024)

    @app.get("/conflict")
    def conflict() -> str:
        raise Conflict("the address is taken by shop/cart")

    @app.get("/ours")
    def ours() -> str:
        raise DirectorError("a fault of the director")

    client = app.test_client()
    reply = client.get("/conflict")
    assert (reply.status_code, reply.mimetype) == (409, "application/problem+json")
    assert reply.get_json()["detail"] == "the address is taken by shop/cart"
    assert client.get("/ours").status_code == 500
