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


def pins() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes)."""
    text = (REPO / "requirements.lock").read_text()
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
            f"requirements.lock pins {req.name}=={version}, outside {req.specifier}: run make lock")
        assert hashes, f"{req.name} has no hash"
    assert all(hashes for _, hashes in locked.values()), "every pin carries its hashes"
    assert "lvs-director" not in locked, "the director's own wheel is built, not pinned"


def test_the_changelog_begins_with_this_version() -> None:
    from director import __version__

    first = re.search(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert first is not None and first[1] == __version__, "CHANGELOG.md: say what changed"
