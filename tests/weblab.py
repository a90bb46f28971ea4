"""What the admin API's tests share: a director with a static table and the stateful fake
IPVS, its control loop on a thread, the API's Flask test client, and the check of an
``application/problem+json`` answer. Its fixtures (``director``, ``client``) are registered
for every test by ``tests/conftest.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from director.adapters.metrics.collector import DirectorCollector, Recorder
from director.adapters.metrics.ipvs import IpvsExposition, Scrape
from director.adapters.metrics.promtext import CollectorRegistry
from director.core.model import IpProtocol as Protocol, ServiceKey
from director.dataplane.fake import FakeIpvs
from director.engine.loop import Controller
from director.schema.config import Settings, parse_config
from director.web.app import create_app
from lab.wait import eventually

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
