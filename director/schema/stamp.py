"""What a parse of the file depended on, as one digest: the key the start's caches are kept
under (the parse, :mod:`director.schema.cache`; a static box's encoded table,
:mod:`director.dataplane.replay`). Light, so that a start can check a cache before the rest
of the director is loaded: ``os`` and ``sys`` only, and ``hashlib`` when a key is made
(``director check`` run by hand makes none)."""

from __future__ import annotations

import os
import sys

from director import __version__

FORMAT = "director-config-cache-2"  # changed when what is pickled changes shape
FILE_NAME = "config.cache"
_CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the director package
_STAMP: list[str] = []


def code_stamp() -> str:
    """The director's code as it is on disk now: every module's path, size and mtime."""
    if _STAMP:
        return _STAMP[0]
    import hashlib

    digest = hashlib.sha256(f"{__version__} {sys.version} {sys.implementation.name}".encode())
    modules = []
    for folder, dirs, files in os.walk(_CODE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        modules += [os.path.join(folder, name) for name in files if name.endswith(".py")]
    for path in sorted(modules, key=lambda p: os.path.relpath(p, _CODE).split(os.sep)):
        stat = os.stat(path)
        relative = os.path.relpath(path, _CODE).replace(os.sep, "/")
        digest.update(f"{relative} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    _STAMP.append(digest.hexdigest())
    return _STAMP[0]


def key_of(raw: bytes, source: str) -> str:
    """What a parse of ``raw`` (the file named ``source``) depended on, as one digest."""
    import hashlib

    digest = hashlib.sha256(FORMAT.encode())
    for part in (source, os.getcwd(), code_stamp()):
        digest.update(part.encode() + b"\0")
    digest.update(raw)
    return digest.hexdigest()


def header(key: str) -> bytes:
    """The first two lines of the parse's cache kept under ``key`` (read before anything is
    unpickled: :mod:`director.schema.cache`; and by :mod:`director.cli.ahead`)."""
    return f"{FORMAT}\n{key}\n".encode()


def key_of_file(path: str) -> str:
    """``key_of`` the file at ``path`` as it is now. Raises OSError when it cannot be read."""
    with open(path, "rb") as handle:
        return key_of(handle.read(), path)


def default_cache() -> str | None:
    """The parse's cache in systemd's state directory for the unit (``StateDirectory=``:
    the environment's ``STATE_DIRECTORY``), or no cache outside such a unit."""
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    return os.path.join(state, FILE_NAME) if state else None
