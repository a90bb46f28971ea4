"""The desired table as a JSON file (``--state-file``: what a shadow director would program)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from director.core.owned import write_atomic
from director.core.services import Table


def table_json(table: Table) -> list[dict[str, Any]]:
    out = []
    for key in sorted(table, key=str):
        vs = table[key]
        out.append(
            {
                "service": str(key),
                "origin": vs.origin,
                "scheduler": vs.config.scheduler,
                "flags": sorted(vs.config.flags),
                "persistence": vs.config.persistence,
                "real_servers": [
                    {
                        "address": rs.address,
                        "port": rs.port,
                        "weight": rs.weight,
                        "forwarding": rs.forwarding.label,
                    }
                    for rs in vs.real_servers.values()
                ],
            }
        )
    return out


def write_state(path: Path, table: Table, addresses: dict[str, list[str]]) -> None:
    """The desired table as JSON, replaced atomically and durably (readers never see half a
    file, a crash leaves the old one). Raises OSError."""
    body = {"generated": time.time(), "addresses": addresses, "services": table_json(table)}
    write_atomic(path, json.dumps(body, indent=1) + "\n")
