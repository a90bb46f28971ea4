"""FRR kept true on a thread of its own: the latest routes rendered and applied, what FRR
announces and the VIPs on ``lo`` read back and repaired (``director.adapters.worker``'s
Keeper)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from director.adapters.frr.announce import VERIFY_SECONDS, Frr
from director.adapters.frr.conf import Networks, boot_text, render_frr
from director.adapters.frr.loopback import VIP_DEVICE
from director.adapters.worker import Keeper
from director.core.announce import PeerState, Route
from director.core.owned import Failure, Ledger, classify
from director.core.pools import Pool
from director.logs import event
from director.schema.bgp import BgpSettings

log = logging.getLogger("director.frr")


class FrrSync(Keeper[Mapping[str, Route]]):
    """Renders and applies FRR's configuration on a thread of its own (the latest route
    table wins; the loop never waits), and keeps it true: every ``VERIFY_SECONDS`` (or
    ``poll_seconds``, if longer) it reads back what bgpd announces, the file FRR boots from
    and the VIPs on ``lo``, and repairs whatever someone else changed (FRR restarted from
    its boot file, ``ip addr flush dev lo``); every ``poll_seconds`` it asks FRR how its
    sessions are. Each read-back starts vtysh once: on a box emulated in software that is
    most of a second of CPU, so it is not done every second."""

    name = "frr"
    resource = "frr"

    def __init__(
        self,
        bgp: BgpSettings,
        pools: tuple[Pool, ...],
        source_config: str,
        frr: Frr | None = None,
        *,
        netns: str | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.bgp, self.pools, self.source_config = bgp, pools, source_config
        self.frr = frr or Frr(bgp, netns)
        self.idle_seconds = float(bgp.poll_seconds) or None
        self.verify_seconds = max(VERIFY_SECONDS, float(bgp.poll_seconds))
        self.sessions: tuple[PeerState, ...] = tuple(
            PeerState(p.address, p.asn, "unknown") for p in bgp.peers
        )
        self.polled = 0.0
        self._observed: Networks | None = {}  # what verify found bgpd announcing (None: no bgp)
        super().__init__(ledger)

    def start(self) -> None:
        self.ledger.track("addresses")
        super().start()

    def install(self, value: Mapping[str, Route]) -> None:
        if self.frr.applied is None and not self.frr.vips.held:
            self.frr.vips.adopt(tuple(p for p in self.pools if p.announce.bgp))
        announced = {vip for vip, route in value.items() if route.announced}
        # Held before it is announced, released only once it is withdrawn.
        self.frr.vips.hold(self.frr.vips.held | set(value))
        self.frr.install(render_frr(self.bgp, value, self.pools, self.source_config))
        self.frr.vips.hold(set(value))
        event(log, "frr.routes", announced=len(announced), withdrawn=len(value) - len(announced))

    def verify(self, value: Mapping[str, Route]) -> str | None:
        if not self.idle_seconds:  # else every poll looks at lo already
            self._keep_addresses()
        drift = []
        running = self.frr.running()
        wanted = self.frr.wanted_networks()
        if running is None and self._observed is not None:
            # bgpd runs no router bgp: FRR restarting (its boot file not loaded yet), most
            # likely. Repaired (a whole frr-reload.py: a minute under emulation) only if the
            # next read-back finds it so too.
            self._observed = None
            return None
        self._observed = running
        if running is None:
            drift.append(f"bgpd runs no router bgp {self.bgp.asn}")
        elif _prefixes(running) != _prefixes(wanted):
            extra = sorted(p.split()[2] for p in _prefixes(running) - _prefixes(wanted))
            lost = sorted(p.split()[2] for p in _prefixes(wanted) - _prefixes(running))
            drift.append(
                f"bgpd announces {len(extra)} prefixes it should not "
                f"({', '.join(extra[:3]) or '-'}) and misses {len(lost)} "
                f"({', '.join(lost[:3]) or '-'})"
            )
        if self.frr.applied is not None:
            try:
                boot = self.frr.path.read_text()
            except FileNotFoundError:
                boot = None
            except OSError as exc:
                raise classify(exc) from None
            if boot != boot_text(self.frr.applied):
                drift.append(f"{self.frr.path} is not the file the director wrote")
        return "; ".join(drift) or None

    def repair(self, value: Mapping[str, Route], drift: str) -> None:
        running = self._observed
        if running is None:
            # FRR runs something else: frr-reload.py brings it back to the whole text.
            self.frr.applied = None
            self.install(value)
            return
        self.frr.send_networks(running, self.frr.wanted_networks())
        self.frr.write_boot_file()

    def _keep_addresses(self) -> None:
        """The VIPs this director holds on ``lo``, put back if someone removed them (IPVS
        takes a packet only when its address is local: a VIP announced without it on ``lo``
        black-holes its traffic)."""
        if not self.frr.vips.held:
            self.ledger.ok("addresses")
            return
        try:
            missing = self.frr.vips.held - self.frr.vips.on_lo()
            if not missing:
                self.ledger.ok("addresses")
                return
            what = f"{len(missing)} VIPs gone from {VIP_DEVICE} ({', '.join(sorted(missing)[:3])})"
            self.ledger.drift("addresses", what)
            event(
                log,
                "owned.drift",
                level=logging.WARNING,
                resource="addresses",
                drift=what,
                action="repairing",
            )
            self.frr.vips.hold(set(self.frr.vips.held), missing=missing)
        except Failure as exc:
            self.ledger.failed("addresses", exc)
            event(log, "frr.addresses_failed", level=logging.ERROR, reason=exc.reason)
            return
        self.ledger.ok("addresses", repaired=True)
        event(log, "owned.repaired", resource="addresses", drift=what)

    def poll(self) -> None:
        """Between changes: ask FRR how its sessions are, and look at ``lo`` (cheap, and a
        VIP gone from it black-holes its traffic until it is back)."""
        self._keep_addresses()
        self._poll()

    def withdrawn(self, timeout: float) -> bool:
        """Wait until FRR says it sends no prefix to any established peer (the withdrawals
        went out); False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self._poll()
            if all(p.prefixes_sent == 0 for p in self.sessions if p.up):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def _poll(self) -> None:
        previous = {p.address: p.state for p in self.sessions}
        self.sessions = tuple(self.frr.peers())
        self.polled = time.time()
        for peer in self.sessions:
            if previous.get(peer.address) != peer.state:
                event(
                    log,
                    "bgp.session",
                    peer=peer.address,
                    state=peer.state,
                    bfd=peer.bfd,
                    level=logging.INFO if peer.up else logging.WARNING,
                )


def _prefixes(networks: Networks) -> set[str]:
    """Each announced prefix with its family and its route-map: what bgpd sends."""
    return {f"{family} {line}" for family, nets in networks.items() for line in nets.values()}
