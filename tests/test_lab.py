"""The lab's own plumbing, on the host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def fake_vng(tmp_path: Path, body: str) -> dict[str, str]:
    """A shell script named vng (``body`` after its #! line) first on PATH: the environment
    a child running lab.vm with it needs."""
    fake = tmp_path / "bin"
    fake.mkdir()
    vng = fake / "vng"
    vng.write_text(f"#!/bin/sh\n{body}")
    vng.chmod(0o755)
    return dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PYTHONPATH=str(REPO))


def test_the_vm_runner_never_truncates_a_redirected_log(tmp_path: Path) -> None:
    """`make test > log`: what was written before the VM boots stays in the file, whatever
    the VM's console does with its stdout (qemu reopens it, which truncated the file)."""
    env = fake_vng(tmp_path, "echo 'from the VM' > /dev/stdout\n")  # opens with O_TRUNC
    log = tmp_path / "log"
    script = (
        "import sys; from pathlib import Path; from lab.vm import boot; "
        "print('host tests: 200 passed', flush=True); sys.exit(boot('true', Path(sys.argv[1])))"
    )
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "rw")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=60,
            check=False,
        )
    text = log.read_text()
    assert done.returncode == 0, text
    assert "host tests: 200 passed" in text and "from the VM" in text, text


def test_the_shape_check_names_a_long_function_and_a_class_with_too_many_attributes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make lint` names a function over 80 lines and a class holding more than 15 instance
    attributes (fields or `self.x`) as warnings: a smoke detector, not a gate (issue 72);
    the rules (circles, the engine's door, the mirror) are what fail it."""
    from lab import shape

    assert shape.main() == 0
    printed = capsys.readouterr().out.splitlines()
    assert all(line.startswith("warning: ") for line in printed), printed
    tree = tmp_path / "director"
    tree.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    fields = "\n".join(f"    f{i}: int = 0" for i in range(12))
    selves = "\n".join(f"        self.s{i} = {i}" for i in range(4))
    (tree / "big.py").write_text(
        f"def long():\n{body}\n    return x0\n\n"
        f"@dataclass\nclass Wide:\n{fields}\n    def __post_init__(self):\n{selves}\n\n"
        f"class Lean:\n    x: int = prop('x')\n{fields}\n"
    )
    assert list(shape.findings(tree)) == [
        "director/big.py:1: long is 82 lines (80 at most)",
        "director/big.py:85: Wide has 16 instance attributes (15 at most)",
    ]


def test_the_shape_check_counts_forwarding_properties_and_keeps_the_engine_door(
    tmp_path: Path,
) -> None:
    """A property that only hands on another object's attribute is still one of the class's
    attributes (the Controller once showed 25 of its parts' this way); the web and the
    adapters import the engine's events, view and ports only, whatever module is added."""
    from lab import shape

    tree = tmp_path / "director"
    (tree / "web").mkdir(parents=True)
    selves = "\n".join(f"        self.s{i} = {i}" for i in range(12))
    forwards = "".join(
        f"    @property\n    def f{i}(self):\n        return self.s0.part{i}\n\n" for i in range(3)
    )
    (tree / "hub.py").write_text(
        f"class Hub:\n    def __init__(self):\n{selves}\n\n{forwards}"
        "    @property\n    def maybe(self):\n        return self.s1.x if self.s1 else None\n\n"
        "    @property\n    def computed(self):\n        return len(self.s2.items)\n\n"
        "    @property\n    def own(self):\n        return self.s3\n"
    )
    (tree / "web" / "page.py").write_text(
        "from director.engine.view import LoopView\n"
        "from director.engine import events, loop\n"
        "import director.engine.reconcile\n"
    )
    assert list(shape.findings(tree)) == [
        "director/hub.py:1: Hub has 16 instance attributes (15 at most)",
        "director/web/page.py:2: imports director.engine.loop (the engine's door: events, "
        "view, ports)",
        "director/web/page.py:3: imports director.engine.reconcile (the engine's door: "
        "events, view, ports)",
    ]


def test_the_shape_check_names_an_import_circle_even_one_for_type_checking_only(
    tmp_path: Path,
) -> None:
    from lab import shape

    tree = tmp_path / "director"
    (tree / "engine").mkdir(parents=True)
    (tree / "engine" / "loop.py").write_text("from director.engine import exports\n")
    (tree / "engine" / "exports.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from director.engine.loop import Controller\n"
    )
    (tree / "engine" / "view.py").write_text("from director.engine.exports import x\n")
    assert list(shape.findings(tree)) == [
        "import circle: director.engine.exports -> director.engine.loop"
    ]


def test_the_shape_check_keeps_modules_short_and_the_kernel_s_format_out_of_the_core(
    tmp_path: Path,
) -> None:
    """A module over 400 lines is a finding. The core names no IPVS flag bit and packs
    nothing with ``struct``: that is the codec's."""
    from lab import shape

    tree = tmp_path / "director"
    (tree / "core").mkdir(parents=True)
    (tree / "long.py").write_text("x = 1\n" * 401)
    (tree / "core" / "model.py").write_text(
        "import struct\nSVC_F_PERSISTENT = 1\n\ndef bits(p):\n"
        "    return SVC_F_PERSISTENT if p else 0\n"
    )
    assert list(shape.findings(tree)) == [
        "director/core/model.py:1: struct is the kernel's wire format (not the core's)",
        "director/core/model.py:2: SVC_F_PERSISTENT is the kernel's wire format (not the core's)",
        "director/core/model.py:5: SVC_F_PERSISTENT is the kernel's wire format (not the core's)",
        "director/long.py: 401 lines (400 at most)",
    ]


def test_the_shape_check_holds_tests_to_mirror_the_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module needs ``tests/<package>/test_<module>.py`` unless the list names the file
    that covers it; a listed module that has its own test now is a finding (the list
    shrinks), and so is a listed test file that is gone; a tests folder must be a package."""
    from lab import shape

    monkeypatch.setattr(
        shape,
        "UNMIRRORED",
        {
            "director/core/cluster.py": ("tests/core/test_model.py", "covered there"),
            "director/web/app.py": ("tests/web/test_api.py", "a file that is gone"),
        },
    )
    tree = tmp_path / "director"
    for folder in ("director/core", "director/web", "tests/core"):
        (tmp_path / folder).mkdir(parents=True)
    for package in ("tests", "tests/core"):
        (tmp_path / package / "__init__.py").write_text("")
    for module in ("core/model.py", "core/cluster.py", "core/new.py", "web/app.py"):
        (tree / module).write_text("x = 1\n")
    (tmp_path / "tests" / "core" / "test_model.py").write_text("")
    (tmp_path / "tests" / "core" / "test_cluster.py").write_text("")  # listed, now mirrored
    (tmp_path / "tests" / "system").mkdir()
    (tmp_path / "tests" / "system" / "test_model.py").write_text("")  # not a package
    assert list(shape.mirror(tree)) == [
        "tests/system/__init__.py: missing (each tests folder is a package: names may repeat)",
        "director/core/cluster.py: has tests/core/test_cluster.py: take it out of UNMIRRORED",
        "director/core/new.py: no tests/core/test_new.py (tests mirror director/)",
        "director/web/app.py: UNMIRRORED names tests/web/test_api.py, which is not there",
    ]


def test_the_vm_caches_what_the_guest_only_reads_and_never_the_folder_results_come_back_in() -> (
    None
):
    """The interpreter, the venv and the repo's code are read through a cached 9p export in
    the VM; .lab (where --rwdir brings the results back) and .git are left uncached, and a
    failed mount only costs speed: the guest's command runs either way."""
    from lab import vm

    trees = vm.cached_trees()
    assert Path(os.__file__).resolve().parent in trees  # the standard library
    assert Path("/usr") not in trees and Path(sys.base_prefix).resolve() not in trees
    assert Path(sys.prefix).resolve() in trees
    assert (REPO / "director").resolve() in trees and (REPO / "tests").resolve() in trees
    lab_dir = (REPO / ".lab").resolve()
    assert not [t for t in trees if t == lab_dir or lab_dir in t.parents or t in lab_dir.parents]
    assert (REPO / ".git").resolve() not in trees
    mounts = vm.cached_mounts()
    assert "cache=loose" in mounts and ".lab" not in mounts
    assert mounts.rstrip().endswith(">&2"), "a failed mount must not stop the guest's command"


def test_a_long_guest_command_travels_as_a_script_not_on_the_kernel_command_line(
    tmp_path: Path,
) -> None:
    """virtme-ng puts the command on the guest kernel's command line (2,048 bytes with its
    own options; past that the kernel panics at boot and the VM sits until its timeout):
    however long the command, vng is given a few bytes naming a script that holds it."""
    argv = tmp_path / "argv"
    env = fake_vng(tmp_path, f'for a in "$@"; do printf "%s\\n" "$a"; done > {argv}\n')
    command = "pytest -k '" + " or ".join(f"test_{i}" for i in range(400)) + "'"
    script = (
        "import sys; from pathlib import Path; from lab.vm import boot; "
        "sys.exit(boot(sys.argv[2], Path(sys.argv[1])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "rw"), command],
        env=env,
        timeout=60,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    given = argv.read_text().splitlines()
    guest = given[-1]
    assert given[-3:-1] == ["bash", "-c"] and len(guest) < 200, guest
    held = (tmp_path / "rw" / ".guest.sh").read_text()
    assert guest.endswith(".guest.sh") and command in held


def test_the_kernel_suite_log_reaches_our_stdout_while_the_vm_runs_and_once(tmp_path: Path) -> None:
    """A run cut off from outside (CI's own time limit) must still show how far the kernel
    suite got: what pytest writes in the VM reaches our stdout while the VM runs, not at
    its end, and each line once. The fake VM writes its first line, then waits until our
    stdout has shown it before it ends."""
    results = tmp_path / "results"
    seen = tmp_path / "seen"
    env = fake_vng(
        tmp_path,
        f"echo 'tests/system/test_bgp_lab.py ..' > {results}/pytest.log\n"
        f"for i in $(seq 600); do [ -e {seen} ] && break; sleep 0.1; done\n"
        f"[ -e {seen} ] || exit 1\n"
        f"echo '1 passed' >> {results}/pytest.log\n"
        f"echo 0 > {results}/exit\n"
        f'echo \'<testsuite tests="1" failures="0" errors="0" skipped="0"/>\' '
        f"> {results}/junit.xml\n",
    )
    script = (
        "import sys; from pathlib import Path; import lab.vm; "
        "lab.vm.precompile = lambda: None; "
        "sys.exit(lab.vm.kernel_suite([], Path(sys.argv[1])))"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, str(results)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "test_bgp_lab.py" in line:
                seen.touch()  # the fake VM may end now
        code = proc.wait(timeout=60)
    text = "".join(lines)
    assert code == 0, text
    assert seen.exists(), text
    assert text.count("test_bgp_lab.py ..") == 1 and text.count("1 passed") == 1, text
    assert text.index("test_bgp_lab.py ..") < text.index("lab: VM finished"), text


def test_the_start_bench_times_a_start_by_the_kernels_last_add_and_its_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start bench's figure is the monotonic stamp of the last IPVS add the kernel's
    function tracer saw (lines as the guest's ftrace writes them, other functions and the
    header left out, the CPUs' lines merged in time); the kernel's waits are the gaps above
    a millisecond; events the tracer lost make no figure at all."""
    from lab.bench_start import AddClock, waits

    monkeypatch.setattr(AddClock, "ROOT", tmp_path)
    clock = AddClock()
    clock.begin()
    assert (tmp_path / "tracing_on").read_text() == "1"
    trace = tmp_path / "trace"
    assert trace.read_text() == ""  # emptied at each start's beginning
    trace.write_text(
        "# tracer: function\n#\n"
        "    keepalived-277     [000] .....    24.037345: ip_vs_add_service <-ip_vs_genl_set_cmd\n"
        "      keepalived-277     [001] .....    24.040000: ip_vs_add_dest <-ip_vs_genl_set_cmd\n"
        "      keepalived-277     [000] .....    24.039000: ip_vs_add_dest <-ip_vs_genl_set_cmd\n"
        "      keepalived-277     [001] .....    25.500000: ip_vs_edit_dest <-ip_vs_genl_set_cmd\n"
        "      keepalived-277     [001] .....    24.045000: ip_vs_add_dest <-ip_vs_genl_set_cmd\n"
    )
    stamps = clock.end()
    assert (tmp_path / "tracing_on").read_text() == "0"
    assert stamps == [24.037345, 24.039, 24.04, 24.045]
    assert waits(stamps) == pytest.approx((24.039 - 24.037345) + (24.045 - 24.04))
    trace.write_text("CPU:1 [LOST 12 EVENTS]\n" + " x-1 [000] ..... 1.0: ip_vs_add_dest <-y\n")
    with pytest.raises(SystemExit, match="lost events"):
        clock.end()


def test_the_start_bench_rotates_its_contenders_and_pairs_each_turns_ratio() -> None:
    """Each contender takes every place in the turns (none always follows another's torn
    down namespace), and the ratio is each turn's own, their median: a slow turn moves both
    sides of its ratio, where the medians of each side taken apart do not pair them."""
    from lab.bench_start import paired_ratio, turn_order

    names = ["keepalived", "director", "before"]
    orders = [turn_order(names, turn) for turn in range(6)]
    assert all(sorted(order) == sorted(names) for order in orders)
    for name in names:
        assert {order.index(name) for order in orders} == {0, 1, 2}
    assert turn_order([], 3) == []
    # slow turns (x3) in the director's and keepalived's alike: 0.9 each turn
    keepalived = [1.0, 3.0, 1.0, 3.0, 3.0]
    director = [0.9, 2.7, 0.9, 2.7, 2.7]
    assert paired_ratio(director, keepalived) == 0.9


def test_lab_has_no_import_circle() -> None:
    """lab/ is test support the tests import: held to the rule director/ is held to (issue 72:
    lab.bench and lab.bench_kube imported each other)."""
    from lab import shape

    assert shape.circles(shape.LAB) == []
