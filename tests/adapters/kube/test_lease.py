"""Who writes Service status: the Lease, judged by what this director observes (issue 13,
item 21). Another box's timestamps are never compared with this box's clock, so clock skew
between the pair cannot hand the Lease to both, or to neither."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from director.adapters.kube.client import KubeApi, api_client
from director.adapters.kube.write import KubeWriter
from lab.kubeapi import FakeApiServer
from lab.wait import Clock, eventually

NS, NAME = "lvs-director", "lvs-director"


def writer(api: FakeApiServer, tmp_path: Path, identity: str, clock: Clock) -> KubeWriter:
    kube = KubeApi(api_client(str(api.kubeconfig(tmp_path / f"kc-{identity}"))))
    return KubeWriter(kube, "lvs-director", identity, clock=clock)


def stamp(seconds_from_now: float) -> str:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds_from_now)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def hold(api: FakeApiServer, holder: str, renew: str) -> None:
    """The other box renews (its clock says ``renew``)."""
    lease = api.get("leases", NAME, namespace=NS)
    lease["spec"].update(holderIdentity=holder, renewTime=renew)
    api.store.update("leases", NS, NAME, lease)


def test_a_holder_whose_clock_runs_late_keeps_the_lease_while_it_renews(
    api: FakeApiServer, tmp_path: Path
) -> None:
    clock = Clock(1000.0)
    b = writer(api, tmp_path, "b", clock)
    assert b.acquire_lease(NS, NAME, 15) is True
    a = writer(api, tmp_path, "a", clock)
    for step in range(10):  # b renews every 5 s; its clock is an hour behind ours
        hold(api, "b", stamp(-3600 + step))
        assert a.acquire_lease(NS, NAME, 15) is False, f"taken at step {step}"
        clock.now += 5
    assert api.get("leases", NAME, namespace=NS)["spec"]["holderIdentity"] == "b"


def test_a_holder_that_stops_is_replaced_after_a_lease_duration_whatever_its_clock_says(
    api: FakeApiServer, tmp_path: Path
) -> None:
    clock = Clock(1000.0)
    b = writer(api, tmp_path, "b", clock)
    assert b.acquire_lease(NS, NAME, 15) is True
    hold(api, "b", stamp(+3600))  # b's clock runs an hour ahead, then b dies
    a = writer(api, tmp_path, "a", clock)
    assert a.acquire_lease(NS, NAME, 15) is False  # first sight: wait a whole duration
    clock.now += 14
    assert a.acquire_lease(NS, NAME, 15) is False
    clock.now += 2
    assert a.acquire_lease(NS, NAME, 15) is True
    spec = api.get("leases", NAME, namespace=NS)["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 1


def test_a_clean_stop_hands_the_lease_over_at_once(api: FakeApiServer, tmp_path: Path) -> None:
    """A planned switch-over (``systemctl stop`` on the status writer) does not wait out the
    lease: the stopping director gives it up and the other takes it at its next attempt."""
    from director.adapters.kube.lease import Elector

    clock = Clock(1000.0)
    changes: list[bool] = []
    b = Elector(writer(api, tmp_path, "b", clock), NS, NAME, 15, changes.append)
    b.start()
    eventually(lambda: changes == [True], timeout=10, what="b leads")
    a = writer(api, tmp_path, "a", clock)
    assert a.acquire_lease(NS, NAME, 15) is False, "b holds it"
    b.stop()
    spec = api.get("leases", NAME, namespace=NS)["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert a.acquire_lease(NS, NAME, 15) is True, "taken with no lease duration waited out"
    spec = api.get("leases", NAME, namespace=NS)["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 1


def test_a_lease_taken_meanwhile_is_not_released_by_its_old_holder(
    api: FakeApiServer, tmp_path: Path
) -> None:
    clock = Clock(1000.0)
    b = writer(api, tmp_path, "b", clock)
    assert b.acquire_lease(NS, NAME, 15) is True
    hold(api, "a", stamp(0))  # a took it (b was cut off for a lease duration)
    assert b.release_lease(NS, NAME) is False
    assert api.get("leases", NAME, namespace=NS)["spec"]["holderIdentity"] == "a"
