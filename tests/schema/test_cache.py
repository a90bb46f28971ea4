"""A start with the file unchanged takes its parse from the cache (director.schema.cache);
anything changed, damaged or foreign, and the file is parsed as ever."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from director.schema import stamp
from director.schema.config import ConfigError
from director.schema.reparse import Reparser

FILE = """
ownership: {networks: [198.51.100.0/24]}
services:
"""


def services(n: int, weight: int = 1) -> str:
    return FILE + "".join(
        f"  - name: s{i}\n    address: 198.51.100.{i + 1}\n    port: 80\n"
        f"    real_servers: [{{address: 192.0.2.{i + 1}, port: 8080, weight: {weight}}}]\n"
        for i in range(n)
    )


def not_parsed(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("the file was parsed: the cache was not taken")


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, Path]:
    """A file, and the cache of its parse as a start leaves it."""
    path, cache = tmp_path / "director.yaml", tmp_path / "state" / "config.cache"
    cache.parent.mkdir()
    path.write_text(services(20))
    reader = Reparser()
    reader.load(path, cache)
    assert reader.save(cache) and cache.exists()
    assert cache.stat().st_mode & 0o077 == 0, "readable by its owner only"
    return path, cache


def test_an_unchanged_file_starts_from_the_cache_and_its_first_reload_is_paid_by_the_edit(
    written: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, cache = written
    expected = Reparser().load(path)
    with monkeypatch.context() as patch:
        patch.setattr("director.schema.reparse.parse_config", not_parsed)
        with caplog.at_level(logging.INFO, logger="director.config"):
            reader = Reparser()
            settings = reader.load(path, cache)
    assert settings == expected and settings.source == str(path)
    assert "event=config.cache_used" in caplog.text or any(
        "config.cache_used" in r.getMessage() for r in caplog.records
    )
    path.write_text(services(20).replace("weight: 1}", "weight: 3}", 1))
    reloaded = reader.load(path)
    assert reader.reused == 19, "the reader's memory of each item came with the cache"
    assert (
        next(iter(reloaded.services.values())).real_servers.values().__iter__().__next__().weight
        == 3
    )
    assert reader.save(cache)  # the reloaded file's parse, for the next start
    with monkeypatch.context() as patch:
        patch.setattr("director.schema.reparse.parse_config", not_parsed)
        assert Reparser().load(path, cache) == reloaded


@pytest.mark.parametrize(
    "change",
    [
        "the file",
        "made invalid",
        "the code",
        "the name",
        "damaged",
        "foreign",
        "another key",
        "ours, but not settings",
    ],
)
def test_anything_changed_or_damaged_and_the_file_is_parsed_as_ever(
    written: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    path, cache = written
    if change == "the file":
        path.write_text(services(21))
    elif change == "made invalid":
        path.write_text(services(20).replace("port: 80\n", "port: 80000\n", 1))
    elif change == "the code":
        monkeypatch.setattr(stamp, "code_stamp", lambda: "an upgraded director")
    elif change == "the name":
        moved = path.with_name("other.yaml")
        path.rename(moved)
        path = moved
    elif change == "damaged":
        cache.write_bytes(cache.read_bytes()[:100])
    elif change == "foreign":
        cache.write_bytes(pickle.dumps({"not": "ours"}))
    elif change == "another key":
        header, key, rest = cache.read_bytes().split(b"\n", 2)
        cache.write_bytes(b"\n".join((header, b"x" * len(key), rest)))
    elif change == "ours, but not settings":
        header, key, _rest = cache.read_bytes().split(b"\n", 2)
        cache.write_bytes(b"\n".join((header, key, pickle.dumps(("not", "settings")))))
    else:
        raise AssertionError(f"no such change: {change}")
    if change == "made invalid":
        with pytest.raises(ConfigError) as caught:
            Reparser().load(path, cache)
        assert caught.value.line == 6 and caught.value.where == "services[0].port"
        return
    reader = Reparser()
    settings = reader.load(path, cache)
    assert settings == Reparser().load(path)  # what a parse makes of the file as it is now
    assert settings.source == str(path)
    assert reader.save(cache)
    with monkeypatch.context() as patch:  # written again: the next start takes it
        patch.setattr("director.schema.reparse.parse_config", not_parsed)
        assert Reparser().load(path, cache) == settings


def test_a_cache_that_cannot_be_written_costs_the_next_start_a_parse_and_nothing_else(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "director.yaml"
    path.write_text(services(3))
    reader = Reparser()
    settings = reader.load(path, tmp_path / "gone" / "config.cache")
    with caplog.at_level(logging.WARNING, logger="director.config"):
        assert reader.save(tmp_path / "gone" / "config.cache") is False
    assert any("config.cache_not_saved" in r.getMessage() for r in caplog.records)
    assert list(tmp_path.iterdir()) == [path]
    assert Reparser().load(path, tmp_path / "gone" / "config.cache") == settings


def _run_until(config: Path, state: Path, line: str) -> str:
    """A real ``director run`` (fake dataplane) under a unit's state directory, until
    ``line``; stopped with SIGTERM, it must exit 0."""
    from tests.cli.test_main import run_until

    return "".join(run_until(config, line, {"STATE_DIRECTORY": str(state)}))


def test_director_run_keeps_its_parse_in_the_units_state_directory(tmp_path: Path) -> None:
    config, state = tmp_path / "director.yaml", tmp_path / "state"
    state.mkdir()
    config.write_text(services(5))
    first = _run_until(config, state, "event=config.cache_saved")
    assert "event=config.cache_used" not in first and (state / "config.cache").exists()
    second = _run_until(config, state, "event=startup.timing")
    assert "event=config.cache_used" in second, second[-2000:]
    config.write_text(services(6))
    third = _run_until(config, state, "event=config.cache_saved")
    assert "event=config.cache_ignored" in third and "the file or the code changed" in third


def test_a_check_in_the_units_state_directory_writes_nothing_and_refuses_with_the_line(
    tmp_path: Path,
) -> None:
    """`director check` validates; it never writes the box's state, even run where the unit's
    would be (systemd's $STATE_DIRECTORY): the start that follows parses and keeps its own,
    and an invalid file is refused with its line, whatever the cache holds."""
    config, state = tmp_path / "director.yaml", tmp_path / "state"
    state.mkdir()
    config.write_text(services(4))
    env = {**os.environ, "STATE_DIRECTORY": str(state)}
    check = [sys.executable, "-m", "director", "check", "--offline", "--config", str(config)]
    done = subprocess.run(check, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert list(state.iterdir()) == []
    started = _run_until(config, state, "event=config.cache_saved")
    assert "event=config.cache_used" not in started and (state / "config.cache").exists()
    config.write_text(services(4).replace("port: 80\n", "port: 99999\n", 1))
    done = subprocess.run(check, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and f"{config}:6: services[0].port" in done.stderr, done.stderr


@pytest.mark.parametrize("plant", ["writable by others", "another user's", "a folder for all"])
def test_a_cache_another_user_could_have_planted_is_never_unpickled(
    written: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    plant: str,
) -> None:
    """Issue 71, 6: config.cache was unpickled without a look at its owner or mode, and its
    key is computable by anyone (the file's bytes, the code's stat): a cache planted by
    another user ran code as root. One not the director's user's alone is parsed over."""
    path, cache = written
    unpickled: list[object] = []
    monkeypatch.setattr(pickle, "load", lambda *a, **k: unpickled.append(a))
    if plant == "writable by others":
        cache.chmod(0o666)
    elif plant == "another user's":
        os.chown(cache, 65534, 65534)
    else:
        cache.parent.chmod(0o777)
    with caplog.at_level(logging.INFO, logger="director.config"):
        settings = Reparser().load(path, cache)
    assert unpickled == [] and settings == Reparser().load(path)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "event=config.cache_ignored" in said, said


def test_a_cache_named_as_the_configuration_file_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """Issue 71, 6: ``--config-cache`` naming the configuration file overwrote it with the
    pickle, even under --dry-run. Refused at start, the file untouched."""
    path = tmp_path / "director.yaml"
    path.write_text(services(2))
    before = path.read_bytes()
    script = (
        "import sys; import director.cli.main as cli; "
        "from director.dataplane.fake import FakeIpvs; "
        "import director.cli.run; director.cli.run.open_ipvs = lambda netns: FakeIpvs(); "
        f"sys.exit(cli.main(['run', '--config', {str(path)!r}, '--config-cache', "
        f"{str(path)!r}, '--dry-run']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "is the configuration file itself" in done.stderr
    assert path.read_bytes() == before
