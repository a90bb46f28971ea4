"""BGP through the admin API and the status page: maintenance withdraws every route, keeps
IPVS and survives a restart; each route and session shown."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from director.dataplane.fake import FakeIpvs
from director.engine.loop import Controller
from director.schema.config import Settings
from tests.bgplab import KEY, VIP, config


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
    assert (
        controller.parts.exports.view.addressing.routes[VIP].reason == "maintenance: kernel upgrade"
    )
    client = create_app(controller.door(), "t").test_client()
    back = client.delete("/api/v1/maintenance", headers=auth).get_json()
    assert back["maintenance"] is None and back["announced"] == 1
    stop.set()


def test_the_status_page_shows_the_bgp_routes_and_sessions(tmp_path: Path) -> None:
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
