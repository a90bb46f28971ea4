"""What the loop's tests against a cluster share: the API stand-in with two nodes, and a
kubeconfig for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.kubeapi import FakeApiServer, node


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        for name, address in (("n1", "192.0.2.11"), ("n2", "192.0.2.12")):
            server.create("nodes", node(name, address))
        yield server


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> Path:
    return api.kubeconfig(tmp_path / "kubeconfig")
