"""The kernel parameters the director needs, kept as owned state: set at start, read back on
a schedule and set again when someone changed them (``sysctl --system`` with a file that
says otherwise, a package's postinst, an operator). Each one names what breaks without it.

- full NAT: ``net.ipv4.vs.conntrack=1`` (conntrack undoes the SNAT on the replies);
- BGP: ``net.ipv4.vs.sloppy_tcp`` and ``sloppy_sctp`` (a director takes over the middle of
  a connection another one saw start).

A parameter that cannot be set (the module not loaded yet, no permission) is a transient
failure: logged with its effect, shown in /readyz and the metrics, tried again with backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from director.adapters.worker import Keeper
from director.core.owned import Ledger, Transient, classify
from director.dataplane.netns import read_sysctls, write_sysctls
from director.logs import event

log = logging.getLogger("director.sysctl")
Values = tuple[tuple[str, str], ...]  # (name, value), in the order they are set


class Sysctls(Keeper[Values]):
    name = "sysctls"
    resource = "sysctls"
    verify_seconds = 10.0

    def __init__(
        self, netns: str | None, wanted: Mapping[str, tuple[str, str]], ledger: Ledger | None = None
    ) -> None:
        """``wanted``: name -> (value, what breaks without it)."""
        self.netns = netns
        self.values: Values = tuple((name, value) for name, (value, _) in wanted.items())
        self.effects = {name: effect for name, (_, effect) in wanted.items()}
        super().__init__(ledger)

    def start(self, wait: float = 2.0) -> None:
        """Start keeping them; the first write is waited for (``wait`` seconds at most; it
        takes milliseconds), so they are in force before the first sync's traffic."""
        super().start()
        self.submit(self.values)
        self.settle(wait)

    def install(self, value: Values) -> None:
        try:
            failed = write_sysctls(self.netns, dict(value))
        except OSError as exc:  # the namespace is gone, or cannot be entered
            raise classify(exc) from None
        for name, why in failed.items():
            event(
                log,
                "sysctl.not_set",
                level=logging.ERROR,
                sysctl=name,
                value=dict(value)[name],
                reason=why,
                effect=self.effects.get(name, ""),
            )
        if failed:
            raise Transient("; ".join(f"{name}: {why}" for name, why in failed.items()))

    def verify(self, value: Values) -> str | None:
        try:
            now = read_sysctls(self.netns, [name for name, _ in value])
        except OSError as exc:
            raise classify(exc) from None
        drift = [f"{name} is {now[name] or 'gone'}, not {v}" for name, v in value if now[name] != v]
        return "; ".join(drift) or None
