"""`make bench` (in the lab VM): starting with a big static file, keepalived against the director.

The same table (N virtual services x 10 real servers, written once as keepalived's
``virtual_server`` blocks and once as the director's YAML by ``lab.bench_config``). Each
contender starts from exec in a fresh network namespace of its own (an empty IPVS table) and
the clock runs until the kernel holds the whole table: every service and every real server.
The kernel says when (``AddClock``: its function tracer stamps each add on the monotonic
clock, the figure runs to the last one), and a look at the namespace's table says the whole
table is there (``polled``: when a look saw it, the figure before 0.4.31, late by up to a
look's period, a few tenths of a second; ``--looks`` times by the looks alone). The
contenders take turns, REPEAT times each, in one boot, in an order rotated each turn; the
figure is each one's median and their ratio (below 1.0: the director is done sooner), and
beside it the median of each turn's own ratio (``turn by turn``). From the same clock: when
the first add came (``first_add``), and how long the kernel waited between two adds, summed
over the waits above a millisecond (``kernel_waited``: a contender that packs its next
requests, or waits for its answers, while the kernel has nothing to do).
Since 0.4.34 a start has one way in (issue 72): the file is parsed and validated in the
process, the first sync goes through the kernel adapter, and nothing is kept on disk for the
next start. ``director`` is that start; ``unit`` is a reboot under the role's unit as systemd
starts it (its ``ExecStartPre=`` and ``ExecStart=`` lines read from the role's template, the
clock started at the first one's exec). With ``--before`` (a checkout of an earlier release,
laid out beside it), ``before`` is that release's start with no cache, and ``unit_before``
and ``unit_reloaded_before`` its reboots under its unit, from a state directory its run
before filled (its parse kept, and from 0.4.20 its table, replayed before the rest loads),
the second after a reload: the figures to set the plain start beside.

Both run as from a box's own disk (a copy on the guest's tmpfs: see ``local_box``), their
shared libraries too; ``--from-9p`` runs them from the lab's root instead, to show what the
lab's filesystem costs. The director runs on the interpreter the role makes its virtualenv
from (``director_python``: Debian's python3.11, built with profile-guided optimisation), not
the lab's own (pyenv's, without it), and the unit's starts (and ``first``, a first boot
under it) with the unit's ``Environment=``. ``lab_python`` is the director's first start
without a cache on the lab's interpreter, as every run before 0.4.30 measured it.

The director's own log says where its time went (``event=startup.timing``: the interpreter,
the replay, the first moments' read of the file, the early table sent from it, imports,
taking the parse, starting its parts, the first read of the kernel, translating,
programming, publishing); the bench prints the median of each phase. A director whose
first moments completed the table (a replay, an early table) is stopped only once it has
logged that line.

    python -m lab.vm run lab.bench_start
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from lab.bench_config import REAL_SERVERS, write_tables
from lab.netns import Netns
from lab.wait import stop_group

REPEAT = 3
TIMEOUT = 900.0
POLL = 0.05
RELOAD_SETTLE = 60.0  # seconds a reload's table may take to be kept (none before 0.4.28)
REPO = Path(__file__).resolve().parent.parent
BOX = Path("/dev/shm/bench-start-box")


def table_in(ns: Netns) -> tuple[int, int]:
    """(virtual services, real servers) the namespace's kernel holds, from its
    /proc/net/ip_vs, read by the namespace's own thread (``/proc/thread-self/net``): the
    kernel prints it under RCU, where a netlink dump (ipvsadm) takes the mutex every add
    waits for, and would slow the contender it watches; and no process is started for it
    (``ip netns exec cat`` took 0.31 s of the guest's time a look at 11,000 entries, this
    0.05-0.07 s)."""

    def read() -> str:
        try:
            with open("/proc/thread-self/net/ip_vs", encoding="ascii") as handle:
                return handle.read()
        except FileNotFoundError:  # ip_vs not loaded yet: nothing in any table
            return ""

    lines = ns.call(read).splitlines()
    return sum(1 for line in lines if line.startswith("TCP")), sum(
        1 for line in lines if line.startswith("  ->") and ":1F90 " in line
    )  # 8080


class AddClock:
    """When the kernel took each IPVS add, from its function tracer (ftrace), on the clock
    ``time.monotonic()`` reads (``trace_clock`` mono): the figure of a start is the moment
    of its last ``ip_vs_add_service``/``ip_vs_add_dest`` (the whole table then, to within
    that one operation), whatever the look at the table that saw it complete. A look costs
    the guest tens of milliseconds at these sizes, so it can only be made every few tenths
    of a second: a figure taken from the looks was late by anything up to that, turn by
    turn (the noise of the figures before 0.4.31). Both contenders call the same two
    functions of the kernel, by netlink: the tracer costs each the same few microseconds an
    add. ``None`` from ``open`` where the guest has no tracer: the looks are the figure."""

    ROOT = Path("/sys/kernel/tracing")
    TRACED = ("ip_vs_add_service", "ip_vs_add_dest")

    @classmethod
    def open(cls) -> AddClock | None:
        try:
            if not (cls.ROOT / "trace").exists():
                subprocess.run(
                    ["mount", "-t", "tracefs", "nodev", str(cls.ROOT)],
                    check=True,
                    capture_output=True,
                )
            subprocess.run(["modprobe", "ip_vs"], check=True, capture_output=True)
            clock = cls()
            clock._write("tracing_on", "0")
            clock._write("trace_clock", "mono")
            clock._write("set_ftrace_filter", "\n".join(cls.TRACED) + "\n")
            clock._write("buffer_size_kb", "16384")
            clock._write("current_tracer", "function")
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"bench start: no kernel clock ({exc}); the looks are the figure", flush=True)
            return None
        return clock

    def _write(self, name: str, text: str) -> None:
        (self.ROOT / name).write_text(text)

    def begin(self) -> None:
        self._write("trace", "")  # emptied
        self._write("tracing_on", "1")

    def end(self) -> list[float]:
        """The monotonic time of every add traced since ``begin``, in order."""
        self._write("tracing_on", "0")
        stamps = []
        for line in (self.ROOT / "trace").read_text(errors="replace").splitlines():
            if "LOST" in line and "EVENTS" in line:
                raise SystemExit(f"bench start: the kernel clock lost events: {line.strip()}")
            if line.startswith("#") or not any(f" {name} " in line for name in self.TRACED):
                continue
            stamps.append(float(line.split(": ", 1)[0].split()[-1]))
        return sorted(stamps)  # the buffer is per CPU: merged, it is in order within one

    def close(self) -> None:
        self._write("tracing_on", "0")
        self._write("current_tracer", "nop")
        self._write("set_ftrace_filter", "")


def waits(stamps: list[float], longer_than: float = 0.001) -> float:
    """Seconds between one add and the next when more than ``longer_than``, summed: how long
    the kernel waited on the contender while it programmed the table."""
    return sum(b - a for a, b in itertools.pairwise(stamps) if b - a > longer_than)


# Runs ``director`` as ``python -m director`` would, and writes the files of every module it
# loaded when it exits (``-X importtime`` misses those loaded by importlib.import_module).
WRAPPER = """
import atexit, runpy, sys
out, sys.argv = sys.argv[1], ["director", *sys.argv[2:]]
def dump():
    files = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    with open(out, "w") as f:
        f.write("\\n".join(sorted(str(p) for p in files if p)))
