"""The command line on this host (whose kernel has no IPVS)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from director.cli import main as cli
from tests.conftest import kernel_unavailable

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "static.yaml")


@pytest.mark.skipif(kernel_unavailable() is None, reason="this host has IPVS")
@pytest.mark.parametrize("command", ["plan", "apply"])
def test_without_ipvs_plan_and_apply_say_so_in_one_sentence(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "director", command, "--config", EXAMPLE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == cli.EXIT_NO_IPVS
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "has no IPVS support" in lines[0] or "needs root" in lines[0]


@pytest.mark.skipif(not kernel_unavailable(), reason="checks the shadow on a kernel without IPVS")
def test_shadow_mode_runs_without_ipvs_and_writes_only_its_state_file(tmp_path: Path) -> None:
    import json
    import signal
    import time

    from lab.kubeapi import FakeApiServer, service

    with FakeApiServer() as api:
        api.create("services", service("web", [("http", "TCP", 80)]))
        config = tmp_path / "director.yaml"
        config.write_text(
            "pools: [{name: p, addresses: [198.51.100.0/29]}]\n"
            f"kubernetes: {{kubeconfig: {api.kubeconfig(tmp_path / 'kc')}}}\n"
        )
        state = tmp_path / "state.json"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "director",
                "run",
                "--config",
                str(config),
                "--dry-run",
                "--state-file",
                str(state),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not (state.exists() and json.loads(state.read_text())["services"]):
                assert time.monotonic() < deadline, "no state file"
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0
        body = json.loads(state.read_text())
        # A CIDR pool skips its network address (.0).
        assert body["addresses"] == {"default/web": ["198.51.100.1"]}
        assert body["services"][0]["service"] == "tcp 198.51.100.1:80"
        assert "event=ipvs.unavailable_shadow" in err
        assert 'event=ipvs.would_change op="+ service tcp 198.51.100.1:80' in err
        assert "origin=default/web:http" in err
        # Nothing was written to the cluster: no status, no event, no lease.
        assert api.get("services", "web")["status"] == {"loadBalancer": {}}
        assert api.store.list("events", None)["items"] == []
        assert api.store.list("leases", None)["items"] == []


def test_keepalived_config_renders_the_static_vips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services:\n"
        "  - {address: 198.51.100.10, port: 80, real_servers: ['192.0.2.11:80']}\n"
        "  - {address: 198.51.100.10, port: 443, real_servers: ['192.0.2.11:443']}\n"
        "  - {address: 198.51.100.20, port: 53, protocol: udp, real_servers: ['192.0.2.11:53']}\n"
        "ha: {interface: eth1, router_id: edge1, priority: 150, unicast_source: 203.0.113.11,\n"
        "     peers: [203.0.113.12]}\n"
    )
    assert cli.main(["keepalived-config", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert "priority 150" in text and "203.0.113.12" in text
    vips = [line.split()[0] for line in text.splitlines() if "dev eth1" in line]
    assert vips == ["198.51.100.10/32", "198.51.100.20/32"]  # once per address
    no_ha = tmp_path / "no-ha.yaml"
    no_ha.write_text("defaults: {scheduler: rr}\n")
    assert cli.main(["keepalived-config", "--config", str(no_ha)]) == 1
    said = capsys.readouterr().err
    assert f"{no_ha} is valid but has no ha: section" in said and "invalid" not in said


# -- what check says, run does (issue 13, items 12, 14, 17, 29, 30) ---------------------------
def api_config(tmp_path: Path, token: str | None = "t0ken-for-the-admin-api\n", **api: str) -> Path:
    token_file = tmp_path / "token"
    if token is not None:
        token_file.write_text(token)
    fields = {
        "listen": "127.0.0.1:0",
        "token_file": str(token_file),
        "intents_file": str(tmp_path / "intents.json"),
        **api,
    }
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
        "api: {" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}\n"
    )
    return config


def run_director(config: Path) -> subprocess.CompletedProcess[str]:
    """``director run`` with the fake dataplane (this host has no IPVS): what it says at start."""
    script = (
        "import sys; import director.cli.main as cli; "
        "from director.dataplane.fake import FakeIpvs; "
        "import director.cli.run; director.cli.run.open_ipvs = lambda netns: FakeIpvs(); "
        f"sys.exit(cli.main(['run', '--config', {str(config)!r}]))"
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "No such file or directory"),
        ("", "the token must be at least 16 characters"),
        ("first-line-of-a-token\nsecond-line-of-it\n", "the token must be one line"),
        ("a token with spaces in it\n", "the token may hold only letters, digits and -._~+/="),
    ],
    ids=["missing", "empty", "two-lines", "spaces"],
)
def test_check_refuses_the_token_files_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], token: str | None, reason: str
) -> None:
    config = api_config(tmp_path, token)
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert reason in capsys.readouterr().err
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and reason in done.stderr
    assert "Traceback" not in done.stderr


def test_an_api_address_that_is_not_the_boxs_own_fails_check_and_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = api_config(tmp_path, listen="192.0.2.254:9180")  # not an address of this host
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert f"{config}:3: api.listen: 192.0.2.254:9180: Cannot assign requested address" in (
        capsys.readouterr().err
    )  # the line and the field, as for a fault of the file's own
    assert cli.main(["check", "--offline", "--config", str(config)]) == 0, "an image build"
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"director: invalid configuration: {config}: api.listen 192.0.2.254:9180: "
        "Cannot assign requested address"
    )


def test_a_port_in_use_is_a_note_for_check_and_a_clean_exit_for_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = api_config(tmp_path, listen=f"127.0.0.1:{port}")
        assert cli.main(["check", "--config", str(config)]) == 0
        assert "the port is in use now" in capsys.readouterr().out
        done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr
    assert f"api.listen 127.0.0.1:{port}: Address already in use" in done.stderr


def test_a_missing_tls_certificate_fails_check_and_run_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = api_config(
        tmp_path, tls_cert=str(tmp_path / "no-cert.pem"), tls_key=str(tmp_path / "no-key.pem")
    )
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert f"{config}:3: api.tls_cert: cannot load it with api.tls_key" in capsys.readouterr().err
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr
    assert "api.tls_cert/tls_key: cannot load" in done.stderr


def test_a_regular_file_at_the_fifo_path_is_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("an operator's file\n")
    config = api_config(tmp_path)
    config.write_text(
        config.read_text()
        + "ha: {interface: eth1, router_id: edge1, priority: 150, unicast_source: 203.0.113.11,\n"
        f"     peers: [203.0.113.12], fifo: {precious}, config_file: {tmp_path}/k.conf,\n"
        f"     keepalived: /bin/true}}\n"
    )
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert f"{config}:5: ha.fifo: {precious} exists and is not a FIFO" in capsys.readouterr().err
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr
    assert f"ha.fifo {precious} exists and is not a FIFO" in done.stderr
    assert precious.read_text() == "an operator's file\n"


def test_the_config_path_cannot_inject_keepalived_configuration(tmp_path: Path) -> None:
    from director.adapters.keepalived import render_keepalived
    from director.schema.config import HaSettings, load_config

    settings = load_config(EXAMPLE)

    ha = HaSettings("eth1", "edge1", 150, "203.0.113.11", ("203.0.113.12",))
    text = render_keepalived(ha, {"198.51.100.10"}, "/etc/x\n}\nvrrp_script evil {\n")
    header = [line for line in text.splitlines() if line.startswith("# Rendered")]
    assert len(header) == 1 and "vrrp_script evil" in header[0], "kept as text in the comment"
    scripts = [line for line in text.splitlines() if line.startswith("vrrp_script")]
    assert scripts == ["vrrp_script director_alive {"], "only the director's own check"
    assert settings.services  # the example still loads


# -- a CLI for scripts: JSON everywhere, exit statuses, completion (issue 18) ---------------
def test_schedulers_say_so_on_a_kernel_without_ipvs_and_answer_json_otherwise(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from director.dataplane import modules

    monkeypatch.setattr(modules, "offered_schedulers", frozenset)
    assert cli.main(["schedulers"]) == cli.EXIT_NO_IPVS  # as plan and apply: 3, one sentence
    out, err = capsys.readouterr()
    assert out == "" and "offers no IPVS scheduler" in err
    monkeypatch.setattr(modules, "offered_schedulers", lambda: frozenset({"rr", "mh", "wlc"}))
    assert cli.main(["schedulers", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"schedulers": ["mh", "rr", "wlc"]}
    assert cli.main(["schedulers"]) == 0
    assert capsys.readouterr().out == "mh rr wlc\n"


def completions(shell: str, *words: str) -> list[str]:
    """What the shell offers after ``words`` (the last one being typed), through the script
    `director completion SHELL` prints, run by the shell itself."""
    script = subprocess.run(
        [sys.executable, "-m", "director", "completion", shell],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    quoted = " ".join(f"'{w}'" for w in words)
    if shell == "bash":
        program = (
            f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1))\n"
            "_director; printf '%s\\n' \"${COMPREPLY[@]}\""
        )
        command = ["bash", "--norc", "-c", program]
    else:  # zsh's completion system: compadd and _files report what they were given
        program = (
            "autoload -U compinit && compinit -u -D\n"
            f'{script}\ncompadd() {{ shift; print -rl -- "$@"; }}\n'
            "_files() { print -r -- FILES; }\n"
            f"words=({quoted}); CURRENT=${{#words}}; _director"
        )
        command = ["zsh", "-f", "-c", program]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_shell_completion_follows_the_parser(shell: str) -> None:
    top = completions(shell, "director", "")
    assert {"run", "check", "ctl", "status", "schedulers", "completion"} <= set(top)
    assert "services" in completions(shell, "director", "ctl", "")
    assert completions(shell, "director", "ctl", "scheduler", "") == ["set", "unset"]
    assert "--output" in completions(shell, "director", "ctl", "services", "-")
    assert completions(shell, "director", "ctl", "services", "-o", "") == ["wide"]
    assert completions(shell, "director", "--log-format", "") == ["logfmt", "json"]
    assert completions(shell, "director", "completion", "") == ["bash", "zsh"]
    assert "--kubeconfig" in completions(shell, "director", "run", "--")
    files = completions(shell, "director", "run", "--config", EXAMPLE[:-3])
    assert files == (["FILES"] if shell == "zsh" else [EXAMPLE])
    for option in ("--ca-file", "--config", "--token-file"):  # --ca-file was --cacert here
        assert completions(shell, "director", "status", option, EXAMPLE[:-3]) == files, option
    if shell == "bash":  # bash filters by what is typed; zsh's compadd does it itself
        assert completions(shell, "director", "ct") == ["ctl"]


def test_every_command_option_and_argument_says_what_it_is_for() -> None:
    """`--help` is for the operator: no option without a help line, and the top level says
    what the program is (it was a code comment about the composition root)."""
    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}")
            elif action.help is None:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    top = cli.build_parser()
    walk(top, "director")
    assert missing == []
    assert "composition root" not in top.format_help()
    assert top.description is not None and "load balancer" in top.description


def test_every_option_completion_treats_as_a_file_is_an_option_of_the_command() -> None:
    from director.cli.completion import FILE_OPTIONS

    def options(parser: argparse.ArgumentParser) -> set[str]:
        found: set[str] = set()
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    found |= options(child)
        return found

    assert options(cli.build_parser()) >= FILE_OPTIONS


@pytest.mark.parametrize(
    "spelling",
    [
        "password: s3cret-x\n",
        "password: |\n        s3cret-x\n",
        "password:\n        s3cret-x\n",
        '"password": "s3cret-x"\n',
        "? password\n      : s3cret-x\n",
        "'pass''word': s3cret-x\n".replace("''", ""),
    ],
)
def test_a_bundle_redacts_a_secret_however_yaml_spells_it(spelling: str) -> None:
    """The secrets are found by reading the file as YAML: a block scalar, the value on the
    next line, a quoted key, a complex key: none of them leaks (per-line patterns did)."""
    from director.cli.bundle import REDACTED, redact

    text = (
        "bgp:\n  asn: 64512\n  peers:\n    - address: 198.18.0.2\n      asn: 64500\n"
        f"      {spelling}"
    )
    out = redact(text)
    assert out is not None and "s3cret" not in out and REDACTED in out
    assert len(out.splitlines()) == len(text.splitlines())
    assert redact("bgp: [unclosed\n") is None  # not YAML: left out, not guessed at


def test_a_bundle_written_over_an_existing_file_is_its_owners_alone(tmp_path: Path) -> None:
    from director.cli.bundle import write

    out = tmp_path / "bundle.tar.gz"
    out.write_text("old")
    out.chmod(0o644)
    write(out, {"x": "y"}, ["m"])
    assert oct(out.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("given", ["", "kubeconfig: /nonexistent/kc"])
def test_check_refuses_a_cluster_run_could_not_reach_and_run_says_why_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """kubernetes: without a kubeconfig, outside a pod (no service account), or with one
    that is not there: check said valid where run then died with a traceback."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = tmp_path / "director.yaml"
    config.write_text(
        f"pools: [{{name: p, addresses: [198.51.100.0/28]}}]\nkubernetes: {{{given}}}\n"
    )
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    said = capsys.readouterr().err
    assert ("not a Kubernetes pod" in said) if not given else ("No such file" in said), said
    done = run_director(config)
    assert done.returncode == cli.EXIT_CONFIG and "Traceback" not in done.stderr, done.stderr
    assert "cannot load the cluster's credentials" in done.stderr


