"""Desired vs actual IPVS state -> the minimal ordered list of operations. Pure.

What the director owns (``director.core.ownership``) it plans for; everything else the kernel
holds is *foreign*: left alone, and reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from director.core.added import AddedService, added_whole
from director.core.dests import HASHING_SCHEDULERS, DestEdit, Dests, hash_order
from director.core.model import DestKey, RealServer, ServiceKey
from director.core.ownership import Ownership
from director.core.services import Op, OpKind, Table, VirtualService


@dataclass(frozen=True, slots=True)
class Plan:
    """The operations that make the kernel's table the desired one, and what was left alone."""

    ops: tuple[Op, ...] = ()
    # Services in the kernel outside the owned ranges: never touched.
    foreign: tuple[ServiceKey, ...] = ()
    # Desired services the director refuses to program, with the reason.
    refused: tuple[tuple[ServiceKey, str], ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not self.ops


def plan_service(
    key: ServiceKey, desired: VirtualService | None, actual: VirtualService | None
) -> list[Op]:
    """Operations that turn ``actual`` into ``desired`` for one virtual service.

    Scheduler, flags, persistence and real-server weights/forwarding/thresholds change in
    place (SET), never by delete-and-add, so established connections survive.
    """
    if desired is None:
        if actual is None:
            return []
        return [Op(OpKind.DEL_SERVICE, key, origin=actual.origin)]
    whole = _added(key, desired, actual)
    if whole is not None:  # a first sync's 100,000 real servers
        return list(whole)
    hashing = desired.config.scheduler in HASHING_SCHEDULERS
    origin = desired.origin
    if in_step(desired, actual):
        return []  # the common case of a resync (the very object, once read back as cached)
    ops: list[Op] = []
    actual_dests: Mapping[DestKey, RealServer]
    if actual is None:
        ops.append(Op(OpKind.ADD_SERVICE, key, config=desired.config, origin=origin))
        actual_dests = {}
    else:
        if actual.config != desired.config:
            ops.append(Op(OpKind.SET_SERVICE, key, config=desired.config, origin=origin))
        actual_dests = dict(actual.real_servers.items())  # looked up at random below
    wanted = dict(desired.real_servers.items())
    for dkey, rs in actual_dests.items():
        if dkey not in wanted:
            ops.append(Op(OpKind.DEL_DEST, key, dest=rs, origin=origin))
    if hashing:
        ops.extend(_in_hash_order(key, desired, wanted, actual_dests))
        return ops
    added = []
    for dkey, rs in wanted.items():
        have = actual_dests.get(dkey)
        if have is None:
            added.append(dkey)
        elif have != rs:
            ops.append(Op(OpKind.SET_DEST, key, dest=rs, origin=origin))
    # The last added goes first in the kernel's list: added last first, a new service's
    # list is in hash_order already, should the scheduler become a hashing one.
    added.sort(reverse=True)
    ops.extend(Op(OpKind.ADD_DEST, key, dest=wanted[dkey], origin=origin) for dkey in added)
    return ops


def _added(
    key: ServiceKey, desired: VirtualService, actual: VirtualService | None
) -> AddedService | None:
    """``desired`` as one ``AddedService`` if the kernel lacks it and it is added whole
    (``added_whole``); None if it is planned operation by operation."""
    if actual is None and added_whole(desired):
        return AddedService(key, desired)
    return None


def in_step(desired: VirtualService, actual: VirtualService | None) -> bool:
    """Nothing to do: ``actual`` is ``desired`` (a hashing service's list in hash_order)."""
    return (actual is desired or actual == desired) and not (
        desired.config.scheduler in HASHING_SCHEDULERS
        and actual is not None
        and _out_of_order(actual.real_servers)
    )


def _out_of_order(dests: Mapping[DestKey, RealServer]) -> bool:
    return list(dests) != hash_order(dests)


def _live_weight(wanted: Mapping[DestKey, RealServer]) -> int | None:
    """The weight to add a quiesced (weight 0) real server of an mh service with.

    mh builds its table from each real server's last weight above 0 (ip_vs_mh.c reads
    ``last_weight``, which a change to weight 0 keeps), so a director that saw a backend
    live and then quiesced it keeps it in the table, where a director that adds it at
    weight 0 would not: their tables, and the flows of other backends, would differ. Adding
    it at its live peers' weight, then setting 0, gives the same table. Exact when the live
    real servers share one weight (every Kubernetes Service, most static ones); only the
    ratios count, so with none live any one weight will do. None: mixed weights."""
    weights = {rs.weight for rs in wanted.values() if rs.weight}
    if len(weights) > 1:
        return None
    return weights.pop() if weights else 1


def as_applied(vs: VirtualService, before: VirtualService | None) -> VirtualService:
    """``vs`` as the kernel holds it once the plan from ``before`` applied, its real servers
    in the order of the kernel's list: a hashing service's in ``hash_order``; another's
    with the added ones at the head (in ``hash_order``) and the others where they were."""
    keys = list(vs.real_servers)
    if vs.config.scheduler in HASHING_SCHEDULERS:
        order = hash_order(keys)
    else:
        old = list(before.real_servers) if before is not None else []
        seen, wanted = set(old), set(keys)
        order = hash_order(d for d in keys if d not in seen) + [d for d in old if d in wanted]
    if order == keys:
        return vs  # the common case: no copy made
    # Its rows moved as they are (a VirtualService holds Dests: ``of`` returns them).
    moved = Dests.of(vs.real_servers).reordered(order, keys)
    return VirtualService(vs.key, vs.config, moved, vs.origin)


def _in_hash_order(
    key: ServiceKey,
    desired: VirtualService,
    wanted: Mapping[DestKey, RealServer],
    actual: Mapping[DestKey, RealServer],
) -> list[Op]:
    """Real-server operations that leave the kernel's list in ``hash_order``.

    The kernel adds at the head of the list, so the real servers that already form the
    list's tail in order stay; each one before them is deleted and added again (a deleted
    real server waits in the kernel's trash with its connections, and comes back with them),
    and the new ones are added, last first."""
    origin = desired.origin
    order = hash_order(wanted)
    position = {dkey: index for index, dkey in enumerate(d for d in actual if d in wanted)}
    staying, limit = 0, len(position)
    for dkey in reversed(order):
        at = position.get(dkey)
        if at is None or at >= limit:
            break
        staying, limit = staying + 1, at
    moving = order[: len(order) - staying]
    ops = [Op(OpKind.DEL_DEST, key, dest=actual[d], origin=origin) for d in moving if d in actual]
    live = None
    if desired.config.scheduler == "mh" and any(not wanted[d].weight for d in moving):
        live = _live_weight(wanted)
    for dkey in reversed(moving):
        rs = wanted[dkey]
        if rs.weight or live is None:
            ops.append(Op(OpKind.ADD_DEST, key, dest=rs, origin=origin))
        else:  # added live, then quiesced: see _live_weight
            ops.append(Op(OpKind.ADD_DEST, key, dest=rs._replace(weight=live), origin=origin))
            ops.append(Op(OpKind.SET_DEST, key, dest=rs, origin=origin))
    for dkey in order[len(moving) :]:
        if actual[dkey] != wanted[dkey]:
            ops.append(Op(OpKind.SET_DEST, key, dest=wanted[dkey], origin=origin))
    return ops


@dataclass(frozen=True, slots=True)
class Outline:
    """Which services a full diff touches, in the order their operations go, without the
    operations (a first sync's 110,000 need not all be held at once: see ``outlined_ops``)."""

    removals: tuple[ServiceKey, ...] = ()  # owned, in the kernel, not desired
    changes: tuple[ServiceKey, ...] = ()  # desired and not in step with the kernel
    foreign: tuple[ServiceKey, ...] = ()
    refused: tuple[tuple[ServiceKey, str], ...] = ()


def outline(desired: Table, actual: Table, ownership: Ownership) -> Outline:
    """Removals first (they free kernel memory before anything new is added), then
    changes, each in key order. Only the services out of step are sorted: a resync that
    finds nothing to do (the common case, 10,000 services) pays for comparisons, not for
    a sort."""
    refused: list[tuple[ServiceKey, str]] = []
    foreign = sorted(key for key in actual if key not in desired and not ownership.owns(key))
    foreign_set = set(foreign)
    removals = [key for key in actual.keys() - desired.keys() if key not in foreign_set]
    changes: list[ServiceKey] = []
    for key, vs in desired.items():
        if not ownership.owns(key):
            refused.append((key, f"outside the owned ranges ({ownership.describe()}); left alone"))
        elif not in_step(vs, actual.get(key)):
            changes.append(key)
    refused.sort(key=lambda item: item[0])
    rank = ServiceKey.rank
    return Outline(
        tuple(sorted(removals, key=rank)),
        tuple(sorted(changes, key=rank)),
        tuple(foreign),
        tuple(refused),
    )


def outlined_ops(
    shape: Outline, desired: Table, actual: Table
) -> Iterator[tuple[ServiceKey, Sequence[Op]]]:
    """Each outlined service's operations, planned when asked for against ``actual`` as it
    is then (a caller applying them service by service may update it between two)."""
    for key in shape.removals:
        yield key, plan_service(key, None, actual.get(key))
    for key in shape.changes:
        vs, before = desired[key], actual.get(key)
        added = _added(key, vs, before)  # its operations made only if asked for
        yield key, added if added is not None else plan_service(key, vs, before)


def build_plan(desired: Table, actual: Table, ownership: Ownership) -> Plan:
    """The full diff: every owned service in either table, in a stable order."""
    shape = outline(desired, actual, ownership)
    ops = [op for _key, service_ops in outlined_ops(shape, desired, actual) for op in service_ops]
    return Plan(tuple(ops), shape.foreign, shape.refused)


def apply_ops_to_table(table: Table, ops: Iterable[Op], failed: set[int] | None = None) -> None:
    """Update a cached copy of the kernel table with the ops that succeeded.

    ``failed`` holds the positions (in ``ops``) of operations the kernel refused. This lets
    the reconciler keep an exact picture of the kernel without reading it back.
    """
    editing: dict[ServiceKey, DestEdit] = {}  # a service's real servers, op by op
    for index, op in enumerate(ops):
        if failed and index in failed:
            continue
        if editing and op.key not in editing:
            _finish(table, editing)  # a plan's ops come service by service
        current = table.get(op.key)
        if op.kind is OpKind.ADD_SERVICE:
            assert op.config is not None
            table[op.key] = VirtualService(op.key, op.config, {}, op.origin)
            editing.pop(op.key, None)
        elif op.kind is OpKind.DEL_SERVICE:
            table.pop(op.key, None)
            editing.pop(op.key, None)
        elif current is None:
            continue
        elif op.kind is OpKind.SET_SERVICE:
            assert op.config is not None
            table[op.key] = VirtualService(op.key, op.config, current.real_servers, op.origin)
        else:
            assert op.dest is not None
            edit = editing.get(op.key)
            if edit is None:
                edit = editing[op.key] = DestEdit(current.real_servers)
            if op.kind is OpKind.DEL_DEST:
                edit.remove(op.dest.key)
            elif op.kind is OpKind.ADD_DEST:  # the kernel adds at the head of its list
                edit.add(op.dest)
            else:
                edit.set(op.dest)
    _finish(table, editing)


def _finish(table: Table, editing: dict[ServiceKey, DestEdit]) -> None:
    """The edited services written back, before the next service's ops (so a whole plan's
    edits are never held at once)."""
    for key, edit in editing.items():
        vs = table[key]
        table[key] = VirtualService(key, vs.config, edit.done(), vs.origin)
    editing.clear()
