"""Announcing VIPs over BGP on the host: the bgp: section, the decision and its reasons, the
FRR configuration (checked by FRR's own vtysh), the defaults of a Service announced over
BGP, and the loop end to end on the fake dataplane. The routers, ECMP and real traffic are
in ``tests/system/test_bgp_lab.py`` (the lab VM)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from director.adapters.frr import Frr, FrrRejected
from director.adapters.frr_conf import render_frr
from director.adapters.frr_sync import FrrSync
from director.core.announce import Route
from director.core.intents import AddDrain, Drain
from director.core.model import Forwarding, IpProtocol, RealServer, ServiceKey
from director.core.translate import translate
from director.dataplane.fake import FakeIpvs
from director.engine.announcer import VipAnnouncer
from director.engine.events import IntentPosted, Reply
from director.engine.hooks import Hooks
from director.engine.loop import Controller
from director.schema.config import ConfigError, Settings, parse_config
from lab.netns import Netns
from tests.core.test_translate import NODES, POLICY, svc

VIP = "198.51.100.10"
KEY = ServiceKey.inet(IpProtocol.TCP, VIP, 80)
BASE = """
pools:
  - {name: edge, addresses: [198.51.100.0/28], announce: bgp, communities: ["64512:10"],
     local_preference: 200}
  - {name: pair, addresses: [203.0.113.0/28]}
bgp:
  asn: 64512
  router_id: 198.18.0.11
  peers:
    - {address: 198.18.0.1, asn: 64500}
    - {address: "2001:db8::1", asn: 64500, password: s3cret, multihop: 2, bfd: false}
"""
STATIC = """
services:
  - name: web
    address: 198.51.100.10
    port: 80
    scheduler: mh
    flags: [mh-port]
    forwarding: tun
    real_servers: ["192.0.2.11:80", "192.0.2.12:80"]
  - {name: pair, address: 203.0.113.5, port: 80, real_servers: ["192.0.2.11:80"]}
