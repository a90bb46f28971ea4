"""The configuration file's shape (:class:`Document`: the sections and the file's own
objects, each key defined once), what it compiles to (:class:`Settings`), and the error that
names a fault in it (:class:`ConfigError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from director.core.checks import CheckSpec
from director.core.errors import DirectorError
from director.core.model import RateLimit, RealServer, ServiceKey
from director.core.ownership import Ownership
from director.core.services import Table
from director.schema.sections import (
    ApiSettings,
    ClusterSettings,
    Defaults,
    GuardSettings,
    HealthSettings,
    KubeSettings,
    OwnershipEntry,
    Section,
    SnatSettings,
)
from director.schema.sections_base import from_file, section
from director.schema.static import ServiceEntry

if TYPE_CHECKING:
    from director.core.pools import Pool
    from director.schema.bgp import BgpSettings
    from director.schema.ha import HaSettings
    from director.schema.pool_entries import PoolEntry

# Imported when a file has the section (a static box's has none of them): see LATER in
# director.schema.sections_base.
LATER_SECTIONS = {
    "BgpSettings": "director.schema.bgp",
    "HaSettings": "director.schema.ha",
    "PoolEntry": "director.schema.pool_entries",
}


class ConfigError(DirectorError, ValueError):
    status = 400

    def __init__(
        self, source: str, line: int, where: str, reason: str, also: tuple[ConfigError, ...] = ()
    ) -> None:
        """``also``: the file's other faults found in the same pass, in file order (the
        message names the first; ``director check`` lists them all)."""
        self.source, self.line, self.where, self.reason = source, line, where, reason
        self.also = also
        location = f"{source}:{line}" if line else source
        super().__init__(f"{location}: {where + ': ' if where else ''}{reason}")

    @property
    def faults(self) -> tuple[ConfigError, ...]:
        """This fault and the others found with it, in file order."""
        return (self, *self.also)


@section
class Document(Section):
    """The whole file."""

    ownership: OwnershipEntry | None = None
    defaults: Defaults | None = None
    services: tuple[ServiceEntry, ...] = ()
    kubernetes: KubeSettings | None = None
    clusters: tuple[ClusterSettings, ...] = ()
    pools: tuple[PoolEntry, ...] = ()
    api: ApiSettings | None = None
    ha: HaSettings | None = None
    health: HealthSettings | None = None
    bgp: BgpSettings | None = None
    snat: SnatSettings | None = None
    guard: GuardSettings | None = None


def syn_guard(mode: str, *, ha: bool, bgp: bool) -> tuple[bool, str]:
    """guard.syn resolved: whether the box guards Services' SYNs, and if not, why."""
    if mode == "off":
        return False, "guard.syn is off"
    if mode == "on":
        return True, ""
    if bgp:
        return False, (
            "guard.syn is auto, and a box of a BGP fleet guards nothing: a flow the "
            "routers move to another director would lose its handshake's state"
        )
    if ha:
        return False, (
            "guard.syn is auto, and a box of a pair guards nothing: a takeover would "
            "break the guarded connections (their handshake's state is this box's alone)"
        )
    return True, ""


def read_document(data: object) -> Document:
    """The file's plain data as its sections; Invalid with every fault found."""
    return from_file(Document, data)


@dataclass(frozen=True, slots=True)
class Settings:
    """The configuration file, checked and compiled."""

    source: str = "<defaults>"
    ownership: Ownership = field(default_factory=Ownership)
    defaults: Defaults = field(default_factory=Defaults)
    services: Table = field(default_factory=dict)
    kubernetes: KubeSettings | None = None
    pools: tuple[Pool, ...] = ()
    api: ApiSettings | None = None
    ha: HaSettings | None = None
    health: HealthSettings | None = None
    # Static services' own health check ("none" or a check), by service key.
    static_checks: dict[ServiceKey, CheckSpec | None] = field(default_factory=dict)
    bgp: BgpSettings | None = None
    snat: SnatSettings | None = None  # full-NAT's source addresses
    static_snat: frozenset[ServiceKey] = frozenset()  # the static services with full NAT
    # clusters: (several clusters, each named); kubernetes: is the one unnamed cluster
    clusters: tuple[ClusterSettings, ...] = ()
    guard: GuardSettings = field(default_factory=GuardSettings)
    # the static services the box answers SYNs for (TCP, nat or fullnat, not opted out)
    static_guard: frozenset[ServiceKey] = frozenset()
    # the static services with rate limits (TCP), and theirs
    static_limits: dict[ServiceKey, RateLimit] = field(default_factory=dict)
    # the static services' sorry servers (what serves while none of their real servers is up)
    static_sorry: dict[ServiceKey, RealServer] = field(default_factory=dict)

    @property
    def syn_guard(self) -> tuple[bool, str]:
        """Does this box guard Services' SYNs (guard.syn resolved), and if not, why."""
        return syn_guard(self.guard.syn, ha=self.ha is not None, bgp=self.bgp is not None)
        if self.bgp is not None:
            return False, (
                "guard.syn is auto, and a box of a BGP fleet guards nothing: a flow the "
                "routers move to another director would lose its handshake's state"
            )
        if self.ha is not None:
            return False, (
                "guard.syn is auto, and a box of a pair guards nothing: a takeover would "
                "break the guarded connections (their handshake's state is this box's alone)"
            )
        return True, ""

    @property
    def served(self) -> tuple[KubeSettings, ...]:
        """Every cluster this director serves: ``kubernetes:`` (one, named ""), or
        ``clusters:``."""
        return (self.kubernetes,) if self.kubernetes is not None else self.clusters

    @property
    def in_cluster(self) -> bool:
        """Does this director serve any cluster?"""
        return self.kubernetes is not None or bool(self.clusters)

    @property
    def bgp_pools(self) -> tuple[Pool, ...]:
        return tuple(pool for pool in self.pools if pool.announce.bgp)
