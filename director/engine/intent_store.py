"""The admin API's intents (static schedulers, drains), kept in one small JSON file.

A burst of intents is applied to a copy, stored once, then made current; a change that
cannot be stored (disk full) is answered 503 and changes nothing. The file is owned state:
looked at every ``VERIFY_SECONDS``, and written again from what is in force should anyone
remove or replace it (a restart then reads the operator's intents back, not nothing)."""

from __future__ import annotations

import logging
from pathlib import Path

from director.core.intents import IntentRefused, Intents, SetMaintenance, SetScheduler
from director.core.owned import Ledger, classify, file_mark
from director.core.snapshot import ALL
from director.engine.events import IntentPosted, Reply
from director.engine.view import STATIC, LoopStatus
from director.logs import event

Answer = tuple[Reply, int, str]  # a reply, and its status and detail, given after the step

log = logging.getLogger("director.controller")
VERIFY_SECONDS = 5.0
RESOURCE = "intents-file"


class IntentStore:
    def __init__(
        self, path: Path | None, status: LoopStatus, *, dry_run: bool, ledger: Ledger | None = None
    ) -> None:
        self.path, self.status, self.dry_run = path, status, dry_run
        self.ledger = ledger or Ledger()
        self.current = Intents.load(path) if path else Intents()
        self._mark = file_mark(path) if path else None  # the file as last read or written
        self._next_verify = 0.0
        if path is not None and not dry_run:
            self.ledger.track(RESOURCE)

    def verify(self, now: float) -> None:
        """Write the file again if it is not the one last written (removed, replaced);
        also after a write failed (the intents in force were answered 503: not stored,
        not changed; what is in force is stored again)."""
        if self.path is None or self.dry_run or now < self._next_verify:
            return
        self._next_verify = now + VERIFY_SECONDS
        found = file_mark(self.path)
        if found == self._mark:
            state = self.ledger.get(RESOURCE)
            if state is not None and not state.in_sync:  # a change refused: the file holds
                self.ledger.ok(RESOURCE)  # what is in force all the same
            return
        if found is None and self._mark is None and self.current == Intents():
            return  # nothing stored, nothing to store
        drift = f"{self.path} was removed or replaced"
        self.ledger.drift(RESOURCE, drift)
        event(
            log,
            "owned.drift",
            level=logging.WARNING,
            resource=RESOURCE,
            drift=drift,
            action="writing the intents in force again",
        )
        try:
            self.current.save(self.path)
        except OSError as exc:
            self.ledger.failed(RESOURCE, classify(exc))
            return
        self._mark = file_mark(self.path)
        self.ledger.ok(RESOURCE, repaired=True)
        event(log, "owned.repaired", resource=RESOURCE, drift=drift)

    def take(self, items: list[IntentPosted], replies: list[Answer]) -> set[str]:
        """Apply the burst. The answers to what was taken join ``replies``: 200 for a stored
        change, 503 when it could not be stored (then nothing changed); the loop gives them
        once the step's view is published, so a status read after an answer shows what the
        answer says. Refused ones (a bad request) are answered now. Returns what to
        resync."""
        new = self.current.copy()
        accepted: list[Reply] = []
        dirty: set[str] = set()
        for posted in items:
            if not posted.reply.take():  # answered 503 already: nothing is made of it
                event(log, "api.intent_abandoned", intent=type(posted.intent).__name__)
                continue
            try:
                new.change(posted.intent)
            except IntentRefused as exc:
                posted.reply.resolve(exc.status, exc.detail)
                continue
            accepted.append(posted.reply)
            if not isinstance(posted.intent, SetMaintenance):  # the announcer reads it
                dirty.add(STATIC if isinstance(posted.intent, SetScheduler) else ALL)
            event(log, "api.intent", intent=type(posted.intent).__name__, detail=posted.intent)
        if not accepted:
            return set()
        failed = self._store(new)
        if failed is not None:
            replies.extend((reply, 503, failed) for reply in accepted)
            return set()
        self.current = new
        replies.extend((reply, 200, "") for reply in accepted)
        return dirty

    def _store(self, new: Intents) -> str | None:
        """Write ``new``; None when stored, else the answer's detail."""
        if self.path is None or self.dry_run:
            return None
        try:
            new.save(self.path)
            self._mark = file_mark(self.path)
        except OSError as exc:
            reason = f"{self.path}: {exc.strerror or exc}"
            self.ledger.failed(RESOURCE, classify(exc))
            self.status.last_error = f"intents not stored: {reason}"
            event(log, "api.intent_not_stored", level=logging.ERROR, reason=reason)
            return f"the change could not be stored ({reason}); nothing was changed"
        self.ledger.ok(RESOURCE)
        return None
