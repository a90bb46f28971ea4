"""Boot the lab VM (virtme-ng, Debian's kernel, the host's root filesystem) and run one
command inside it; results come back through a writable folder.

This machine's kernel has no IPVS; the VM's kernel (linux-image-amd64) has ip_vs and every
scheduler as modules. Software emulation only (see ../shared/LAB-FACTS.md).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def find_kernel() -> Path:
    """The newest /boot/vmlinuz-*-amd64 whose modules include IPVS."""
    found = []
    for image in Path("/boot").glob("vmlinuz-*"):
        release = image.name[len("vmlinuz-") :]
        if Path(f"/lib/modules/{release}/kernel/net/netfilter/ipvs").is_dir():
            found.append(image)
    if not found:
        sys.exit("lab: no kernel with IPVS modules under /boot (apt-get install linux-image-amd64)")
    return sorted(
        found,
        key=lambda p: [int(x) if x.isdigit() else x for x in p.name.replace("-", ".").split(".")],
    )[-1]


# virtme-ng mounts the host's root with 9p and no cache: every stat and open of every Python
# start goes to the host, which made imports three times slower than the emulated CPU alone
# (`import director.cli.main, pyroute2`: 9.5 s against 3.1 s; Python's own start 2.0 s against
# 0.7 s). The trees the guest only reads (the interpreter, the venv, the repo's code) are
# exported once more, read-only, under a tag of their own, mounted with cache=loose and bound
# over their own paths. The host changes none of them while the VM runs (the results come back
# through --rwdir, which stays as it is); if the mount fails the guest goes on uncached.
CACHED_TAG = "labcached"
CACHED_EXPORT = (
    f"-fsdev local,id={CACHED_TAG},path=/,security_model=none,readonly=on,multidevs=remap "
    f"-device virtio-9p-pci,fsdev={CACHED_TAG},mount_tag={CACHED_TAG}"
)


def cached_trees() -> list[Path]:
    """What the guest binds from the cached export: the standard library, the venv, and the
    repo's own folders (not .git, and not .lab, where the results come back). Never a whole
    system prefix such as /usr: the guest's overlay there stays writable."""
    trees = {Path(os.__file__).resolve().parent}
    if sys.prefix != sys.base_prefix:
        trees.add(Path(sys.prefix).resolve())
    trees.update(
        d.resolve()
        for d in REPO.iterdir()
        if d.is_dir() and not d.is_symlink() and d.name not in {".git", ".lab"}
    )
    return sorted(trees)


def cached_mounts() -> str:
    """The guest's shell commands that mount the cached export and bind ``cached_trees``."""
    root = "/run/lab-cached"
    binds = " && ".join(
        f"mount --bind {root}{shlex.quote(str(t))} {shlex.quote(str(t))}" for t in cached_trees()
    )
    return (
        f"{{ mkdir -p {root} && mount -t 9p -o ro,trans=virtio,version=9p2000.L,access=any,"
        f"msize=524288,cache=loose {CACHED_TAG} {root} && {binds}; }} "
        "|| echo 'lab: the cached 9p export did not mount; reading the host uncached' >&2"
    )


def boot(
    command: str, rwdir: Path, memory: str = "2G", cpus: int = 2, timeout: float = 3600
) -> int:
    """Run ``command`` (bash) in the VM as root, cwd = the repo. Returns its exit status."""
    vng = shutil.which("vng") or str(Path(sys.executable).parent / "vng")
    rwdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    # virtme-ng passes the command on the guest kernel's command line, 2,048 bytes in all
    # with its own options: a longer one panics the kernel at boot (and the VM waits out its
    # timeout). The command goes as a script in the results folder; the line names it.
    script = rwdir / ".guest.sh"
    script.write_text(
        f"{cached_mounts()}\ncd {shlex.quote(str(REPO))} && export PYTHONDONTWRITEBYTECODE=1 "
        f"PATH={shlex.quote(env['PATH'])}:/usr/sbin:/sbin && {command}\n"
    )
    guest = f"exec bash {shlex.quote(str(script))}"
    cmd = [
        vng,
        "--run",
        str(find_kernel()),
        "--disable-kvm",
        "--force-9p",
        "--cpus",
        str(cpus),
        "--memory",
        memory,
        "--rwdir",
        str(rwdir),
        f"--qemu-opts={CACHED_EXPORT}",
        "--",
        "bash",
        "-c",
        guest,
    ]
    started = time.monotonic()
    print(f"lab: booting {find_kernel().name} (software emulation)...", flush=True)
    # The VM's console goes through a pipe, never straight to our stdout: qemu reopens a
    # file it is given, truncating it (`make test > log` lost the host tests' output).
    with subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as proc:
        assert proc.stdout is not None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            for chunk in iter(lambda: os.read(proc.stdout.fileno(), 65536), b""):  # type: ignore[union-attr]
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        finally:
            timer.cancel()
        code = proc.wait()
    print(f"lab: VM finished in {time.monotonic() - started:.0f}s (exit {code})", flush=True)
    return code


