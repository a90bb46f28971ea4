"""What the adapters' tests share: a strict Kubernetes API stand-in, one per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lab.kubeapi import FakeApiServer
from tests.kubelab import no_credential_logged


@pytest.fixture
def api(caplog: pytest.LogCaptureFixture) -> Iterator[FakeApiServer]:
    """The stand-in; nothing the test logged, as the director writes it, holds its token."""
    with FakeApiServer() as server:
        yield server
    no_credential_logged(caplog, server.token)
