"""The Prometheus alert rules shipped in deploy/prometheus: promtool accepts them, their unit
tests pass (each alert fires on its cause, after its ``for:``, and not on what only looks like
it), every alert has such a test, and every metric they name is one the director exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from director.adapters.metrics.collector import Metrics
from director.adapters.metrics.daemons import ConntrackdFigures, FrrFigures
from director.adapters.metrics.promtext import generate_latest
from director.core.announce import PeerState
from director.core.services import Op, OpKind
from director.dataplane.fake import FakeIpvs
from director.engine.events import WatchState
from director.engine.loop import Controller
from lab.wait import eventually
from tests.bgplab import KEY, config

RULES = Path(__file__).parent.parent / "deploy" / "prometheus"
ALERTS = RULES / "director-alerts.yml"
TESTS = RULES / "director-alerts.test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: apt-get install prometheus (make setup does)"
    return subprocess.run([tool, *args], capture_output=True, text=True, check=False, cwd=RULES)


def rules() -> list[dict[str, object]]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", ALERTS.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    tested = promtool("test", "rules", TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_shown_firing_and_every_rule_has_a_severity_and_summary() -> None:
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    firing = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check["exp_alerts"]
    }
    names = {str(r["alert"]) for r in rules()}
    assert names - firing == set(), "alerts no test shows firing"
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule  # type: ignore[index]
        assert rule["annotations"]["summary"], rule  # type: ignore[index]


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """The names of every series a director speaking BGP, in a VRRP pair, with full NAT and
    watching a cluster exports (counters with no sample yet by their ``_total`` name)."""
    controller = Controller(FakeIpvs(), config())
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop, 0.05), daemon=True).start()
    try:
        eventually(lambda: controller.health.synced, what="the first sync")
        controller.post(WatchState("services", True))  # as a watch of the cluster reports
        eventually(
            lambda: controller.parts.exports.view.status.connected, what="the watch's report"
        )
        peer = PeerState("198.18.0.1", 64500, "Established", 3.0, 1, "up")
        metrics = Metrics()
        metrics.serve(
            controller.door(),
            FakeIpvs(),
            lambda: (0, 0),
            frr=lambda: FrrFigures((peer,), 0, 0),
            conntrack=lambda: {"entries": 3, "insert_failed": 0, "max": 262144},  # full NAT's
            conntrackd=lambda: ConntrackdFigures(True, 3),
            syn_guard=lambda: {"services": 1, "syn_received": 9, "cookie_valid": 2, "dropped": 1},
        )
        text = generate_latest(metrics.registry).decode()
    finally:
        stop.set()
    return series_names(text)


def series_names(text: str) -> set[str]:
    """Every series name in a scrape (counters with no sample yet by their ``_total`` name)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name + "_total" if family.type == "counter" else family.name)
        names.update(sample.name for sample in family.samples)
    return names


def test_every_metric_an_alert_names_is_one_the_director_exports(exported: set[str]) -> None:
    named = {
        name
        for rule in rules()
        for name in re.findall(r"\b((?:director|process)_[a-z0-9_]+)", str(rule["expr"]))
    }
    assert len(named) >= 15
    assert named - exported == set(), "alerts on metrics nobody exports"


def test_the_loop_heartbeat_is_wall_time_and_a_static_box_reports_no_cluster(
    exported: set[str],
) -> None:
    """The stalled-loop alert compares with Prometheus' time(); a box without Kubernetes must
    not look disconnected from it (or leaderless)."""
    controller = Controller(FakeIpvs(), config())
    metrics = Metrics()
    metrics.serve(controller.door(), None, lambda: None)
    samples = {
        s.name: s.value
        for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for s in f.samples
    }
    assert abs(samples["director_loop_last_step_timestamp_seconds"] - time.time()) < 60
    assert "director_kubernetes_connected" not in samples
    assert "director_leader" not in samples
    assert "director_kubernetes_connected" in exported  # once a watch reports


def test_the_example_scrape_configuration_passes_promtool(tmp_path: Path) -> None:
    """As an operator would install it: the token in a file, the rules beside it."""
    token = tmp_path / "director-token"
    token.write_text("t0ken\n")
    shutil.copy(ALERTS, tmp_path / ALERTS.name)
    text = (RULES / "prometheus.yml").read_text()
    assert "/etc/prometheus/director-token" in text
    (tmp_path / "prometheus.yml").write_text(
        text.replace("/etc/prometheus/director-token", str(token))
    )
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 1 rule files found" in checked.stdout


