"""The pinned dependencies (issue 18): ``requirements.lock`` pins, with hashes, a version of
every runtime dependency pyproject.toml declares, inside its range; the wheelhouse is built
from it (the role test builds one and installs it with the hashes checked)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent


def pins(lock: str = "requirements.lock") -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes)."""
    text = (REPO / lock).read_text()
    out: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[a-z0-9])", text):
        found = re.match(r"([A-Za-z0-9_.-]+)==([^\s;\\]+)", block)
        if found:
            hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
            out[canonicalize_name(found[1])] = (found[2], hashes)
    return out


def test_every_runtime_dependency_is_pinned_inside_its_range_with_hashes() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = pins()
    for line in declared:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is not in requirements.lock: run make lock"
        version, hashes = locked[name]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {req.name}=={version}, outside {req.specifier}: run make lock"
        )
        assert hashes, f"{req.name} has no hash"
    assert all(hashes for _, hashes in locked.values()), "every pin carries its hashes"
    assert "lvs-director" not in locked, "the director's own wheel is built, not pinned"


def test_the_changelog_begins_with_this_version() -> None:
    from director import __version__

    first = re.search(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert first is not None and first[1] == __version__, "CHANGELOG.md: say what changed"


def test_the_test_tools_are_pinned_and_test_what_the_boxes_run() -> None:
    """``make venv`` installs from requirements-dev.lock with the hashes checked: every dev
    tool pinned inside its range, and every runtime dependency at the very version the
    wheelhouse ships (the suite tests what the edge boxes run)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dev, runtime = pins("requirements-dev.lock"), pins()
    for line in project["optional-dependencies"]["dev"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in dev, f"{req.name} is not in requirements-dev.lock: run make lock"
        assert req.specifier.contains(dev[name][0], prereleases=True), (
            f"requirements-dev.lock pins {req.name}=={dev[name][0]}, outside {req.specifier}"
        )
    assert all(hashes for _, hashes in dev.values()), "every pin carries its hashes"
    differ = {
        name: (version, dev.get(name, ("absent",))[0])
        for name, (version, _) in runtime.items()
        if dev.get(name, ("",))[0] != version
    }
    assert differ == {}, "runtime pins (requirements.lock, requirements-dev.lock) differ"
    makefile = (REPO / "Makefile").read_text()
    assert "--require-hashes -r requirements-dev.lock" in makefile
    assert "'.[dev]'" not in makefile, "make venv resolves nothing itself"
