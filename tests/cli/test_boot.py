"""``director``'s first moments: only ``director run`` with a file and a cache replays, the
arguments it reads are the command's own, and any other command goes straight on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from director.cli import boot, startup
from director.dataplane import replay
from director.schema import stamp


@pytest.fixture
def static_box(tmp_path: Path) -> tuple[Path, Path]:
    config = tmp_path / "director.yaml"
    config.write_text("services: []\n")
    return config, tmp_path / "config.cache"


def test_only_a_run_with_a_file_and_a_cache_looks_for_a_kept_table(
    static_box: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, cache = static_box
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    said = boot.replay_for(["--config", str(config)])
    assert said == {"replayed": False, "reason": "no file, or no cache (--config-cache '')"}
    said = boot.replay_for(["--config", str(config), "--config-cache", str(cache), "--dry-run"])
    assert said["reason"] == "not asked (--dry-run or --help)"
    said = boot.replay_for([f"--config={config}", f"--config-cache={cache}"])
    assert said == {"replayed": False, "reason": "none kept yet"}
    monkeypatch.setenv("STATE_DIRECTORY", str(cache.parent))  # systemd's, unless told
    assert boot.replay_for(["--config", str(config)])["reason"] == "none kept yet"


def test_a_table_kept_for_the_file_is_offered_under_the_files_key(
    static_box: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, cache = static_box
    asked: list[tuple[str, str, str | None]] = []

    def fake_replay(path: str, key: str, netns: str | None = None) -> dict[str, object]:
        asked.append((path, key, netns))
        return {"replayed": True}

    replay.store(replay.path_beside(str(cache)), "old", 33, [(b"x" * 4, 1, 1)], services=1)
    monkeypatch.setattr(replay, "replay", fake_replay)
    args = ["--config", str(config), "--config-cache", str(cache), "--netns", "edge"]
    assert boot.replay_for(args) == {"replayed": True}
    expected_key = stamp.key_of(config.read_bytes(), str(config))
    assert asked == [(str(cache.parent / replay.FILE_NAME), expected_key, "edge")]
    config.unlink()
    assert boot.replay_for(args)["reason"] == "the file: No such file or directory"


def test_another_command_goes_straight_to_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    called: list[object] = []
    monkeypatch.setattr(boot, "replay_for", lambda args: called.append(args) or {})
    startup.REPLAY.clear()
    with pytest.raises(SystemExit) as exited:
        boot.main(["--version"])
    assert exited.value.code == 0 and "director 0.4" in capsys.readouterr().out
    assert called == [] and startup.REPLAY == {}


def test_a_run_as_the_unit_starts_it_looks_for_its_table(
    static_box: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _ = static_box
    asked: list[list[str]] = []
    monkeypatch.setattr(boot, "replay_for", lambda args: asked.append(list(args)) or {"x": 1})
    monkeypatch.setattr("director.cli.main.main", lambda argv=None: 0)
    startup.REPLAY.clear()
    assert boot.main(["--log-level", "info", "run", "--config", str(config)]) == 0
    assert asked == [["--config", str(config)]] and startup.REPLAY == {"x": 1}
    startup.REPLAY.clear()


def test_a_replay_that_fails_is_said_and_the_start_goes_on(
    static_box: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, cache = static_box
    replay.store(replay.path_beside(str(cache)), "old", 33, [(b"x" * 4, 1, 1)], services=1)

    def broken(path: str, key: str, netns: str | None = None) -> dict[str, object]:
        raise KeyError(1)  # an answer the kernel was not expected to give

    ran: list[object] = []
    monkeypatch.setattr(replay, "replay", broken)
    monkeypatch.setattr(boot, "parse_ahead", lambda args, send: {"forked": False})  # no fork
    monkeypatch.setattr("director.cli.main.main", lambda argv=None: ran.append(argv) or 0)
    startup.REPLAY.clear()
    args = ["run", "--config", str(config), "--config-cache", str(cache)]
    assert boot.main(args) == 0 and ran == [args]
    assert startup.REPLAY == {"replayed": False, "reason": "failed: KeyError(1)"}
    startup.REPLAY.clear()


def test_a_parse_ahead_that_fails_is_said_and_the_start_goes_on(
    static_box: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, cache = static_box

    def broken(
        config: str | None, cache: str | None, args: object, netns: str | None
    ) -> dict[str, object]:
        raise OSError(11, "Resource temporarily unavailable")  # fork(2) refused

    ran: list[object] = []
    monkeypatch.setattr("director.cli.ahead.start", broken)
    monkeypatch.setattr("director.cli.main.main", lambda argv=None: ran.append(argv) or 0)
    startup.AHEAD.clear()
    args = ["run", "--config", str(config), "--config-cache", str(cache)]
    assert boot.main(args) == 0 and ran == [args]
    assert startup.AHEAD["forked"] is False
    assert "Resource temporarily unavailable" in str(startup.AHEAD["reason"])
    startup.AHEAD.clear()


def _director(*args: str, stdout: int = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "director", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_command_that_only_prints_ends_at_once_with_all_its_output_out(tmp_path: Path) -> None:
    """A read-only command's process skips Python's teardown (end_now): what it printed,
    on stdout and stderr, and its exit status are those of the usual exit."""
    from director.schema.config import json_schema_text

    done = _director("schema")
    assert done.returncode == 0 and done.stdout == json_schema_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  - address: 10.0.0.1\n    port: 99999\n")
    done = _director("check", "--offline", "--json", "--config", str(bad))
    report = json.loads(done.stdout)
    assert done.returncode == 2 and report["ok"] is False
    assert report["error"]["line"] == 3 and "65535 (got 99999)" in report["error"]["reason"]
    done = _director("check", "--offline", "--config", str(bad))
    assert done.returncode == 2
    assert done.stderr == (
        f"director: invalid configuration: {bad}:3: services[0].port: must be an integer "
        "between 1 and 65535 (got 99999)\n"
    )


def test_a_command_whose_reader_went_away_fails_as_python_would() -> None:
    """stdout closed before the output is out: no silent success (Python's own exit
    reports the broken pipe, status 120)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = _director("schema", stdout=writer)
    finally:
        os.close(writer)
    assert done.returncode != 0 and "BrokenPipeError" in done.stderr