# -- a static box loads what its file uses (issue 38) -------------------------------------------
def modules_loaded_by_run(config: Path) -> set[str]:
    """The top-level packages a real ``director run`` process (fake dataplane) imported from
    its start until it stopped, once ready: ``sys.modules`` as it exits (``-X importtime``
    misses what ``importlib.import_module`` loads, as pydantic does its own parts)."""
    said = run_until(config, "event=controller.ready")
    (names,) = [text[len(MODULES) :] for text in said if text.startswith(MODULES)]
    return {name.split(".")[0] for name in names.split()}


MODULES = "modules loaded: "


def run_until(config: Path, line: str, env: dict[str, str] | None = None) -> list[str]:
    """What a real ``director run`` process (fake dataplane, ``-X importtime``) writes to
    stderr until ``line`` appears, then (stopped with SIGTERM, it must exit 0) the rest,
    the names in ``sys.modules`` at its exit last."""
    import signal

    script = (
        "import atexit, sys; import director.cli.main as cli; "
        "from director.dataplane.fake import FakeIpvs; "
        "import director.cli.run; director.cli.run.open_ipvs = lambda netns: FakeIpvs(); "
        f"atexit.register(lambda: print({MODULES!r} + ' '.join(sorted(sys.modules)), "
        "file=sys.stderr, flush=True)); "
        f"sys.exit(cli.main(['run', '--config', {str(config)!r}]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-c", script],
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    assert proc.stderr is not None
    said: list[str] = []
    try:
        for text in proc.stderr:
            said.append(text)
            if line in text:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
    assert any(line in text for text in said), "".join(said)[-2000:]
    assert proc.returncode == 0, rest
    return said + rest.splitlines(keepends=True)