"""


def config(text: str = BASE + STATIC) -> Settings:
    return parse_config(text, "d.yaml")


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        config(text)
    return str(caught.value)


# -- the configuration ---------------------------------------------------------------------
def test_the_bgp_section_and_pools_announced_over_it() -> None:
    settings = config()
    assert settings.bgp is not None and settings.bgp.asn == 64512
    assert [p.name for p in settings.bgp_pools] == ["edge"]
    edge = settings.bgp_pools[0].announce
    assert (edge.communities, edge.local_preference) == (("64512:10",), 200)
    peer = settings.bgp.peers[0]
    assert (peer.keepalive, peer.hold, peer.bfd, peer.bfd_interval_ms) == (1, 3, True, 300)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            BASE.replace(
                "    - {address: 198.18.0.1, asn: 64500}\n",
                "    - {address: 198.18.0.1, asn: 64500, keepalive: 5, hold: 9}\n",
            ),
            "d.yaml:10: bgp.peers[0].hold: hold (9) must be at least 3 keepalives (15)",
        ),
        (
            BASE.replace("2001:db8::1", "198.18.0.1"),
            "d.yaml:11: bgp.peers[1].address: peer 198.18.0.1 is listed twice",
        ),
        (
            BASE.replace('"64512:10"', '"big"'),
            "d.yaml:3: pools[0].communities[0]: 'big' is not a community",
        ),
        (
            BASE.replace("s3cret", '"two words"'),
            "bgp.peers[1].password: 1 to 80 printable characters, without spaces",
        ),
        (
            BASE.replace("router_id: 198.18.0.11", 'router_id: "2001:db8::11"'),
            "d.yaml:8: bgp.router_id: a BGP router id is an IPv4 address",
        ),
        (
            BASE.replace(
                "{name: pair, addresses: [203.0.113.0/28]}",
                "{name: pair, addresses: [203.0.113.0/28], local_preference: 5}",
            ),
            "pools[1].local_preference: local_preference is for pools announced over BGP",
        ),
        (
            BASE.split("bgp:", maxsplit=1)[0],
            "d.yaml:3: pools[0].announce: pool 'edge' is announced over BGP: add a bgp: section",
        ),
        (
            BASE + STATIC.replace("    forwarding: tun\n", ""),
            "d.yaml:19: services[0].real_servers[0]: "
            "nat cannot serve an address announced over BGP",
        ),
    ],
)
def test_a_bad_bgp_setting_is_refused_with_its_line_and_reason(text: str, expected: str) -> None:
    assert expected in refusal(text)


# -- the decision ----------------------------------------------------------------------------
def table(*weights: int) -> dict[ServiceKey, object]:
    from director.core.model import ServiceConfig
    from director.core.services import VirtualService

    servers = {
        (f"192.0.2.{11 + i}", 80): RealServer(f"192.0.2.{11 + i}", 80, w, Forwarding.TUN)
        for i, w in enumerate(weights)
    }
    return {KEY: VirtualService(KEY, ServiceConfig("mh", frozenset({"mh-port"})), servers, "web")}


def announcer() -> tuple[VipAnnouncer, list[Mapping[str, Route]]]:
    heard: list[Mapping[str, Route]] = []
    vips = VipAnnouncer(Hooks(), config().bgp_pools)
    vips.hooks.on_routes = heard.append
    return vips, heard


def test_a_vip_is_announced_only_while_this_director_can_serve_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vips, heard = announcer()
    caplog.set_level(logging.INFO, "director.announce")
    vips.update([KEY], table(1, 1), ready=False)
    assert heard[-1][VIP].announced is False
    assert "first sync" in heard[-1][VIP].reason
    vips.update([KEY], table(1, 1), ready=True)
    assert heard[-1][VIP].announced and "2 real servers" in heard[-1][VIP].reason
    assert heard[-1][VIP].communities == ("64512:10",)
    assert f"event=bgp.announce vip={VIP} announced=True pool=edge" in caplog.text
    vips.touched([KEY])
    vips.update([KEY], table(0, 0), ready=True)  # drained, or quiesced by health checks
    assert not heard[-1][VIP].announced and "no healthy real server" in heard[-1][VIP].reason
    vips.touched([KEY])
    vips.update([KEY], table(1, 0), ready=True, down={KEY})  # all down, kept in the table
    assert not vips.routes[VIP].announced
    vips.touched([KEY])
    vips.update([KEY], {}, ready=True)  # wanted, but the kernel does not hold it
    assert "not programmed" in vips.routes[VIP].reason
    vips.touched([KEY])
    vips.update([KEY], table(1), ready=True)
    assert heard[-1][VIP].announced
    vips.update([KEY], table(1), ready=True, maintenance="operator")
    assert not heard[-1][VIP].announced and heard[-1][VIP].reason == "maintenance: operator"
    vips.keys_changed()
    vips.update([], {}, ready=True, maintenance="operator")  # the service is gone, its route too
    assert VIP not in heard[-1]
    assert 'reason="gone: no virtual service has this address"' in caplog.text


def test_routes_go_to_frr_when_an_announcement_flips_and_only_then() -> None:
    vips, heard = announcer()
    vips.update([KEY], table(1, 1), ready=True)
    assert len(heard) == 1
    vips.touched([KEY])
    vips.update([KEY], table(1, 1, 1), ready=True)  # a third real server: still announced
    vips.update([KEY], table(1, 1, 1), ready=True)  # nothing touched
    assert len(heard) == 1
    assert "3 real servers" in vips.routes[VIP].reason  # the status shows the new reason


def test_vrrp_vips_go_to_keepalived_and_bgp_vips_do_not() -> None:
    vips, _ = announcer()
    told: list[frozenset[str]] = []
    vips.hooks.announce = told.append
    pair = ServiceKey.inet(IpProtocol.TCP, "203.0.113.5", 80)
    vips.update([KEY, pair], table(1), ready=True)
    assert told == [frozenset({"203.0.113.5"})]


# -- FRR's configuration ---------------------------------------------------------------------
ROUTES = {
    VIP: Route(VIP, "edge", True, "serving", ("64512:10",), 200),
    "198.51.100.11": Route("198.51.100.11", "edge", False, "no healthy real server"),
    "2001:db8:100::5": Route("2001:db8:100::5", "edge", True, "serving"),
}


def test_frr_configuration_announces_what_is_served_and_frr_accepts_it(tmp_path: Path) -> None:
    settings = config()
    assert settings.bgp is not None
    text = render_frr(settings.bgp, ROUTES, settings.pools, "d.yaml")
    assert "network 198.51.100.10/32 route-map director-edge" in text
    assert "198.51.100.11" not in text  # withdrawn
    assert "address-family ipv6 unicast\n  network 2001:db8:100::5/128" in text
    assert " set community 64512:10\n set local-preference 200" in text
    assert " neighbor 198.18.0.1 bfd profile director-300ms-x3" in text
    assert " neighbor 2001:db8::1 password s3cret" in text
    assert " neighbor 2001:db8::1 ebgp-multihop 2" in text
    assert "neighbor 2001:db8::1 bfd" not in text
    assert "route-map director-pair" not in text  # a vrrp pool has no route map
    Frr(settings.bgp).validate(text)  # vtysh --dryrun: FRR's own parser


def test_a_configuration_frr_rejects_never_goes_live(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = parse_config(BASE.replace("bgp:\n", f"bgp:\n  config_file: {tmp_path}/frr.conf\n"))
    assert settings.bgp is not None
    frr = Frr(settings.bgp)
    frr.path.write_text("! the live one\n")
    with pytest.raises(FrrRejected, match="Unknown command"):
        frr.install("router bgp 64512\n neighbor 198.18.0.1 remote-az 1\n")
    assert frr.path.read_text() == "! the live one\n"
    assert frr.rejected == 1 and "event=frr.config_rejected" in caplog.text
    frr.applied = "! the live one\n"  # as after the first install since the director started
    assert frr.install("! the live one\n") is False  # unchanged: FRR is not touched


def test_vtysh_is_installed() -> None:
    """make test installs FRR: the checks above ran FRR's parser, not a stand-in."""
    assert shutil.which("vtysh") is not None


