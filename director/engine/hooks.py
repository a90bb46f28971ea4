"""Every call the loop makes out of the engine, in one typed place.

The runtime sets what listens (systemd's notifier, the watchdog, the prober, keepalived's
and FRR's keepers); the loop's parts call through ``Hooks`` and never hold a listener of
their own. Each is None until someone listens: nothing is lost meanwhile, the parts tell
what is true again once one does (the VIP set, the routes, the targets).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from director.core.announce import Route
from director.core.checks import Target

Announce = Callable[[frozenset[str]], None]
Routes = Callable[[Mapping[str, Route]], None]
Targets = Callable[[set[Target], set[Target]], None]


@dataclass(slots=True)
class Hooks:
    """What the engine calls out to: readiness, health checks, keepalived, FRR."""

    on_ready: Callable[[str], None] | None = None  # once: the first sync is applied
    on_step: Callable[[], None] | None = None  # after every step (the watchdog, heartbeat)
    on_targets: Targets | None = None  # the health checks to add and to drop
    announce: Announce | None = None  # the VRRP VIP set, to keepalived
    on_routes: Routes | None = None  # every route, to FRR (one came, went or flipped)
