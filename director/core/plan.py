"""Desired vs actual IPVS state -> the minimal ordered list of operations. Pure.

Ownership: the director only ever touches virtual services inside the address ranges
(and firewall-mark ranges) it is configured to own. Everything else the kernel holds is
*foreign*: left alone, and reported.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from director.core.model import DestKey, Op, OpKind, RealServer, ServiceKey, Table, VirtualService

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Ownership:
    networks: tuple[Network, ...] = ()
    fwmarks: tuple[range, ...] = ()
    # (family, network as int, mask as int): owns() runs once per service on every full sync.
    _masks: tuple[tuple[int, int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        masks = tuple(
            (
                socket.AF_INET6 if net.version == 6 else socket.AF_INET,
                int(net.network_address),
                int(net.netmask),
            )
            for net in self.networks
        )
        object.__setattr__(self, "_masks", masks)

    def owns(self, key: ServiceKey) -> bool:
        if key.fwmark:
            return any(key.fwmark in marks for marks in self.fwmarks)
        family = key.family
        value = int.from_bytes(socket.inet_pton(family, key.address), "big")
        return any(fam == family and value & mask == net for fam, net, mask in self._masks)

    def describe(self) -> str:
        parts = [str(n) for n in self.networks]
        parts += [f"fwmark {r.start}-{r.stop - 1}" for r in self.fwmarks]
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True, slots=True)
class Plan:
    ops: tuple[Op, ...] = ()
    # Services in the kernel outside the owned ranges: never touched.
    foreign: tuple[ServiceKey, ...] = ()
    # Desired services the director refuses to program, with the reason.
    refused: tuple[tuple[ServiceKey, str], ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not self.ops


def plan_service(
    key: ServiceKey,
    desired: VirtualService | None,
    actual: VirtualService | None,
) -> list[Op]:
    """Operations that turn ``actual`` into ``desired`` for one virtual service.

    Scheduler, flags, persistence and real-server weights/forwarding/thresholds change in
    place (SET), never by delete-and-add, so established connections survive.
    """
    if desired is None:
        if actual is None:
            return []
        return [Op(OpKind.DEL_SERVICE, key, origin=actual.origin)]
    if actual == desired:  # the common case of a resync: compared in C, nothing to do
        return []
    origin = desired.origin
    ops: list[Op] = []
    actual_dests: Mapping[DestKey, RealServer]
    if actual is None:
        ops.append(Op(OpKind.ADD_SERVICE, key, config=desired.config, origin=origin))
        actual_dests = {}
    else:
        if actual.config != desired.config:
            ops.append(Op(OpKind.SET_SERVICE, key, config=desired.config, origin=origin))
        actual_dests = actual.real_servers
    wanted = desired.real_servers
    for dkey, rs in actual_dests.items():
        if dkey not in wanted:
            ops.append(Op(OpKind.DEL_DEST, key, dest=rs, origin=origin))
    for dkey, rs in wanted.items():
        have = actual_dests.get(dkey)
        if have is None:
            ops.append(Op(OpKind.ADD_DEST, key, dest=rs, origin=origin))
        elif have != rs:
            ops.append(Op(OpKind.SET_DEST, key, dest=rs, origin=origin))
    return ops


def build_plan(desired: Table, actual: Table, ownership: Ownership) -> Plan:
    """The full diff: every owned service in either table, in a stable order.

    Only the services that need operations are sorted: a resync that finds nothing to do
    (the common case, 10,000 services) pays for comparisons, not for a sort."""
    refused: list[tuple[ServiceKey, str]] = []
    foreign = sorted(key for key in actual if key not in desired and not ownership.owns(key))
    foreign_set = set(foreign)
    removals = [key for key in actual.keys() - desired.keys() if key not in foreign_set]
    changes: list[tuple[ServiceKey, list[Op]]] = []
    for key, vs in desired.items():
        if not ownership.owns(key):
            refused.append((key, f"outside the owned ranges ({ownership.describe()}); left alone"))
            continue
        ops = plan_service(key, vs, actual.get(key))
        if ops:
            changes.append((key, ops))
    # Deletions first: they free kernel memory before anything new is added.
    ordered: list[Op] = []
    for key in sorted(removals):
        ordered.extend(plan_service(key, None, actual[key]))
    for _key, ops in sorted(changes, key=lambda item: item[0]):
        ordered.extend(ops)
    refused.sort(key=lambda item: item[0])
    return Plan(tuple(ordered), tuple(foreign), tuple(refused))


def apply_ops_to_table(table: Table, ops: Iterable[Op], failed: set[int] | None = None) -> None:
    """Update a cached copy of the kernel table with the ops that succeeded.

    ``failed`` holds the positions (in ``ops``) of operations the kernel refused. This lets
    the reconciler keep an exact picture of the kernel without reading it back.
    """
    for index, op in enumerate(ops):
        if failed and index in failed:
            continue
        current = table.get(op.key)
        if op.kind is OpKind.ADD_SERVICE:
            assert op.config is not None
            table[op.key] = VirtualService(op.key, op.config, {}, op.origin)
        elif op.kind is OpKind.DEL_SERVICE:
            table.pop(op.key, None)
        elif current is None:
            continue
        elif op.kind is OpKind.SET_SERVICE:
            assert op.config is not None
            table[op.key] = VirtualService(op.key, op.config, current.real_servers, op.origin)
        else:
            assert op.dest is not None
            dests = dict(current.real_servers)
            if op.kind is OpKind.DEL_DEST:
                dests.pop(op.dest.key, None)
            else:
                dests[op.dest.key] = op.dest
            table[op.key] = VirtualService(op.key, current.config, dests, current.origin)