# -- a Service announced over BGP ------------------------------------------------------------
def test_a_service_announced_over_bgp_gets_maglev_hashing_and_tun() -> None:
    out = translate(svc(), [VIP], [], NODES, POLICY, bgp=True)
    vs = out.services[KEY]
    assert (vs.config.scheduler, vs.config.flags) == ("mh", frozenset({"mh-port"}))
    assert {rs.forwarding for rs in vs.real_servers.values()} == {Forwarding.TUN}
    assert not out.problems
    plain = translate(svc(), [VIP], [], NODES, POLICY).services[KEY]
    assert plain.config.scheduler == "wlc"


def test_nat_is_refused_and_other_schedulers_warned_for_a_service_announced_over_bgp() -> None:
    nat = svc(annotations={"lvs-director.io/forwarding": "nat"})
    out = translate(nat, [VIP], [], NODES, POLICY, bgp=True)
    assert [(p.reason, p.annotation) for p in out.problems] == [
        ("ForwardingRefused", "lvs-director.io/forwarding")
    ]
    assert "replies would have to come back" in out.problems[0].message
    assert {rs.forwarding for rs in out.services[KEY].real_servers.values()} == {Forwarding.TUN}
    rr = svc(annotations={"lvs-director.io/scheduler": "rr"})
    out = translate(rr, [VIP], [], NODES, POLICY, bgp=True)
    assert out.services[KEY].config.scheduler == "rr"  # allowed, with a warning
    assert [p.reason for p in out.problems] == ["SchedulerNotHashing"]
    sh = svc(annotations={"lvs-director.io/scheduler": "sh:sh-port"})
    assert not translate(sh, [VIP], [], NODES, POLICY, bgp=True).problems


def test_a_static_service_announced_over_bgp_gets_maglev_hashing_unless_it_names_one() -> None:
    """As a Service does: a static service in a bgp pool with no scheduler of its own gets
    mh with mh-port (the default scheduler, wlc, breaks connections on every ECMP change);
    one that names another scheduler keeps it, and check and run say what it costs."""
    from director.cli.preflight import preflight
    from director.schema.notes import bgp_notes

    text = (
        BASE
        + """
services:
  - {name: web, address: 198.51.100.10, port: 80, forwarding: tun, real_servers: ["192.0.2.11:80"]}
  - {name: rr, address: 198.51.100.11, port: 80, scheduler: rr, forwarding: tun,
     real_servers: ["192.0.2.11:80"]}
  - {name: pair, address: 203.0.113.5, port: 80, real_servers: ["192.0.2.11:80"]}
"""
    )
    settings = config(text)
    by_name = {vs.origin: vs.config for vs in settings.services.values()}
    assert (by_name["static/web"].scheduler, by_name["static/web"].flags) == (
        "mh",
        frozenset({"mh-port"}),
    )
    assert by_name["static/rr"].scheduler == "rr"
    assert by_name["static/pair"].scheduler == "wlc"  # vrrp: one director serves it
    notes = bgp_notes(settings)
    assert len(notes) == 1 and notes[0].startswith("static/rr: scheduler rr")
    assert notes[0] in preflight(settings, host=False)[1]


