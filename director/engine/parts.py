"""The loop's parts, made once by the Controller and held here alone: the translator shapes
with them and the programmer programs with them, each through this one holder, so no two
objects can come to hold different ones."""

from __future__ import annotations

from dataclasses import dataclass

from director.engine.addresses import Addresses
from director.engine.draining import Draining
from director.engine.exports import Exports
from director.engine.health_gate import HealthGate
from director.engine.intake import Intake
from director.engine.intent_store import IntentStore
from director.engine.pace import Pace
from director.engine.reporter import Reporter
from director.engine.source_filter import SourceFilter
from director.engine.syncer import Syncer
from director.engine.table import Programmed


@dataclass(frozen=True, slots=True)
class Parts:
    """One job each (Seesaw's engine and its managers)."""

    intake: Intake  # events into the snapshot
    store: IntentStore  # the API's intents, kept across restarts
    syncer: Syncer  # the kernel (through the reconciler)
    reporter: Reporter  # Service status and Events
    addresses: Addresses  # the pools' addresses given to Services
    gate: HealthGate  # the health checks' verdicts
    drains: Draining  # real servers leaving gracefully
    filter: SourceFilter  # source ranges and full NAT in nftables
    table: Programmed  # what is programmed, for whom
    exports: Exports  # the read model, the state file, the VIP set, the BGP routes
    pace: Pace  # clock, timers, back-off, heartbeat
