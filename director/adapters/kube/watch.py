"""List + watch of one resource, resuming from the last resourceVersion (bookmarks keep it
fresh), relisting on 410 Gone, reconnecting with capped exponential backoff (and at once
when a server that stopped answering answers ``/readyz`` again). It hands plain JSON to a
callback; it never touches IPVS, so an API outage changes nothing in the kernel."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from director.adapters.kube.client import (
    Gone,
    Handler,
    Json,
    KubeApi,
    KubeError,
    Resource,
    WatchStream,
    short_reason,
    text_field,
)
from director.core.cluster import split_resource
from director.logs import event

log = logging.getLogger("director.kube")

PROBE_EVERY = 1.0  # seconds between looks at a server that stopped answering (jittered)
BACKOFF_BASE = 0.5  # seconds before the first retry; doubled per failure up to backoff_max


def refusing(parse: Callable[[Json], Any], resource: Resource) -> Callable[[Json], Any]:
    """``parse``, giving None (logged) should it ever fail on an object: one object the
    director cannot read never stops the list or the watch."""

    def parsed(obj: Json) -> Any:
        try:
            return parse(obj)
        except Exception as exc:
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            name = f"{text_field(meta, 'namespace')}/{text_field(meta, 'name')}"
            event(
                log,
                "kube.object_refused",
                level=logging.ERROR,
                resource=resource.name,
                object=name,
                error=short_reason(exc),
                exc_info=exc,
            )
            return None

    return parsed


class Fatal(Exception):
    """The watcher cannot go on (the process that takes its lists cannot be made): its
    thread ends, and the director's watchdog stops the director for systemd."""


class Watcher:
    """List + watch of one resource on a thread of its own; ``parse`` turns each object's
    JSON into what the handler keeps."""

    def __init__(
        self,
        kube: KubeApi,
        resource: Resource,
        handler: Handler,
        parse: Callable[[Json], Any],
        *,
        watch_seconds: int = 300,
        backoff_max: float = 30.0,
    ) -> None:
        self.kube, self.resource, self.handler = kube, resource, handler
        self._refusing = refusing(parse, resource)
        self.watch_seconds, self.backoff_max = watch_seconds, backoff_max
        self.resource_version: str | None = None
        self._stream: WatchStream | None = None  # the watch under way, if any
        self.connected = False
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._random = random.Random()
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{resource.name}", daemon=True
        )

    @property
    def cluster(self) -> str:
        """The cluster it follows ("" for the one cluster of ``kubernetes:``)."""
        return split_resource(self.resource.name)[0]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop; a watch under way is cut at once (a removed cluster's, say)."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.shutdown()

    def parse(self, obj: Json) -> Any:
        """The object's value, or None (logged) should the parser ever fail on it."""
        return self._refusing(obj)

    def list_all(self) -> str:
        """The whole resource, handed on as one RELIST; the version to watch from."""
        items, rv = self.kube.list(self.resource, self.parse)
        self._set_connected(True)
        self.handler(self.resource.name, "RELIST", items)
        event(log, "kube.listed", resource=self.resource.name, items=len(items), rv=rv)
        return rv

    def watched(self, kind: str, obj: Json) -> None:
        """One watch event: parsed here, off the controller's thread, and handed on."""
        info = self.parse(obj)
        if info is not None:
            self.handler(self.resource.name, kind, info)

    def _set_connected(self, up: bool, error: str | None = None) -> None:
        if up != self.connected:
            self.connected = up
            self.handler(self.resource.name, "CONNECTED" if up else "DISCONNECTED", error)
        if error:
            self.last_error = error

    def _run(self) -> None:
        delay = BACKOFF_BASE
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.resource_version = self.list_all()
                    delay = BACKOFF_BASE  # the server answers: the next failure starts afresh
                events = self.kube.watch(self.resource, self.resource_version, self.watch_seconds)
                self._stream = events
                if self._stop.is_set():  # stopped while the watch was being opened
                    events.shutdown()
                self._set_connected(True)
                delay = BACKOFF_BASE  # started; a quiet resource may see no event for minutes
                for kind, obj in events:
                    seen = (obj.get("metadata") or {}).get("resourceVersion")
                    if seen:
                        self.resource_version = str(seen)
                    if kind != "BOOKMARK":
                        self.watched(kind, obj)
                    if self._stop.is_set():
                        return
            except Fatal as exc:
                event(
                    log,
                    "kube.watch_ended",
                    level=logging.CRITICAL,
                    resource=self.resource.name,
                    reason=str(exc),
                )
                return  # the director's watchdog sees this thread end, and stops it
            except Gone as exc:
                event(log, "kube.watch_gone", resource=self.resource.name, reason=str(exc))
                self.resource_version = None  # relist; the kernel is not touched
            except Exception as exc:
                if self._stop.is_set():  # its connection closed because the director stops
                    return
                if isinstance(exc, KubeError) and exc.status == 410:
                    # The watch itself answered 410 (not an ERROR event): the version is
                    # gone for good; retrying it would fail forever. Relist.
                    event(
                        log,
                        "kube.watch_gone",
                        resource=self.resource.name,
                        reason=short_reason(exc),
                    )
                    self.resource_version = None
                    continue
                reason = short_reason(exc)
                self._set_connected(False, reason)
                # Jittered (half to all of the delay): the two boxes of a pair, and their
                # watchers, do not come back to a recovering API server in lock-step.
                wait = self._random.uniform(delay / 2, delay)
                event(
                    log,
                    "kube.watch_failed",
                    level=logging.WARNING,
                    resource=self.resource.name,
                    reason=reason,
                    retry_in=f"{wait:.2f}s",
                )
                if isinstance(exc, KubeError):  # it answered: back off, do not press it
                    self._stop.wait(wait)
                else:  # no answer at all: an outage, whose end is not waited out
                    self._wait_or_answer(wait)
                delay = min(delay * 2, self.backoff_max)

    def _wait_or_answer(self, wait: float) -> None:
        """Wait ``wait`` seconds, but come back as soon as the API server answers again
        (``GET /readyz`` about once a second): after an outage the watches resume within a
        second of the server, not at the end of a backoff grown during the outage."""
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            step = self._random.uniform(0.75, 1.25) * PROBE_EVERY
            if left <= step:
                self._stop.wait(max(0.0, left))
                return
            if self._stop.wait(step):
                return
            if self.kube.answers(timeout=PROBE_EVERY):
                event(
                    log,
                    "kube.server_back",
                    resource=self.resource.name,
                    backoff_left=f"{deadline - time.monotonic():.2f}s",
                )
                return
