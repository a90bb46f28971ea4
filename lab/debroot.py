"""A Debian 12 root for the Ansible role's test: debootstrap'd once (cached in
.lab/debian-base), copied fresh to .lab/debian-root for every run of the role, plus the
wheelhouse the role installs the director from (.lab/wheelhouse).

`tests/system/test_ansible_role.py` applies the role to that tree through Ansible's chroot
connection, on the host (it needs the package registries); its kernel test then checks, in the
lab VM, what the role wrote.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / ".lab" / "debian-base"
ROOT = REPO / ".lab" / "debian-root"
WHEELHOUSE = REPO / ".lab" / "wheelhouse"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# What the role's first task installs (director_packages), python3-apt for Ansible's apt
# module, and systemd (the unit is verified inside the tree).
PACKAGES = (
    "systemd,systemd-sysv,keepalived,ipvsadm,python3,python3-venv,python3-apt,kmod,procps,iproute2"
)
STAMP = f"{SUITE} {PACKAGES}\n"


def mirror() -> str:
    """The Debian mirror this machine's apt uses (debootstrap follows it), else the default."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    listing = Path("/etc/apt/sources.list")
    if listing.exists():
        for line in listing.read_text().splitlines():
            words = line.split()
            if words[:1] == ["deb"] and "security" not in line:
                return next(w for w in words[1:] if not w.startswith("["))
    return DEFAULT_MIRROR


def base() -> None:
    stamp = BASE / ".director-stamp"
    if stamp.exists() and stamp.read_text() == STAMP:
        return
    shutil.rmtree(BASE, ignore_errors=True)
    BASE.parent.mkdir(parents=True, exist_ok=True)
    print(f"debroot: debootstrap {SUITE} into {BASE} ...", flush=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(BASE), mirror()],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stamp.write_text(STAMP)


def fresh_root(root: Path = ROOT) -> None:
    shutil.rmtree(root, ignore_errors=True)
    # Its contents, not BASE itself: a BASE that is a link (a worktree sharing another's
    # cache) would otherwise be copied as the link, and the root built into the cache.
    root.mkdir(parents=True)
    subprocess.run(["cp", "-a", f"{BASE}/.", str(root)], check=True)
    # The package lists count as fresh: the role's apt task then needs no network.
    lists = root / "var/lib/apt/lists"
    os.utime(lists)
    stamp = root / "var/lib/apt/periodic/update-success-stamp"
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()


def next_release() -> str:
    """A release after this tree's (its version, .post1): what upgrade tests install."""
    from director import __version__

    return f"{__version__}.post1"


def wheelhouse(out: Path = WHEELHOUSE, release: str | None = None) -> Path:
    """The wheelhouse for the root's Python, from this source tree; ``release``: built as
    that version instead (a copy of the tree with its version changed: an upgrade to test)."""
    version = subprocess.run(
        ["chroot", str(BASE), "python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="director-source-") as tmp:
        source = REPO
        if release is not None:
            source = Path(tmp) / "source"
            shutil.copytree(
                REPO,
                source,
                ignore=shutil.ignore_patterns(
                    ".lab", ".venv", ".git", "dist", "*.egg-info", "__pycache__", "build"
                ),
            )
            init = source / "director" / "__init__.py"
            init.write_text(
                re.sub(r'__version__ = "[^"]*"', f'__version__ = "{release}"', init.read_text())
            )
        subprocess.run(
            [
                sys.executable,
                str(REPO / "ansible/roles/director/files/build-wheelhouse.py"),
                "--source",
                str(source),
                "--python-version",
                version,
                "--out",
                str(out),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return out
