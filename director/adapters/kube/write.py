"""Service status, Events and the Lease: the director's only writes to the cluster, each a
single small request."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from collections.abc import Callable

from director.adapters.kube.client import Json, KubeApi, KubeError
from director.logs import event

log = logging.getLogger("director.kube")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeWriter:
    """Service status, Events and the Lease: the director's only writes to the cluster."""

    def __init__(
        self,
        kube: KubeApi,
        component: str,
        identity: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.component, self.identity = kube, component, identity
        self.clock = clock
        # Lease -> (the holder's record as last seen, when it was seen to change): expiry is
        # judged by this observer's own clock, never by comparing another box's timestamps
        # with ours (client-go's rule), so clock skew between the boxes changes nothing.
        self._observed: dict[tuple[str, str], tuple[tuple[object, ...], float]] = {}

    def patch_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        body = {
            "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in ips]}}
        }
        self.kube.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/services/{name}/status",
            body=body,
            content_type="application/merge-patch+json",
        )

    def clear_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        """Empty the Service's load-balancer status if it still names ``ips`` as this
        director wrote them: the status is read, its addresses compared (an API server
        before 1.29 stores no ``ipMode``: what it stored is compared, not what was sent), and
        a JSON patch whose ``test`` is the ingress as read empties it; the ``test`` fails,
        422, when anyone wrote it since (another fleet serving the cluster keeps what it
        wrote)."""
        current = self.kube.request("GET", f"/api/v1/namespaces/{namespace}/services/{name}")
        status = current.get("status") if isinstance(current, dict) else None
        balancer = status.get("loadBalancer") if isinstance(status, dict) else None
        ingress = balancer.get("ingress") if isinstance(balancer, dict) else None
        listed = [i.get("ip") for i in ingress or () if isinstance(i, dict)]
        if not ingress or listed != list(ips):
            event(
                log,
                "kube.status_kept",
                service=f"{namespace}/{name}",
                reason="it names other addresses (written by someone else since)",
            )
            return
        ops = [
            {"op": "test", "path": "/status/loadBalancer/ingress", "value": ingress},
            {"op": "replace", "path": "/status/loadBalancer", "value": {}},
        ]
        try:
            self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/services/{name}/status",
                body=ops,
                content_type="application/json-patch+json",
            )
        except KubeError as exc:
            if exc.status != 422:
                raise
            event(
                log,
                "kube.status_kept",
                service=f"{namespace}/{name}",
                reason="written by someone else since",
            )

    def patch_annotations(self, namespace: str, name: str, values: dict[str, str | None]) -> None:
        """Set (or, with None, remove) annotations on a Service: a JSON merge patch."""
        self.kube.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/services/{name}",
            body={"metadata": {"annotations": values}},
            content_type="application/merge-patch+json",
        )

    def event(
        self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
    ) -> None:
        """An Event on the Service. As client-go's recorder aggregates, the same one again
        (same Service, type, reason and message: after a restart, a leader change, from the
        other box) raises the count and lastTimestamp of the first instead of adding one:
        its name is made from what it says."""
        now = _now()[:19] + "Z"
        message = message[:1024]
        digest = hashlib.sha256(f"{uid}\0{kind}\0{reason}\0{message}".encode()).hexdigest()
        event_name = f"{name}.{digest[:16]}"
        path = f"/api/v1/namespaces/{namespace}/events"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Service",
                "name": name,
                "namespace": namespace,
                "uid": uid,
            },
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": self.component, "host": self.identity},
            "reportingComponent": self.component,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.request("POST", path, body=body)
            return
        except KubeError as exc:
            if exc.status != 409:  # 409: told before; counted below
                raise
        current = self.kube.request("GET", f"{path}/{event_name}")
        version = (current.get("metadata") or {}).get("resourceVersion")
        patch = {
            "count": int(current.get("count") or 1) + 1,
            "lastTimestamp": now,
            "metadata": {"resourceVersion": version},
        }
        self.kube.request(
            "PATCH", f"{path}/{event_name}", body=patch, content_type="application/merge-patch+json"
        )

    def _expired(self, lease: tuple[str, str], spec: Json) -> bool:
        """Has the holder stopped renewing? True once its record has not changed for a
        lease duration on this observer's clock, or when nobody holds it."""
        if not spec.get("holderIdentity"):
            return True
        record = tuple(
            str(spec.get(k))
            for k in (
                "holderIdentity",
                "renewTime",
                "acquireTime",
                "leaseTransitions",
                "leaseDurationSeconds",
            )
        )
        now = self.clock()
        seen = self._observed.get(lease)
        if seen is None or seen[0] != record:
            self._observed[lease] = (record, now)
            return False
        try:
            duration = max(1.0, float(spec.get("leaseDurationSeconds") or 15))
        except (TypeError, ValueError):
            duration = 15.0
        return now - seen[1] > duration

    def lease_refusal(self, namespace: str, name: str, timeout: float = 5) -> str | None:
        """Why the API server would refuse this director the Lease (a dry-run create:
        nothing is written), or None when it would not."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
        }
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        try:
            self.kube.request("POST", path, query=[("dryRun", "All")], body=body, timeout=timeout)
        except KubeError as exc:
            if exc.status != 409:  # 409: it exists already, which is fine
                return str(exc)
        return None

    def release_lease(self, namespace: str, name: str, timeout: float = 5) -> bool:
        """Give the Lease up (a clean stop): no holder, a duration of one second, so the
        other box takes it at its next attempt instead of a whole duration later (what
        client-go's ReleaseOnCancel does). True when this director held it and let it go."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        lease = self.kube.request("GET", path, timeout=timeout)
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return False
        now = _now()
        spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=now, renewTime=now)
        try:  # resourceVersion guards it: taken meanwhile, it is no longer ours to release
            self.kube.request("PUT", path, body=dict(lease, spec=spec), timeout=timeout)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def acquire_lease(self, namespace: str, name: str, seconds: int) -> bool:
        """Take or renew the Lease; True when this director holds it afterwards."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        now = _now()
        try:
            lease = self.kube.request("GET", f"{path}/{name}")
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": seconds,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            try:
                self.kube.request("POST", path, body=body)
            except KubeError as exc2:
                if exc2.status == 409:
                    return False  # someone else created it first
                raise
            return True
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity")
        if holder != self.identity and not self._expired((namespace, name), spec):
            return False
        if holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=seconds, renewTime=now)
        lease = dict(lease, spec=spec)
        try:
            self.kube.request("PUT", f"{path}/{name}", body=lease)  # resourceVersion guards it
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True