atexit.register(dump)
runpy.run_module("director", run_name="__main__", alter_sys=True)
"""


def _copy_file(origin: Path, roots: dict[Path, Path]) -> None:
    """A module's file (and its compiled copy) into the tree that mirrors its root."""
    for root, target in roots.items():
        if origin.is_relative_to(root):
            files = [origin]
            if origin.suffix == ".py":
                files.append(Path(importlib.util.cache_from_source(str(origin))))
            for file in files:
                if file.is_file():
                    (target / file.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, target / file.relative_to(root))
            return


# What a box's standard library holds that no start loads: left out of the box's copy.
NOT_LOADED = frozenset(
    {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data"}
)


def _stdlib(stdlib: Path) -> list[Path]:
    """The standard library as a box has it (but ``NOT_LOADED``): every module, not only
    those a start loaded, since what a start loads later (``pickle`` when its table is
    kept, since 0.4.30) is not in a warm-up that stopped before."""
    found = []
    for path in stdlib.rglob("*"):
        parts = path.relative_to(stdlib).parts
        if parts[0] in NOT_LOADED or "-packages" in parts[0] or "__pycache__" in parts:
            continue
        if path.suffix == ".py" or (parts[0] == "lib-dynload" and path.suffix == ".so"):
            found.append(path)
    return found


@dataclass
class Box:
    """How each contender is started: the director's argv prefix and environment, keepalived's
    binary, (``--before``) the environment that runs an earlier director's code instead, and
    (``lab``) the director's argv and environment on the lab's own interpreter."""

    director: list[str]
    env: dict[str, str]
    keepalived: str
    before: dict[str, str] | None = None
    lab: tuple[list[str], dict[str, str]] | None = None


# The interpreter a box runs the director on: the role's ``director_python`` (its virtualenv
# is made from it). Debian's python3.11 is built with profile-guided optimisation and links
# libpython statically; the lab's (pyenv) is neither, and ran the same Python work about a
# quarter slower natively.
ROLE_DEFAULTS = REPO / "ansible/roles/director/defaults/main.yml"


def role_python() -> Path | None:
    """The role's default ``director_python``, resolved, when this machine has it and it is
    the lab's minor version (the dependencies in the lab's venv are built for that)."""
    found = re.search(r"^director_python:\s*(\S+)", ROLE_DEFAULTS.read_text(), re.MULTILINE)
    if not found or not Path(found.group(1)).exists():
        return None
    python = Path(found.group(1)).resolve()
    try:
        said = _asked(python, "import sys; print(*sys.version_info[:2])").split()
    except (OSError, subprocess.CalledProcessError):  # not one that runs here
        return None
    return python if said == [str(n) for n in sys.version_info[:2]] else None


def _asked(python: Path, code: str) -> str:
    """What ``python -c code`` prints."""
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass
class Home:
    """One interpreter laid out in the box: its binary, its standard library, and the files
    of the modules a start loaded with it."""

    python: Path
    stdlib: Path
    modules: list[Path]


def home_of(python: Path, modules: list[Path]) -> Home:
    stdlib = _asked(python, "import sysconfig; print(sysconfig.get_paths()['stdlib'])")
    return Home(python, Path(stdlib), modules)


def _libraries(binary: Path) -> list[Path]:
    """The shared libraries ``binary`` loads (ldd), less the dynamic loader itself."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) > 2 and parts[2].startswith("/"):
            found.append(Path(parts[2]))
    return found


def local_box(homes: dict[str, Home], before: Path | None = None) -> Box:
    """Both contenders as installed on a box's own disk, on the guest's tmpfs: for each of
    ``homes`` (``py``: the box's interpreter; ``lab``: the lab's, when it differs) the
    interpreter and its standard library (``_stdlib``, with the compiled copies), the
    dependencies' modules a start loaded, every dependency's metadata, the director's
    code, keepalived's binary, and the shared libraries of all of them (``lib``, named by
    ``LD_LIBRARY_PATH`` for every contender alike: from the lab's root keepalived's 45
    libraries took 0.17 s of each start in the guest, its whole ``--version`` 0.27 s against
    0.09 s). The lab's root is the host's filesystem over 9p without a cache, where every
    stat and read crosses emulated virtio: a Python process opens hundreds of files at start,
    keepalived a few dozen, so from there the figure is the lab's, not a box's. ``before``: a
    folder holding an earlier ``director`` package, laid out beside the current one."""
    shutil.rmtree(BOX, ignore_errors=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = Path(sysconfig.get_paths()["purelib"])
    libs = BOX / "lib"
    libs.mkdir(parents=True)
    keepalived = BOX / "keepalived"
    shutil.copy2(shutil.which("keepalived") or "/usr/sbin/keepalived", keepalived)
    shared = set(_libraries(keepalived))
    envs: dict[str, dict[str, str]] = {}
    pythons: dict[str, str] = {}
    for name, home in homes.items():
        root = BOX / name
        roots = {site: BOX / "site", home.stdlib: root / "lib" / version}
        (root / "lib" / version / "lib-dynload").mkdir(parents=True)
        (root / "bin").mkdir(parents=True)
        shutil.copy2(home.python, root / "bin" / version)
        for landmark in ("os.py", "os.pyc"):  # where the interpreter finds its prefix
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(home.stdlib / landmark, root / "lib" / version / landmark)
        for module in [*home.modules, *_stdlib(home.stdlib)]:
            _copy_file(module, roots)
            if module.suffix == ".so":
                shared.update(_libraries(module))
        shared.update(_libraries(home.python))
        envs[name] = {
            "PYTHONHOME": str(root),
            "PYTHONPATH": str(BOX / "site"),
            "PYTHONNOUSERSITE": "1",
            "LD_LIBRARY_PATH": str(libs),
        }
        pythons[name] = str(root / "bin" / version)
    for library in shared:
        shutil.copy2(library, libs / library.name)
    # The metadata of the box's dependencies (requirements.lock), which pydantic scans for
    # plugins at its first schema: a box has those, not the lab's test tools.
    lock = (REPO / "requirements.lock").read_text().splitlines()
    wanted = {
        re.sub(r"[-_.]+", "_", line.split("==")[0]).lower()
        for line in lock
        if "==" in line and line[:1].isalpha()
    }
    for info in site.glob("*.dist-info"):
        if re.sub(r"[-_.]+", "_", info.name.split("-")[0]).lower() in wanted:
            shutil.copytree(info, BOX / "site" / info.name, dirs_exist_ok=True)
    # The director as the role installs it: its modules compiled (pip does at install), with
    # the box's interpreter; the box's starts, like the unit's, write nothing (the guest sets
    # PYTHONDONTWRITEBYTECODE).
    shutil.copytree(REPO / "director", BOX / "site" / "director")
    installer = str(homes["py"].python)
    subprocess.run(
        [installer, "-m", "compileall", "-q", str(BOX / "site" / "director")], check=True
    )
    warming = {k: v for k, v in {**os.environ, **envs["py"]}.items() if k != "PYTHONHOME"}
    warming["PYTHONPATH"] = f"{BOX / 'site'}{os.pathsep}{site}"
    earlier = None
    if before is not None:
        shutil.copytree(before / "director", BOX / "before" / "director")
        earlier = {**envs["py"], "PYTHONPATH": f"{BOX / 'before'}{os.pathsep}{BOX / 'site'}"}
        # Installed as the role installs it, as the current code is: its modules' bytecode
        # (a checkout made by `git archive` has none, and the guest writes none) and its
        # dataclasses' code. Without them its imports took 2.5 s where this code's take 0.9.
        subprocess.run(
            [installer, "-m", "compileall", "-q", str(BOX / "before" / "director")], check=True
        )
        if (before / "director" / "cli" / "classcode.py").exists():  # as that role did
            subprocess.run(
                [installer, "-m", "director.cli.classcode"],
                env={**warming, "PYTHONPATH": f"{earlier['PYTHONPATH']}{os.pathsep}{site}"},
                cwd=BOX,
                check=True,
                capture_output=True,
            )
    lab = ([pythons["lab"], "-m", "director"], envs["lab"]) if "lab" in homes else None
    return Box([pythons["py"], "-m", "director"], envs["py"], str(keepalived), earlier, lab)


def start_once(
    name: str,
    argv: list[str],
    services: int,
    log: Path,
    env: dict[str, str] | None = None,
    *,
    cwd: Path | None = None,
    pre: Sequence[list[str]] = (),
    clock: AddClock | None = None,
) -> dict[str, Any]:
    """Seconds from exec until the whole table is in a fresh namespace's kernel: from the
    exec of the first of ``pre`` (run one after the other, each to its end, as systemd runs
    a unit's ``ExecStartPre=``; in the host's namespace, where a unit runs them) when any.
    With ``clock``, until the kernel's last add (``AddClock``), the looks at the table only
    saying when it is complete (``polled``: when a look saw it); without, until a look saw
    it."""
    ns = Netns(f"start-{name}-{services}")
    ns.ip("link set lo up")
    want = (services, services * REAL_SERVERS)
    said_before = _count(log, SETTLED) if name != "keepalived" else None
    with log.open("ab") as out:
        if clock is not None:
            clock.begin()
        started = time.monotonic()
        for command in pre:
            done = subprocess.run(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=cwd or (BOX if env else None),
                check=False,
            )
            if done.returncode != 0:
                ns.close()
                raise SystemExit(f"{name}: {command[-3:]} exited {done.returncode}; see {log.name}")
        proc = spawn(ns, argv, out, env or {}, cwd)
        try:
            seen = (0, 0)
            while time.monotonic() - started < TIMEOUT:
                asked = time.monotonic()
                seen = table_in(ns)
                if seen >= want:
                    break
                if proc.poll() is not None:
                    raise SystemExit(
                        f"{name} exited ({proc.returncode}) before the table was"
                        f" complete; see {log.name}"
                    )
                # Reading 55,000 lines back is work for the VM too: the look runs at most
                # half the time (both contenders alike), a quarter when the kernel's clock
                # gives the figure (the looks then only say when to stop).
                time.sleep(max(POLL, (3 if clock else 1) * (time.monotonic() - asked)))
            took = time.monotonic() - started
            if seen < want:
                raise SystemExit(f"{name}: {seen} of {want} after {TIMEOUT:.0f} s; see {log.name}")
            if said_before is not None:  # the table may be there before the director is up
                _settle(proc, log, said_before)
        finally:
            stop_group(proc)
            ns.close()
    if clock is None:
        return {"seconds": round(took, 3), "polled": round(took, 3)}
    stamps = clock.end()
    if len(stamps) < sum(want):
        raise SystemExit(f"{name}: the kernel's clock saw {len(stamps)} adds of {sum(want)}")
    return {
        "seconds": round(stamps[-1] - started, 3),
        "polled": round(took, 3),
        "first_add": round(stamps[0] - started, 3),
        "kernel_waited": round(waits(stamps), 3),
    }


# A director's table is complete before it is up when its first moments sent it (a replay,
# an early table): it is stopped only once it has said where its start's time went (and, for
# the warm-up, loaded every module a start loads).
SETTLED = b"event=startup.timing"
SETTLE_TIMEOUT = 300.0


def _count(log: Path, line: bytes) -> int:
    try:
        return log.read_bytes().count(line)
    except FileNotFoundError:
        return 0


def _settle(proc: subprocess.Popen[bytes], log: Path, before: int) -> None:
    """Until the director has logged one more ``SETTLED`` line than ``before`` (or exited,
    or SETTLE_TIMEOUT passed)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        if _count(log, SETTLED) > before:
            return
        time.sleep(0.2)


