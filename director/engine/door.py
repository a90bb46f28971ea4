"""The running loop as the web and the metrics see it (``engine.ports.LoopPort``): each
answer read, at the time of asking, from the part that holds it (nothing copied, and no
part reached through the Controller)."""

from __future__ import annotations

from collections.abc import Callable

from director.core.cluster import ServiceInfo
from director.core.firewall import Firewall
from director.core.intents import Intent
from director.core.policy import Policy
from director.dataplane.interface import Ipvs
from director.engine.events import Reply
from director.engine.exports import Exports
from director.engine.pace import Pace
from director.engine.reconcile import Reconciler
from director.engine.source_filter import SourceFilter
from director.engine.translator import Translator
from director.engine.view import LoopView
from director.schema.config import Settings


class Door:
    def __init__(
        self,
        settings: Callable[[], Settings],
        *,
        translator: Translator,
        reconciler: Reconciler,
        pace: Pace,
        source_filter: SourceFilter,
        exports: Exports,
        submit: Callable[[Intent, float], Reply],
    ) -> None:
        self._settings, self._translator, self._reconciler = settings, translator, reconciler
        self._pace, self._filter, self._exports, self._submit = pace, source_filter, exports, submit

    @property
    def settings(self) -> Settings:  # a reload replaces the loop's
        return self._settings()

    @property
    def policy(self) -> Policy:
        return self._translator.policy

    def policy_of(self, svc: ServiceInfo) -> Policy:
        return self._translator.policy_of(svc)

    @property
    def ipvs(self) -> Ipvs:
        return self._reconciler.ipvs

    @property
    def dry_run(self) -> bool:
        return self._reconciler.dry_run

    @property
    def last_step(self) -> float:
        return self._pace.last_step

    @property
    def firewall(self) -> Firewall | None:
        return self._filter.firewall

    @property
    def view(self) -> LoopView:
        return self._exports.view

    def submit_intent(self, intent: Intent, timeout: float = 10.0) -> Reply:
        """Hand the loop an admin-API intent and wait for its reply (``Controller``'s)."""
        return self._submit(intent, timeout)