def test_a_command_that_changes_something_ends_the_usual_way() -> None:
    assert {"run", "apply", "decommission", "bundle"} <= boot.ENDED_THE_USUAL_WAY
    assert not {"check", "plan", "ctl", "status", "schema"} & boot.ENDED_THE_USUAL_WAY


@pytest.mark.parametrize(
    "extra", [["--dry"], ["--net", "edge"], ["--config-c", "x"], ["-x"]], ids=" ".join
)
def test_a_run_whose_options_are_not_written_out_whole_sends_nothing_first(
    static_box: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    """Issue 71, 6: ``director run --dry`` (argparse's prefix of --dry-run) had its first
    moments send the static table before the parser ran, ``--net NS`` sent it to the
    director's own namespace, and a mistyped option was refused after the table went in.
    The first moments act only on options written out whole; the parser refuses the rest."""
    config, cache = static_box
    first: list[str] = []
    monkeypatch.setattr(boot, "replay_for", lambda args: first.append("replay") or {})
    monkeypatch.setattr(
        boot, "parse_ahead", lambda args, send: first.append("ahead") or {"forked": False}
    )
    monkeypatch.setattr(boot, "parse_here", lambda args: first.append("here"))
    args = ["run", "--config", str(config), "--config-cache", str(cache), *extra]
    with pytest.raises(SystemExit) as refused:
        boot.main(args)
    assert refused.value.code == 2 and first == []
    assert boot.whole(["--config", "c", "--dry-run", "--netns=x", "--log-level", "info"])
