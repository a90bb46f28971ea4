#!/usr/bin/env python3
"""Build a wheelhouse for an edge box: the director's wheel plus every dependency's wheel
for the box's Python and CPU, so the box installs with ``pip --no-index``. The dependencies
are the source tree's ``requirements.lock`` pins, downloaded with ``--require-hashes``; the
lock goes into the wheelhouse, and the box installs from it with the hashes checked again.

    build-wheelhouse.py --source DIR --python-version 3.11 --platform x86_64 --out DIR
    build-wheelhouse.py --pack DIR --out FILE.tar      # the same bytes for the same wheels

Run by the Ansible role on the controller (and by ``make wheelhouse``). The director's wheel
is built reproducibly (SOURCE_DATE_EPOCH), so an unchanged source gives the same bytes and
the role's copy reports no change.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

EPOCH = "1700000000"  # any fixed time: wheels carry file times, which would differ per build


def pack(folder: Path, out: Path) -> None:
    """One reproducible tar of the wheels (sorted, fixed times and owners): the role copies
    one file, and an unchanged wheelhouse is an unchanged file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.GNU_FORMAT) as tar:
        for wheel in sorted([*folder.glob("*.whl"), *folder.glob("requirements.lock")]):
            info = tar.gettarinfo(str(wheel), arcname=wheel.name)
            info.mtime, info.mode = int(EPOCH), 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            with wheel.open("rb") as data:
                tar.addfile(info, data)
    if out.exists() and out.read_bytes() == partial.read_bytes():
        partial.unlink()
    else:
        partial.replace(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", help="the director's source tree")
    parser.add_argument("--python-version", help="the box's Python, like 3.11")
    parser.add_argument("--platform", default="x86_64", help="the box's CPU: x86_64, aarch64")
    parser.add_argument("--pack", help="a wheelhouse folder to pack into the --out tar")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.pack:
        pack(Path(args.pack), Path(args.out))
        return 0
    if not args.source or not args.python_version:
        parser.error("--source and --python-version are needed to build a wheelhouse")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH, PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", tmp, args.source],
            check=True, env=env,
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("lvs_director-*.whl")
        for old in (*out.glob("lvs_director-*.whl"), *out.glob("director-*.whl")):
            old.unlink()  # director-*.whl: the distribution's name before 0.2.0
        shutil.copy2(wheel, out / wheel.name)
    lock = Path(args.source) / "requirements.lock"
    if not lock.is_file():
        parser.error(f"{lock} is missing: the dependencies are installed from its pins only")
    platforms = [
        f"manylinux_2_{minor}_{args.platform}" for minor in (17, 28, 34)
    ] + [f"manylinux2014_{args.platform}"]
    with tempfile.TemporaryDirectory() as tmp:
        # Every dependency as the lock pins it, each file checked against its hashes: two
        # builds from one lock ship the same bytes, whatever PyPI holds on the day.
        subprocess.run(
            [*pip, "download", "--quiet", "--only-binary=:all:", "--implementation", "cp",
             "--python-version", args.python_version, "--dest", tmp, "--require-hashes",
             *(f"--platform={p}" for p in platforms), "-r", str(lock)],
            check=True, env=env,
        )  # fmt: skip
        fresh = {wheel.name for wheel in Path(tmp).glob("*.whl")}
        for old in out.glob("*.whl"):  # a wheel of an earlier lock would be installable
            if old.name not in fresh and not old.name.startswith("lvs_director-"):
                old.unlink()
        for name in sorted(fresh):
            if not (out / name).exists():
                shutil.copy2(Path(tmp) / name, out / name)
    shutil.copy2(lock, out / "requirements.lock")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
