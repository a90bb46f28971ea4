"""The dataclasses' methods kept compiled between starts (``director.cli.classcode``): a second
start compiles none of them, the classes made from kept code behave as any, and a file that
cannot be trusted or written costs nothing but the compiling."""

from __future__ import annotations

import dataclasses
import marshal
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import CodeType

import pytest

from director.cli import classcode

SOURCE = """
from dataclasses import dataclass, field

@dataclass(frozen=True, order=True, slots=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = field(default=())

@dataclass
class Box:
    items: list[int] = field(default_factory=list)
    name: str = "box"
"""


@pytest.fixture(autouse=True)
def given_back(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test runs as a box's Python does (bytecode written, whatever this machine's
    PYTHONDONTWRITEBYTECODE says) and ends with dataclasses' own exec, nothing kept."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    yield
    classcode.keep()
    assert "exec" not in vars(dataclasses)


def made(source: str = SOURCE) -> dict[str, object]:
    scope: dict[str, object] = {"__name__": "made"}
    sys.modules["made"] = type(sys)("made")  # dataclasses looks its module up
    try:
        exec(compile(source, "made.py", "exec"), scope)
    finally:
        del sys.modules["made"]
    return scope


def behaviour(scope: dict[str, object]) -> list[object]:
    """What a user of the classes sees: construction, defaults, repr, equality, order,
    hashing, a frozen instance refusing a write, a mutable default made anew."""
    point, box = scope["Point"], scope["Box"]
    assert isinstance(point, type) and isinstance(box, type)
    a, b = point(1, 2), point(1, 3, ("x",))
    seen: list[object] = [repr(a), repr(b), a == point(1, 2), a < b, hash(a) == hash(point(1, 2))]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.x = 5
    one, two = box(), box()
    one.items.append(1)
    seen += [repr(one), repr(two), one == two, [f.name for f in dataclasses.fields(point)]]
    return seen


def test_classes_made_from_kept_code_behave_as_those_compiled(tmp_path: Path) -> None:
    plain = behaviour(made())
    kept = tmp_path / "code.marshal"
    classcode.install(str(kept))
    first = behaviour(made())
    figures = classcode.keep()
    assert figures["compiled"] > 0 and figures["taken"] == 0
    assert figures["kept"] == figures["compiled"] and kept.exists()

    classcode.install(str(kept))
    again = behaviour(made())
    figures = classcode.keep()
    assert figures["compiled"] == 0 and figures["taken"] > 0 and figures["kept"] == 0
    assert plain == first == again


def renamed(source: str = SOURCE) -> str:
    """One class with another field name: other method texts (a new version's)."""
    return source.replace("y: int", "height: int")  # Point's; Box's stay


def test_a_changed_class_is_compiled_again_and_kept_beside_the_old(tmp_path: Path) -> None:
    kept = tmp_path / "code.marshal"
    classcode.install(str(kept))
    made()
    before = classcode.keep()["kept"]
    assert isinstance(before, int)
    classcode.install(str(kept))
    scope = made(renamed())
    figures = classcode.keep()
    point = scope["Point"]
    assert isinstance(point, type) and point(1, height=7).height == 7
    assert 0 < figures["compiled"] < before and figures["taken"] > 0
    assert figures["kept"] == before + figures["compiled"]


