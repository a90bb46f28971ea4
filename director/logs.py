"""Structured logs: a stable event name, then key=value context, one line per event."""

from __future__ import annotations

import logging
import sys


def _value(value: object) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **context: object) -> None:
    """Log ``event=NAME k=v ...`` (values with spaces are quoted)."""
    if logger.isEnabledFor(level):
        fields = " ".join(f"{k}={_value(v)}" for k, v in context.items())
        logger.log(level, "event=%s%s", name, f" {fields}" if fields else "")


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
