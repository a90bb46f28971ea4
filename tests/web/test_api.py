"""The admin API through Flask's test client: every endpoint, status code and error.

A real control loop runs on its own thread with the stateful fake IPVS; the Kubernetes
endpoints run against the API stand-in through the same wiring as ``director run``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from director.adapters.metrics import DirectorCollector, Recorder
from director.adapters.metrics_ipvs import IpvsExposition, Scrape
from director.cli.runtime import Runtime
from director.core.model import IpProtocol as Protocol, ServiceKey
from director.dataplane.fake import FakeIpvs
from director.engine.loop import Controller
from director.schema.config import Settings, parse_config
from director.web.app import create_app
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests.kubelab import settings as kube_settings

TOKEN = "t0ken-for-the-admin-api"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
STATIC = """
ownership: {networks: [198.51.100.0/24]}
services:
  - name: web
    address: 198.51.100.10
    port: 80
    scheduler: rr
    real_servers: [192.0.2.11:8080, 192.0.2.12:8080]
  - name: dns
    address: 198.51.100.53
    port: 53
    protocol: udp
    real_servers: [192.0.2.11:53, 192.0.2.13:53]
"""


class Director:
    def __init__(self, settings: Settings, intents: Path) -> None:
        self.ipvs = FakeIpvs()
        self.registry = CollectorRegistry()
        self.controller = Controller(
            self.ipvs, settings, intents_file=intents, recorder=Recorder(self.registry)
        )
        self.registry.register(DirectorCollector(self.controller.door()))
        self.scrape = Scrape(self.registry, IpvsExposition(self.controller.door()))
        self.app = create_app(self.controller.door(), TOKEN, metrics=self.scrape)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop, 0.05))

    def vs(self, key: ServiceKey = WEB):  # type: ignore[no-untyped-def]
        return self.ipvs.read().services.get(key)


@pytest.fixture
def director(tmp_path: Path) -> Iterator[Director]:
    d = Director(parse_config(STATIC, "static.yaml"), tmp_path / "intents.json")
    d.thread.start()
    eventually(lambda: d.controller.health.synced, what="the first sync")
    yield d
    d.stop.set()
    d.thread.join(5)


@pytest.fixture
def client(director: Director) -> FlaskClient:
    return director.app.test_client()


def is_problem(response, status: int, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body = response.get_json()
    assert body["status"] == status
    for word in words:
        assert word in body["detail"], body["detail"]


def test_every_api_request_needs_the_token(client: FlaskClient) -> None:
    missing = client.get("/api/v1/services")
    is_problem(missing, 401, "Bearer")
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    is_problem(client.get("/api/v1/services", headers={"Authorization": "Bearer nope"}), 403)
    is_problem(client.get("/api/v1/openapi.json"), 401)
    # Health, readiness, metrics and the status page are open (bind the API to a safe place).
    for path in ("/healthz", "/readyz", "/metrics", "/", "/ui/status"):
        assert client.get(path).status_code == 200, path


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
    assert again.controller.store.current.schedulers["web"] == ("sh", frozenset({"sh-port"}))
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


def test_readyz_is_503_before_the_first_sync(tmp_path: Path) -> None:
    d = Director(parse_config(STATIC, "static.yaml"), tmp_path / "i.json")
    client = d.app.test_client()
    is_problem(client.get("/readyz"), 503, "first sync")
    assert client.get("/healthz").status_code == 200


def test_metrics_use_node_exporter_labels_and_pass_promtool(
    director: Director, client: FlaskClient, tmp_path: Path
) -> None:
    director.ipvs.set_connections(WEB, ("192.0.2.11", 8080), active=3, inactive=0)
    text = client.get("/metrics").get_data(as_text=True)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = {
        "local_address": "198.51.100.10",
        "local_port": "80",
        "local_mark": "",
        "proto": "tcp",
        "namespace": "",
        "service": "web",
        "port_name": "",
        "remote_address": "192.0.2.11",
        "remote_port": "8080",
    }
    key = tuple(sorted(labels.items()))
    assert samples[("director_ipvs_backend_connections_active", key)] == 3
    assert samples[("director_ipvs_backend_weight", key)] == 1
    assert 'director_vrrp_state{state="MASTER"} 0.0' in text
    assert "director_sync_duration_seconds_bucket" in text
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (make setup does)"
    scrape = tmp_path / "scrape.prom"
    scrape.write_text(text)
    with scrape.open() as handle:
        done = subprocess.run(
            [promtool, "check", "metrics"],
            stdin=handle,
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr


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
            runtime.controller.door(), TOKEN, writer=runtime.controller.reporter.outbox.writer
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
    view = client.get("/api/v1/services/default/web", headers=AUTH).get_json()
    assert view["virtual_services"][0]["scheduler_source"] == "api"
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


# -- hostile and careless input (issue 13, items 4-9) -----------------------------------------
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


def test_a_bad_address_is_named_safely(client: FlaskClient) -> None:
    reply = client.post("/api/v1/drains", json={"address": "192.0.2.1/x"}, headers=AUTH)
    is_problem(reply, 400, "'192.0.2.1/x' is not an IPv4 or IPv6 address")
    reply = client.post(
        "/api/v1/drains", data=b'{"address": "\xff"}', headers=AUTH, content_type="application/json"
    )
    is_problem(reply, 400, "not UTF-8")


def test_the_bearer_scheme_is_case_insensitive(client: FlaskClient) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        reply = client.get("/api/v1/status", headers={"Authorization": f"{scheme} {TOKEN}"})
        assert reply.status_code == 200, scheme
    is_problem(client.get("/api/v1/status", headers={"Authorization": f"Basic {TOKEN}"}), 401)
    is_problem(client.get("/api/v1/status", headers={"Authorization": "Bearer"}), 401)


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


def test_metrics_text_is_exact_escaped_and_gzipped_when_asked(
    director: Director, client: FlaskClient
) -> None:
    """The kernel's families are written straight to text (issue 13, item 26): the same
    series prometheus_client would write, and what Prometheus asks for, gzip."""
    import gzip

    plain = client.get("/metrics").get_data()
    zipped = client.get("/metrics", headers={"Accept-Encoding": "gzip, deflate"})
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.get_data()) == plain, "one scrape, served both ways"
    families = {f.name: f for f in text_string_to_metric_families(plain.decode())}
    assert families["director_ipvs_backend_connections"].type == "counter"
    assert families["director_ipvs_backend_weight"].type == "gauge"
    weights = {
        s.labels["remote_address"]
        for s in families["director_ipvs_backend_weight"].samples
        if s.labels["service"] == "web"
    }
    assert weights == {"192.0.2.11", "192.0.2.12"}
    from director.adapters.metrics_ipvs import _label_text

    text = _label_text(["a", "b"], ['say "hi"', "back\\slash\nnew"])
    line = f"x{text} 1\n"
    (sample,) = next(iter(text_string_to_metric_families(line))).samples
    assert sample.labels == {"a": 'say "hi"', "b": "back\\slash\nnew"}


def test_each_real_server_is_scraped_with_its_own_figures_and_health() -> None:
    """Per real server: its address (a tunnelled IPv6 one of an IPv4 service too), its
    weight and connection counts; ``director_backend_up`` only for the checked ones, 0 for
    the one failing its checks; a service with no real servers still has its totals."""
    from types import SimpleNamespace

    from director.core.model import Forwarding, RealServer, ServiceConfig
    from director.core.services import Op, OpKind, Stats

    web, empty = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80), ServiceKey.mark(4, 9)
    a, b = RealServer("192.0.2.11", 8080, 2), RealServer("2001:db8::7", 8080, 5, Forwarding.TUN)
    ipvs = FakeIpvs()
    assert ipvs.apply(
        [
            Op(OpKind.ADD_SERVICE, web, config=ServiceConfig("rr")),
            Op(OpKind.ADD_DEST, web, dest=a),
            Op(OpKind.ADD_DEST, web, dest=b),
            Op(OpKind.ADD_SERVICE, empty, config=ServiceConfig("rr")),
        ]
    ).ok
    ipvs.set_connections(web, b.key, active=4, inactive=1)
    ipvs.set_stats(web, Stats(connections=12, bytes_in=3000))
    view = SimpleNamespace(
        desired={web: SimpleNamespace(origin="shop/web:http")},
        checks={web: {a.key: object(), b.key: object()}},
        unhealthy_dest=lambda key, dkey: dkey == b.key,
    )
    exposition = IpvsExposition(SimpleNamespace(view=view, ipvs=ipvs))  # type: ignore[arg-type]
    text = b"".join(exposition.chunks()).decode()
    samples = {
        (s.name, s.labels.get("remote_address", s.labels["local_mark"])): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("director_ipvs_backend_weight", "192.0.2.11")] == 2
    assert samples[("director_ipvs_backend_weight", "2001:db8::7")] == 5
    assert samples[("director_ipvs_backend_connections_active", "2001:db8::7")] == 4
    assert samples[("director_ipvs_backend_connections_inactive", "2001:db8::7")] == 1
    assert samples[("director_backend_up", "192.0.2.11")] == 1
    assert samples[("director_backend_up", "2001:db8::7")] == 0
    assert samples[("director_ipvs_service_connections_total", "")] == 12
    assert samples[("director_ipvs_service_incoming_bytes_total", "")] == 3000
    assert samples[("director_ipvs_service_connections_total", "9")] == 0  # the empty one
    assert 'namespace="shop",service="web",port_name="http",remote_address="192.0.2.11"' in text
    assert sum(name == "director_backend_up" for name, _ in samples) == 2


def test_a_scrape_of_a_big_table_leaves_the_director_the_size_it_was() -> None:
    """20,000 real servers are 28 MB of text. The director once kept the whole text (and its
    gzip) between scrapes, and the heap it was built in: a director of 10,000 Services grew
    by 100 MB at the first scrape. Now the text is written in pieces, compressed as it
    goes, and only the 1 MB gzip is kept; a plain request gets it back in bounded pieces."""
    import ctypes
    import gzip
    from types import SimpleNamespace

    from director.adapters.metrics_ipvs import UNPACK_BYTES
    from director.core.model import RealServer, ServiceConfig
    from director.core.services import Op, OpKind

    def resident_mib() -> float:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0]) / 1024

    ipvs, desired = FakeIpvs(record=False), {}
    for i in range(2000):
        key = ServiceKey.inet(Protocol.TCP, f"198.18.{i // 250}.{1 + i % 250}", 80)
        desired[key] = SimpleNamespace(origin=f"default/svc-{i:05d}:http")
        servers = [RealServer(f"10.{i // 250}.{i % 250}.{d}", 8080) for d in range(1, 11)]
        ops = [Op(OpKind.ADD_DEST, key, dest=rs) for rs in servers]
        ipvs.apply([Op(OpKind.ADD_SERVICE, key, config=ServiceConfig("rr")), *ops])
    view = SimpleNamespace(desired=desired, checks={}, unhealthy_dest=lambda *_: False)
    scrape = Scrape(CollectorRegistry(), IpvsExposition(SimpleNamespace(view=view, ipvs=ipvs)))  # type: ignore[arg-type]
    getattr(ctypes.CDLL(None), "malloc_trim", lambda _: 0)(0)
    before = resident_mib()
    zipped = scrape.gzipped()
    grown = resident_mib() - before
    pieces = list(scrape.plain())
    text = b"".join(pieces)
    assert gzip.decompress(zipped) == text
    assert len(text) > 25e6 and len(zipped) < len(text) / 20
    assert text.count(b"\ndirector_ipvs_backend_weight{") == 20_000
    assert max(len(p) for p in pieces) <= UNPACK_BYTES
    print(f"a {len(text) / 1e6:.0f} MB scrape: the process grew {grown:.1f} MiB")
    assert grown < 12, f"a {len(text) / 1e6:.0f} MB scrape left the process {grown:.1f} MiB bigger"
    # Once it can serve no more, not even the gzip is held until the next scrape.
    eventually(lambda: scrape._gzipped == b"", timeout=10, what="the scrape let go")


def test_a_lease_namespace_that_does_not_exist_makes_the_director_unready_and_says_why(
    tmp_path: Path,
) -> None:
    """Neither box of a pair could write Service status: /readyz and `director status` say
    why (not just a warning in the log every few seconds), and clear once it is fixed."""
    with FakeApiServer(namespaces=("default",)) as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        runtime = Runtime(kube_settings(api.kubeconfig(tmp_path / "kc")), FakeIpvs())
        runtime.start()
        try:
            assert runtime.wait_ready(20)
            client = create_app(runtime.controller.door(), TOKEN).test_client()
            reason = (
                "the API server refuses the Lease lvs-director/lvs-director: HTTP 404 "
                'NotFound: namespaces "lvs-director" not found'
            )
            eventually(lambda: client.get("/readyz").status_code == 503, what="unready")
            is_problem(client.get("/readyz"), 503, reason)
            status = client.get("/api/v1/status", headers=AUTH).get_json()
            assert (status["leader"], status["lease_refused"]) == (False, reason)
            api.create("namespaces", {"metadata": {"name": "lvs-director"}}, namespace="")
            eventually(lambda: client.get("/readyz").status_code == 200, what="ready again")
            eventually(
                lambda: runtime.controller.exports.view.status.leader, what="the Lease taken"
            )
            assert client.get("/api/v1/status", headers=AUTH).get_json()["lease_refused"] is None
        finally:
            runtime.stop()
