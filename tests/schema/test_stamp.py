"""The key a start's caches are kept under: the file's bytes and name, the working directory
and the director's code, and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from director.schema import stamp


def test_the_key_changes_with_the_file_its_name_and_the_folder_it_is_read_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = stamp.key_of(b"services: []\n", "/etc/director/director.yaml")
    assert key == stamp.key_of(b"services: []\n", "/etc/director/director.yaml")
    assert key != stamp.key_of(b"services: [] \n", "/etc/director/director.yaml")
    assert key != stamp.key_of(b"services: []\n", "/etc/director/other.yaml")
    monkeypatch.chdir(tmp_path)  # a relative path resolves elsewhere
    assert key != stamp.key_of(b"services: []\n", "/etc/director/director.yaml")


def test_the_code_stamp_follows_every_module_of_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "director"
    (package / "cli").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cli" / "boot.py").write_text("x = 1\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "boot.cpython-311.pyc").write_bytes(b"compiled")
    monkeypatch.setattr(stamp, "_CODE", str(package))

    def fresh() -> str:
        stamp._STAMP.clear()
        return stamp.code_stamp()

    before = fresh()
    (package / "__pycache__" / "boot.cpython-311.pyc").write_bytes(b"compiled again")
    assert fresh() == before, "compiled copies are not the code"
    (package / "cli" / "boot.py").write_text("x = 2\n")
    os.utime(package / "cli" / "boot.py", ns=(1, 1))
    assert fresh() != before, "an edited module is new code"
    stamp._STAMP.clear()


def test_the_default_cache_is_the_units_state_directorys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    assert stamp.default_cache() is None
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/director:/var/lib/other")
    assert stamp.default_cache() == "/var/lib/director/config.cache"
