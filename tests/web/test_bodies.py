"""Request bodies: a key given twice, deep nesting, control characters and lone surrogates
refused in plain words."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from tests.weblab import AUTH, Director, is_problem


def test_a_key_given_twice_in_a_body_is_refused(director: Director, client: FlaskClient) -> None:
    """{"scheduler": "rr", "scheduler": "sh"}: a proxy and the director could read it two
    ways (the last key wins in Python, the first in some parsers): refused, not guessed."""
    reply = client.put(
        "/api/v1/static/web/scheduler",
        headers=AUTH,
        data='{"scheduler": "rr", "scheduler": "sh"}',
        content_type="application/json",
    )
    is_problem(reply, 400, "'scheduler' is given twice")
    assert director.vs().config.scheduler == "rr"


def test_deep_nesting_is_a_400_not_a_500(client: FlaskClient) -> None:
    put = "/api/v1/static/web/scheduler"
    deep = "[" * 30_000 + "]" * 30_000  # under 64 KiB
    is_problem(
        client.put(put, data=deep, headers=AUTH, content_type="application/json"), 400, "nested"
    )
    nested = {"scheduler": "rr", "flags": [[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]}
    is_problem(client.put(put, json=nested, headers=AUTH), 400, "nested deeper than 16")


@pytest.mark.parametrize(
    "raw",
    [b'{"address": "192.0.2.11\\u0000"}', b'{"address": "\\ud800"}', b'{"address": "\\u001b[1m"}'],
    ids=["nul", "lone-surrogate", "escape"],
)
def test_control_characters_and_lone_surrogates_are_refused_in_plain_words(
    client: FlaskClient, raw: bytes
) -> None:
    reply = client.post("/api/v1/drains", data=raw, headers=AUTH, content_type="application/json")
    is_problem(reply, 400, "strings must be text without control characters or lone surrogates")