# -- the loop ---------------------------------------------------------------------------------
def test_the_loop_announces_a_static_vip_once_programmed_and_withdraws_it_when_drained() -> None:
    ipvs = FakeIpvs()
    hooks = Hooks()
    controller = Controller(ipvs, config(), hooks=hooks)
    heard: list[Mapping[str, Route]] = []
    hooks.on_routes = heard.append
    told: list[frozenset[str]] = []
    hooks.announce = told.append
    controller.step(0.01)
    assert heard and heard[-1][VIP].announced
    assert told == [frozenset({"203.0.113.5"})]
    for address in ("192.0.2.11", "192.0.2.12"):
        controller.post(IntentPosted(AddDrain(Drain(address, 80, None)), Reply()))
    controller.step(0.01)
    assert not heard[-1][VIP].announced
    assert "no healthy real server" in heard[-1][VIP].reason


# -- the admin API ----------------------------------------------------------------------------
def test_maintenance_withdraws_every_route_keeps_ipvs_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    import threading

    from director.core.announce import PeerState
    from director.web.app import create_app
    from lab.wait import eventually

    intents = tmp_path / "intents.json"
    auth = {"Authorization": "Bearer t"}
    peers = (PeerState("198.18.0.1", 64500, "Established", 12.5, 1, "up"),)

    def run(settings: Settings, ipvs: FakeIpvs) -> tuple[Controller, threading.Event]:
        controller = Controller(ipvs, settings, intents_file=intents)
        stop = threading.Event()
        threading.Thread(target=controller.run, args=(stop, 0.05), daemon=True).start()
        eventually(lambda: controller.health.synced, what="the first sync")
        return controller, stop

    ipvs = FakeIpvs()
    controller, stop = run(config(), ipvs)
    client = create_app(controller.door(), "t", peers=lambda: peers).test_client()
    body = client.get("/api/v1/bgp", headers=auth).get_json()
    assert body["routes"] == [
        {
            "vip": VIP,
            "pool": "edge",
            "announced": True,
            "reason": "serving: 2 real servers take new connections",
        }
    ]
    assert body["peers"][0]["state"] == "Established" and body["peers"][0]["bfd"] == "up"
    bad = client.put("/api/v1/maintenance", json={"reason": ""}, headers=auth)
    assert bad.status_code == 400 and "reason" in bad.get_json()["detail"]
    done = client.put("/api/v1/maintenance", json={"reason": "kernel upgrade"}, headers=auth)
    assert done.status_code == 200, done.get_data(as_text=True)
    assert done.get_json()["maintenance"] == "kernel upgrade"
    assert done.get_json()["announced"] == 0
    assert ipvs.read().services[KEY].real_servers  # IPVS kept: connections drain elsewhere
    status = client.get("/api/v1/status", headers=auth).get_json()
    assert status["bgp"]["maintenance"] == "kernel upgrade"
    stop.set()

    controller, stop = run(config(), ipvs)  # a restart stays out until put back
    assert controller.exports.view.addressing.routes[VIP].reason == "maintenance: kernel upgrade"
    client = create_app(controller.door(), "t").test_client()
    back = client.delete("/api/v1/maintenance", headers=auth).get_json()
    assert back["maintenance"] is None and back["announced"] == 1
    stop.set()


