"""Shared fixtures. Tests marked ``kernel`` need real IPVS: they run in the lab VM
(``make test``) and are reported as not run (skipped, with the reason) anywhere else."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from hypothesis import settings

from director.dataplane.fake import FakeIpvs
from director.dataplane.interface import Ipvs

# Fixtures for every folder: a director with a static table and its Flask test client
# (weblab); director run's wiring serving the admin API (serverlab); the Kubernetes API
# stand-in with one node (kubelab; the adapters' and the engine's own conftest narrow it).
pytest_plugins = ("tests.weblab", "tests.serverlab", "tests.kubelab")

# Property tests run the same examples every time in `make test` (a red CI names a real
# bug, reproducibly); HYPOTHESIS_PROFILE=explore draws new ones on each run, to look further.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@cache
def kernel_unavailable() -> str | None:
    """Why the kernel tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "not root"
    subprocess.run(["modprobe", "ip_vs"], capture_output=True, check=False)
    if not Path("/proc/net/ip_vs").exists():
        return "this kernel has no IPVS"
    return None


# Seconds a test in the lab may take, fixtures included (a lab set up, a box booted, a role
# applied under emulation), before it counts as hung; host tests have pyproject's 300.
LAB_TIMEOUT = 1500
LAB_MARKERS = ("kernel", "role", "boot")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None and any(
            m in item.keywords for m in LAB_MARKERS
        ):
            item.add_marker(pytest.mark.timeout(LAB_TIMEOUT))
    reason = kernel_unavailable() if any("kernel" in i.keywords for i in items) else None
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"not run: {reason} (make test runs these in the lab VM)")
    for item in items:
        if "kernel" in item.keywords:
            item.add_marker(skip)


_names = itertools.count()


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh, empty network namespace (its own empty IPVS table)."""
    from lab.netns import Netns

    ns = Netns(f"t{os.getpid()}-{next(_names)}")
    # Like any host: with lo down a fresh namespace has no local routing table, and the
    # kernel then refuses IPv4 real servers (ip_vs_new_dest checks inet_addr_type()).
    ns.ip("link set lo up")
    try:
        yield ns.name
    finally:
        ns.close()


@pytest.fixture(params=["fake", pytest.param("kernel", marks=pytest.mark.kernel)])
def ipvs(request: pytest.FixtureRequest) -> Iterator[Ipvs]:
    """The conformance subject: the stateful fake on the host, the real kernel in the VM."""
    if request.param == "fake":
        yield FakeIpvs()
        return
    from director.dataplane.kernel import KernelIpvs

    name = request.getfixturevalue("netns")
    kernel = KernelIpvs(netns=name)
    try:
        yield kernel
    finally:
        kernel.close()
