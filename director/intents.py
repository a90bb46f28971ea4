"""What operators asked for through the admin API, applied on top of the desired table. Pure
apart from ``load``/``save`` (one small JSON file, replaced atomically).

- Scheduler overrides of static services, by service name (``static/NAME``). Overrides of
  Kubernetes Services live on the Service itself (annotation ``lvs-director.io/scheduler-override``)
  so that both directors of a pair see them; those are handled by ``director.translate``.
- Drains: a real server (address, optionally port, optionally in one virtual service only)
  held at weight 0 everywhere it appears, until undrained.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from director.model import RealServer, ServiceConfig, ServiceKey, VirtualService


@dataclass(frozen=True, slots=True)
class Drain:
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

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "address": self.address, "port": self.port, "service": self.service}


@dataclass
class Intents:
    schedulers: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    drains: dict[str, Drain] = field(default_factory=dict)

    def apply(self, key: ServiceKey, vs: VirtualService) -> VirtualService:
        """``vs`` with its static scheduler override and drains applied."""
        config = vs.config
        if vs.origin.startswith("static/"):
            override = self.schedulers.get(vs.origin[len("static/") :])
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

    # -- persistence -----------------------------------------------------------------
    def save(self, path: Path) -> None:
        body = {
            "schedulers": {
                name: {"scheduler": s, "flags": sorted(f)}
                for name, (s, f) in self.schedulers.items()
            },
            "drains": [d.as_json() for d in self.drains.values()],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> Intents:
        """The saved intents; an absent file is none. A corrupt one raises ValueError."""
        try:
            body = json.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read saved API intents: {exc}") from None
        out = cls()
        for name, entry in (body.get("schedulers") or {}).items():
            out.schedulers[str(name)] = (str(entry["scheduler"]), frozenset(entry.get("flags", ())))
        for entry in body.get("drains") or ():
            drain = Drain(str(entry["address"]), entry.get("port"), entry.get("service"))
            out.drains[drain.id] = drain
        return out
