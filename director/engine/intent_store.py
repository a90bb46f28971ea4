"""The admin API's intents (static schedulers, drains), kept in one small JSON file.

A burst of intents is applied to a copy, stored once, then made current; a change that
cannot be stored (disk full) is answered 503 and changes nothing."""

from __future__ import annotations

import logging
from pathlib import Path

from director.core.intents import IntentRefused, Intents, SetMaintenance, SetScheduler
from director.core.snapshot import ALL
from director.engine.events import IntentPosted, Reply
from director.engine.view import STATIC, LoopStatus
from director.logs import event

log = logging.getLogger("director.controller")


class IntentStore:
    def __init__(self, path: Path | None, status: LoopStatus, *, dry_run: bool) -> None:
        self.path, self.status, self.dry_run = path, status, dry_run
        self.current = Intents.load(path) if path else Intents()

    def take(self, items: list[IntentPosted], replies: list[Reply]) -> set[str]:
        """Apply the burst; the stored changes' replies join ``replies`` (answered once the
        step has applied them), refused ones are answered now. Returns what to resync."""
        new = self.current.copy()
        accepted: list[Reply] = []
        dirty: set[str] = set()
        for posted in items:
            try:
                new.change(posted.intent)
            except IntentRefused as exc:
                posted.reply.resolve(exc.status, exc.detail)
                continue
            accepted.append(posted.reply)
            if not isinstance(posted.intent, SetMaintenance):  # the announcer reads it
                dirty.add(STATIC if isinstance(posted.intent, SetScheduler) else ALL)
            event(log, "api.intent", intent=type(posted.intent).__name__, detail=posted.intent)
        if not accepted or not self._store(new, accepted):
            return set()
        self.current = new
        replies.extend(accepted)
        return dirty

    def _store(self, new: Intents, accepted: list[Reply]) -> bool:
        if self.path is None or self.dry_run:
            return True
        try:
            new.save(self.path)
        except OSError as exc:
            reason = f"{self.path}: {exc.strerror or exc}"
            self.status.last_error = f"intents not stored: {reason}"
            event(log, "api.intent_not_stored", level=logging.ERROR, reason=reason)
            for reply in accepted:
                reply.resolve(503, f"the change could not be stored ({reason}); "
                              "nothing was changed")  # fmt: skip
            return False
        return True
