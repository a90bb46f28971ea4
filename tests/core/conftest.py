"""The core tests' stand-in API server: empty (a test adds what it needs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lab.kubeapi import FakeApiServer


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server
