"""The VIPs this director holds on ``lo`` (BGP mode): IPVS takes a packet only when its
address is local, and a withdrawn VIP still gets the connections the routers had sent here
before, so a VIP stays on ``lo`` while it has virtual services, announced or not. Only the
addresses this director put there are ever removed."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from director.core.announce import pool_of
from director.core.owned import Transient
from director.core.pools import Pool

VIP_DEVICE = "lo"
Run = Callable[[list[str]], subprocess.CompletedProcess[str]]


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stderr or done.stdout).strip()[-500:] or f"exited {done.returncode}"


class LoopbackVips:
    """``held``: the VIPs this director put on ``lo``. ``run`` runs a command (a failure to
    run it raises ``Failure``); ``ip``: the ``ip`` command, in the namespace if any."""

    def __init__(self, run: Run, ip: list[str]) -> None:
        self._run, self._ip = run, ip
        self.held: set[str] = set()

    def on_lo(self) -> set[str]:
        """The addresses on ``lo`` now."""
        done = self._run([*self._ip, "-o", "addr", "show", "dev", VIP_DEVICE])
        if done.returncode != 0:
            raise Transient(f"cannot read the addresses of {VIP_DEVICE}: {_said(done)}")
        out = set()
        for line in done.stdout.splitlines():
            words = line.split()
            if len(words) > 3 and words[2] in ("inet", "inet6"):
                out.add(words[3].split("/")[0])
        return out

    def adopt(self, pools: tuple[Pool, ...]) -> None:
        """Count as held the addresses of ``pools`` already on ``lo`` (a previous run's): the
        pools are this director's own, so those it no longer serves are released."""
        self.held |= {address for address in self.on_lo() if pool_of(address, pools)}

    def hold(self, vips: set[str], *, missing: set[str] | None = None) -> None:
        """Exactly ``vips`` of the ones this director holds are on ``lo`` (others'
        untouched); ``missing``: held ones found gone from ``lo``, added back."""
        for vip in sorted((vips - self.held) | (missing or set())):
            prefix = 128 if ":" in vip else 32
            done = self._run([*self._ip, "addr", "replace", f"{vip}/{prefix}", "dev", VIP_DEVICE])
            if done.returncode != 0:
                raise Transient(f"cannot hold {vip} on {VIP_DEVICE}: {_said(done)}")
            self.held.add(vip)
        for vip in sorted(self.held - vips):
            prefix = 128 if ":" in vip else 32
            self._run([*self._ip, "addr", "del", f"{vip}/{prefix}", "dev", VIP_DEVICE])
            self.held.discard(vip)
