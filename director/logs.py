"""Structured logs: a stable event name, then key=value context, one line per event.

Two formats: logfmt (``ts=2026-11-24T02:55:41.123Z level=INFO logger=... event=... k=v``,
ISO-8601 UTC) and JSON (one object per line, the context as keys). Under systemd (stderr
connected to the journal) each line starts with its syslog priority (``<4>``), which
journald reads, so ``journalctl -p warning`` shows the warnings and errors. A traceback, and
an exception nothing caught, is logged in the same format, on one line.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Any

# Control characters as logfmt parsers (go-logfmt, the JSON-string rules they follow) read
# them back: \n, \r, \t and \u00NN, never \xNN; C1 controls and the Unicode line and
# paragraph separators too, so one event stays one line in every viewer.
_CONTROL = {c: f"\\u{c:04x}" for c in (*range(32), *range(127, 160), 0x2028, 0x2029)} | {
    10: "\\n",
    13: "\\r",
    9: "\\t",
}
# syslog priorities (sd-daemon.h), which journald reads from a "<N>" prefix.
_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}
FORMATS = ("logfmt", "json")
# A credential in an Authorization header's form, wherever a message or a traceback quotes
# one (an HTTP library's error names the header's value): never written to a log.
_CREDENTIAL = re.compile(r"\b(Bearer|Basic)(\s+|%20)[A-Za-z0-9\-._~+/=]{4,}", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every bearer or basic credential replaced by ``<redacted>``."""
    if "earer" not in text and "asic" not in text and "EARER" not in text:
        return text
    return _CREDENTIAL.sub(lambda m: f"{m.group(1)} <redacted>", text)


def _value(value: object) -> str:
    """One value: quoted when it holds spaces, quotes or '='; control characters (from
    the cluster, say) escaped, so one event is always one line."""
    text = str(value)
    if text and not any(c in text for c in ' "=\\') and text.isprintable():
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').translate(_CONTROL)
    return f'"{escaped}"'


def event(
    logger: logging.Logger,
    name: str,
    level: int = logging.INFO,
    *,
    exc_info: BaseException | None = None,
    fields: Mapping[str, object] | None = None,
    **context: object,
) -> None:
    """Log ``event=NAME k=v ...`` (values with spaces are quoted); ``exc_info``: the
    exception's traceback goes with the line; ``fields``: context whose names are data
    (figures by phase), after the keyword ones."""
    if fields:
        context = {**context, **fields}
    if logger.isEnabledFor(level):
        line = " ".join(f"{k}={_value(v)}" for k, v in context.items())
        logger.log(
            level,
            "event=%s%s",
            name,
            f" {line}" if line else "",
            exc_info=exc_info,
            extra={"event": name, "context": context},
        )


def _timestamp(record: logging.LogRecord) -> str:
    # time, not datetime: datetime costs every command a module it needs for nothing else
    when = time.gmtime(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S.", when) + f"{int(record.msecs):03d}Z"


class Formatter(logging.Formatter):
    """One line per record, logfmt or JSON, with the journal's priority prefix if asked."""

    def __init__(self, style: str = "logfmt", priority: bool = False) -> None:
        super().__init__()
        self.json, self.priority = style == "json", priority

    def format(self, record: logging.LogRecord) -> str:
        trace = self.formatException(record.exc_info) if record.exc_info else None
        if self.json:
            body: dict[str, Any] = {
                "ts": _timestamp(record),
                "level": record.levelname,
                "logger": record.name,
            }
            name = getattr(record, "event", None)
            if name is not None:
                body["event"] = name
                body.update(
                    {
                        k: v if isinstance(v, (int, float, bool)) or v is None else str(v)
                        for k, v in getattr(record, "context", {}).items()
                        if k not in body
                    }
                )
            else:
                body["message"] = record.getMessage()
            if trace:
                body["traceback"] = trace
            line = json.dumps(body, ensure_ascii=False)
        else:
            line = (
                f"ts={_timestamp(record)} level={record.levelname} logger={record.name} "
                f"{record.getMessage()}"
            )
            if trace:
                line += f" traceback={_value(trace)}"
        line = redact(line)
        if self.priority:
            line = f"<{_PRIORITY.get(record.levelno, 6)}>{line}"
        return line


def _under_journal() -> bool:
    """Is stderr the journal's stream (systemd sets JOURNAL_STREAM to its device:inode)?"""
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        device, inode = (int(part) for part in stream.split(":"))
        stat = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError):
        return False
    return (stat.st_dev, stat.st_ino) == (device, inode)


def setup(level: str = "INFO", style: str = "logfmt") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Formatter(style, priority=_under_journal()))
    root = logging.getLogger("director")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # urllib3 retries are reported by the watchers as kube.watch_failed; no second voice.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    crashes = logging.getLogger("director.crash")

    def uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, exc, tb)
            return
        reason = "".join(traceback.format_exception_only(kind, exc)).strip()
        event(crashes, "uncaught", logging.CRITICAL, exc_info=exc, error=reason)

    def uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            uncaught(args.exc_type, args.exc_value, args.exc_traceback)

    sys.excepthook = uncaught
    threading.excepthook = uncaught_in_thread
