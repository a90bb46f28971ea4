"""A first start parses its file in a child process while it imports the rest, and takes
the parse from the cache the child wrote; a fault in the file is reported as ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from director.cli import ahead
from director.schema import stamp

STATIC = """\
ownership:
  networks: [198.51.100.0/24]
services:
  - name: web
    address: 198.51.100.10
    port: 80
    real_servers: [192.0.2.11:8080, 192.0.2.12:8080]
"""


def run(config: Path, cache: str, until: str | None = "event=controller.ready") -> tuple[int, str]:
    """A real ``director run`` through the console script's entry point (fake dataplane):
    its exit code and stderr, stopped with SIGTERM once ``until`` is said."""
    script = (
        "import sys; from director.dataplane.fake import FakeIpvs; "
        "import director.cli.run; director.cli.run.open_ipvs = lambda netns: FakeIpvs(); "
        # and the early table never reaches this host's kernel, whatever it has
        "import director.cli.early as early; "
        "early.empty_table = lambda netns: (_ for _ in ()).throw(OSError(19, 'a test')); "
        "from director.cli.boot import main; "
        f"sys.exit(main(['--log-level', 'info', 'run', '--config', {str(config)!r}, "
        f"'--config-cache', {cache!r}]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stderr=subprocess.PIPE, text=True, cwd=config.parent
    )
    assert proc.stderr is not None
    said: list[str] = []
    try:
        for text in proc.stderr:
            said.append(text)
            if until is not None and until in text:
                break
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=60)
    return proc.returncode, "".join(said) + rest


def line(said: str, name: str) -> str:
    found = [text for text in said.splitlines() if f"event={name} " in text]
    assert len(found) == 1, said[-3000:]
    return found[0]


def test_a_first_start_takes_its_parse_from_the_cache_a_child_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the key names the working directory: the command's
    config, cache = tmp_path / "director.yaml", tmp_path / "config.cache"
    config.write_text(STATIC)
    code, said = run(config, str(cache))
    assert code == 0, said[-3000:]
    assert "forked=True parsed=True" in line(said, "startup.parse_ahead")
    assert "event=config.cache_used" in said  # the command parsed nothing itself
    assert "event=config.cache_saved" not in said  # nor wrote the cache again
    with cache.open("rb") as handle:
        assert handle.readline().decode().strip() == stamp.FORMAT
        assert handle.readline().decode().strip() == stamp.key_of(config.read_bytes(), str(config))
    code, said = run(config, str(cache))  # a restart: nothing to parse
    assert code == 0, said[-3000:]
    assert 'reason="the cache holds this file\'s parse"' in line(said, "startup.parse_ahead")
    config.write_text(STATIC.replace("192.0.2.12", "192.0.2.13"))  # an edit: parsed again
    code, said = run(config, str(cache))
    assert "forked=True parsed=True" in line(said, "startup.parse_ahead")


def test_a_fault_in_the_file_is_reported_with_its_line_as_without_a_child(tmp_path: Path) -> None:
    config, cache = tmp_path / "director.yaml", tmp_path / "config.cache"
    config.write_text(STATIC.replace("192.0.2.12:8080", "192.0.2.300:8080"))
    code, said = run(config, str(cache), until=None)
    plain_code, plain = run(config, "", until=None)  # no cache: no child
    assert code == plain_code != 0
    fault = [text for text in plain.splitlines() if "192.0.2.300" in text]
    assert fault and all(text in said for text in fault)
    assert "line 7" in fault[0] or ":7" in fault[0], fault
    assert "forked=True parsed=False" in line(said, "startup.parse_ahead")
    assert not cache.exists()  # nothing kept of a file that does not load


@pytest.mark.parametrize(
    ("args", "cache", "reason"),
    [
        (["--help"], "c", "not asked (--help)"),
        ([], "", "no file, or no cache (--config-cache '')"),
        ([], "/nonexistent-folder/config.cache", "/nonexistent-folder is not writable"),
    ],
)
def test_no_child_is_forked_when_it_could_not_help(
    tmp_path: Path, args: list[str], cache: str, reason: str
) -> None:
    config = tmp_path / "director.yaml"
    config.write_text(STATIC)
    assert ahead.start(str(config), cache, args) == {"forked": False, "reason": reason}
    gone = ahead.start(str(tmp_path / "missing.yaml"), "c", [])
    assert gone == {"forked": False, "reason": "the file: No such file or directory"}
    assert ahead.wait() == {}  # nothing to wait for


def test_a_child_that_fails_leaves_the_command_to_parse(tmp_path: Path) -> None:
    """A child killed before it wrote the cache (as by a signal) is said, and waited for."""
    config, cache = tmp_path / "director.yaml", tmp_path / "config.cache"
    config.write_text(STATIC)
    pid = os.fork()
    if pid == 0:
        signal.pause()  # a child still at its parse, then killed
        os._exit(0)
    report, into = os.pipe()
    os.close(into)
    os.kill(pid, signal.SIGKILL)
    ahead._CHILD.append((pid, 0.0, report))
    found = ahead.wait()
    assert found["parsed"] is False and "exited -9" in str(found["reason"])
    assert "early" not in found  # it said nothing of a table
    assert not cache.exists()