UNIT = REPO / "ansible/roles/director/templates/director.service.j2"
# 0.4.25's unit had the file checked in a process of its own before every start.
CHECK_FIRST = (
    "ExecStartPre={{ director_install_dir }}/bin/director check --config "
    "{{ director_config_dir }}/director.yaml"
)


def spawn(
    ns: Netns, argv: list[str], out: BinaryIO, env: dict[str, str], cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """``argv`` started in ``ns``, in a session of its own, its output to ``out``; from the
    box's folder when it runs with the box's environment."""
    return subprocess.Popen(
        ["ip", "netns", "exec", ns.name, *argv],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **env},
        cwd=cwd or (BOX if env else None),
    )


def unit_environment() -> dict[str, str]:
    """The variables the role's unit sets (its ``Environment=`` lines): what the unit's
    starts, and a first boot under it, run with (``MALLOC_ARENA_MAX``)."""
    found = {}
    for line in UNIT.read_text().splitlines():
        if line.startswith("Environment="):
            name, _, value = line.removeprefix("Environment=").partition("=")
            if "{" in value or " " in name:
                raise SystemExit(f"bench: the unit's line needs more than this: {line}")
            found[name] = value
    return found


def unit_commands(
    director: list[str], config: Path, *, check_first: bool = False
) -> list[list[str]]:
    """What systemd runs to start the role's unit, in its order (every ``ExecStartPre=``,
    then ``ExecStart=``), read from the role's template: the director as the box runs it,
    ``config`` as its file. ``check_first``: with 0.4.25's check before it, if the template
    has none."""
    lines = [
        line
        for line in UNIT.read_text().splitlines()
        if line.startswith(("ExecStartPre=", "ExecStart="))
    ]
    if check_first and not any(line.startswith("ExecStartPre=") for line in lines):
        lines.insert(0, CHECK_FIRST)
    lines.sort(key=lambda line: not line.startswith("ExecStartPre="))  # stable: pre first
    commands = []
    for line in lines:
        text = line.split("=", 1)[1]
        for var, value in (
            ("{{ director_install_dir }}/bin/director", "@DIRECTOR@"),
            ("{{ director_config_dir }}/director.yaml", str(config)),
            ("{{ director_log_level }}", "info"),
        ):
            text = text.replace(var, value)
        if "{" in text:
            raise SystemExit(f"bench: the unit's line needs more than the bench renders: {line}")
        argv = shlex.split(text)
        if argv[0] != "@DIRECTOR@":
            raise SystemExit(f"bench: the unit runs something other than the director: {line}")
        commands.append([*director, *argv[1:]])
    return commands


