"""What the engine needs from the world outside it, and what it offers the web and the
adapters: small Protocols, so each side can be tested with a stand-in."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Protocol

from director.core.cluster import ServiceInfo
from director.core.firewall import Firewall
from director.core.intents import Intent
from director.core.policy import Policy
from director.dataplane.interface import Ipvs
from director.schema.config import Settings

if TYPE_CHECKING:
    from director.engine.events import Reply
    from director.engine.view import LoopView


class ClusterWriter(Protocol):
    """What the loop writes to the cluster (``director.adapters.kube.client.KubeWriter``)."""

    def patch_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None: ...

    def clear_status(self, namespace: str, name: str, ips: tuple[str, ...]) -> None:
        """Empty the status if it still names ``ips`` (else leave it)."""
        ...

    def event(
        self, namespace: str, name: str, uid: str, *, kind: str, reason: str, message: str
    ) -> None: ...


class LoopMetrics(Protocol):
    """The figures the loop feeds (``director.adapters.metrics.collector.Recorder``)."""

    def observe_sync(self, kind: str, seconds: float) -> None: ...

    def observe_programming(self, trigger: str, now: dt.datetime) -> None: ...


class LoopPort(Protocol):
    """The running loop as the web and the metrics see it: its settings, its latest
    published view, and a way to hand it an intent. Nothing here takes the loop's lock."""

    @property
    def settings(self) -> Settings: ...

    @property
    def policy(self) -> Policy: ...

    def policy_of(self, svc: ServiceInfo) -> Policy:
        """The policy of the Service's cluster."""
        ...

    @property
    def ipvs(self) -> Ipvs: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def last_step(self) -> float: ...

    @property
    def firewall(self) -> Firewall | None: ...

    @property
    def view(self) -> LoopView: ...

    def submit_intent(self, intent: Intent, timeout: float = 10.0) -> Reply: ...
