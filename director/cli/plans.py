"""What ``plan``, ``apply`` and ``decommission`` print, and the kernel they work on: shared by
the commands, below each of them (``main`` and ``decommission`` both import it; neither
imports the other's names)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from director.core.services import Op, OpKind

if TYPE_CHECKING:  # `director status` imports this module: no schema, no planner
    from director.core.plan import Plan
    from director.dataplane.interface import Ipvs
    from director.schema.config import Settings

EXIT_FAILED_OPS = 1  # some operations failed (each is printed with the kernel's errno)
EXIT_CONFIG = 2
SHOWN_FAULTS = 20  # faults of an invalid file printed (check --json lists them all)
EXIT_NO_IPVS = 3


def open_ipvs(netns: str | None) -> Ipvs:
    """The kernel's IPVS for the one-shot commands (made where the daemon makes its own)."""
    from director.daemon.wiring import open_ipvs as made

    return made(netns)


def _summary(ops: Sequence[Op]) -> str:
    counts = Counter(op.kind for op in ops)
    parts = []
    for verb, service_kind, dest_kind in (
        ("To remove", OpKind.DEL_SERVICE, OpKind.DEL_DEST),
        ("To change in place", OpKind.SET_SERVICE, OpKind.SET_DEST),
        ("To add", OpKind.ADD_SERVICE, OpKind.ADD_DEST),
    ):
        things = [
            f"{n} {noun}{'s' if n != 1 else ''}"
            for n, noun in ((counts[service_kind], "service"), (counts[dest_kind], "real server"))
            if n
        ]
        if things:
            parts.append(f"{verb}: {', '.join(things)}.")
    return " ".join(parts)


def print_plan(settings: Settings, plan: Plan, verb: str) -> None:
    print(
        f"{verb} {settings.source} against this kernel's IPVS "
        f"(owned: {settings.ownership.describe()})"
    )
    for op in plan.ops:
        origin = f"   [{op.origin}]" if op.origin else ""
        indent = "  " if op.kind in (OpKind.ADD_DEST, OpKind.SET_DEST, OpKind.DEL_DEST) else ""
        print(f"{indent}{op.describe()}{origin}")
    print("No changes: the kernel matches the configuration." if plan.empty else _summary(plan.ops))
    for key in plan.foreign:
        print(f"Left alone (not owned): {key}")
    for key, reason in plan.refused:
        print(f"Refused: {key}: {reason}")


def plan_json(plan: Plan) -> str:
    return json.dumps(
        {
            "ops": [
                {
                    "op": op.kind.value,
                    "service": str(op.key),
                    "detail": op.describe(),
                    "origin": op.origin,
                }
                for op in plan.ops
            ],
            "foreign": [str(k) for k in plan.foreign],
            "refused": [{"service": str(k), "reason": r} for k, r in plan.refused],
        },
        indent=2,
    )
