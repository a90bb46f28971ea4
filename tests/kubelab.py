"""Helpers shared by the Kubernetes tests on the host and in the VM."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from director.schema.config import Settings, parse_config
from lab.kubeapi import FakeApiServer, node, service

# A Service's one port, and the annotation that balances it over its pods.
PORTS = [("http", "TCP", 80)]
POD = {"lvs-director.io/backends": "pod"}


def settings(
    kubeconfig: Path,
    *,
    identity: str = "director-a",
    pool: str = "198.51.100.0-198.51.100.7",  # a range: CIDRs skip their network address
    extra: str = "",
    kube_extra: str = "",
    resync: int = 3600,
) -> Settings:
    text = f"""
pools:
  - name: default
    addresses: [{pool}]
kubernetes:
  kubeconfig: {kubeconfig}
  identity: {identity}
  lease_seconds: 2
  resync_seconds: {resync}
  drain_timeout_seconds: 30
{kube_extra}
{extra}
"""
    return parse_config(text, "test.yaml")


def restricted(name: str, ranges: list[str]) -> dict[str, object]:
    """A LoadBalancer Service on port 80 that admits only ``ranges``."""
    obj = service(name, [("http", "TCP", 80)])
    obj["spec"]["loadBalancerSourceRanges"] = ranges  # type: ignore[index]
    return obj


@contextmanager
def stand_in(*nodes: tuple[str, str]) -> Iterator[FakeApiServer]:
    """The API stand-in holding ``nodes`` (name, InternalIP), each Ready."""
    with FakeApiServer() as server:
        for name, address in nodes:
            server.create("nodes", node(name, address))
        yield server


N1, N2 = ("n1", "192.0.2.11"), ("n2", "192.0.2.12")


@pytest.fixture
def api(caplog: pytest.LogCaptureFixture) -> Iterator[FakeApiServer]:
    """The stand-in with one node, n1 (the engine's conftest gives it two). Nothing the
    test logged, as the director writes it, holds the stand-in's token (issue 71, 4)."""
    with stand_in(N1) as server:
        yield server
    no_credential_logged(caplog, server.token)


def no_credential_logged(caplog: pytest.LogCaptureFixture, token: str) -> None:
    from director.logs import Formatter

    formatter = Formatter()
    for record in caplog.records:
        line = formatter.format(record)
        assert token not in line, f"a credential in the log: {line[:300]}"
