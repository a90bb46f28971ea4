"""The admin API's replies: what each endpoint answers matches the shape it publishes, and
counters carry the kernel's figures under their own names (zeros for a service the kernel
does not hold)."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from pydantic import TypeAdapter

from director.core.services import Stats
from director.schema import replies
from tests.weblab import AUTH, WEB, Director


def test_counters_are_the_kernels_figures_by_name_and_zeros_when_it_holds_nothing() -> None:
    assert replies.counters(None) == dict.fromkeys(replies.STATS_FIELDS, 0)
    figures = replies.counters(Stats(connections=3, bytes_in=1500, cps=2))
    assert (figures["connections"], figures["bytes_in"], figures["cps"]) == (3, 1500, 2)
    assert set(figures) == set(Stats.__dataclass_fields__)


def test_each_answer_validates_against_the_reply_it_publishes(
    director: Director, client: FlaskClient
) -> None:
    director.ipvs.set_connections(WEB, ("192.0.2.11", 8080), active=2, inactive=1)
    answers: list[tuple[str, Any]] = [
        ("/api/v1/services", replies.ServiceList),
        ("/api/v1/status", replies.Status),
        ("/api/v1/plan", replies.Plan),
        ("/api/v1/drains", replies.DrainList),
        ("/api/v1/bgp", replies.Bgp),
    ]
    for path, shape in answers:
        reply = client.get(path, headers=AUTH)
        assert reply.status_code == 200, path
        TypeAdapter(shape).validate_python(reply.get_json(), strict=False)
    problem = client.get("/api/v1/services/default/web", headers=AUTH).get_json()
    TypeAdapter(replies.Problem).validate_python(problem)
