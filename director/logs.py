"""Structured logs: a stable event name, then key=value context, one line per event."""

from __future__ import annotations

import logging
import sys

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), 127)} | {10: "\\n", 13: "\\r", 9: "\\t"}


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
    **context: object,
) -> None:
    """Log ``event=NAME k=v ...`` (values with spaces are quoted); ``exc_info``: the
    exception's traceback follows the line."""
    if logger.isEnabledFor(level):
        fields = " ".join(f"{k}={_value(v)}" for k, v in context.items())
        logger.log(level, "event=%s%s", name, f" {fields}" if fields else "", exc_info=exc_info)


def setup(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    )
    root = logging.getLogger("director")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # urllib3 retries are reported by the watchers as kube.watch_failed; no second voice.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