def imported(lines: list[str]) -> set[str]:
    """The modules ``python -X importtime`` reports in ``lines``, by their full names."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in lines
        if line.startswith("import time:") and line.count("|") == 2
    }


CLUSTER_ONLY = {"kubernetes", "urllib3", "yaml", "websocket", "oauthlib"}
API_ONLY = {"flask", "werkzeug"}


def test_the_client_and_the_routes_share_one_spelling_of_each_path() -> None:
    """`director ctl` and `bundle` fill in the rules the API's routes are registered with
    (director.schema.paths): a renamed route cannot leave the client calling the old path."""
    from director.schema import paths
    from director.web.app import create_app  # noqa: F401  (registers every route)
    from director.web.registry import OPERATIONS

    assert {op.rule for op in OPERATIONS} == set(paths.ALL)
    for module in ("ctl.py", "client.py", "bundle.py"):
        text = (Path(cli.__file__).parent / module).read_text()
        assert "/api/v1" not in text, module
    assert paths.url(paths.SERVICE_SCHEDULER, namespace="shop", name="a/b") == (
        "/api/v1/services/shop/a%2Fb/scheduler"
    )


def test_status_and_ctl_load_neither_the_schema_nor_the_engine() -> None:
    """An operator's quick look (`director status`, `director ctl`) answers in a blink: it
    imports the API client alone, not pydantic, the engine or the cluster's client."""
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "director",
            "status",
            "--url",
            "http://127.0.0.1:1",
            "--token-file",
            "/dev/null",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (5, 6), done.stderr[-2000:]  # unreachable, or no token
    loaded = imported(done.stderr.splitlines())
    assert "director.cli.ctl" in loaded, "the import log was read"
    heavy = {
        name
        for name in loaded
        if name.split(".")[0] in ("pydantic", "kubernetes", "flask")
        or name.startswith(("director.engine", "director.schema.config"))
    }
    assert heavy == set(), sorted(heavy)
