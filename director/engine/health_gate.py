"""Health gating: which real servers are checked with what, which fail, and what that does
to a virtual service (weight 0, or removed and then drained; all failing: kept, loudly, or
its sorry server in their place, as keepalived's ``sorry_server``: also when it has none).

The prober runs the checks; ``on_targets(add, remove)`` tells it what to check. A target
shared by several virtual services is checked once.
"""

from __future__ import annotations

from director.core.checks import Target
from director.core.model import DestKey, RealServer, ServiceKey
from director.core.services import VirtualService
from director.engine.hooks import Hooks
from director.schema.config import HealthSettings

Checks = dict[DestKey, tuple[Target, ...]]


class HealthGate:
    def __init__(self, settings: HealthSettings | None, hooks: Hooks) -> None:
        self.settings = settings
        self.hooks = hooks
        self.checks: dict[ServiceKey, Checks] = {}
        self.users: dict[Target, set[ServiceKey]] = {}
        self.down: set[Target] = set()
        self.all_down: set[ServiceKey] = set()  # every real server failing: kept, loudly
        self.sorry: dict[ServiceKey, RealServer] = {}  # what serves while none is up
        self.version = 0  # bumped when ``checks`` changes (readers copy it then)
        self.verdicts = 0  # bumped when ``down`` changes

    def set_checks(self, key: ServiceKey, checks: Checks) -> None:
        if checks == self.checks.get(key, {}):
            return
        self.version += 1
        before = {t for targets in self.checks.get(key, {}).values() for t in targets}
        after = {t for targets in checks.values() for t in targets}
        if checks:
            self.checks[key] = checks
        else:
            self.checks.pop(key, None)
        added, removed = set(), set()
        for target in after - before:
            users = self.users.setdefault(target, set())
            if not users:
                added.add(target)
            users.add(key)
        for target in before - after:
            users = self.users.get(target, set())
            users.discard(key)
            if not users:
                self.users.pop(target, None)
                self.down.discard(target)
                removed.add(target)
        if (added or removed) and self.hooks.on_targets is not None:
            self.hooks.on_targets(added, removed)

    def forget(self, key: ServiceKey) -> None:
        self.set_checks(key, {})
        self.all_down.discard(key)
        self.sorry.pop(key, None)

    def set_sorry(self, key: ServiceKey, server: RealServer | None) -> None:
        """The server that takes ``key``'s traffic while none of its real servers is up."""
        if server is None:
            self.sorry.pop(key, None)
        else:
            self.sorry[key] = server

    @property
    def unserved(self) -> set[ServiceKey]:
        """The virtual services whose every real server fails with no sorry server in their
        place: a VIP of only these is not worth announcing over BGP."""
        return {key for key in self.all_down if key not in self.sorry}

    def observe(self, target: Target, up: bool) -> set[ServiceKey]:
        """A target's new state; the virtual services that use it."""
        if up != (target not in self.down):
            self.verdicts += 1
        if up:
            self.down.discard(target)
        else:
            self.down.add(target)
        return set(self.users.get(target, ()))

    def unhealthy(self, key: ServiceKey, dkey: DestKey) -> bool:
        return any(t in self.down for t in self.checks.get(key, {}).get(dkey, ()))

    def failing(self) -> dict[ServiceKey, frozenset[DestKey]]:
        """Every virtual service's failing real servers (for the view)."""
        out: dict[ServiceKey, frozenset[DestKey]] = {}
        users = self.users
        for key in {key for target in self.down for key in users.get(target, ())}:
            sick = frozenset(d for d in self.checks.get(key, {}) if self.unhealthy(key, d))
            if sick:
                out[key] = sick
        return out

    def apply(self, key: ServiceKey, vs: VirtualService) -> tuple[VirtualService, bool]:
        """``vs`` with its failing real servers at weight 0 (or removed), unless all of them
        fail (then kept, or its sorry server alone); and whether every one has just started
        failing (say so, once)."""
        sorry = self.sorry.get(key)
        if sorry is not None and not vs.real_servers:  # none at all: the sorry server
            return VirtualService(key, vs.config, {sorry.key: sorry}, vs.origin), False
        if not self.down or key not in self.checks:
            self.all_down.discard(key)
            return vs, False
        failing = [d for d in vs.real_servers if self.unhealthy(key, d)]
        if not failing:
            self.all_down.discard(key)
            return vs, False
        health = self.settings
        every = len(failing) == len(vs.real_servers)
        if every and (sorry is not None or health is None or health.all_down == "keep"):
            first = key not in self.all_down
            self.all_down.add(key)
            if sorry is not None:
                return VirtualService(key, vs.config, {sorry.key: sorry}, vs.origin), first
            return vs, first
        self.all_down.discard(key)
        dests = dict(vs.real_servers)
        for dkey in failing:
            if health is not None and health.on_failure == "remove":
                del dests[dkey]  # then drained like any removed real server
            else:
                dests[dkey] = dests[dkey]._replace(weight=0)
        return VirtualService(key, vs.config, dests, vs.origin), False
