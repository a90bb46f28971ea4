"""The command line on this host (whose kernel has no IPVS)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from director.cli import main as cli
from tests.conftest import kernel_unavailable

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "static.yaml")


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
        "import director.daemon.run; director.daemon.run.open_ipvs = lambda netns: FakeIpvs(); "
        f"sys.exit(cli.main(['run', '--config', {str(config)!r}]))"
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_config_path_cannot_inject_keepalived_configuration(tmp_path: Path) -> None:
    from director.adapters.pair.keepalived import render_keepalived
    from director.schema.config import load_config
    from director.schema.ha import HaSettings

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
def modules_loaded_by_run(
    config: Path, then: Callable[[], None] | None = None, whole: bool = False
) -> set[str]:
    """The top-level packages (``whole``: the modules) a real ``director run`` process
    (fake dataplane) imported from its start until it stopped, once ready (and ``then``
    done): ``sys.modules`` as it exits (``-X importtime`` misses what
    ``importlib.import_module`` loads, as pydantic does its own parts)."""
    said = run_until(config, "event=controller.ready", then=then)
    (names,) = [text[len(MODULES) :] for text in said if text.startswith(MODULES)]
    return set(names.split()) if whole else {name.split(".")[0] for name in names.split()}


MODULES = "modules loaded: "


def run_until(
    config: Path,
    line: str,
    env: dict[str, str] | None = None,
    then: Callable[[], None] | None = None,
) -> list[str]:
    """What a real ``director run`` process (fake dataplane, ``-X importtime``) writes to
    stderr until ``line`` appears, then (``then`` done, stopped with SIGTERM, it must exit
    0) the rest, the names in ``sys.modules`` at its exit last."""
    import signal

    script = (
        "import atexit, sys; import director.cli.main as cli; "
        "from director.dataplane.fake import FakeIpvs; "
        "import director.daemon.run; director.daemon.run.open_ipvs = lambda netns: FakeIpvs(); "
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
        if then is not None and any(line in text for text in said):
            then()
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


CLUSTER_ONLY = {"kubernetes", "urllib3", "websocket", "oauthlib"}


API_ONLY = {"flask", "werkzeug"}


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