def precompile() -> None:
    """Write bytecode on the host: the guest sees a read-only tree over 9p."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            str(REPO / "director"),
            str(REPO / "lab"),
            str(REPO / "tests"),
            str(Path(sys.prefix) / "lib"),
        ],
        check=False,
        stdout=subprocess.DEVNULL,
    )


class Follower:
    """Copies what a file in the results folder gains to our stdout while the VM runs (the
    guest writes it through --rwdir): a run cut off from outside (CI's own time limit) still
    shows how far it got and what it was doing."""

    def __init__(self, path: Path, every: float = 2.0) -> None:
        self.path, self.every, self.done = path, every, threading.Event()
        self.offset = 0
        self.thread = threading.Thread(target=self._run, name="follow", daemon=True)

    def __enter__(self) -> Follower:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.done.set()
        self.thread.join()
        self.copy()  # what came after the last look

    def _run(self) -> None:
        while not self.done.wait(self.every):
            self.copy()

    def copy(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                gained = f.read()
        except OSError:  # not written yet
            return
        if gained:
            self.offset += len(gained)
            sys.stdout.buffer.write(gained)
            sys.stdout.flush()


def kernel_suite(pytest_args: list[str], results: Path | None = None) -> int:
    """Run the kernel-marked tests in one VM boot, one pytest process; check the result."""
    results = results or REPO / ".lab" / "kernel-suite"
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    precompile()
    args = " ".join(shlex.quote(a) for a in pytest_args)
    python = shlex.quote(sys.executable)
    command = (
        f"{python} -m pytest -m kernel -p no:cacheprovider -o junit_family=xunit2 --durations=25 "
        f"--junitxml={results}/junit.xml {args} > {results}/pytest.log 2>&1; "
        f"echo $? > {results}/exit; dmesg > {results}/dmesg.log 2>&1; true"
    )
    # 18-22 minutes on a usual day; 53 on a slow one (2026-11-29): the VM's bound is 2 hours
    with Follower(results / "pytest.log"):
        boot(command, results, timeout=7200)
    exit_file = results / "exit"
    if not exit_file.exists():
        print("lab: FAILED: the kernel suite did not run (no exit status came back from the VM)")
        return 1
    status = int(exit_file.read_text().strip() or 1)
    junit = results / "junit.xml"
    if not junit.exists():
        print("lab: FAILED: no JUnit results came back from the VM")
        return 1
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite") if root.tag == "testsuites" else root
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    ran = counts["tests"] - counts["skipped"]
    print(
        f"lab: kernel suite in the VM: {ran} ran, {counts['failures']} failed, "
        f"{counts['errors']} errors, {counts['skipped']} not run (results in {results})"
    )
    if ran == 0:
        print("lab: FAILED: no kernel test ran in the VM")
        return 1
    if counts["skipped"]:
        print("lab: FAILED: kernel tests were skipped inside the VM, where they must run")
        return 1
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("test", help="run the kernel suite in the VM")
    p.add_argument("pytest_args", nargs="*")
    p = sub.add_parser("run", help="run a python module in the VM (demo, bench)")
    p.add_argument("module")
    p.add_argument("--memory", default="2G")
    argv = sys.argv[1:]
    passed: list[str] = []  # after --: the module's own arguments (run)
    if argv[:1] == ["run"] and "--" in argv:
        argv, passed = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = parser.parse_args(argv)
    if args.command == "test":
        return kernel_suite(args.pytest_args)
    precompile()
    out = REPO / ".lab" / args.module
    shutil.rmtree(out, ignore_errors=True)
    extra = "".join(f" {shlex.quote(a)}" for a in passed)
    cmd = f"{shlex.quote(sys.executable)} -m {shlex.quote(args.module)} --out {out}{extra}"
    return boot(cmd, out, memory=args.memory)


if __name__ == "__main__":
    sys.exit(main())
