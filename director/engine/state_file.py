"""The desired table as a JSON file (``--state-file``: what a shadow director would program)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from director.core.model import Table


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
    """The desired table as JSON, replaced atomically (readers never see half a file)."""
    body = {"generated": time.time(), "addresses": addresses, "services": table_json(table)}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=1) + "\n")
    os.replace(tmp, path)
