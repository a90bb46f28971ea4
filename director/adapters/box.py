"""This box's own addresses, as its interfaces hold them: read on a schedule and handed to
the control loop when they change, so that no Service is given one (a tenant's Service on
the box's management address could take its SSH) and no endpoint is one.

``ip -j address show`` in the director's namespace is asked (iproute2 is on every box):
read-only, and the one parser of its answer is here. Host routes (/32, /128) are left out:
they are the VIPs keepalived and the director add, not the box's own."""

from __future__ import annotations

import ipaddress
import json
import logging
import subprocess
import threading
from collections.abc import Callable, Mapping

from director.logs import event

log = logging.getLogger("director.box")


def parse_addresses(text: str) -> dict[str, str] | None:
    """``ip -j address show``'s answer: address -> interface, less host routes; None when
    it is not such an answer."""
    try:
        links = json.loads(text)
    except ValueError:
        return None
    if not isinstance(links, list):
        return None
    found: dict[str, str] = {}
    for link in links:
        if not isinstance(link, dict):
            continue
        for info in link.get("addr_info") or ():
            local = info.get("local") if isinstance(info, dict) else None
            prefix = info.get("prefixlen") if isinstance(info, dict) else None
            if not isinstance(local, str) or not isinstance(prefix, int):
                continue
            try:
                address = ipaddress.ip_address(local.partition("%")[0])
            except ValueError:
                continue
            if prefix < address.max_prefixlen and not address.is_link_local:
                found[str(address)] = str(link.get("ifname", "?"))[:16]
    return found


def read_addresses(netns: str | None = None, timeout: float = 10.0) -> dict[str, str] | None:
    """This box's own addresses now (None: ``ip`` could not say)."""
    command = ["ip", *(["-n", netns] if netns else []), "-j", "address", "show"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_addresses(done.stdout) if done.returncode == 0 else None


class BoxWatch:
    """Reads the box's addresses every ``every`` seconds and calls ``changed`` with them
    when they differ from the last it said (the first read always says)."""

    def __init__(
        self,
        changed: Callable[[Mapping[str, str]], None],
        netns: str | None = None,
        every: float = 10.0,
        read: Callable[[str | None], dict[str, str] | None] = read_addresses,
    ) -> None:
        self.changed, self.netns, self.every, self._read = changed, netns, every, read
        self._said: dict[str, str] | None = None
        self._failing = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="box-addresses", daemon=True)

    def start(self) -> None:
        self.look()  # before the first sync: nothing is given an address of the box's
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def look(self) -> None:
        found = self._read(self.netns)
        if found is None:  # could not run: tried again at the next look (transient)
            if not self._failing:
                event(log, "box.addresses_unreadable", level=logging.WARNING, netns=self.netns)
            self._failing = True
            return
        self._failing = False
        if found != self._said:
            self._said = found
            self.changed(found)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.look()
            except Exception as exc:  # never silently: the loop's other inputs go on
                event(log, "box.watch_error", level=logging.ERROR, error=repr(exc)[:300])
