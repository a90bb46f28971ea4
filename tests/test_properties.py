"""Property-based proof that no input stops the director (issue 13): arbitrary Services,
annotations, EndpointSlices and Nodes through parse, IPAM, translate and plan; arbitrary
configuration files; arbitrary API bodies; and a running loop fed garbage that keeps
programming the good Services."""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient
from hypothesis import HealthCheck, event, given, settings, strategies as st

from director.core.annotations import ipam_request
from director.core.checks import CheckSpec
from director.core.cluster_parse import node_from_json, service_from_json, slice_from_json
from director.core.ipam import Allocator
from director.core.model import KNOWN_SCHEDULERS, Forwarding, canonical_address
from director.core.ownership import Ownership
from director.core.plan import build_plan
from director.core.policy import Policy
from director.core.pools import Pool
from director.core.translate import translate
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.engine.loop import Controller
from director.schema.config import ConfigError, load_config, parse_config
from director.web.app import create_app
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests import hostile
from tests.kubelab import settings as kube_settings

POOLS = (Pool.parse("v4", ["198.51.100.0/24"]), Pool.parse("v6", ["2001:db8:100::/120"]))


POLICY = Policy(
    load_balancer_class="lvs-director.io/ipvs",
    default_class=True,
    nodeport_vips=("198.51.100.250", "2001:db8:100::fa"),
    backends="nodeport",
    scheduler="wlc",
    forwarding=Forwarding.NAT,
    weight=1,
    schedulers=frozenset(KNOWN_SCHEDULERS) - {"twos"},
    check=CheckSpec(),
    checking=True,
)


OWNED = Ownership(tuple(ipaddress.ip_network(n) for n in ("198.51.100.0/24", "2001:db8:100::/64")))


SLOW = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def one_line(text: str) -> bool:
    return text.isprintable() or not any(ord(c) < 32 for c in text)


@SLOW
@given(
    st.one_of(hostile.service_json("web", shapeless=False), hostile.service_json("web")),
    st.lists(hostile.slice_json(), max_size=3),
    st.lists(hostile.node_json(), max_size=3),
)
def test_any_cluster_objects_parse_translate_and_plan_without_raising(
    svc_obj: Any, slice_objs: list[Any], node_objs: list[Any]
) -> None:
    svc = service_from_json(svc_obj)
    slices = [slice_from_json(s) for s in slice_objs]
    nodes = {n.name: n for n in map(node_from_json, node_objs)}
    for address in [*svc.status_ips, *(a for n in nodes.values() for a in n.internal_ips)]:
        assert canonical_address(address) == address, "canonical where it enters"
    request, problems = ipam_request(svc)
    addresses: tuple[str, ...] = ()
    if request is not None:
        keep = [ipaddress.ip_address(a) for a in svc.status_ips]
        outcome = Allocator(POOLS).assign(request, keep)
        addresses = tuple(str(a) for a in outcome.addresses)
    for policy in (POLICY, dataclasses.replace(POLICY, backends="pod")):
        result = translate(svc, addresses, slices, nodes, policy)
        event("virtual services" if result.services else "none")
        for problem in [*problems, *result.problems]:
            assert one_line(problem.message), problem
        for key, vs in result.services.items():
            assert canonical_address(key.address) == key.address
            assert 1 <= key.port <= 65535
            for rs in vs.real_servers.values():
                assert canonical_address(rs.address) == rs.address
                assert 1 <= rs.port <= 65535
        plan = build_plan(result.services, {}, OWNED)
        applied = FakeIpvs().apply(plan.ops)
        assert applied.ok, [e.describe() for e in applied.errors]  # the kernel would take it


sections = {
    "ownership": st.fixed_dictionaries({"networks": st.lists(hostile.cidrs, max_size=2)}),
    "pools": st.lists(
        st.fixed_dictionaries(
            {
                "name": hostile.anything(hostile.names),
                "addresses": st.lists(hostile.cidrs, max_size=2),
                "all_addresses": hostile.anything(st.booleans()),
            }
        ),
        max_size=2,
    ),
    "services": st.lists(
        st.fixed_dictionaries(
            {
                "name": hostile.anything(hostile.names),
                "address": hostile.ip_texts,
                "port": hostile.ports,
                "scheduler": hostile.schedulers,
                "flags": hostile.flag_lists,
                "real_servers": st.lists(
                    st.one_of(hostile.ip_texts.map(lambda a: f"{a}:80"), hostile.json_values),
                    max_size=2,
                ),
            }
        ),
        max_size=2,
    ),
    "api": st.fixed_dictionaries(
        {
            "listen": st.text(max_size=20),
            "token_file": st.text(max_size=8),
            "public": hostile.json_values,
        }
    ),
    "ha": st.fixed_dictionaries(
        {
            "interface": st.text(max_size=8),
            "router_id": st.text(max_size=8),
            "priority": hostile.ports,
            "unicast_source": hostile.ip_texts,
            "peers": st.lists(hostile.ip_texts, max_size=2),
        }
    ),
    "kubernetes": st.fixed_dictionaries(
        {"nodeport_vip": hostile.ip_texts, "lease_seconds": hostile.ports}
    ),
    "defaults": st.fixed_dictionaries({"scheduler": hostile.schedulers, "weight": hostile.ports}),
}


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    chosen = draw(st.lists(st.sampled_from(sorted(sections)), unique=True, max_size=5))
    doc = {name: draw(hostile.anything(sections[name])) for name in chosen}
    text = yaml.safe_dump(doc, allow_unicode=True)
    if draw(st.booleans()):  # and then break it somewhere
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.text(max_size=6)) + text[cut:]
    return text


