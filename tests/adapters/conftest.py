"""What the adapters' tests share: a strict Kubernetes API stand-in, one per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lab.kubeapi import FakeApiServer


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server