def phases(log: Path) -> list[dict[str, float]]:
    """Every ``startup.timing`` line the director logged, as {phase: seconds}."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if "event=startup.timing" in line:
            found.append({k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)(?=\s|$)", line)})
    return found


def warm_up(
    services: int, workdir: Path, code: Path | None = None, python: Path | None = None
) -> tuple[list[Path], float]:
    """One director start from the lab's root: the files of the modules a start loads (the
    box is laid out with them), and its seconds on 9p. ``code``: a folder holding another
    ``director`` package to start instead (an earlier one loads modules this one does not);
    ``python``: another interpreter than the lab's, given the lab's dependencies."""
    director_file, _ = write_tables(services, workdir)
    loaded = workdir / "loaded.txt"
    interpreter = str(python or sys.executable)
    argv = [interpreter, "-c", WRAPPER, str(loaded), "run", "--config", str(director_file)]
    paths = [str(code)] if code is not None else []
    if python is not None:
        paths += [str(REPO)] if code is None else []
        paths.append(sysconfig.get_paths()["purelib"])
    env = {"PYTHONPATH": os.pathsep.join(paths)} if paths else None
    name = "director" if code is None else "before"
    log = workdir / f"warm-up-{name}.log"
    seconds = start_once(name, argv, services, log, env, cwd=code or REPO)["seconds"]
    return [Path(line) for line in loaded.read_text().splitlines()], seconds


def measure(
    services: int,
    workdir: Path,
    repeat: int,
    box: Box,
    *,
    before_checks_first: bool = False,
    only: frozenset[str] | None = None,
    clock: AddClock | None = None,
) -> dict[str, Any]:
    """Each contender's starts in turn (``only``: those named, keepalived always), timed by
    the kernel's ``clock`` when there is one."""

    def wanted(name: str) -> bool:
        return only is None or name in only or name == "keepalived"

    director_file, keepalived_file = write_tables(services, workdir)
    director = [*box.director, "run", "--config", str(director_file)]
    argv = {
        "keepalived": [
            box.keepalived,
            "--dont-fork",
            "--log-console",
            "--check",
            "-f",
            str(keepalived_file),
            "-p",
            str(workdir / "ka.pid"),
            "-c",
            str(workdir / "ka-checkers.pid"),
        ],
        "director": director,
        "before": director,
    }
    if box.lab is not None:  # the same first start on the lab's interpreter
        argv["lab_python"] = [*box.lab[0], "run", "--config", str(director_file)]
    env = {
        "keepalived": box.env,
        "director": box.env,
        "before": box.before,
        "lab_python": box.lab[1] if box.lab is not None else None,
    }
    # A reboot under the role's unit, as systemd starts it: its state directory holds what the
    # run before kept (the parse, the table). "unit_before": the unit with the earlier
    # code (--before); with --before-checks-first, the file checked in a process of its own
    # first, as 0.4.25's unit did.
    pres: dict[str, list[list[str]]] = {}
    units = {"unit": (box.env, False), "unit_before": (box.before, before_checks_first)}
    for name, (unit_env, check_first) in units.items():
        if unit_env is None or not wanted(name):
            continue
        state = workdir / f"{name}-{services}"
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir()
        *pres[name], argv[name] = unit_commands(
            box.director, director_file, check_first=check_first
        )
        env[name] = {**unit_env, **unit_environment(), "STATE_DIRECTORY": str(state)}
        if name == "unit_before":  # the earlier release kept its parse (and table) there
            primer = [*director, "--config-cache", str(state / "config.cache")]
            prime(primer, services, state / "config.cache", unit_env, workdir)
    # A reboot after a reload: the state directory as a run left it once it had read a
    # changed file (SIGHUP) and served it, restored before every turn (each start may write
    # it). "unit_reloaded_before": the earlier code (--before) under the same unit.
    restore: dict[str, tuple[Path, Path]] = {}
    reloaded = workdir / f"reloaded-{services}.yaml"
    for name, unit_env in (("unit_reloaded_before", box.before),):
        if unit_env is None or not wanted(name):
            continue
        state = workdir / f"{name}-{services}"
        *pres[name], argv[name] = unit_commands(box.director, reloaded)
        env[name] = {**unit_env, **unit_environment(), "STATE_DIRECTORY": str(state)}
        restore[name] = (
            prime_reloaded(
                name,
                box.director,
                services,
                state=state,
                config=reloaded,
                final=director_file,
                env=unit_env,
                workdir=workdir,
            ),
            state,
        )
    runs: dict[str, list[dict[str, float]]] = {  # each start's figures (start_once)
        name: [] for name in argv if env.get(name) is not None and wanted(name)
    }
    logs = {name: workdir / f"{name}-{services}.log" for name in runs}
    for turn in range(repeat):  # in turn: a busy moment of the VM slows all alike, not one
        for name in turn_order(list(runs), turn):
            starts = runs[name]
            if name in restore:
                snapshot, state = restore[name]
                shutil.rmtree(state, ignore_errors=True)
                shutil.copytree(snapshot, state)
            took = start_once(
                name,
                argv[name],
                services,
                logs[name],
                env[name],
                pre=pres.get(name, ()),
                clock=clock,
            )
            starts.append(took)
    out: dict[str, Any] = {
        "services": services,
        "real_servers": services * REAL_SERVERS,
        "clock": "kernel" if clock is not None else "looks",
    }
    for name, starts in runs.items():
        values = [start["seconds"] for start in starts]
        out[name] = {"seconds": values, "median": round(statistics.median(values), 3)}
        if clock is not None:  # what a look at the table saw, as the figures before 0.4.31
            out[name]["polled"] = [start["polled"] for start in starts]
            out[name]["polled_median"] = round(statistics.median(out[name]["polled"]), 3)
            for key in ("first_add", "kernel_waited"):  # exec -> first add; the kernel idle
                out[name][key] = round(statistics.median(start[key] for start in starts), 3)
        split = phases(logs[name]) if name != "keepalived" else []
        if split:
            out[name]["phases"] = {
                k: round(statistics.median(p.get(k, 0.0) for p in split), 3) for k in split[0]
            }
    for name in CONTENDERS[1:]:
        if name in out:
            ratio = round(out[name]["median"] / out["keepalived"]["median"], 3)
            out["ratio" if name == "director" else f"ratio_{name}"] = ratio
            out[f"paired_ratio_{name}"] = paired_ratio(
                out[name]["seconds"], out["keepalived"]["seconds"]
            )
            if clock is not None:
                looked = out[name]["polled_median"] / out["keepalived"]["polled_median"]
                out[f"polled_ratio_{name}"] = round(looked, 3)
    return out


