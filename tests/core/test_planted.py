"""A file the director left on disk is its own only while no other user could have written
it (issue 71, 6: a planted config.cache ran code as root; a table.cache changed in place
was replayed into the kernel)."""

from __future__ import annotations

import os
from pathlib import Path

from director.core.planted import planted


def said(path: Path) -> str | None:
    return planted(str(path), os.stat(path))


def test_only_a_file_of_the_director_s_user_alone_is_trusted(tmp_path: Path) -> None:
    kept = tmp_path / "state" / "config.cache"
    kept.parent.mkdir()
    kept.write_bytes(b"x")
    kept.chmod(0o600)
    assert said(kept) is None
    kept.chmod(0o620)
    assert said(kept) == "writable by other users"
    kept.chmod(0o600)
    os.chown(kept, 65534, 65534)
    assert said(kept) == f"owned by uid 65534, not the director's ({os.geteuid()})"
    os.chown(kept, os.geteuid(), os.getegid())
    kept.parent.chmod(0o777)
    assert said(kept) == "its folder is writable by every user"
    kept.parent.chmod(0o1777)  # /tmp's: others cannot replace what is this user's
    assert said(kept) is None
    kept.parent.chmod(0o700)
    os.chown(kept.parent, 65534, 65534)
    assert said(kept) == "its folder is owned by uid 65534"
    assert said(tmp_path) == "not a regular file"
