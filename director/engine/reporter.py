"""What the loop tells the cluster: Service status and Events, through the outbox.

Only the Lease holder writes. An Event is sent when what it says changes (not on every
sync); Events a follower saw the reason for are kept and sent should it become the leader.
Refused parts of a Service are counted in the loop's status once per distinct problem.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from functools import partial

from director.core.annotations import Problem
from director.core.cluster import ServiceInfo
from director.engine.events import LeaseRefused, WriteFailed
from director.engine.outbox import Outbox
from director.engine.ports import ClusterWriter
from director.engine.view import LoopStatus
from director.logs import event

log = logging.getLogger("director.controller")
Pending = tuple[ServiceInfo, str, str, str]  # the Service, kind, reason, message
RETIRE_SECONDS = 30.0  # a removed cluster's last writes: given up after this long
PROBLEM_EVENTS = 10  # new problems of one Service at once sent as Events each; more: one
MANY = "problem:*"  # the topic of that one Event


def outboxes(
    writer: ClusterWriter | Mapping[str, ClusterWriter] | None,
    on_error: Callable[[WriteFailed], None],
) -> dict[str, Outbox]:
    """An outbox for each cluster's writer (``writer``: the one cluster's, or one per
    cluster by name): one cluster's slow or refused writes never hold another's."""
    if writer is None:
        return {}
    writers = writer if isinstance(writer, Mapping) else {"": writer}
    return {cluster: Outbox(w, on_error, cluster=cluster) for cluster, w in writers.items()}


def _cluster_of(topics: dict[str, Pending]) -> str:
    return next(iter(topics.values()))[0].cluster if topics else ""


def _pairs(told: tuple[str, ...]) -> Iterable[tuple[str, str]]:
    return zip(told[::2], told[1::2], strict=True)


class Reporter:
    def __init__(
        self,
        outbox: Outbox | Mapping[str, Outbox] | None,
        status: LoopStatus,
        *,
        dry_run: bool,
        clusters: Iterable[str] = ("",),
    ) -> None:
        """``outbox``: the cluster's, or one per cluster by name ("": ``kubernetes:``);
        ``clusters``: the clusters served, each with a Lease of its own."""
        if outbox is None:
            self.outboxes: dict[str, Outbox] = {}
        elif isinstance(outbox, Mapping):
            self.outboxes = dict(outbox)
        else:
            self.outboxes = {"": outbox}
        self.status, self.dry_run = status, dry_run
        # cluster -> holds its Lease (a shadow allocates as if it led, and writes nothing)
        self.leaders = {cluster: dry_run for cluster in clusters}
        status.leaders = dict(self.leaders)
        self.lease_refused: str | None = None  # why no box can write status, if refused
        # service -> (topic, its last message, topic, message, ...): one flat tuple, not a
        # dict, per Service (most have one topic; a dict each was 2 MB at 10,000 Services)
        self.reported: dict[str, tuple[str, ...]] = {}
        # Events a follower saw the reason for: written should it become the leader.
        self.unsent: dict[str, dict[str, Pending]] = {}

    @property
    def outbox(self) -> Outbox | None:
        """The one cluster's outbox (``kubernetes:``)."""
        return self.outboxes.get("")

    @property
    def leader(self) -> bool:
        """Holds the Lease of every cluster served."""
        return bool(self.leaders) and all(self.leaders.values())

    def leads(self, cluster: str) -> bool:
        """Writes the status and Events of ``cluster``'s Services."""
        return self.leaders.get(cluster, self.dry_run)

    def add(self, cluster: str, outbox: Outbox | None) -> None:
        """A cluster served from now on (a reload added it): its writes, and its Lease
        not held until its elector says so."""
        if outbox is not None:
            self.outboxes[cluster] = outbox
        self.leaders[cluster] = self.dry_run
        self.status.leaders = dict(self.leaders)

    def remove(self, cluster: str, services: Iterable[ServiceInfo] = ()) -> None:
        """A cluster no longer served: the addresses its leader wrote in its ``services``'
        status taken back (a status another writer wrote since is kept), with what was
        still queued, within ``RETIRE_SECONDS``; nothing more is written to it."""
        outbox = self.outboxes.pop(cluster, None)
        if outbox is not None:
            clear = outbox.writer.clear_status
            if self.leaders.get(cluster) and not self.dry_run:
                for svc in services:
                    if svc.status_ips:
                        write = partial(clear, svc.namespace, svc.name, svc.status_ips)
                        outbox.put(("status", svc.ref), write)
            outbox.retire(RETIRE_SECONDS)
        self.leaders.pop(cluster, None)
        self.status.leaders = dict(self.leaders)
        for ref in [r for r, t in self.unsent.items() if _cluster_of(t) == cluster]:
            del self.unsent[ref]

    def absorb(self, ev: WriteFailed | LeaseRefused) -> None:
        """A cluster write failed (the outbox retries it, or dropped it): counted. The
        status Lease refused (or no longer): kept, for /readyz and ``director status``."""
        if isinstance(ev, LeaseRefused):
            if ev.reason != self.lease_refused:
                level = logging.ERROR if ev.reason else logging.INFO
                event(log, "lease.refused", level=level, reason=ev.reason or "-")
            self.lease_refused = ev.reason
            return
        errors, labels = self.status.write_errors, (ev.cluster, ev.verb, ev.resource, ev.code)
        errors[labels] = errors.get(labels, 0) + 1

    def forget(self, ref: str) -> None:
        self.reported.pop(ref, None)
        self.unsent.pop(ref, None)

    def lead(self, leader: bool, cluster: str = "") -> None:
        """Leadership of ``cluster`` changed: a new leader sends what it held back and is
        still true."""
        self.leaders[cluster] = leader
        self.status.leaders = dict(self.leaders)
        if not leader:
            return
        for ref in [r for r, t in self.unsent.items() if _cluster_of(t) == cluster]:
            for topic, (svc, severity, reason, message) in self.unsent.pop(ref).items():
                if self.said(ref, topic) == message:  # still true
                    self._send_event(svc, severity, reason, message)

    def said(self, ref: str, topic: str) -> str | None:
        """The last message on ``topic`` for the Service, if any."""
        told = self.reported.get(ref, ())
        for at in range(0, len(told), 2):
            if told[at] == topic:
                return told[at + 1]
        return None

    def topics(self, ref: str) -> list[str]:
        return list(self.reported.get(ref, ())[::2])

    def _set(self, ref: str, topic: str, message: str | None) -> None:
        """Keep ``message`` as the last on ``topic`` (None: forget the topic)."""
        told = self.reported.get(ref, ())
        pairs = [(t, m) for t, m in zip(told[::2], told[1::2], strict=True) if t != topic]
        if message is not None:
            pairs.append((topic, message))
        if pairs:
            self.reported[ref] = tuple(item for pair in pairs for item in pair)
        else:
            self.reported.pop(ref, None)

    def known(self, ref: str, topic: str, message: str) -> None:
        """Something already true (a restart, the other director): nothing to announce."""
        if self.said(ref, topic) != message:
            self._set(ref, topic, message)

    def report(self, svc: ServiceInfo, kind: str, reason: str, message: str, topic: str) -> None:
        """An Event on the Service when what it says changes (not on every sync)."""
        if self.said(svc.ref, topic) == message:
            return
        self._set(svc.ref, topic, message)
        level = logging.WARNING if kind == "Warning" else logging.INFO
        event(log, "service." + reason, level=level, service=svc.ref, message=message)
        self._tell(svc, kind, reason, message, topic)

    def _tell(self, svc: ServiceInfo, kind: str, reason: str, message: str, topic: str) -> None:
        if svc.cluster not in self.outboxes:
            return
        if not self.leads(svc.cluster):  # the leader writes Events; kept for when it leads
            self.unsent.setdefault(svc.ref, {})[topic] = (svc, kind, reason, message)
            return
        self._send_event(svc, kind, reason, message)

    def report_problems(self, svc: ServiceInfo, problems: Iterable[Problem]) -> None:
        """Refused parts of the Service (annotations, fields, endpoints): a Warning Event, a
        log line and a count each, once per distinct problem while it lasts. More than
        ``PROBLEM_EVENTS`` new ones at once are one Event that counts them (a Service with
        thousands of bad entries is one Event, and linear work, not thousands)."""
        told = dict(_pairs(self.reported.get(svc.ref, ())))
        current: dict[str, tuple[Problem, str]] = {}
        for problem in problems:
            topic = f"problem:{problem.annotation}:{problem.message}"
            if topic not in current:
                text = (
                    f"{problem.annotation}: {problem.message}"
                    if problem.reason == "InvalidAnnotation"
                    else problem.message
                )
                current[topic] = (problem, text)
        fresh = [topic for topic in current if topic not in told]
        refused = self.status.refused
        for topic in fresh:
            problem = current[topic][0]
            resource = "endpointslices" if problem.reason == "InvalidEndpoint" else "services"
            refused[resource] = refused.get(resource, 0) + 1
        for topic in [t for t in told if t.startswith("problem:") and t not in current]:
            del told[topic]  # fixed: the same problem again is reported again
        if len(fresh) <= PROBLEM_EVENTS:
            self._keep(svc.ref, told)
            for topic in fresh:
                problem, text = current[topic]
                self.report(svc, "Warning", problem.reason, text, topic)
            return
        first, text = current[fresh[0]]
        message = f"{len(fresh)} problems; the first: {text}"[:1000]
        for topic in fresh:
            told[topic] = current[topic][1]
        told[MANY] = message
        self._keep(svc.ref, told)
        event(
            log,
            "service." + first.reason,
            level=logging.WARNING,
            service=svc.ref,
            problems=len(fresh),
            message=message,
        )
        self._tell(svc, "Warning", first.reason, message, MANY)

    def _keep(self, ref: str, told: dict[str, str]) -> None:
        if told:
            self.reported[ref] = tuple(item for pair in told.items() for item in pair)
        else:
            self.reported.pop(ref, None)

    def write_status(self, svc: ServiceInfo, ips: tuple[str, ...]) -> None:
        if self.dry_run:
            event(log, "kube.would_write_status", service=svc.ref, ingress=",".join(ips) or "-")
            return
        outbox = self.outboxes.get(svc.cluster)
        if outbox is None:
            return
        writer = outbox.writer
        outbox.put(("status", svc.ref), lambda: writer.patch_status(svc.namespace, svc.name, ips))

    def _send_event(self, svc: ServiceInfo, kind: str, reason: str, message: str) -> None:
        outbox = self.outboxes[svc.cluster]
        writer = outbox.writer
        outbox.put(  # a later message of the same Service and reason replaces this one
            ("event", svc.ref, reason),
            lambda: writer.event(
                svc.namespace, svc.name, svc.uid, kind=kind, reason=reason, message=message
            ),
        )
