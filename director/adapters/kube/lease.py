"""The Lease that decides which director of a pair writes Service status: taken and renewed
in a thread of its own, given up on a clean stop (the other box takes over at its next
attempt, not a lease duration later), and lost when it would have expired for the others."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from director.core.owned import Ledger, Refused, Transient
from director.logs import event

if TYPE_CHECKING:  # the Kubernetes client is loaded where a cluster is configured only
    from director.adapters.kube.write import KubeWriter

log = logging.getLogger("director.runtime")
RELEASE_SECONDS = 5.0  # a clean stop waits at most this for the Lease's release


class Elector:
    """Holds the Lease that decides which director of the pair writes Service status."""

    def __init__(
        self,
        writer: KubeWriter,
        namespace: str,
        name: str,
        seconds: int,
        on_change: Callable[[bool], None],
        *,
        on_refused: Callable[[str | None], None] | None = None,
        ledger: Ledger | None = None,
        owned_name: str | None = None,
    ) -> None:
        """``owned_name``: its name in the ledger (``lease``; ``lease/prod`` for a named
        cluster's, one of several)."""
        self.writer, self.namespace, self.name, self.seconds = writer, namespace, name, seconds
        self.on_change, self.on_refused = on_change, on_refused
        self.ledger = ledger or Ledger()
        self.refused: str | None = None
        self.leader = False
        self._last_renewal = 0.0
        self.owned = owned_name or "lease"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.owned, daemon=True)

    def start(self) -> None:
        self.ledger.track(self.owned)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop renewing; with ``release`` (a clean stop), give the Lease up so the other
        box writes status at its next attempt, not a lease duration later."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=RELEASE_SECONDS)  # no renewal after the release
        if not (release and self.leader):
            return
        self.leader = False
        try:
            released = self.writer.release_lease(self.namespace, self.name, timeout=RELEASE_SECONDS)
        except Exception as exc:  # the API is away: the Lease expires on its own
            event(log, "lease.release_failed", level=logging.WARNING, reason=str(exc)[:200])
            return
        event(log, "lease.released", lease=f"{self.namespace}/{self.name}", released=released)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                held = self.writer.acquire_lease(self.namespace, self.name, self.seconds)
                if held:
                    self._last_renewal = time.monotonic()
                self._refused(None)
                self.ledger.ok(self.owned)
            except Exception as exc:
                event(log, "lease.renew_failed", level=logging.WARNING, reason=str(exc)[:200])
                lease = f"the Lease {self.namespace}/{self.name}: {str(exc)[:200]}"
                if lease_refusal(exc):  # a refusal, not an outage: it stays until fixed
                    self.ledger.failed(self.owned, Refused(f"the API server refuses {lease}"))
                    self._refused(f"the API server refuses {lease}")
                else:
                    self.ledger.failed(self.owned, Transient(f"cannot renew {lease}"))
                # Leadership lapses when the lease would have expired for the others too.
                held = self.leader and time.monotonic() - self._last_renewal < self.seconds
            if held != self.leader:
                self.leader = held
                self.on_change(held)
            self._stop.wait(max(0.2, self.seconds / 3))

    def _refused(self, reason: str | None) -> None:
        if reason != self.refused:
            self.refused = reason
            if self.on_refused is not None:
                self.on_refused(reason)


def lease_refusal(exc: BaseException) -> bool:
    """An answer that will not change until someone fixes the cluster: 401, 403 (RBAC), 404
    (the namespace does not exist), 422. Outages, 409 and 429 are passing."""
    from director.adapters.kube.client import KubeError

    return isinstance(exc, KubeError) and exc.status in (401, 403, 404, 422)