def turn_order(names: list[str], turn: int) -> list[str]:
    """The contenders' order in a turn: rotated by one each turn, so that none always
    follows the same one (a namespace of 11,000 entries is still being torn down by the
    kernel when the next start begins) nor always comes first."""
    if not names:
        return []
    at = turn % len(names)
    return names[at:] + names[:at]


def paired_ratio(seconds: list[float], anchors: list[float]) -> float:
    """The median of the turns' own ratios (each start over the anchor's in the same turn):
    a turn the VM ran slow moves both sides of its ratio, not the median of one side."""
    return round(statistics.median(a / b for a, b in zip(seconds, anchors, strict=True)), 3)


def prime(argv: list[str], services: int, cache: Path, env: dict[str, str], workdir: Path) -> None:
    """One start that leaves its parse in ``cache`` and its table beside it (both written
    once it serves): what a restart then starts from."""
    table = cache.with_name("table.cache")
    table.unlink(missing_ok=True)
    cache.unlink(missing_ok=True)
    ns = Netns(f"start-prime-{services}")
    ns.ip("link set lo up")
    with (workdir / f"prime-{services}.log").open("ab") as out:
        proc = spawn(ns, argv, out, env)
        try:
            started = time.monotonic()
            while not (cache.exists() and table.exists()) and time.monotonic() - started < TIMEOUT:
                if proc.poll() is not None:
                    raise SystemExit(f"the priming start exited ({proc.returncode})")
                time.sleep(0.5)
            if not (cache.exists() and table.exists()):
                raise SystemExit(f"no {cache.name} and {table.name} after {TIMEOUT:.0f} s")
        except SystemExit:
            out.flush()
            tail = (workdir / f"prime-{services}.log").read_text(errors="replace")[-3000:]
            print(f"bench start: the priming start said:\n{tail}", flush=True)
            raise
        finally:
            stop_group(proc)
            ns.close()