def test_a_changed_default_is_seen_though_the_code_is_kept(tmp_path: Path) -> None:
    kept = tmp_path / "code.marshal"
    classcode.install(str(kept))
    made()
    classcode.keep()
    classcode.install(str(kept))
    scope = made(SOURCE.replace("y: int = 0", "y: int = 7"))
    figures = classcode.keep()
    point = scope["Point"]
    assert isinstance(point, type) and point(1).y == 7  # not the kept __init__'s default
    assert figures["compiled"] == 0


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00garbage\xff" * 10,
        marshal.dumps(("director-dataclass-code-1", b"\x00\x00\r\n", {})),  # another Python's
        marshal.dumps(("other-format", b"", {})),
        marshal.dumps({"not": "a tuple"}),
        "cut short",
    ],
)
def test_a_file_that_cannot_be_trusted_is_as_good_as_none(tmp_path: Path, content: object) -> None:
    kept = tmp_path / "code.marshal"
    classcode.install(str(kept))
    made()
    classcode.keep()
    if content == "cut short":
        whole = kept.read_bytes()
        kept.write_bytes(whole[: len(whole) // 2])
    else:
        assert isinstance(content, bytes)
        kept.write_bytes(content)
    classcode.install(str(kept))
    seen = behaviour(made())
    figures = classcode.keep()
    assert figures["taken"] == 0 and figures["compiled"] > 0
    assert seen == behaviour(made())  # and compiled as ever, without it
    classcode.install(str(kept))  # what was written over it is whole again
    made()
    assert classcode.keep()["compiled"] == 0


def test_a_text_kept_with_something_else_than_code_is_compiled(tmp_path: Path) -> None:
    kept = tmp_path / "code.marshal"
    classcode.install(str(kept))
    made()
    classcode.keep()
    magic, texts = marshal.loads(kept.read_bytes())[1:]
    kept.write_bytes(marshal.dumps((classcode.FORMAT, magic, dict.fromkeys(texts, "nope"))))
    classcode.install(str(kept))
    assert len(behaviour(made())) == 9
    assert classcode.keep()["taken"] == 0


def test_nothing_is_written_where_python_writes_no_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "code.marshal"
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    classcode.install(str(kept))
    made()
    assert classcode.keep()["kept"] == 0
    assert not kept.exists()
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    classcode.install(str(blocked / "code.marshal"))  # its folder cannot be made
    made()
    assert classcode.keep()["kept"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no partial left


def test_past_the_limit_only_what_this_process_used_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "code.marshal"
    classcode.install(str(kept))
    made()
    whole = classcode.keep()["kept"]
    assert isinstance(whole, int)
    monkeypatch.setattr(classcode, "LIMIT", whole)
    classcode.install(str(kept))
    made(renamed())  # new texts beside some alike
    figures = classcode.keep()
    assert figures["kept"] == figures["compiled"] + figures["taken"]  # the old ones gone


def test_the_file_is_where_python_keeps_the_package_bytecode() -> None:
    path = classcode.default_path()
    tag = sys.implementation.cache_tag
    if sys.pycache_prefix:
        assert path.startswith(sys.pycache_prefix)
    else:
        package = Path(classcode.__file__).resolve().parent.parent
        assert Path(path).parent == package / "__pycache__"
    assert Path(path).name.startswith(f"dataclass-code.{tag}")


def python_env(prefix: Path, *, write: bool) -> dict[str, str]:
    """A box's Python: its bytecode under ``prefix``, written there or not (``write``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def startup_class_code(config: Path, prefix: Path, *, write: bool = True) -> dict[str, int]:
    """What a real ``director run`` process (``--dry-run`` on this host: no IPVS) said of the
    dataclasses' code, its bytecode under ``prefix`` (and written there: ``write``)."""
    env = python_env(prefix, write=write)
    argv = ["run", "--dry-run", "--config-cache", "", "--config", str(config)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "director", *argv],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    try:
        deadline = time.monotonic() + 120
        for line in proc.stderr:
            if "event=startup.class_code" in line:
                said = re.findall(r"\b(taken|compiled|kept)=(\d+)", line)
                return {name: int(value) for name, value in said}
            assert time.monotonic() < deadline, "no event=startup.class_code"
        raise AssertionError(f"exited {proc.wait()} without event=startup.class_code")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def small_config(tmp_path: Path) -> Path:
    config = tmp_path / "director.yaml"
    config.write_text(
        "services:\n  - {name: web, address: 10.0.0.1, port: 80, real_servers:"
        " [{address: 172.16.0.1, port: 8080}]}\n"
    )
    return config


def test_a_second_director_run_compiles_no_dataclass_method(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    first = startup_class_code(config, tmp_path / "pyc")
    assert first["compiled"] > 100 and first["kept"] == first["compiled"]
    second = startup_class_code(config, tmp_path / "pyc")
    # Some texts are made twice (alike classes): taken as often, compiled once.
    assert second["compiled"] == 0 and second["kept"] == 0
    assert second["taken"] >= first["compiled"]


def test_an_installer_warms_the_code_for_a_service_that_cannot_write_it(tmp_path: Path) -> None:
    """The role's unit runs ``director run`` in a read-only release: the installer's
    ``python -m director.cli.classcode`` (even under ``PYTHONDONTWRITEBYTECODE``) leaves it
    nothing to compile."""
    config = small_config(tmp_path)
    prefix = tmp_path / "pyc"
    unwarmed = startup_class_code(config, prefix, write=False)
    assert unwarmed["compiled"] > 100 and unwarmed["kept"] == 0
    warmed = subprocess.run(
        [sys.executable, "-m", "director.cli.classcode"],
        env=python_env(prefix, write=False),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    said = dict(re.findall(r"\b(taken|compiled|kept)=(\d+)", warmed.stdout))
    assert int(said["kept"]) >= int(said["compiled"]) > unwarmed["compiled"]
    after = startup_class_code(config, prefix, write=False)
    assert after["compiled"] == 0 and after["taken"] >= unwarmed["compiled"]


def test_warming_passes_over_a_module_whose_dependency_the_box_goes_without(tmp_path: Path) -> None:
    """A box without the Kubernetes client (a static box's image) still gets the code of
    every other module's dataclasses, and is told what was passed over."""
    kept = tmp_path / "code.marshal"
    script = (
        "import sys; sys.modules['kubernetes'] = None\n"  # import kubernetes: not found
        "from director.cli import classcode\n"
        f"print(classcode.warm({str(kept)!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    figures = done.stdout.strip()
    assert "'missing': 'kubernetes'" in figures and kept.exists(), figures
    format_, _magic, texts = marshal.loads(kept.read_bytes())
    assert format_ == classcode.FORMAT and len(texts) > 300
    assert all(isinstance(code, CodeType) for code in texts.values())


def test_dataclasses_load_inspect_only_when_a_class_needs_it() -> None:
    """``install`` imports ``dataclasses`` without ``inspect`` (ast, dis: milliseconds of a
    first start): a class with a docstring costs no ``inspect``; one without still gets the
    docstring Python makes from its signature, ``inspect`` loaded for it then; and any other
    ``import inspect`` gets the real module."""
    code = """
import sys
from director.cli import classcode
classcode.install()
import dataclasses
assert "inspect" not in sys.modules, "loaded with dataclasses"

@dataclasses.dataclass
class Told:
    '''Documented.'''
    a: int

assert "inspect" not in sys.modules, "loaded for a documented class"
assert Told.__doc__ == "Documented."

@dataclasses.dataclass
class Untold:
    a: int
    b: str = "x"

assert Untold.__doc__ == "Untold(a: int, b: str = 'x')", Untold.__doc__
import inspect
assert type(inspect) is type(sys), type(inspect)
assert inspect.signature(Untold).parameters["b"].default == "x"
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
