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


def boot(
    command: str, rwdir: Path, memory: str = "2G", cpus: int = 2, timeout: float = 3600
) -> int:
    """Run ``command`` (bash) in the VM as root, cwd = the repo. Returns its exit status."""
    vng = shutil.which("vng") or str(Path(sys.executable).parent / "vng")
    rwdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    guest = (
        f"cd {shlex.quote(str(REPO))} && export PYTHONDONTWRITEBYTECODE=1 "
        f"PATH={shlex.quote(env['PATH'])}:/usr/sbin:/sbin && {command}"
    )
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


def kernel_suite(pytest_args: list[str]) -> int:
    """Run the kernel-marked tests in one VM boot, one pytest process; check the result."""
    results = REPO / ".lab" / "kernel-suite"
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    precompile()
    args = " ".join(shlex.quote(a) for a in pytest_args)
    python = shlex.quote(sys.executable)
    command = (
        f"{python} -m pytest -m kernel -p no:cacheprovider -o junit_family=xunit2 "
        f"--junitxml={results}/junit.xml {args} > {results}/pytest.log 2>&1; "
        f"echo $? > {results}/exit; dmesg > {results}/dmesg.log 2>&1; true"
    )
    # 18-19 minutes on a usual day; 53 on a slow one (2026-11-29): the VM's bound is 2 hours
    boot(command, results, timeout=7200)
    log = results / "pytest.log"
    if log.exists():
        sys.stdout.write(log.read_text())
    exit_file = results / "exit"
    if not exit_file.exists():
        print("lab: FAILED: the kernel suite did not run (no exit status came back from the VM)")
        return 1
    status = int(exit_file.read_text().strip() or 1)
    junit = results / "junit.xml"
    if not junit.exists():
        print("lab: FAILED: no JUnit results came back from the VM")
        return 1
    suite = ET.parse(junit).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
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
