"""The nftables adapter: the only module that runs ``nft``.

Applies ``director.core.firewall.render_nft`` scripts in one transaction and reads the per-service
drop counters back (``nft -j``), in the director's network namespace when it has one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from typing import Any

from director.core.firewall import (
    CHAIN_PREFIX,
    COUNTER_PREFIX,
    FAMILY,
    TABLE,
    FirewallError,
    Restrictions,
    object_name,
    render_nft,
)
from director.core.model import ServiceKey


class NftFirewall:
    def __init__(self, netns: str | None = None, nft: str = "nft") -> None:
        self.netns, self.nft = netns, nft
        self._names: dict[str, ServiceKey] = {}  # counter name -> service
        self._lock = threading.Lock()

    def _run(self, args: list[str], stdin: str | None = None) -> str:
        binary = shutil.which(self.nft) or self.nft
        command = (["ip", "netns", "exec", self.netns] if self.netns else []) + [binary, *args]
        try:
            done = subprocess.run(
                command, input=stdin, capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FirewallError(f"cannot run {self.nft}: {exc}") from None
        if done.returncode != 0:
            words = " | ".join(line.strip() for line in done.stderr.splitlines() if line.strip())
            raise FirewallError(words[-2000:] or f"nft exited {done.returncode}")
        return done.stdout

    def _objects(self) -> list[dict[str, Any]]:
        try:
            text = self._run(["-j", "list", "table", FAMILY, TABLE])
        except FirewallError as exc:
            if "No such file or directory" in str(exc):  # no table yet
                return []
            raise
        try:
            return list(json.loads(text).get("nftables", ()))
        except (ValueError, AttributeError) as exc:
            raise FirewallError(f"nft -j printed something unexpected: {exc}") from None

    def apply(self, restrictions: Restrictions) -> None:
        with self._lock:
            existing = []
            for item in self._objects():
                for kind in ("chain", "counter"):
                    if kind in item and isinstance(item[kind], dict):
                        existing.append(str(item[kind].get("name", "")))
            self._run(["-f", "-"], render_nft(restrictions, existing))
            self._names = {object_name(COUNTER_PREFIX, key): key for key in restrictions}

    def in_use(self) -> bool:
        with self._lock:
            try:
                return any(
                    str(item["chain"].get("name", "")).startswith(CHAIN_PREFIX)
                    for item in self._objects()
                    if isinstance(item.get("chain"), dict)
                )
            except FirewallError:  # no nft here: nothing of ours can be in force
                return False

    def dropped(self) -> dict[ServiceKey, int]:
        with self._lock:
            out: dict[ServiceKey, int] = {}
            for item in self._objects():
                counter = item.get("counter")
                if not isinstance(counter, dict):
                    continue
                key = self._names.get(str(counter.get("name", "")))
                if key is not None:
                    out[key] = int(counter.get("packets") or 0)
            return out
