"""Graceful removal of real servers (kube-proxy's graceful-termination manager is the model).

A removed or terminating real server stays at weight 0 until its active connections reach
0 or the drain timeout passes; UDP ones go at once (no connection to finish).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from director.core.dests import Dests
from director.core.model import DestKey, IpProtocol, RealServer, ServiceKey
from director.core.services import VirtualService
from director.dataplane.interface import Ipvs
from director.logs import event

log = logging.getLogger("director.controller")
Terminating = frozenset[tuple[ServiceKey, DestKey]]


class Draining:
    def __init__(self, ipvs: Ipvs, clock: Callable[[], float], timeout: float) -> None:
        self.ipvs, self.clock, self.timeout = ipvs, clock, timeout
        # Real servers at weight 0 waiting for their connections: key -> dest -> deadline.
        self.waiting: dict[ServiceKey, dict[DestKey, float]] = {}

    def forget(self, key: ServiceKey) -> None:
        self.waiting.pop(key, None)

    def apply(
        self,
        key: ServiceKey,
        vs: VirtualService,
        actual: VirtualService | None,
        terminating: Terminating,
    ) -> VirtualService:
        """``vs`` with its removed and terminating real servers kept at weight 0 while their
        connections finish (``actual``: what the kernel holds for ``key``)."""
        if self._nothing_to_drain(key, vs, actual, terminating):
            return vs  # the most common case, and every one of a first start's
        dests = dict(vs.real_servers)
        candidates = self._candidates(key, dests, actual, terminating)
        waiting = self.waiting.pop(key, {})
        for dkey in [d for d in waiting if d not in candidates]:
            del waiting[dkey]  # back in service, or gone for good
        if candidates:
            now = self.clock()
            active = self._active_connections(key)
            for dkey, rs in candidates.items():
                deadline = waiting.setdefault(dkey, now + self.timeout)
                if now >= deadline or active.get(dkey, 0) == 0:
                    dests.pop(dkey, None)
                    del waiting[dkey]
                    why = "timeout" if now >= deadline else "no active connections"
                    event(
                        log,
                        "drain.done",
                        service=key,
                        real_server=f"{dkey[0]}:{dkey[1]}",
                        reason=why,
                    )
                else:
                    dests[dkey] = rs
        if waiting:
            self.waiting[key] = waiting
        if dests == vs.real_servers:
            return vs
        return VirtualService(key, vs.config, dests, vs.origin)

    def _nothing_to_drain(
        self,
        key: ServiceKey,
        vs: VirtualService,
        actual: VirtualService | None,
        terminating: Terminating,
    ) -> bool:
        """No real server of ``key`` waits, terminates, or was removed from the kernel's."""
        return (
            key not in self.waiting
            and (
                actual is None
                or key.protocol is IpProtocol.UDP
                or Dests.of(vs.real_servers).covers(actual.real_servers)
            )
            and not any(tkey == key for tkey, _ in terminating)
        )

    @staticmethod
    def _candidates(
        key: ServiceKey,
        dests: dict[DestKey, RealServer],
        actual: VirtualService | None,
        terminating: Terminating,
    ) -> dict[DestKey, RealServer]:
        """Real servers to drain: removed (from the kernel's copy, at weight 0) and
        terminating (UDP ones are dropped from ``dests`` at once)."""
        candidates: dict[DestKey, RealServer] = {}
        if actual is not None and key.protocol is not IpProtocol.UDP:
            for dkey, rs in actual.real_servers.items():
                if dkey not in dests:
                    candidates[dkey] = rs._replace(weight=0)
        for tkey, dkey in terminating:
            if tkey == key and dkey in dests:
                if key.protocol is IpProtocol.UDP:
                    del dests[dkey]
                else:
                    candidates[dkey] = dests[dkey]
        return candidates

    def _active_connections(self, key: ServiceKey) -> dict[DestKey, int]:
        try:
            states = self.ipvs.read_dest_states(key)
        except OSError as exc:
            event(log, "drain.read_failed", level=logging.WARNING, service=key, reason=str(exc))
            return {}
        return {dkey: state.active_connections for dkey, state in states.items()}