@SLOW
@given(config_texts())
def test_any_configuration_text_loads_or_fails_with_a_config_error(text: str) -> None:
    try:
        parse_config(text, "fuzz.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.yaml"), str(exc)
        assert "\n" not in str(exc).strip()


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=300))
def test_any_bytes_as_a_configuration_file_fail_cleanly(tmp_path_factory: Any, raw: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("cfg")) / "director.yaml"
    path.write_bytes(raw)
    with contextlib.suppress(ConfigError):
        load_config(path)


# -- the admin API ---------------------------------------------------------------------------
TOKEN = "t0ken-for-the-admin-api"


AUTH = {"Authorization": f"Bearer {TOKEN}"}


STATIC = """
ownership: {networks: [198.51.100.0/24]}
services:
  - {name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.11:8080]}
  - {name: dns, address: 198.51.100.53, port: 53, protocol: udp, real_servers: [192.0.2.11:53]}
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlaskClient]:
    import threading

    controller = Controller(
        FakeIpvs(),
        parse_config(STATIC, "static.yaml"),
        intents_file=tmp_path_factory.mktemp("api") / "intents.json",
    )
    stop = threading.Event()
    loop = threading.Thread(target=controller.run, args=(stop, 0.02), daemon=True)
    loop.start()
    eventually(lambda: controller.health.synced, what="the first sync")
    yield create_app(controller.door(), TOKEN).test_client()
    stop.set()
    loop.join(5)


WRITES = [
    ("PUT", "/api/v1/static/web/scheduler"),
    ("PUT", "/api/v1/static/dns/scheduler"),
    ("POST", "/api/v1/drains"),
]


bodies = st.one_of(
    hostile.json_values,
    st.fixed_dictionaries(
        {
            "scheduler": hostile.anything(hostile.schedulers),
            "flags": hostile.anything(hostile.flag_lists),
        }
    ),
    st.fixed_dictionaries(
        {
            "address": hostile.anything(hostile.ip_texts),
            "port": hostile.ports,
            "service": hostile.anything(st.just("tcp 198.51.100.10:80")),
        }
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(WRITES), st.one_of(bodies.map(json.dumps), st.text(max_size=40)))
def test_any_api_body_is_answered_without_a_server_error(
    client: FlaskClient, write: tuple[str, str], body: str
) -> None:
    method, path = write
    reply = client.open(
        path, method=method, data=body, headers=AUTH, content_type="application/json"
    )
    assert reply.status_code < 500, reply.get_data(as_text=True)
    if reply.status_code >= 400:
        problem = reply.get_json()
        assert reply.mimetype == "application/problem+json"
        assert one_line(problem["detail"]) and len(problem["detail"]) < 2000
    if method == "POST" and reply.status_code == 201:  # keep the drains few
        undrain = f"/api/v1/drains/{reply.get_json()['id']}"
        assert client.delete(undrain, headers=AUTH).status_code == 200


# -- a running loop fed garbage ---------------------------------------------------------------
@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeApiServer, Runtime]]:
    with FakeApiServer() as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        kubeconfig = api.kubeconfig(tmp_path_factory.mktemp("kube") / "kc")
        config = kube_settings(
            kubeconfig, pool="198.51.100.0-198.51.100.255", kube_extra="  default_class: true"
        )
        runtime = Runtime(config, FakeIpvs())
        with runtime.start():
            assert runtime.wait_ready(20)
            eventually(lambda: runtime.controller.parts.reporter.leader, what="the lease")
            yield api, runtime


counter = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(hostile.service_json(), min_size=1, max_size=3),
    st.lists(hostile.slice_json(service="garbage"), max_size=2),
    hostile.node_json(),
)
def test_a_running_loop_fed_garbage_keeps_programming_the_good_services(
    running: tuple[FakeApiServer, Runtime], garbage: list[Any], slices: list[Any], bad_node: Any
) -> None:
    api, runtime = running
    n = next(counter)
    made: list[tuple[str, str]] = []
    for index, obj in enumerate(garbage):
        obj["metadata"]["name"] = f"garbage-{n}-{index}"
        obj["metadata"].pop("namespace", None)
        if isinstance(obj.get("spec"), dict) and isinstance(obj["spec"].get("ports"), list):
            obj["spec"]["ports"] = [p for p in obj["spec"]["ports"] if isinstance(p, dict)]
        else:
            obj["spec"] = {}
        api.store.create("services", "default", obj)  # stored as sent: no schema at all
        made.append(("services", obj["metadata"]["name"]))
    for index, obj in enumerate(slices):
        obj["metadata"]["name"] = f"garbage-{n}-s{index}"
        obj["metadata"].pop("namespace", None)
        api.store.create("endpointslices", "default", obj)
        made.append(("endpointslices", obj["metadata"]["name"]))
    bad_node["metadata"]["name"] = f"node-{n}"
    api.store.create("nodes", "", bad_node)
    good = f"good-{n}"
    api.create("services", service(good, [("http", "TCP", 80)]))
    made.append(("services", good))
    try:
        eventually(
            lambda: runtime.controller.parts.table.produced.get(f"default/{good}"),
            timeout=20,
            what="the good Service programmed",
        )
        assert runtime.controller.health.loop_errors == 0, runtime.controller.health.last_error
        assert runtime.failed is None
    finally:
        for plural, name in made:
            api.store.delete(plural, "default", name)
        api.store.delete("nodes", "", f"node-{n}")
