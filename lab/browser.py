"""Headless Chromium driven over the DevTools protocol, for the status page's tests.

``--window-size`` cannot make a window narrower than 500 px, so a phone is emulated the way
Chrome's device toolbar does it (``Emulation.setDeviceMetricsOverride``, mobile, with the
page's viewport meta honoured). The page's own time runs for real: ``settle`` waits while it
refreshes itself.

    with Browser() as browser:
        page = browser.open(url, width=390, height=844, mobile=True, settle=9.0)
        page.evaluate("document.title"); page.screenshot(path)
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket  # websocket-client (a dependency of the kubernetes client)


class Page:
    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.ws.close()


class Browser:
    def __init__(self) -> None:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            raise RuntimeError("chromium is missing: apt-get install chromium (make setup does)")
        self.profile = tempfile.TemporaryDirectory(prefix="director-chromium-")
        self.proc = subprocess.Popen(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--disable-dev-shm-usage",
                "--remote-debugging-port=0",
                "--no-first-run",
                f"--user-data-dir={self.profile.name}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = Path(self.profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        self.port = int(port_file.read_text().split()[0])

    def open(
        self, url: str, *, width: int, height: int, mobile: bool = False, settle: float = 5.0
    ) -> Page:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=30) as r:
            targets = [t for t in json.loads(r.read()) if t.get("type") == "page"]
        page = Page(targets[0]["webSocketDebuggerUrl"])
        page.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=2 if mobile else 1,
            mobile=mobile,
        )
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        time.sleep(settle)
        return page

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        # Chromium's helpers (crashpad, the zygote) may write into the profile for a moment
        # after the browser exits: try again, then leave what is left to the tmp cleaner.
        for _ in range(5):
            try:
                self.profile.cleanup()
                return
            except OSError:
                time.sleep(0.5)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