def test_routes_frr_could_not_take_are_tried_again_and_a_refused_file_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """FRR not running yet (at boot, frr-reload.py fails): a transient failure, kept pending
    and tried again with a backoff until FRR takes it; a file vtysh refuses is refused
    once, not every poll. The file FRR boots from never holds the routes."""
    from director.adapters.frr_sync import FrrSync
    from lab.wait import eventually

    answer = tmp_path / "answer"
    answer.write_text("1")
    reload = tmp_path / "frr-reload"  # stands in for frr-reload.py: its exit status is given
    reload.write_text(f"#!/bin/sh\nexit $(cat {answer})\n")
    reload.chmod(0o755)
    text = BASE.replace(
        "bgp:\n",
        f"bgp:\n  config_file: {tmp_path}/frr.conf\n  reload: {reload}\n  poll_seconds: 0\n",
    )
    settings = parse_config(text)
    assert settings.bgp is not None
    sync = FrrSync(settings.bgp, settings.pools, "d.yaml")
    sync.frr.peers = lambda: []  # type: ignore[method-assign]  # no vtysh daemons here
    sync.frr.vips.hold = lambda vips, missing=None: None  # type: ignore[method-assign]  # no lo
    sync.start()
    try:
        sync.submit(dict(ROUTES))
        eventually(lambda: sync.attempts >= 2, what="a second try after FRR failed")
        state = sync.ledger.get("frr")
        assert sync.installed is None and sync.pending is not None, "kept, not dropped"
        assert state is not None and not state.in_sync and state.kind == "transient"
        assert not sync.settle(0.1)
        answer.write_text("0")  # FRR is up
        eventually(lambda: sync.installed is not None, what="the routes applied on a retry")
        assert sync.settle(1) and sync.ledger.get("frr").in_sync  # type: ignore[union-attr]
        assert "network 198.51.100.10/32" in (sync.frr.applied or "")
        boot = (tmp_path / "frr.conf").read_text()
        assert "router bgp 64512" in boot and "\n  network " not in boot
    finally:
        sync.stop()
    frr = sync.frr
    bad = (frr.applied or "").replace("remote-as 64500", "remote-az 64500", 1)  # same routes
    before = frr.rejected
    for _ in range(3):
        with pytest.raises(FrrRejected):
            frr.install(bad)
    assert frr.rejected == before + 1  # refused and counted once; the same file is not retried


def test_a_file_the_daemons_refuse_is_rolled_back_and_routes_still_follow(tmp_path: Path) -> None:
    """vtysh --dryrun checks the syntax only; bgpd may still refuse a line (a neighbor that
    is this box) after taking the ones before it. The daemons are put back on the live
    file, the refused text is not reloaded again, and the director's routes are still sent
    on top of the last accepted configuration (a VIP that should go is withdrawn)."""
    calls, vtysh_calls = tmp_path / "calls", tmp_path / "vtysh-calls"
    reload = tmp_path / "frr-reload"  # stands in for frr-reload.py: refuses "remote-as 64999"
    reload.write_text(
        "#!/bin/sh\n"
        f'for last; do :; done; echo "$last" >> {calls}; cp "$last" {calls}.last\n'
        'if grep -q "remote-as 64999" "$last"; then\n'
        '  echo "% Can not configure the local system as neighbor"; exit 1; fi\n'
    )
    vtysh = tmp_path / "vtysh"  # FRR's own parser for --dryrun; the daemons' side recorded
    dryruns = tmp_path / "dryruns"
    vtysh.write_text(
        f'#!/bin/sh\nif [ "$1" = --dryrun ]; then echo x >> {dryruns}; '
        f'exec {shutil.which("vtysh")} "$@"; fi\n'
        f'echo "$@" >> {vtysh_calls}\n'
    )
    for script in (reload, vtysh):
        script.chmod(0o755)
    text = BASE.replace(
        "bgp:\n",
        f"bgp:\n  config_file: {tmp_path}/frr.conf\n  reload: {reload}\n  vtysh: {vtysh}\n",
    )
    settings = parse_config(text)
    assert settings.bgp is not None
    frr = Frr(settings.bgp)
    fewer = {VIP: Route(VIP, "edge", False, "no healthy real server")}
    good_fewer = render_frr(settings.bgp, {**ROUTES, **fewer}, settings.pools)
    assert frr.install(good_fewer)
    good = render_frr(settings.bgp, ROUTES, settings.pools)
    checked = len(dryruns.read_text().split())
    assert frr.install(good)  # prefixes alone: one vtysh call, the file not parsed again
    assert len(dryruns.read_text().split()) == checked
    assert f"-c network {VIP}/32 route-map director-edge" in vtysh_calls.read_text()
    bad = good.replace("remote-as 64500", "remote-as 64999", 1)
    with pytest.raises(FrrRejected, match=r"^% Can not configure the local system as neighbor$"):
        frr.install(bad)
    from director.adapters.frr_conf import boot_text

    assert (tmp_path / "frr.conf").read_text() == boot_text(good)  # the live file: the old one
    assert frr.applied == good
    applied = calls.read_text().split()
    assert (tmp_path / "calls.last").read_text() == good, "the daemons were put back"
    assert all(call.endswith("/frr.conf") and "director-frr-" in call for call in applied), (
        "frr-reload.py is given <its confdir>/frr.conf: it saves nothing over FRR's file"
    )
    assert frr.rejected == 1
    sent = vtysh_calls.read_text()
    with pytest.raises(FrrRejected, match="refused by FRR"):  # the refusal stands, and shows
        frr.install(bad)
    assert vtysh_calls.read_text() == sent  # the same routes: nothing to send, nothing reloaded
    bad_fewer = render_frr(settings.bgp, {**ROUTES, **fewer}, settings.pools).replace(
        "remote-as 64500", "remote-as 64999", 1
    )
    with pytest.raises(FrrRejected, match="its routes are sent"):
        frr.install(bad_fewer)
    assert f"-c no network {VIP}/32" in vtysh_calls.read_text()  # withdrawn all the same
    assert len(calls.read_text().split()) == len(applied)  # no frr-reload.py for it again
    assert frr.rejected == 1
    assert frr.install(good) is True and frr.invalid is None  # a good file is whole again