def prime_reloaded(
    name: str,
    director: list[str],
    services: int,
    *,
    state: Path,
    config: Path,
    final: Path,
    env: dict[str, str],
    workdir: Path,
) -> Path:
    """The state directory a reboot after a reload finds, made once: a run under the unit's
    environment started on the table less one service, then ``config`` rewritten as
    ``final``'s table and reloaded (SIGHUP), stopped once the reload's parse is kept (and,
    where the code keeps it, the table: at most ``RELOAD_SETTLE`` seconds after the parse).
    Returns a copy of that directory, restored before each turn."""
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir()
    (workdir / f"fewer-{services}").mkdir(exist_ok=True)
    fewer, _ = write_tables(services - 1, workdir / f"fewer-{services}")
    shutil.copy(fewer, config)
    log = workdir / f"prime-{name}-{services}.log"
    ns = Netns(f"start-reload-{services}")
    ns.ip("link set lo up")
    argv = unit_commands(director, config)[-1]
    with log.open("ab") as out:
        proc = spawn(ns, argv, out, {**env, "STATE_DIRECTORY": str(state)})
        try:
            _wait_log(log, proc, lambda text: "event=table.kept" in text, "the first table kept")
            shutil.copy(final, config)
            os.killpg(proc.pid, signal.SIGHUP)
            _wait_log(
                log,
                proc,
                lambda text: (
                    "event=config.cache_saved" in text.partition("event=config.reloaded")[2]
                ),
                "the reload's parse kept",
            )
            with contextlib.suppress(SystemExit):  # 0.4.27 and before: never kept again
                _wait_log(
                    log,
                    proc,
                    lambda text: "event=table.kept" in text.partition("event=config.reloaded")[2],
                    "the reload's table kept",
                    RELOAD_SETTLE,
                )
        finally:
            stop_group(proc)
            ns.close()
    snapshot = workdir / f"{name}-{services}-snapshot"
    shutil.rmtree(snapshot, ignore_errors=True)
    shutil.copytree(state, snapshot)
    return snapshot


