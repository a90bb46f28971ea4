"""Logs that tools parse: logfmt with ISO-8601 UTC times or JSON, one line per event (a
traceback too), and the syslog priority journald reads when stderr is the journal."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

SCRIPT = """
import logging, sys, threading
from director import logs
logs.setup("INFO", sys.argv[1])
log = logging.getLogger("director.test")
logs.event(log, "demo.info", reason="two words", count=3)
logs.event(log, "demo.warning", logging.WARNING, target='a "quoted"\\nline')
try:
    1 / 0
except ZeroDivisionError as exc:
    logs.event(log, "demo.error", logging.ERROR, exc_info=exc)
thread = threading.Thread(target=lambda: {}["missing"])
thread.start()
thread.join()
raise RuntimeError("nobody caught this")
"""
LOGFMT = re.compile(r'([a-z_]+)=("(?:[^"\\]|\\.)*"|[^ "=]+)(?: |$)')


def run(style: str, env: dict[str, str] | None = None, stderr_path: Path | None = None) -> str:
    environ = dict(os.environ, **(env or {}))
    if stderr_path is None:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, style],
            capture_output=True,
            text=True,
            env=environ,
            timeout=60,
            check=False,
        )
        return done.stderr
    with stderr_path.open("w") as err:
        subprocess.run(
            [sys.executable, "-c", SCRIPT, style], stderr=err, env=environ, timeout=60, check=False
        )
    return stderr_path.read_text()


def fields(line: str) -> dict[str, str]:
    """A logfmt line, parsed strictly: every character belongs to a key=value pair."""
    pairs = LOGFMT.findall(line)
    assert "".join(f"{k}={v} " for k, v in pairs).strip() == line, f"not logfmt: {line}"
    return dict(pairs)


def test_logfmt_lines_parse_with_utc_times_and_tracebacks_on_the_line() -> None:
    lines = run("logfmt").splitlines()
    assert len(lines) == 5, lines  # info, warning, error, the thread's and the main crash
    parsed = [fields(line) for line in lines]
    for entry in parsed:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["ts"])
    assert [p["event"] for p in parsed] == [
        "demo.info",
        "demo.warning",
        "demo.error",
        "uncaught",
        "uncaught",
    ]
    assert parsed[0]["reason"] == '"two words"' and parsed[0]["count"] == "3"
    assert "ZeroDivisionError" in parsed[2]["traceback"]
    assert parsed[3]["level"] == "CRITICAL" and "KeyError" in parsed[3]["error"]
    assert "RuntimeError: nobody caught this" in parsed[4]["error"]


def test_json_lines_carry_the_event_and_its_context_as_keys() -> None:
    lines = [json.loads(line) for line in run("json").splitlines()]
    assert lines[0]["event"] == "demo.info"
    assert (lines[0]["reason"], lines[0]["count"], lines[0]["level"]) == ("two words", 3, "INFO")
    assert lines[1]["target"] == 'a "quoted"\nline'
    assert "ZeroDivisionError" in lines[2]["traceback"]
    assert [entry["event"] for entry in lines[3:]] == ["uncaught", "uncaught"]


def test_under_the_journal_each_line_starts_with_its_priority(tmp_path: Path) -> None:
    """systemd sets JOURNAL_STREAM to the device and inode of the stream it gave stderr;
    journald then reads the <N> prefix, and `journalctl -p warning` finds the warnings."""
    log = tmp_path / "stderr"
    log.touch()
    stat = log.stat()
    text = run("logfmt", {"JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino}"}, log)
    assert [line[:3] for line in text.splitlines()] == ["<6>", "<4>", "<3>", "<2>", "<2>"]
    elsewhere = run("logfmt", {"JOURNAL_STREAM": "1:2"})  # another stream: no prefix
    assert elsewhere.startswith("ts=")


def test_every_change_asked_of_the_api_is_audited_with_the_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from director.dataplane.fake import FakeIpvs
    from director.engine.loop import Controller
    from director.schema.config import parse_config
    from director.web.app import create_app

    controller = Controller(FakeIpvs(), parse_config("ownership: {networks: [10.0.0.0/8]}\n"))
    client = create_app(controller.door(), "t0ken-for-the-admin-api").test_client()
    caplog.set_level("INFO", logger="director.api")
    client.post(
        "/api/v1/drains",
        json={"address": "192.0.2.1"},
        headers={"Authorization": "Bearer wrong"},
        environ_base={"REMOTE_ADDR": "192.0.2.99"},
    )
    client.get("/api/v1/status", headers={"Authorization": "Bearer t0ken-for-the-admin-api"})
    assert [r.getMessage() for r in caplog.records] == [
        "event=api.audit method=POST path=/api/v1/drains status=403 client=192.0.2.99"
    ]


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_any_value_stays_on_one_line_and_reads_back_as_logfmt_parsers_read_it(text: str) -> None:
    """Cluster text (names, annotations, API errors) holds anything: a quoted value uses the
    escapes logfmt parsers take (JSON string rules: \\n, \\u001b; never \\x1b), and no
    character that any viewer reads as a line break."""
    from director.logs import _value

    out = _value(text)
    assert len(out.splitlines()) <= 1, out
    assert (json.loads(out) if out.startswith('"') else out) == text
