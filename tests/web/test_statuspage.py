"""The status page as a browser renders it (headless Chromium): each VIP, its real servers
and their figures, refreshed from ``/ui/status``."""

from __future__ import annotations

import itertools
import os
import re
import threading
import time

from tests.serverlab import REPO, ctl
from tests.weblab import TOKEN


def test_the_status_page_renders_in_headless_chromium(running) -> None:  # type: ignore[no-untyped-def]
    """On a laptop and on a phone (emulated as Chrome's device toolbar does): every VIP with
    its health, drains, and its rates charted (the kernel's estimates, sampled by the page
    every 2 s); nothing wider than the screen."""
    _runtime, ipvs, url, _api = running
    from director.core.model import IpProtocol as Protocol, ServiceKey
    from director.core.services import Stats
    from lab.browser import Browser

    web = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    ipvs.set_connections(web, ("192.0.2.11", 8080), 7, 2)
    assert "draining 192.0.2.12:8080" in ctl(url, "drain", "192.0.2.12:8080")
    stop = threading.Event()

    def traffic() -> None:  # the kernel's estimates move: 30, 42, 54, 47, 38, 30, ... conn/s
        for step in itertools.cycle((30, 42, 54, 47, 38)):
            ipvs.set_stats(
                web,
                Stats(
                    connections=1234,
                    bytes_in=10**9,
                    bytes_out=4 * 10**9,
                    cps=step,
                    bps_in=250_000,
                    bps_out=3_100_000,
                ),
            )
            if stop.wait(1.0):
                return

    feeder = threading.Thread(target=traffic, daemon=True)
    feeder.start()
    try:
        with Browser() as browser:
            for width, height, mobile, name in (
                (1280, 800, False, "status-page.png"),
                (390, 844, True, "status-page-phone.png"),
            ):
                # For the README's pictures, a minute and a half of samples.
                settle = 90.0 if os.environ.get("DIRECTOR_UPDATE_SCREENSHOT") else 9.0
                page = browser.open(
                    f"{url}/", width=width, height=height, mobile=mobile, settle=3.0
                )
                if name == "status-page.png":  # the status is not public: the page asks
                    asked = page.evaluate("document.documentElement.outerHTML")
                    assert "the status needs the token" in asked and "static/web" not in asked
                    page.evaluate(f"$('token').value = {TOKEN!r}; $('login').requestSubmit(); 1")
                time.sleep(settle)  # the tab keeps the token: the phone's view has it too
                dom = page.evaluate("document.documentElement.outerHTML")
                shown = page.evaluate("[window.innerWidth, document.documentElement.dataset.fits]")
                if os.environ.get("DIRECTOR_UPDATE_SCREENSHOT"):
                    page.screenshot(REPO / "docs" / name)
                page.close()
                assert shown == [width, "true"], f"{shown}: the page is wider than {width} px"
                assert 'data-service="tcp 198.51.100.10:80"' in dom, dom[:2000]
                assert TOKEN not in dom, "the token is kept in session storage, not shown"
                assert "static/web · rr (config)" in dom
                # a box on its own guards it; its client rate, and what it dropped
                assert "SYN guard · limits 20/s per client (3 dropped)" in dom
                assert "192.0.2.11:8080" in dom and ">7<" in dom  # its active connections
                assert 'data-service="tcp 198.51.100.64:80"' in dom  # the Kubernetes Service
                assert ">connected<" in dom and ">standalone<" in dom
                assert "2/3 active" in dom and "1 draining" in dom
                assert "1 real server draining" in dom
                assert re.search(r"conn/s <b>(30|42|54|47|38)</b>", dom)
                assert "bytes/s <b>3.4 MB</b>" in dom
                # One point per sample (a few in 9 s), at the heights the estimates gave.
                line = re.search(r'<polyline points="([^"]*)"', dom)
                assert line is not None
                heights = {point.split(",")[1] for point in line[1].split()}
                assert len(line[1].split()) >= 3 and len(heights) >= 2, line[1]
                assert (REPO / "docs" / name).exists(), "make it: DIRECTOR_UPDATE_SCREENSHOT=1"
    finally:
        stop.set()
        feeder.join(5)