def _wait_log(
    log: Path,
    proc: subprocess.Popen[bytes],
    seen: Callable[[str], bool],
    what: str,
    timeout: float = TIMEOUT,
) -> None:
    started = time.monotonic()
    while not seen(log.read_text(errors="replace")):
        if proc.poll() is not None:
            raise SystemExit(f"bench: the priming start exited ({proc.returncode}); see {log}")
        if time.monotonic() - started > timeout:
            raise SystemExit(f"bench: no {what} after {timeout:.0f} s; see {log}")
        time.sleep(0.5)


def _said(name: str, figures: dict[str, Any]) -> str:
    split = " ".join(f"{k}={v}" for k, v in figures.get("phases", {}).items())
    said = f"{name} {figures['median']:.2f} s {figures['seconds']}"
    if "polled" in figures:
        said += (
            f" (looks {figures['polled_median']:.2f} s, first add {figures['first_add']:.2f} s,"
            f" kernel waited {figures['kernel_waited']:.2f} s)"
        )
    return f"{said} [{split}]" if split else said


CONTENDERS = (
    "keepalived",
    "director",
    "unit",
    "before",
    "unit_before",
    "unit_reloaded_before",
    "lab_python",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--from-9p", action="store_true", help="run both from the lab's root (9p), not a copy"
    )
    parser.add_argument(
        "--before", type=Path, help="a folder with an earlier director package: one more contender"
    )
    parser.add_argument(
        "--before-checks-first",
        action="store_true",
        help="run `director check` before the earlier code's unit starts, as 0.4.25's unit did",
    )
    parser.add_argument(
        "--python",
        type=Path,
        help="the interpreter the box runs the director on (default: the role's"
        " director_python, when it is the lab's minor version; else the lab's own)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=CONTENDERS[1:],
        help="these contenders alone (and keepalived): more turns in the same time",
    )
    parser.add_argument(
        "--looks",
        action="store_true",
        help="time each start by the looks at the table, as before 0.4.31 (no kernel clock)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
        box = Box(
            [sys.executable, "-m", "director"], {}, shutil.which("keepalived") or "keepalived"
        )
        if not args.from_9p:
            python = args.python or role_python()
            modules, seconds = warm_up(min(args.services), Path(tmp), python=python)
            if args.before is not None:  # and what the earlier one loads (0.4.7: pydantic)
                modules += warm_up(min(args.services), Path(tmp), args.before, python)[0]
            homes = {"py": home_of(python or Path(sys.executable).resolve(), modules)}
            if python is not None and python != Path(sys.executable).resolve():
                lab = warm_up(min(args.services), Path(tmp))[0]
                homes["lab"] = home_of(Path(sys.executable).resolve(), lab)
            box = local_box(homes, args.before)
            print(
                f"bench start: one start from the lab's root (9p) took {seconds:.1f} s and "
                f"imported {len(modules)} modules; the contenders run from tmpfs, the"
                f" director on {homes['py'].python}"
                + (f" (lab_python: {homes['lab'].python})" if "lab" in homes else ""),
                flush=True,
            )
        clock = None if args.looks else AddClock.open()
        try:
            for count in args.services:
                row = measure(
                    count,
                    Path(tmp),
                    args.repeat,
                    box,
                    before_checks_first=args.before_checks_first,
                    only=frozenset(args.only) if args.only else None,
                    clock=clock,
                )
                row["where"] = "9p" if args.from_9p else "tmpfs"
                rows.append(row)
                print(
                    f"bench start at {count} services x {REAL_SERVERS} (exec -> whole table in the "
                    f"kernel): "
                    + ", ".join(_said(name, row[name]) for name in CONTENDERS if name in row)
                    + " (ratios to keepalived: "
                    + "; ".join(
                        f"{name} {row['ratio' if name == 'director' else f'ratio_{name}']}"
                        f" (turn by turn {row[f'paired_ratio_{name}']})"
                        for name in CONTENDERS[1:]
                        if name in row
                    )
                    + ")",
                    flush=True,
                )
                for name in CONTENDERS:
                    with contextlib.suppress(FileNotFoundError):
                        shutil.copy(
                            Path(tmp) / f"{name}-{count}.log", args.out / f"{name}-{count}.log"
                        )
        finally:
            if clock is not None:
                clock.close()
    shutil.rmtree(BOX, ignore_errors=True)
    (args.out / "results.json").write_text(json.dumps({"start": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
