"""Virtual services through the API: what they show, and the scheduler of a static service
(an intent, kept across restarts) or of a Kubernetes Service (an annotation)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from director.web.app import create_app
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests.kubelab import settings as kube_settings
from tests.weblab import AUTH, STATIC, TOKEN, WEB, Director, is_problem


def test_services_show_origin_scheduler_real_servers_and_counters(
    director: Director, client: FlaskClient
) -> None:
    director.ipvs.set_connections(WEB, ("192.0.2.11", 8080), active=4, inactive=1)
    items = client.get("/api/v1/services", headers=AUTH).get_json()["items"]
    web = next(i for i in items if i["service"] == "tcp 198.51.100.10:80")
    assert web["origin"] == {"kind": "static", "name": "web"}
    assert (web["scheduler"], web["scheduler_source"], web["programmed"]) == ("rr", "config", True)
    first = web["real_servers"][0]
    assert (first["address"], first["port"], first["weight"], first["state"]) == (
        "192.0.2.11",
        8080,
        1,
        "active",
    )
    assert (first["active_connections"], first["inactive_connections"]) == (4, 1)
    assert set(web["counters"]) >= {"connections", "bytes_in", "bytes_out", "cps"}
    one = client.get("/api/v1/static/web", headers=AUTH).get_json()
    assert one["service"] == "tcp 198.51.100.10:80"


def test_static_scheduler_set_in_place_survives_restart_and_unsets(
    director: Director, client: FlaskClient, tmp_path: Path
) -> None:
    reply = client.put(
        "/api/v1/static/web/scheduler", json={"scheduler": "sh", "flags": ["sh-port"]}, headers=AUTH
    )
    assert reply.status_code == 200 and reply.get_json()["source"] == "api"
    eventually(lambda: director.vs().config.scheduler == "sh", what="sh in the kernel")
    assert director.vs().config.flags == {"sh-port"}
    assert [op.kind.value for op in director.ipvs.applied[-1:]] == ["set-service"], "in place"
    web = client.get("/api/v1/static/web", headers=AUTH).get_json()
    assert (web["scheduler"], web["scheduler_source"]) == ("sh", "api")
    # A restarted director finds the choice in its intents file.
    again = Director(parse_config(STATIC, "static.yaml"), tmp_path / "intents.json")
    assert again.controller.parts.store.current.schedulers["web"] == ("sh", frozenset({"sh-port"}))
    assert client.delete("/api/v1/static/web/scheduler", headers=AUTH).status_code == 200
    eventually(lambda: director.vs().config.scheduler == "rr", what="back to the config's rr")


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"scheduler": "fastest"}, 400, ("unknown scheduler 'fastest'", "allowed: dh, fo, lblc")),
        ({"scheduler": "rr", "flags": ["sh-port"]}, 400, ("invalid flags",)),
        ({"scheduler": "rr", "flags": "sh-port"}, 400, ("list of strings",)),
        ({"scheduler": "rr", "colour": "blue"}, 400, ("unknown field(s) colour",)),
        ({}, 400, ("missing field(s) scheduler",)),
        ([1, 2], 400, ("JSON object",)),
    ],
)
def test_bad_scheduler_requests_are_refused_with_a_reason(
    client: FlaskClient, body: object, status: int, words: tuple[str, ...]
) -> None:
    is_problem(client.put("/api/v1/static/web/scheduler", json=body, headers=AUTH), status, *words)


# -- Kubernetes Services --------------------------------------------------------------------
@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Runtime, FlaskClient, FakeIpvs]]:
    with FakeApiServer() as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        config = kube_settings(api.kubeconfig(tmp_path / "kc"))
        ipvs = FakeIpvs()
        runtime = Runtime(config, ipvs)
        runtime.start()
        assert runtime.wait_ready(20)
        app = create_app(
            runtime.controller.door(), TOKEN, writer=runtime.controller.parts.reporter.outbox.writer
        )  # type: ignore[union-attr, arg-type]
        try:
            yield api, runtime, app.test_client(), ipvs
        finally:
            runtime.stop()


def test_kubernetes_scheduler_is_stored_on_the_service_and_applied(kube) -> None:  # type: ignore[no-untyped-def]
    api, _runtime, client, ipvs = kube
    api.create("services", service("web", [("http", "TCP", 80)]))
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
    eventually(lambda: key in ipvs.read().services, what="the virtual service")
    reply = client.put(
        "/api/v1/services/default/web/scheduler", json={"scheduler": "sh"}, headers=AUTH
    )
    assert reply.status_code == 200, reply.get_data(as_text=True)
    annotations = api.get("services", "web")["metadata"]["annotations"]
    assert annotations["lvs-director.io/scheduler-override"] == "sh"
    eventually(lambda: ipvs.read().services[key].config.scheduler == "sh", what="sh applied")

    def source() -> str:
        view = client.get("/api/v1/services/default/web", headers=AUTH).get_json()
        return str(view["virtual_services"][0]["scheduler_source"])

    # The view is published once the step that programmed it ends (a moment after the kernel).
    eventually(lambda: source() == "api", what="the view says the API chose it")
    assert client.delete("/api/v1/services/default/web/scheduler", headers=AUTH).status_code == 200
    assert (
        "lvs-director.io/scheduler-override"
        not in api.get("services", "web")["metadata"]["annotations"]
    )
    eventually(lambda: ipvs.read().services[key].config.scheduler == "wlc", what="default back")
    is_problem(
        client.put(
            "/api/v1/services/default/nope/scheduler", json={"scheduler": "sh"}, headers=AUTH
        ),
        404,
    )


def test_generic_flag_names_are_stored_as_the_kernel_names_them(
    director: Director, client: FlaskClient
) -> None:
    reply = client.put(
        "/api/v1/static/web/scheduler",
        headers=AUTH,
        json={"scheduler": "sh", "flags": ["flag-1", "flag-2"]},
    )
    assert reply.status_code == 200, reply.get_data(as_text=True)
    assert reply.get_json()["flags"] == ["sh-fallback", "sh-port"]
    eventually(lambda: director.vs().config.scheduler == "sh")
    assert director.vs().config.flags == {"sh-fallback", "sh-port"}
    assert client.get("/api/v1/plan", headers=AUTH).get_json()["ops"] == [], "nothing to resend"


def test_onepacket_is_refused_for_a_tcp_service_and_taken_for_udp(client: FlaskClient) -> None:
    body = {"scheduler": "rr", "flags": ["onepacket"]}
    is_problem(
        client.put("/api/v1/static/web/scheduler", json=body, headers=AUTH),
        409,
        "onepacket scheduling only applies to UDP services",
    )
    assert client.put("/api/v1/static/dns/scheduler", json=body, headers=AUTH).status_code == 200
