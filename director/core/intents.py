"""What operators asked for through the admin API, applied on top of the desired table. Pure
apart from ``load``/``save`` (one small JSON file, replaced atomically).

- Scheduler overrides of static services, by service name (``static/NAME``). Overrides of
  Kubernetes Services live on the Service itself (annotation ``lvs-director.io/scheduler-override``)
  so that both directors of a pair see them; those are handled by ``director.core.translate``.
- Drains: a real server (address, optionally port, optionally in one virtual service only)
  held at weight 0 everywhere it appears, until undrained.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from director.core.errors import DirectorError
from director.core.model import RealServer, ServiceConfig, ServiceKey, canonical_address
from director.core.services import VirtualService, static_name

MAX_DRAINS = 1000  # each is matched against every real server on every sync


class IntentRefused(DirectorError):
    """An intent that cannot be taken as asked (the API's 404 or 409)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass(frozen=True, slots=True)
class Drain:
    """An operator's drain: a real server's address (and port), everywhere or in one service."""

    address: str
    port: int | None = None  # None: every port of the address
    service: str | None = None  # str(ServiceKey); None: everywhere

    @property
    def id(self) -> str:
        port = "*" if self.port is None else str(self.port)
        where = f"@{self.service}" if self.service else ""
        return f"{self.address}:{port}{where}"

    def matches(self, key: ServiceKey, rs: RealServer) -> bool:
        return (
            rs.address == self.address
            and (self.port is None or rs.port == self.port)
            and (self.service is None or self.service == str(key))
        )

    @property
    def ident(self) -> str:
        """The short id the API names it by."""
        import hashlib  # here: a first start loads this module before its table is sent

        return hashlib.sha256(self.id.encode()).hexdigest()[:12]

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "address": self.address, "port": self.port, "service": self.service}


@dataclass
class Intents:
    """What the operator asked for through the API: schedulers, drains and maintenance."""

    schedulers: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    drains: dict[str, Drain] = field(default_factory=dict)
    # Why this director withdraws every BGP route (None: it does not). Kept across restarts:
    # a box taken out stays out until it is put back.
    maintenance: str | None = None

    def apply(self, key: ServiceKey, vs: VirtualService) -> VirtualService:
        """``vs`` with its static scheduler override and drains applied."""
        config = vs.config
        name = static_name(vs.origin)
        if name:
            override = self.schedulers.get(name)
            if override is not None:
                config = ServiceConfig(override[0], override[1], config.persistence, config.netmask)
        dests = vs.real_servers
        if self.drains:
            drains = tuple(self.drains.values())
            changed = {
                dkey: rs._replace(weight=0)
                for dkey, rs in dests.items()
                if rs.weight and any(d.matches(key, rs) for d in drains)
            }
            if changed:
                dests = {**dests, **changed}
        if config is vs.config and dests is vs.real_servers:
            return vs
        return VirtualService(key, config, dests, vs.origin)

    def drained(self, key: ServiceKey, rs: RealServer) -> bool:
        return any(d.matches(key, rs) for d in self.drains.values())

    # -- changes (the control loop applies them to a copy, stores it, then swaps) ------
    def copy(self) -> Intents:
        return Intents(dict(self.schedulers), dict(self.drains), self.maintenance)

    def change(self, intent: Intent) -> None:
        """Apply one intent in place. Raises IntentRefused (nothing changed) when it
        conflicts with what is there (an existing drain, a missing one)."""
        if isinstance(intent, SetMaintenance):
            self.maintenance = intent.reason
        elif isinstance(intent, SetScheduler):
            if intent.choice is None:
                self.schedulers.pop(intent.name, None)
            else:
                self.schedulers[intent.name] = intent.choice
        elif isinstance(intent, AddDrain):
            drain = intent.drain
            if drain.id in self.drains:
                raise IntentRefused(409, f"{drain.id} is already drained (id {drain.ident})")
            if len(self.drains) >= MAX_DRAINS:
                raise IntentRefused(
                    409,
                    f"{len(self.drains)} drains are in force (at most {MAX_DRAINS}); "
                    "undrain some first",
                )
            self.drains[drain.id] = drain
        else:
            found = next((d for d in self.drains.values() if d.ident == intent.ident), None)
            if found is None:
                raise IntentRefused(404, f"no drain with id {intent.ident!r}")
            del self.drains[found.id]

    # -- persistence -----------------------------------------------------------------
    def save(self, path: Path) -> None:
        body = {
            "schedulers": {
                name: {"scheduler": s, "flags": sorted(f)}
                for name, (s, f) in self.schedulers.items()
            },
            "drains": [d.as_json() for d in self.drains.values()],
            "maintenance": self.maintenance,
        }
        from director.core.owned import write_atomic  # here: a start reads, never writes

        write_atomic(path, json.dumps(body, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Intents:
        """The saved intents; an absent file is none. A corrupt one raises ValueError."""
        try:
            body = json.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read saved API intents: {exc}") from None
        try:
            return cls._parse(body)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"{path}: saved API intents are not valid: {exc!r}") from None

    @classmethod
    def _parse(cls, body: Any) -> Intents:
        out = cls()
        for name, entry in (body.get("schedulers") or {}).items():
            flags = entry.get("flags", ())
            if not isinstance(flags, list):
                raise TypeError("flags must be a list")
            out.schedulers[str(name)] = (str(entry["scheduler"]), frozenset(map(str, flags)))
        for entry in body.get("drains") or ():
            port, service = entry.get("port"), entry.get("service")
            if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
                raise TypeError("a drain's port must be an integer")
            drain = Drain(
                canonical_address(str(entry["address"])),
                port,
                None if service is None else str(service),
            )
            out.drains[drain.id] = drain
        maintenance = body.get("maintenance")
        out.maintenance = None if maintenance is None else str(maintenance)
        return out


@dataclass(frozen=True, slots=True)
class SetScheduler:
    """A static service's scheduler (None: back to the configuration's)."""

    name: str
    choice: tuple[str, frozenset[str]] | None


@dataclass(frozen=True, slots=True)
class AddDrain:
    """The intent to drain a real server."""

    drain: Drain


@dataclass(frozen=True, slots=True)
class RemoveDrain:
    """The intent to end a drain, by its id."""

    ident: str  # Drain.ident


@dataclass(frozen=True, slots=True)
class SetMaintenance:
    """Withdraw every BGP route, keeping IPVS, so connections drain through the other
    directors (None: announce again)."""

    reason: str | None


Intent = SetScheduler | AddDrain | RemoveDrain | SetMaintenance