def test_the_scale_out_example_is_valid_and_renders_a_configuration_frr_accepts(
    tmp_path: Path,
) -> None:
    from director.core.announce import decide

    settings = parse_config(
        (Path(__file__).resolve().parents[2] / "examples" / "bgp.yaml").read_text()
    )
    assert settings.bgp is not None and [p.name for p in settings.bgp_pools] == ["edge"]
    web = next(iter(settings.services.values()))
    route = decide(web.key.address, settings.bgp_pools[0], [web.key], settings.services, ready=True)
    text = render_frr(settings.bgp, {route.vip: route}, settings.pools)
    assert "network 198.51.100.10/32 route-map director-edge" in text
    Frr(settings.bgp).validate(text)


def test_the_status_page_shows_the_bgp_routes_and_sessions(tmp_path: Path) -> None:
    import subprocess
    import threading

    from werkzeug.serving import make_server

    from director.core.announce import PeerState
    from director.web.app import create_app
    from lab.wait import eventually

    controller = Controller(FakeIpvs(), config())
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop, 0.05), daemon=True).start()
    eventually(lambda: controller.health.synced, what="the first sync")
    peers = (
        PeerState("198.18.0.1", 64500, "Established", 3.0, 1, "up"),
        PeerState("2001:db8::1", 64500, "Active"),
    )
    app = create_app(controller.door(), "t", peers=lambda: peers)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        assert chromium, "chromium is missing: apt-get install chromium (make setup does)"
        dom = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                f"http://127.0.0.1:{server.server_port}/",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
        assert '<span id="bgp-box">' in dom, dom[:3000]  # shown: this director speaks BGP
        assert "1 announced, 0 withdrawn · sessions 1/2" in dom
        assert f"{VIP}: serving: 2 real servers take new connections" in dom
    finally:
        server.shutdown()
        stop.set()


# -- the backends' side: the director_node role's director-node ------------------------------
NODE = Path(__file__).resolve().parents[2] / "ansible/roles/director_node/files/director-node"


