"""`make fresh`: the README's two commands on a truly fresh Debian 12, from nothing.

A green CI cannot show a missing install step: CI's machine keeps what was once installed by
hand. This builds a clean Debian 12 root (debootstrap, cached in .lab/fresh-base), copies the
working tree in, and runs `make test` and `make demo` there as root, with only /proc, /sys and
/dev of this machine bound in. The root starts with what the README says a reader has before
the two commands (git to clone, make to run them, CA certificates): every other package, and
every Python package, the project must install itself, or this fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from lab.debroot import SUITE, mirror

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / ".lab" / "fresh-base"
ROOT = REPO / ".lab" / "fresh-root"
INSIDE = Path("/root/director")  # where the tree lands in the root
PREREQUISITES = "make,git,ca-certificates"  # what the README assumes (a clone, make)
STAMP = f"{SUITE} minbase {PREREQUISITES}\n"
# The environment inside: a root shell's, with this machine's pip settings that are not
# paths into this machine (its local wheel folders do not exist in the fresh root).
PASSED = (
    "PIP_DEFAULT_TIMEOUT",
    "PIP_DISABLE_PIP_VERSION_CHECK",
    "PIP_CERT",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
)
LOCAL_CAS = Path("/usr/local/share/ca-certificates")


def base() -> None:
    stamp = BASE / ".director-stamp"
    if stamp.exists() and stamp.read_text() == STAMP:
        return
    shutil.rmtree(BASE, ignore_errors=True)
    BASE.parent.mkdir(parents=True, exist_ok=True)
    print(f"fresh: debootstrap {SUITE} (minbase + {PREREQUISITES}) into {BASE} ...", flush=True)
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={PREREQUISITES}",
            SUITE,
            str(BASE),
            mirror(),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stamp.write_text(STAMP)


def fresh_root() -> None:
    if ROOT.exists():
        for mount in mounts_under(ROOT):  # a run that was cut off
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(ROOT)
    subprocess.run(["cp", "-a", str(BASE), str(ROOT)], check=True)
    shutil.copy("/etc/resolv.conf", ROOT / "etc" / "resolv.conf")
    # This machine's own trust anchors (the CA of its egress proxy): the network's, not the
    # project's. A fresh machine elsewhere trusts the registries' real certificates.
    for cert in LOCAL_CAS.glob("*.crt") if LOCAL_CAS.is_dir() else ():
        shutil.copy(cert, ROOT / LOCAL_CAS.relative_to("/") / cert.name)
    subprocess.run(
        ["chroot", str(ROOT), "update-ca-certificates"], check=True, stdout=subprocess.DEVNULL
    )
    # The working tree as a clone would have it: tracked files and new ones not ignored.
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    target = ROOT / INSIDE.relative_to("/")
    target.mkdir(parents=True)
    packed = subprocess.run(
        ["tar", "-C", str(REPO), "--null", "-T", "-", "-cf", "-"],
        input=files,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-C", str(target), "-xf", "-"], input=packed, check=True)


def mounts_under(root: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point == str(root) or point.startswith(f"{root}/"):
            found.append(point)
    return sorted(found, key=len, reverse=True)


@contextlib.contextmanager
def bound() -> Iterator[None]:
    """This machine's /proc, /sys and /dev in the root (what qemu, namespaces and apt need).
    The root is a mount point of its own first: `ip netns exec` remounts / as a slave."""
    try:
        subprocess.run(["mount", "--bind", str(ROOT), str(ROOT)], check=True)
        for name, options in (("proc", ["--bind"]), ("sys", ["--rbind"]), ("dev", ["--rbind"])):
            subprocess.run(["mount", *options, f"/{name}", str(ROOT / name)], check=True)
        yield
    finally:
        for mount in mounts_under(ROOT):
            subprocess.run(["umount", "-l", mount], check=False)


def run_inside(command: str, log: Path) -> int:
    env = {
        "HOME": "/root",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    env.update({k: os.environ[k] for k in PASSED if k in os.environ})
    with log.open("ab") as out:
        proc = subprocess.Popen(
            ["chroot", str(ROOT), "bash", "-c", f"cd {INSIDE} && {command}"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        for chunk in iter(lambda: os.read(proc.stdout.fileno(), 65536), b""):  # type: ignore[union-attr]
            out.write(chunk)
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--commands",
        nargs="+",
        default=["make test", "make demo"],
        help="what to run in the fresh root, in order",
    )
    args = parser.parse_args()
    started = time.monotonic()
    base()
    fresh_root()
    log = REPO / ".lab" / "fresh.log"
    log.write_text("")
    timings: list[str] = []
    status = 0
    with bound():
        for command in args.commands:
            began = time.monotonic()
            print(f"fresh: {command} (in {ROOT}, a clean Debian {SUITE})", flush=True)
            status = run_inside(command, log)
            timings.append(f"{command}: {time.monotonic() - began:.0f} s, exit {status}")
            if status != 0:
                break
    summary = "; ".join(timings)
    print(f"fresh: {summary}; {time.monotonic() - started:.0f} s in all (log: {log})", flush=True)
    if status != 0:
        print(
            f"fresh: FAILED: `{command}` needs something the project does not install, "
            "or fails on a fresh machine; see the log",
            flush=True,
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
