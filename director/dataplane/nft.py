"""The nftables adapter: the only module that runs ``nft``.

Applies ``director.core.firewall.render_nft`` scripts in one transaction, reads the per-service
drop counters back (``nft -j``), and reads the whole table back as a fingerprint (the loop
compares it with the one taken after its last write: drift), in the director's network
namespace when it has one. nft that cannot be run, or is killed, is a transient failure;
nft refusing a script is a refusal (``FirewallError``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
from typing import Any

from director.core.firewall import (
    CHAIN_PREFIX,
    COUNTER_PREFIX,
    FAMILY,
    GUARD_COUNTER,
    GUARD_OBJECTS,
    METER_PREFIX,
    OVER_PREFIX,
    SNAT_OBJECTS,
    TABLE,
    FirewallError,
    Limits,
    Restrictions,
    SynGuard,
    limited_keys,
    object_name,
    render_nft,
)
from director.core.model import Family, ServiceKey
from director.core.owned import Transient, not_run, run_failure

# What changes in a table whose rules did not: the counters' figures, and the handles (the
# director's own rewrite of the same rules makes new ones).
_VOLATILE = frozenset({"packets", "bytes", "handle"})


class NftFirewall:
    def __init__(
        self,
        netns: str | None = None,
        nft: str = "nft",
        snat_to: dict[Family, tuple[str, ...]] | None = None,
        snat_ports: tuple[int, int] | None = None,
        syn_guard: SynGuard | None = None,
    ) -> None:
        """``snat_to``: the box's SNAT addresses per family (full NAT; none: no full NAT),
        ``snat_ports``: the source ports it leaves from (None: the kernel's choice),
        ``syn_guard``: what SYN cookies offer (None: no SYN guard on this box)."""
        self.netns, self.nft, self.snat_to = netns, nft, snat_to or {}
        self.snat_ports, self.syn_guard = snat_ports, syn_guard
        self._names: dict[str, ServiceKey] = {}  # counter name -> service
        self._over: dict[str, ServiceKey] = {}  # over-limit counters' stem -> service
        self._existing: list[str] | None = None  # chains, sets, counters (None: not known)
        self._lock = threading.Lock()

    def _run(self, args: list[str], stdin: str | None = None) -> str:
        binary = shutil.which(self.nft) or self.nft
        command = (["ip", "netns", "exec", self.netns] if self.netns else []) + [binary, *args]
        try:
            done = subprocess.run(
                command, input=stdin, capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise run_failure(self.nft, exc) from None
        failed = not_run(self.nft, done.returncode, done.stderr)
        if failed is not None:
            raise failed
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
            raise Transient(f"nft -j printed something unexpected: {exc}") from None

    def apply(
        self,
        restrictions: Restrictions,
        snat: frozenset[ServiceKey] = frozenset(),
        guard: frozenset[ServiceKey] = frozenset(),
        limits: Limits | None = None,
    ) -> None:
        """One transaction. What the table holds (to delete what is no longer wanted) is
        known from the last read-back (``fingerprint``, taken after every write): read
        again only when unknown, or when the transaction failed on it (the table changed
        since: flushed, say)."""
        with self._lock:
            known = self._existing
            try:
                existing = known if known is not None else _names(self._objects())
                self._run(["-f", "-"], self._script(restrictions, existing, snat, guard, limits))
            except FirewallError:
                if known is None:
                    raise
                self._existing = None
                existing = _names(self._objects())
                self._run(["-f", "-"], self._script(restrictions, existing, snat, guard, limits))
            self._existing = None  # changed: read again (fingerprint, or the next apply)
            self._names = {object_name(COUNTER_PREFIX, key): key for key in restrictions}
            self._over = {
                object_name(OVER_PREFIX, k): k for k in limited_keys(limits or {}, restrictions)
            }

    def _script(
        self,
        restrictions: Restrictions,
        existing: list[str],
        snat: frozenset[ServiceKey],
        guard: frozenset[ServiceKey],
        limits: Limits | None,
    ) -> str:
        return render_nft(
            restrictions,
            existing,
            snat,
            self.snat_to,
            self.snat_ports,
            guard=guard,
            syn_guard=self.syn_guard,
            limits=limits,
        )

    def in_use(self) -> bool:
        with self._lock:
            try:
                return any(
                    str(item["chain"].get("name", "")).startswith(CHAIN_PREFIX)
                    or item["chain"].get("name") in (*SNAT_OBJECTS, *GUARD_OBJECTS)
                    for item in self._objects()
                    if isinstance(item.get("chain"), dict)
                )
            except (FirewallError, Transient):  # no nft here: nothing of ours can be in force
                return False

    def fingerprint(self) -> str:
        with self._lock:
            items = [item for item in self._objects() if "metainfo" not in item]
            self._existing = _names(items)
        if not items:
            return ""
        text = json.dumps(_steady(items), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

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

    def limited(self) -> dict[ServiceKey, tuple[int, int]]:
        with self._lock:
            found: dict[ServiceKey, list[int]] = {key: [0, 0] for key in self._over.values()}
            for item in self._objects():
                counter = item.get("counter")
                if not isinstance(counter, dict):
                    continue
                stem, _, which = str(counter.get("name", "")).rpartition("_")
                key = self._over.get(stem)
                if key is not None and which in ("client", "service"):
                    found[key][which == "service"] = int(counter.get("packets") or 0)
            return {key: (a, b) for key, (a, b) in found.items()}

    def guard_dropped(self) -> int:
        with self._lock:
            for item in self._objects():
                counter = item.get("counter")
                if isinstance(counter, dict) and counter.get("name") == GUARD_COUNTER:
                    return int(counter.get("packets") or 0)
            return 0


def _steady(value: object) -> object:
    """``value`` (nft's JSON) without the counters' figures, the handles, and the clients a
    limit's meter holds (traffic puts them there, not a writer)."""
    if isinstance(value, dict):
        item = value.get("set")
        if isinstance(item, dict) and str(item.get("name", "")).startswith(METER_PREFIX):
            return {"set": {k: _steady(v) for k, v in item.items() if k != "elem"}}
        return {k: _steady(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def _names(items: list[dict[str, Any]]) -> list[str]:
    """The chains, sets, counters and limits of the director's table, from nft's JSON."""
    return [
        str(item[kind].get("name", ""))
        for item in items
        for kind in ("chain", "counter", "set", "limit")
        if kind in item and isinstance(item[kind], dict)
    ]
