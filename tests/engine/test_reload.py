"""Reload without restart (issue 18): SIGHUP (``systemctl reload``) reads the file again,
validates it, applies only what changed in ``services:`` and says what it did; a bad file,
or a change that only a restart can apply, changes nothing and says why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.core.model import IpProtocol as Protocol, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.engine.reload import RESTART_ONLY
from director.schema.config import load_config
from lab.kubeapi import FakeApiServer, endpoint_slice, node, service
from lab.wait import eventually
from tests.adapters.test_systemd import listen, received

REPO = Path(__file__).resolve().parents[2]
HEAD = "ownership: {networks: [198.51.100.0/24]}\n"


def services(count: int, *, weight_of_first: int = 1, extra: str = "") -> str:
    lines, first = [HEAD, "services:\n"], weight_of_first
    for i in range(count):
        lines.append(
            f"  - name: s{i}\n    address: 198.51.100.{i + 1}\n    port: 80\n"
            "    real_servers:\n"
            f"      - {{address: 192.0.2.1, port: 8080, weight: {first if i == 0 else 1}}}\n"
            "      - {address: 192.0.2.2, port: 8080, weight: 1}\n"
        )
    return "".join(lines) + extra


def key(i: int) -> ServiceKey:
    return ServiceKey.inet(Protocol.TCP, f"198.51.100.{i + 1}", 80)


def weight(ipvs: FakeIpvs, i: int, rs: str = "192.0.2.1") -> int:
    vs = ipvs.read().services[key(i)]
    return vs.real_servers[(rs, 8080)].weight


def metric(runtime: Runtime, name: str, labels: dict[str, str] | None = None) -> float | None:
    """The sample ``name`` with ``labels`` as a scrape writes it (Prometheus's own parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    from director.adapters.metrics.promtext import generate_latest

    assert runtime.metrics is not None, "the runtime keeps its figures (metrics=True)"
    text = generate_latest(runtime.metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == (labels or {}):
                return float(sample.value)
    return None


@pytest.fixture
def static(tmp_path: Path) -> Iterator[tuple[Path, FakeIpvs, Runtime]]:
    path = tmp_path / "director.yaml"
    path.write_text(services(50))
    ipvs = FakeIpvs()
    # A service the director did not make (outside its networks): never touched.
    foreign = ServiceKey.inet(Protocol.TCP, "203.0.113.9", 443)
    from director.core.model import ServiceConfig
    from director.core.plan import Op, OpKind
    from director.core.services import VirtualService

    ipvs.apply([Op(OpKind.ADD_SERVICE, foreign, ServiceConfig())])
    with Runtime(load_config(path), ipvs, metrics=True).start() as runtime:
        assert runtime.wait_ready(20)
        assert isinstance(ipvs.read().services[foreign], VirtualService)
        yield path, ipvs, runtime


def test_a_one_line_change_reaches_the_kernel_as_one_operation(
    static: tuple[Path, FakeIpvs, Runtime],
) -> None:
    path, ipvs, runtime = static
    before = len(ipvs.applied)
    path.write_text(services(50, weight_of_first=5))
    assert runtime.reload(str(path)) == ("applied", "added=0 removed=0 changed=1")
    assert weight(ipvs, 0) == 5, "the change is in the kernel when reload returns"
    assert len(ipvs.applied) - before == 1, ipvs.applied[before:]
    # The view (the API's, the status page's) is published once the loop's step ends.
    eventually(
        lambda: (
            runtime.controller.parts.exports.view.desired[key(0)]
            .real_servers[("192.0.2.1", 8080)]
            .weight
            == 5
        ),
        what="the view's desired weight",
    )
    assert metric(runtime, "director_config_reloads_total", {"result": "applied"}) == 1
    assert metric(runtime, "director_config_last_reload_successful") == 1


def test_services_added_and_removed_and_nothing_foreign_touched(
    static: tuple[Path, FakeIpvs, Runtime],
) -> None:
    path, ipvs, runtime = static
    # 48 kept, then a new one at .60 (and s48, s49 dropped).
    path.write_text(
        services(48) + "  - {name: new, address: 198.51.100.60, port: 443, "
        "real_servers: [192.0.2.7:8443]}\n"
    )
    result, detail = runtime.reload(str(path))
    assert (result, detail) == ("applied", "added=1 removed=2 changed=0")
    table = ipvs.read().services
    assert key(48) not in table and key(49) not in table
    assert ServiceKey.inet(Protocol.TCP, "198.51.100.60", 443) in table
    assert ServiceKey.inet(Protocol.TCP, "203.0.113.9", 443) in table, "a foreign service went"
    assert len([k for k in table if k.address.startswith("198.51.100.")]) == 49
    # The API and the metrics show the new table (the view is published after the step).
    eventually(
        lambda: (
            ServiceKey.inet(Protocol.TCP, "198.51.100.60", 443)
            in runtime.controller.parts.exports.view.desired
        ),
        5,
    )


def test_an_invalid_file_changes_nothing_and_names_its_line(
    static: tuple[Path, FakeIpvs, Runtime],
) -> None:
    path, ipvs, runtime = static
    table = ipvs.read().services
    before = len(ipvs.applied)
    text = services(50, weight_of_first=5).replace("weight: 5", "weight: lots")
    path.write_text(text)
    result, detail = runtime.reload(str(path))
    line = text.splitlines().index(next(x for x in text.splitlines() if "lots" in x)) + 1
    assert result == "invalid" and f"{path}:{line}" in detail, detail
    assert ipvs.read().services == table and len(ipvs.applied) == before
    assert metric(runtime, "director_config_reloads_total", {"result": "invalid"}) == 1
    assert metric(runtime, "director_config_last_reload_successful") == 0
    # Fixed, it goes in; the gauge says so again.
    path.write_text(services(50, weight_of_first=5))
    assert runtime.reload(str(path))[0] == "applied" and weight(ipvs, 0) == 5
    assert metric(runtime, "director_config_last_reload_successful") == 1


def test_a_change_only_a_restart_can_apply_is_refused_whole(
    static: tuple[Path, FakeIpvs, Runtime],
) -> None:
    path, ipvs, runtime = static
    table = ipvs.read().services
    # A services change and a pools change together: neither is applied.
    pools = "pools: [{name: p, addresses: [198.51.100.128/28]}]\n"
    path.write_text(services(50, weight_of_first=5, extra=pools))
    result, detail = runtime.reload(str(path))
    # The pools widen what the director owns: both are named.
    assert result == "refused" and detail.startswith("ownership, pools changed"), detail
    assert "restart" in detail
    assert ipvs.read().services == table
    assert runtime.controller.settings.pools == ()
    assert metric(runtime, "director_config_reloads_total", {"result": "refused"}) == 1


def test_every_section_but_services_is_restart_only() -> None:
    # A section added to Settings later is restart-only unless it is made reloadable.
    sections = {"pools", "api", "ha", "bgp", "kubernetes", "ownership", "defaults", "health"}
    assert "services" not in RESTART_ONLY and (sections | {"clusters"}) <= set(RESTART_ONLY)


def test_a_changed_entry_of_a_cluster_still_served_is_a_restarts() -> None:
    """Whole clusters come and go on a reload; a cluster's changed entry (wired into its
    watches, writer and Lease at start) is refused, the section named."""
    from director.engine.reload import restart_only
    from director.schema.config import parse_config

    pools = "pools: [{name: p, addresses: [198.51.100.0/28]}]\nclusters:\n"
    one = pools + "  - {name: a, kubeconfig: /k/a, pools: [p]}\n"
    two = one + "  - {name: b, kubeconfig: /k/b, pools: [p]}\n"
    assert restart_only(parse_config(one), parse_config(two)) == []
    moved = pools + "  - {name: a, kubeconfig: /k/elsewhere, pools: [p]}\n"
    assert restart_only(parse_config(one), parse_config(moved)) == ["clusters"]


def test_a_static_service_on_an_address_a_kubernetes_service_holds_is_refused(
    tmp_path: Path,
) -> None:
    with FakeApiServer() as api:
        api.create("nodes", node("n1", "192.0.2.11"))
        api.create("services", service("web", [("http", "TCP", 80)]))
        api.create(
            "endpointslices",
            endpoint_slice("web", [("10.1.0.1", "n1", True, False)], [("http", "TCP", 8080)]),
        )
        kubeconfig = api.kubeconfig(tmp_path / "kc")
        base = (
            "pools: [{name: default, addresses: [198.51.100.0-198.51.100.7]}]\n"
            f"kubernetes: {{kubeconfig: {kubeconfig}, lease_seconds: 2}}\n"
        )
        path = tmp_path / "director.yaml"
        path.write_text(base)
        ipvs = FakeIpvs()
        with Runtime(load_config(path), ipvs, metrics=True).start() as runtime:
            assert runtime.wait_ready(20)
            web = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
            eventually(lambda: web in ipvs.read().services, 10)
            held = ipvs.read().services[web]
            path.write_text(
                base + "services: [{name: mine, address: 198.51.100.0, port: 80, "
                "real_servers: [192.0.2.9:80]}]\n"
            )
            result, detail = runtime.reload(str(path))
            assert result == "refused" and "default/web" in detail, detail
            assert ipvs.read().services[web] == held, "the Service lost its address"
            # Another port on that address: the address is the Service's all the same.
            path.write_text(
                base + "services: [{name: mine, address: 198.51.100.0, port: 81, "
                "real_servers: [192.0.2.9:80]}]\n"
            )
            result, detail = runtime.reload(str(path))
            assert result == "refused" and "assigned to Service default/web" in detail, detail
            # A free address goes in, and IPAM never hands it to a Service from then on.
            path.write_text(
                base + "services: [{name: mine, address: 198.51.100.5, port: 80, "
                "real_servers: [192.0.2.9:80]}]\n"
            )
            assert runtime.reload(str(path))[0] == "applied"
            assert ServiceKey.inet(Protocol.TCP, "198.51.100.5", 80) in ipvs.read().services
            for n in range(2, 8):
                api.create("services", service(f"more{n}", [("http", "TCP", 80)]))
            eventually(
                lambda: all(
                    api.get("services", f"more{n}")
                    .get("status", {})
                    .get("loadBalancer", {})
                    .get("ingress")
                    or any(
                        e["reason"] == "AddressPoolExhausted" for e in api.events_for(f"more{n}")
                    )
                    for n in range(2, 8)
                ),
                20,
            )
            given = {
                i.get("ip")
                for n in range(2, 8)
                for i in (
                    api.get("services", f"more{n}")
                    .get("status", {})
                    .get("loadBalancer", {})
                    .get("ingress")
                    or []
                )
            }
            assert "198.51.100.5" not in given, given


def director_run(config: Path, **env: str) -> subprocess.Popen[str]:
    """A real ``director run`` process on the fake dataplane, its stderr piped."""
    script = (
        "import sys\n"
        "import director.cli.main as cli\n"
        "from director.dataplane.fake import FakeIpvs\n"
        "import director.daemon.run; director.daemon.run.open_ipvs = lambda netns: FakeIpvs()\n"
        f"sys.exit(cli.main(['run', '--config', {str(config)!r}]))\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(REPO), **env),
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sighup_to_director_run_reloads_and_tells_systemd(tmp_path: Path) -> None:
    sock = listen(tmp_path / "notify")
    config = tmp_path / "director.yaml"
    config.write_text(services(3))
    proc = director_run(config, NOTIFY_SOCKET=str(tmp_path / "notify"))
    try:
        assert "READY=1" in received(sock, 5.0)
        config.write_text(services(4))
        proc.send_signal(signal.SIGHUP)
        said = received(sock, 3.0)
        assert said[:1] == ["RELOADING=1"], said
        assert "READY=1" in said and "STATUS=reload applied: added=1 removed=0 changed=0" in said
        config.write_text("services: [oops\n")
        proc.send_signal(signal.SIGHUP)
        said = received(sock, 3.0)
        assert any(x.startswith("STATUS=reload invalid: ") for x in said), said
        assert proc.poll() is None, "a bad file stopped the director"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        sock.close()
    assert proc.returncode == 0, err
    assert "event=config.reloaded" in err and 'changes="added=1 removed=0 changed=0"' in err
    assert "event=config.reload_refused" in err and "result=invalid" in err


def test_a_storm_of_sighups_never_leaves_sigterm_unanswered(tmp_path: Path) -> None:
    """200 SIGHUPs as fast as they go (each a reload the main thread runs), then SIGTERM:
    the director stops, with exit status 0."""
    config = tmp_path / "director.yaml"
    config.write_text(services(3))
    proc = director_run(config)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "event=controller.ready" in line:
            break
    for _ in range(200):
        proc.send_signal(signal.SIGHUP)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("SIGTERM went unanswered after a storm of SIGHUPs") from None
    assert proc.returncode == 0, err[-2000:]


def test_the_main_thread_wakes_for_a_signal_whose_handler_takes_no_lock() -> None:
    """``director run``'s handlers only note what was asked; the kernel's wakeup byte wakes
    the main thread. (An Event.set() in a handler deadlocks when the signal lands while the
    main thread holds that Event's lock inside wait(): seen under load, a SIGTERM never
    answered until systemd's kill -9.) A thread's ask wakes it too, and a full pipe is no
    error."""
    import threading

    from director.daemon.run import Wake

    asked: set[str] = set()
    previous = signal.signal(signal.SIGUSR1, lambda *_: asked.add("stop"))
    wake = Wake()
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        wake.wait()
        assert asked == {"stop"}
        threading.Timer(0.2, wake.ask, (asked, "reload")).start()
        wake.wait()
        assert asked == {"stop", "reload"}
        for _ in range(100_000):  # far beyond a pipe's buffer
            wake.ask(asked, "stop")
    finally:
        wake.close()
        signal.signal(signal.SIGUSR1, previous)
