"""What the loop's tests against a cluster share: the API stand-in with two nodes, and a
kubeconfig for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.kubeapi import FakeApiServer
from tests.kubelab import N1, N2, no_credential_logged, stand_in


@pytest.fixture
def api(caplog: pytest.LogCaptureFixture) -> Iterator[FakeApiServer]:
    with stand_in(N1, N2) as server:
        yield server
    no_credential_logged(caplog, server.token)


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> Path:
    return api.kubeconfig(tmp_path / "kubeconfig")
