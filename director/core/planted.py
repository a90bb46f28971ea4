"""Whether a file the director itself left on disk may be trusted as its own: a kept parse
(unpickled) or a kept table (sent to the kernel) that another user could have written is not
read. Its key is no guard: anyone can compute it. Pure but for ``os.stat``."""

from __future__ import annotations

import os
import stat


def planted(path: str, st: os.stat_result) -> str | None:
    """Why the file at ``path`` (``st``: its stat, taken from the handle that will be read)
    must not be trusted: not a regular file, not owned by this user, writable by others; or
    its folder writable by every user without the sticky bit, or owned by another user.
    None: it may be read."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not the director's ({os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by other users"
    try:
        folder = os.stat(os.path.dirname(os.path.abspath(path)))
    except OSError as exc:
        return f"its folder cannot be read: {exc.strerror or exc}"
    if folder.st_mode & stat.S_IWOTH and not folder.st_mode & stat.S_ISVTX:
        return "its folder is writable by every user"
    if folder.st_uid not in (0, os.geteuid()):
        return f"its folder is owned by uid {folder.st_uid}"
    return None