def test_only_a_resync_that_repairs_the_kernel_counts_as_drift() -> None:
    """The first sync builds the table (not drift); a service deleted behind the director's
    back is put back by the next full resync, and counted."""
    ipvs = FakeIpvs()
    controller = Controller(ipvs, config())
    eventually(lambda: controller.step(0.01) or controller.health.synced, what="first sync")
    assert KEY in ipvs.read().services and controller.health.drift_ops == 0
    controller.programmer.full_resync()
    assert controller.health.drift_ops == 0, "nothing to repair"
    ipvs.apply([Op(OpKind.DEL_SERVICE, KEY)])  # someone runs ipvsadm -D
    controller.programmer.full_resync()
    assert KEY in ipvs.read().services
    assert controller.health.drift_ops == 3  # the service and its two real servers


# -- the Grafana dashboard ----------------------------------------------------------------
DASHBOARD = RULES.parent / "grafana" / "director-dashboard.json"


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def queries() -> list[tuple[str, str]]:
    return [
        (p["title"], t["expr"])
        for p in dashboard()["panels"]
        if p["type"] != "row"
        for t in p["targets"]
    ]


def test_every_dashboard_query_is_promql_promtool_accepts(tmp_path: Path) -> None:
    """Each panel's query, with Grafana's variables as Prometheus receives them, compiled by
    promtool (as a recording rule: promtool parses and type-checks the expression)."""
    found = queries()
    assert len(found) >= 20
    as_rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"dashboard:query_{n}",
                        "expr": expr.replace("$instance", ".*").replace("$__rate_interval", "1m"),
                    }
                    for n, (_title, expr) in enumerate(found)
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(as_rules))
    checked = promtool("check", "rules", str(tmp_path / "dashboard.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The series a whole director (static services with health checks, a cluster, the API)
    serves on /metrics, the kernel's counters included."""
    import urllib.request

    from director.daemon.runtime import Runtime
    from director.schema.config import parse_config
    from lab.kubeapi import FakeApiServer, node
    from tests.serverlab import TOKEN, config as api_config

    tmp = tmp_path_factory.mktemp("served")
    with FakeApiServer() as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        text = api_config(tmp, api) + "health: {check: tcp, interval: 0.5, timeout: 0.2}\n"
        with Runtime(parse_config(text, "director.yaml"), FakeIpvs()).start() as runtime:
            assert runtime.wait_ready(20) and runtime.api is not None
            url = f"http://127.0.0.1:{runtime.api.port}/metrics"

            def scrape() -> str:
                request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
                with urllib.request.urlopen(request, timeout=30) as reply:
                    return str(reply.read().decode())

            eventually(lambda: "director_backend_up{" in scrape(), what="a health check's result")
            text = scrape()
    return series_names(text)


def test_every_metric_the_dashboard_charts_is_one_the_director_exports(
    exported: set[str], served: set[str]
) -> None:
    named = {
        name
        for _title, expr in queries()
        for name in re.findall(r"\b((?:director|process)_[a-z0-9_]+)", expr)
    }
    assert len(named) >= 20
    assert named - (exported | served) == set(), "panels on metrics nobody exports"


def test_the_dashboard_shows_what_is_out_of_sync_and_what_was_repaired() -> None:
    """What /readyz and the OwnedStateOutOfSync alert speak of is on the board, per
    resource: a flushed ruleset or a removed address is seen where it is graphed."""
    charted = " ".join(expr for _title, expr in queries())
    for metric in (
        "director_owned_in_sync",
        "director_owned_repairs_total",
        "director_owned_failures_total",
    ):
        assert metric in charted, metric
    assert "by (instance, resource)" in charted and "by (resource)" in charted


def test_the_dashboard_panels_do_not_overlap_and_use_its_variables() -> None:
    board = dashboard()
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "instance"}
    boxes = [(p["title"], p["gridPos"]) for p in board["panels"]]
    for n, (title, a) in enumerate(boxes):
        assert a["x"] + a["w"] <= 24, title
        for other, b in boxes[n + 1 :]:
            apart = (
                a["x"] + a["w"] <= b["x"]
                or b["x"] + b["w"] <= a["x"]
                or a["y"] + a["h"] <= b["y"]
                or b["y"] + b["h"] <= a["y"]
            )
            assert apart, (title, other)
    for title, expr in queries():
        assert 'instance=~"$instance"' in expr, title
