"""The director's state and what it would change now (``/api/v1/status``, ``/api/v1/plan``)."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.weblab import AUTH, WEB, Director


def test_status_and_plan(director: Director, client: FlaskClient) -> None:
    status = client.get("/api/v1/status", headers=AUTH).get_json()
    assert status["ready"] is True and status["role"] == "standalone"
    assert status["counts"]["virtual_services"] == 2 and status["counts"]["real_servers"] == 4
    assert status["kubernetes"]["configured"] is False
    assert client.get("/api/v1/plan", headers=AUTH).get_json()["ops"] == []
    from director.core.services import Op, OpKind

    director.ipvs.apply([Op(OpKind.DEL_SERVICE, WEB)])  # drift: someone deletes it by hand
    ops = client.get("/api/v1/plan", headers=AUTH).get_json()["ops"]
    assert [o["op"] for o in ops] == ["add-service", "add-dest", "add-dest"]
    assert ops[0]["origin"] == "static/web"
