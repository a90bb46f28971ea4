"""What reaches the control loop, as typed values: the loop takes them with one ``match``.

Watchers, the lease elector, the health prober, keepalived's FIFO and the admin API each
post one kind. ``from_watch`` turns a watcher's ``(resource, kind, payload)`` into its event.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from director.core.checks import Target
from director.core.intents import Intent
from director.schema.config import Settings


class Reply:
    """The loop's answer to one admin-API intent: stored (and programmed), or refused with
    an HTTP status and why. The API thread waits for it; the loop resolves it once. An
    asker that stops waiting ``abandon``s it, and a loop that ``take``s it afterwards makes
    nothing of it: a change answered as not made is never made later."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._state = "waiting"  # taken (by the loop) | abandoned (by the asker)
        self.status = 0
        self.detail = ""

    def take(self) -> bool:
        """The loop is about to make the change: False when its asker has given up."""
        with self._lock:
            if self._state == "abandoned":
                return False
            self._state = "taken"
            return True

    def abandon(self) -> bool:
        """The asker gives up: False when the loop has taken the change already (its answer
        comes once the step is done)."""
        with self._lock:
            if self._state == "taken":
                return False
            self._state = "abandoned"
            return True

    def resolve(self, status: int, detail: str = "") -> None:
        if not self._done.is_set():
            self.status, self.detail = status, detail
            self._done.set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    @property
    def ok(self) -> bool:
        return self._done.is_set() and self.status < 300


@dataclass(frozen=True, slots=True)
class ObjectChanged:
    """A watch event: ``kind`` ADDED, MODIFIED or DELETED of a parsed cluster object."""

    resource: str
    kind: str
    obj: Any  # ServiceInfo | SliceInfo | NodeInfo


@dataclass(frozen=True, slots=True)
class Listed:
    """A fresh list of a resource (at start, and after 410 Gone)."""

    resource: str
    objs: list[Any]


@dataclass(frozen=True, slots=True)
class WatchState:
    """A watch connected or lost."""

    resource: str
    connected: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """This director became or stopped being a cluster's leader."""

    leader: bool
    cluster: str = ""  # whose Lease ("": the one cluster of kubernetes:)


@dataclass(frozen=True, slots=True)
class TargetChecked:
    """A health check's verdict on a target."""

    target: Target
    up: bool


@dataclass(frozen=True, slots=True)
class VrrpChanged:
    """keepalived's VRRP state changed."""

    state: str  # MASTER | BACKUP | FAULT


@dataclass(frozen=True, slots=True)
class IntentPosted:
    """An operator's intent from the API, and where its answer goes."""

    intent: Intent
    reply: Reply


@dataclass(frozen=True, slots=True)
class Reloaded:
    """The configuration file was read again (SIGHUP) and validated: its services replace
    the running ones, only the difference programmed. ``reply``: done, or refused and why."""

    settings: Settings
    reply: Reply
    # the writers of the clusters the file adds, by name (made before the loop takes it)
    writers: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Leaving:
    """The director is stopping: withdraw every BGP route first (``reason``: why)."""

    reason: str


@dataclass(frozen=True, slots=True)
class LeaseRefused:
    """The API server refuses this director the status Lease (a namespace that does not
    exist, RBAC), so neither box of a pair writes status; None: refused no longer."""

    reason: str | None


@dataclass(frozen=True, slots=True)
class WriteFailed:
    """A cluster write the API server refused or did not answer (the outbox's thread)."""

    verb: str  # patch | create
    resource: str  # services/status | events
    code: str  # the HTTP status, or "unreachable"
    dropped: bool  # refused for good (not retried)
    cluster: str = ""  # whose API server (clusters:); "" for kubernetes:


@dataclass(frozen=True, slots=True)
class BoxAddresses:
    """This box's own addresses changed (address -> interface): never a VIP, never an
    endpoint (``adapters.box``)."""

    addresses: tuple[tuple[str, str], ...]


Event = (
    BoxAddresses
    | ObjectChanged
    | Listed
    | WatchState
    | LeaderChanged
    | TargetChecked
    | VrrpChanged
    | IntentPosted
    | WriteFailed
    | LeaseRefused
    | Leaving
    | Reloaded
)


def from_watch(resource: str, kind: str, payload: Any) -> Event:
    """A watcher's (or another thread's) ``(resource, kind, payload)`` as its event."""
    if resource == "health":
        return TargetChecked(payload, kind == "UP")
    if resource == "vrrp":
        return VrrpChanged(kind)
    if resource == "lease":
        return LeaderChanged(kind == "LEADER")
    if kind in ("CONNECTED", "DISCONNECTED"):
        return WatchState(resource, kind == "CONNECTED", "" if payload is None else str(payload))
    if kind == "RELIST":
        return Listed(resource, list(payload))
    return ObjectChanged(resource, kind, payload)