def node(netns: str, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, str(NODE), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_dr_backend_gets_the_vip_on_lo_with_arp_quiet_once(netns: str) -> None:
    """In a namespace standing in for a node: --check says what differs, a run sets it, a
    second run and --check find nothing to do. (tun on the VM's kernel: test_bgp_lab.py.)"""
    code, out = node(netns, "--vip", VIP, "--check")
    assert code == 1 and f"would add {VIP}/32 on lo" in out and "arp_ignore from 0 to 1" in out
    code, out = node(netns, "--vip", VIP)
    assert code == 0 and f"{VIP}/32 on lo" in out, out
    code, out = node(netns, "--vip", VIP)
    assert (code, out) == (0, "")  # idempotent: a boot after the first changes nothing
    assert node(netns, "--vip", VIP, "--check") == (0, "")
    for name, value in (("arp_ignore", "1"), ("arp_announce", "2")):
        live = f"/proc/sys/net/ipv4/conf/all/{name}"
        got = subprocess.run(
            ["ip", "netns", "exec", netns, "cat", live], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert got == value, name


@pytest.mark.parametrize(
    "args", [["--vip", "198.51.100"], ["--vip", "300.1.1.1"], ["--vip"], ["--tunnel"]]
)
def test_the_node_script_refuses_bad_arguments_and_changes_nothing(
    netns: str, args: list[str]
) -> None:
    code, out = node(netns, *args)
    assert code == 2 and ("not an IPv4 address" in out or "usage:" in out), out
    assert node(netns, "--vip", VIP, "--check")[0] == 1  # nothing was set


def test_the_node_script_says_why_when_the_kernel_cannot_decapsulate(netns: str) -> None:
    has_ipip = (
        Path("/sys/module/ipip").exists()
        or subprocess.run(["modprobe", "-n", "ipip"], capture_output=True, check=False).returncode
        == 0
    )
    if has_ipip:
        pytest.skip("this kernel has ipip: the lab VM's test covers --tun")
    code, out = node(netns, "--tun")
    assert code == 3 and "no tunl0: the kernel has no ipip module" in out, out


# -- FRR for real, in a namespace of the host's own ---------------------------------------------
@contextlib.contextmanager
def keeping(frr_ns: tuple[Netns, Path], vtysh: str = "/usr/bin/vtysh") -> Iterator[FrrSync]:
    """FRR started in the namespace, and a director's FRR keeper (polled every second, so
    read back every 10 s) running against it."""
    from lab.bgp import start_frr

    ns, conf = frr_ns
    start_frr(ns)
    settings = frr_settings(ns.name, conf, vtysh)
    assert settings.bgp is not None
    sync = FrrSync(settings.bgp, settings.pools, "d.yaml", netns=ns.name)
    sync.start()
    try:
        yield sync
    finally:
        sync.stop()


@pytest.fixture
def frr_ns() -> Iterator[tuple[Netns, Path]]:
    """A namespace for FRR's zebra, bfdd and bgpd (FRR works on this host's kernel; IPVS
    does not): the tests start them, this stops them."""
    import os

    from lab.bgp import kill_frr

    if shutil.which("vtysh") is None or not Path("/usr/lib/frr/bgpd").exists():
        pytest.skip("FRR is not installed (make setup installs it)")
    ns = Netns(f"frr{os.getpid()}")
    ns.ip("link set lo up")
    try:
        yield ns, Path("/etc/frr") / ns.name / "frr.conf"
    finally:
        kill_frr(ns)
        ns.close()


def frr_settings(netns: str, conf: Path, vtysh: str = "/usr/bin/vtysh") -> Settings:
    extra = f"  config_file: {conf}\n  pathspace: {netns}\n  poll_seconds: 1\n  vtysh: {vtysh}\n"
    return parse_config(BASE.replace("bgp:\n", "bgp:\n" + extra))


def test_frr_restarted_from_its_boot_file_announces_nothing_until_the_director_sends_it_again(
    frr_ns: tuple[Netns, Path], tmp_path: Path
) -> None:
    """The file FRR boots from holds no route: FRR started alone (a reboot, a crash, no
    director) announces nothing the director has not confirmed. The director reads back what
    bgpd runs and sends its routes again (a repair, counted)."""
    from lab.bgp import kill_frr, start_frr
    from lab.wait import eventually

    ns, conf = frr_ns
    with keeping(frr_ns) as sync:
        sync.submit(dict(ROUTES))
        announced = f"{VIP}/32"
        eventually(
            lambda: announced in (sync.frr.running() or {}).get("ipv4", {}),
            timeout=30,
            what="the route sent",
        )
        assert sync.settle(30)
        assert "\n  network " not in conf.read_text() and "router bgp 64512" in conf.read_text()
        kill_frr(ns)  # FRR dies, and starts again from its file: no route
        start_frr(ns)
        assert announced not in (sync.frr.running() or {}).get("ipv4", {}), "the boot file"
        eventually(
            lambda: announced in (sync.frr.running() or {}).get("ipv4", {}),
            timeout=30,
            what="the route sent again",
        )
        frr_state = eventually(lambda: (s := sync.ledger.get("frr")) and s.repairs and s)
        assert frr_state.in_sync and frr_state.repairs >= 1


def test_vips_removed_from_lo_by_someone_else_are_put_back(
    frr_ns: tuple[Netns, Path], tmp_path: Path
) -> None:
    """``ip addr flush dev lo`` (networkd re-applying lo, say): IPVS takes no packet for a
    VIP that is not local, while FRR announces on. The director finds its VIPs gone at its
    next look at lo (every poll), puts them back and counts a repair."""
    from lab.wait import eventually

    ns, _conf = frr_ns
    with keeping(frr_ns) as sync:
        sync.submit(dict(ROUTES))
        assert sync.settle(30) and VIP in sync.frr.vips.on_lo()
        ns.exec(["ip", "addr", "flush", "dev", "lo"])  # (put back within poll_seconds: 1)
        eventually(lambda: VIP in sync.frr.vips.on_lo(), timeout=30, what="the VIP put back on lo")
        state = eventually(lambda: (s := sync.ledger.get("addresses")) and s.repairs and s)
        assert state.in_sync and state.repairs == 1


def test_vtysh_that_cannot_run_is_retried_never_taken_as_frr_refusing(
    frr_ns: tuple[Netns, Path], tmp_path: Path
) -> None:
    """vtysh missing mid-upgrade (or timing out) is a failure to run, tried again with a
    backoff: once it is back the routes changed meanwhile go out. Stored as "FRR refused
    this text", every later change was refused without being tried."""
    from lab.wait import eventually

    gone = tmp_path / "upgrading"
    vtysh = tmp_path / "vtysh"  # vtysh while the package is being replaced: not there
    vtysh.write_text(
        f'#!/bin/sh\nif [ -e {gone} ]; then echo "vtysh: not found" >&2; '
        f'exit 127; fi\nexec {shutil.which("vtysh")} "$@"\n'
    )
    vtysh.chmod(0o755)
    with keeping(frr_ns, str(vtysh)) as sync:
        sync.submit({VIP: ROUTES[VIP]})
        eventually(lambda: sync.installed is not None, timeout=30, what="the first routes")
        gone.touch()
        sync.submit(dict(ROUTES))  # a second VIP while vtysh cannot run
        eventually(lambda: sync.attempts >= 3, timeout=30, what="tried again")
        state = sync.ledger.get("frr")
        assert state is not None and not state.in_sync and state.kind == "transient"
        assert sync.frr.rejected == 0 and sync.frr.invalid is None, "not a refusal"
        gone.unlink()
        v6 = "2001:db8:100::5/128"
        eventually(
            lambda: v6 in (sync.frr.running() or {}).get("ipv6", {}),
            timeout=60,
            what="the second VIP announced once vtysh is back",
        )
        eventually(
            lambda: sync.ledger.get("frr").in_sync,  # type: ignore[union-attr]
            what="in sync once the routes went out",
        )


def test_a_director_restarted_while_frr_runs_its_file_sends_only_the_routes(
    frr_ns: tuple[Netns, Path], tmp_path: Path
) -> None:
    """A restart of the director alone (an upgrade, a rolling restart) while FRR runs on the
    file the director wrote: its first install sends the routes alone (one vtysh call),
    where frr-reload.py reads and diffs the whole configuration (a minute under emulation).
    A boot file that is not the director's, or a change of anything but routes, still goes
    through frr-reload.py."""
    from lab.bgp import start_frr
    from lab.wait import eventually

    ns, conf = frr_ns
    conf.unlink(missing_ok=True)  # (an earlier test's) FRR starts from nothing
    start_frr(ns)
    settings = frr_settings(ns.name, conf)
    assert settings.bgp is not None

    def director(routes: dict[str, Route]) -> FrrSync:
        sync = FrrSync(settings.bgp, settings.pools, "d.yaml", netns=ns.name)  # type: ignore[arg-type]
        sync.start()
        sync.submit(routes)
        assert sync.settle(60), sync.ledger.get("frr")
        return sync

    def announced() -> set[str]:
        running = FrrSync(settings.bgp, settings.pools, "d.yaml", netns=ns.name).frr.running()  # type: ignore[arg-type]
        return {p for nets in (running or {}).values() for p in nets}

    first = director({VIP: ROUTES[VIP]})
    assert first.frr.applied_by == "frr-reload"
    first.stop()
    second = director(dict(ROUTES))  # restarted, and a new VIP meanwhile
    try:
        assert second.frr.applied_by == "vtysh-resume"
        eventually(
            lambda: announced() == {f"{VIP}/32", "2001:db8:100::5/128"},
            what="the routes of the text, sent alone",
        )
        assert "\n  network " not in conf.read_text()
    finally:
        second.stop()
    conf.write_text(conf.read_text() + "! edited by hand\n")
    third = director(dict(ROUTES))
    try:
        assert third.frr.applied_by == "frr-reload", "a file the director did not write"
        assert announced() == {f"{VIP}/32", "2001:db8:100::5/128"}
    finally:
        third.stop()
