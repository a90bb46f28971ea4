"""Helpers shared by the Kubernetes tests on the host and in the VM."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from director.config import Settings, parse_config

T = TypeVar("T")


def eventually(probe: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """Poll until ``probe`` returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def settings(
    kubeconfig: Path,
    *,
    identity: str = "director-a",
    pool: str = "198.51.100.0/29",
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
