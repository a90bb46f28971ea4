"""The director's configuration file: one schema, one validation gate.

The file is read as plain data (:mod:`director.schema.yamldoc`), validated against one
schema (:class:`Document`: the sections and the file's own objects, each key defined once),
then checked by a list of named rules across objects (MetalLB's ``validation.go`` is the
model), and compiled to :class:`Settings`. The same schema is published as JSON Schema
(``director schema``; ``docs/config.schema.json``).

Every error names the file, the line, the field (``services[2].real_servers[0].weight``)
and the reason; nothing partially valid is ever returned.
"""

from __future__ import annotations

import dataclasses
import gc
import ipaddress
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as schema
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from director.core.checks import CheckSpec
from director.core.errors import DirectorError
from director.core.model import Family, Forwarding, ServiceKey, check_flags, format_endpoint
from director.core.options import BGP_SCHEDULER, HASHING, NAT_OVER_BGP
from director.core.ownership import Network, Ownership
from director.core.pools import Pool
from director.core.services import Table
from director.schema import yamldoc
from director.schema.bgp import BgpSettings, PeerEntry
from director.schema.docstrings import attribute_docs
from director.schema.fields import Listen, Path
from director.schema.sections import (
    DEFAULT_CLASS,
    SECTION,
    ApiSettings,
    Defaults,
    HaSettings,
    HealthSettings,
    KubeSettings,
    Section,
    SnatSettings,
    Statuses,
)
from director.schema.static import OwnershipEntry, PoolEntry, Refusal, ServiceEntry

__all__ = [
    "DEFAULT_CLASS",
    "ApiSettings",
    "BgpSettings",
    "ConfigError",
    "Defaults",
    "HaSettings",
    "HealthSettings",
    "KubeSettings",
    "PeerEntry",
    "Settings",
    "json_schema",
    "load_config",
    "parse_config",
]


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


@schema(frozen=True, slots=True, config=SECTION)
class Document(Section):
    """The whole file."""

    ownership: OwnershipEntry | None = None
    defaults: Defaults | None = None
    services: tuple[ServiceEntry, ...] = ()
    kubernetes: KubeSettings | None = None
    pools: tuple[PoolEntry, ...] = ()
    api: ApiSettings | None = None
    ha: HaSettings | None = None
    health: HealthSettings | None = None
    bgp: BgpSettings | None = None
    snat: SnatSettings | None = None


_DOCUMENT = TypeAdapter(Document)


@dataclass(frozen=True, slots=True)
class Settings:
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

    @property
    def bgp_pools(self) -> tuple[Pool, ...]:
        return tuple(pool for pool in self.pools if pool.announce.bgp)


class _FileSchema(GenerateJsonSchema):
    """Defaults written as the file writes them (``listen: 127.0.0.1:9180``, not a pair), and
    each field's docstring as its description (read from the source here, when the schema is
    printed, not by pydantic at every start: that cost every ``director run`` a tenth of a
    second)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._docs: list[dict[str, str]] = []

    def dataclass_schema(self, schema: core_schema.DataclassSchema) -> JsonSchemaValue:
        self._docs.append(attribute_docs(schema["cls"]))
        try:
            return super().dataclass_schema(schema)
        finally:
            self._docs.pop()

    def dataclass_field_schema(self, schema: core_schema.DataclassField) -> JsonSchemaValue:
        out = super().dataclass_field_schema(schema)
        doc = self._docs[-1].get(schema["name"]) if self._docs else None
        return {**out, "description": doc} if doc and "description" not in out else out

    def encode_default(self, dft: Any) -> Any:
        if isinstance(dft, Listen):
            return f"[{dft.host}]:{dft.port}" if ":" in dft.host else f"{dft.host}:{dft.port}"
        if isinstance(dft, Forwarding):
            return dft.label
        if isinstance(dft, Statuses):
            return f"{dft.low}-{dft.high}"
        return super().encode_default(dft)


def json_schema() -> dict[str, Any]:
    """The configuration file's JSON Schema (draft 2020-12), from the one schema."""
    out = _DOCUMENT.json_schema(mode="validation", schema_generator=_FileSchema)
    _one_line(out)
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["title"] = "director configuration file"
    return out


def _one_line(node: object) -> None:
    """Descriptions (the fields' docstrings, wrapped in the source) as one line each."""
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())
        for value in node.values():
            _one_line(value)
    elif isinstance(node, list):
        for value in node:
            _one_line(value)


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def load_config(path: str | FilePath) -> Settings:
    return parse_config(*read_config(path))


def read_config(path: str | FilePath) -> tuple[str, str]:
    """The file's text and its name for messages (ConfigError: unreadable, not UTF-8)."""
    source = str(path)
    try:
        raw = FilePath(path).read_bytes()
    except OSError as exc:
        raise ConfigError(source, 0, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(source, line, "", "not UTF-8 text") from None
    return text, source


def parse_config(text: str, source: str = "<config>") -> Settings:
    """The settings of ``text``, or the ConfigError of its first fault (in file order)."""
    collecting = gc.isenabled()
    gc.disable()  # a big file makes a million objects and no cycle: 20% of the time saved
    try:
        return _parse(text, source)
    finally:
        if collecting:
            gc.enable()


def _parse(text: str, source: str) -> Settings:
    data = yamldoc.fast(text)
    lines: yamldoc.Lines | None = None
    if data is None:
        data, lines = _precise(text, source)
    if data is None:
        return Settings(source=source)
    try:
        return _compile(_DOCUMENT.validate_python(data), source)
    except (ValidationError, Refusal, PydanticCustomError) as exc:
        if lines is None:  # read fast, without lines: read it again to name them
            _, lines = _precise(text, source)
        raise _located(exc, lines, source) from None


def line_of(source: str, where: str) -> int:
    """The line of a field (``api.listen``) in the file ``source``; 0 if it cannot be read
    or does not name it (a default)."""
    try:
        with open(source, encoding="utf-8") as handle:
            _, lines = yamldoc.precise(handle.read())
    except (OSError, ValueError, yamldoc.YamlError):
        return 0
    path = tuple(where.split("."))
    return lines.keys.get(path) or lines.values.get(path, 0)


def _precise(text: str, source: str) -> tuple[object, yamldoc.Lines]:
    try:
        return yamldoc.precise(text)
    except yamldoc.YamlError as exc:
        raise ConfigError(source, exc.line, _where(exc.where), exc.reason) from None


def _where(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _located(exc: Exception, lines: yamldoc.Lines, source: str) -> ConfigError:
    """The ConfigError of the first fault in the file (by line) that ``exc`` reports, with
    the others it reports (a field's faults are all found at once; a rule across objects
    stops at its first)."""
    faults: list[tuple[Path, str, bool]] = []
    if isinstance(exc, ValidationError):
        for error in exc.errors(include_url=False):
            ctx = error.get("ctx") or {}
            path = (*error["loc"], *ctx.get("at", ()))
            faults.append((path, _reason(error), bool(ctx.get("key"))))
    elif isinstance(exc, Refusal):
        first = lines.of(exc.first) if exc.first is not None else 0
        faults.append((exc.path, exc.reason.replace("{first}", str(first)), False))
    elif isinstance(exc, PydanticCustomError):  # a rule refusing a whole section
        ctx = exc.context or {}
        faults.append((tuple(ctx.get("at", ())), str(ctx.get("reason")), bool(ctx.get("key"))))
    found: dict[tuple[int, str], ConfigError] = {}
    for path, reason, key in faults:
        line, where = lines.of(path, key), _where(path)
        found.setdefault((line, where), ConfigError(source, line, where, reason))
    head, *rest = (found[k] for k in sorted(found))
    return ConfigError(head.source, head.line, head.where, head.reason, tuple(rest))


def _reason(error: Any) -> str:
    """Our reason as written; pydantic's own (a list where a mapping belongs) in our words."""
    kind = error["type"]
    if kind == "config":
        return str(error["ctx"]["reason"])
    if kind in ("list_type", "tuple_type"):
        return "must be a list"
    if kind in ("dataclass_type", "dict_type", "model_type", "dataclass_exact_type"):
        return "must be a mapping of keys to values"
    return str(error["msg"])


# -- the rules across objects ------------------------------------------------------------
Rule = Callable[["_Compiling"], None]


@dataclass(slots=True)
class _Compiling:
    """The document, and what the rules have compiled from it so far."""

    doc: Document
    ownership: Ownership = field(default_factory=Ownership)
    pools: list[Pool] = field(default_factory=list)
    services: Table = field(default_factory=dict)
    static_checks: dict[ServiceKey, CheckSpec | None] = field(default_factory=dict)
    static_snat: set[ServiceKey] = field(default_factory=set)
    source: str = ""  # the file's path, as given


def owned_ranges(c: _Compiling) -> None:
    entry = c.doc.ownership or OwnershipEntry()
    c.ownership = Ownership(entry.networks, entry.fwmarks)


def pools_apart(c: _Compiling) -> None:
    """Pools compile, their names are unique and their addresses do not overlap."""
    seen: dict[str, int] = {}
    for index, entry in enumerate(c.doc.pools):
        if entry.name in seen:
            raise Refusal(
                ("pools", index, "name"),
                f"pool {entry.name!r} is declared twice (first on line {{first}})",
                ("pools", seen[entry.name]),
            )
        try:
            pool = entry.compile()
        except Refusal as exc:
            raise Refusal(("pools", index, *exc.path), exc.reason) from None
        for other in c.pools:
            for fam, first, last in pool.ranges:
                if any(f == fam and first <= l2 and f2 <= last for f, f2, l2 in other.ranges):
                    raise Refusal(("pools", index, "addresses"), f"overlaps pool {other.name!r}")
        c.pools.append(pool)
        seen[entry.name] = index


def kubernetes_has_pools(c: _Compiling) -> None:
    if c.doc.kubernetes is not None and not c.pools:
        reason = "serving Kubernetes Services needs at least one address pool (pools:)"
        raise Refusal(("kubernetes",), reason)


def pools_and_vips_are_owned(c: _Compiling) -> None:
    """The pools and the NodePort VIPs are the director's own: it owns their addresses."""
    extra: list[Network] = [net for pool in c.pools for net in pool.networks()]
    vips = c.doc.kubernetes.nodeport_vips if c.doc.kubernetes else ()
    extra += [ipaddress.ip_network(vip) for vip in vips]
    if extra:
        networks = tuple(dict.fromkeys((*c.ownership.networks, *extra)))
        c.ownership = Ownership(networks, c.ownership.fwmarks)


def pools_hold_none_of_the_boxs_addresses(c: _Compiling) -> None:
    """A pool holding an address of the box itself (its VRRP source, a peer, a gateway, its
    BGP router id or session source) would give it to a tenant's Service, which could then
    take the box's own ports (22, the API's)."""
    own: list[tuple[tuple[str | int, ...], str]] = []
    doc = c.doc
    if doc.ha is not None:
        own.append((("ha", "unicast_source"), doc.ha.unicast_source))
        own += [(("ha", "peers", i), peer) for i, peer in enumerate(doc.ha.peers)]
        own += [(("ha", "gateways", i), gw[0]) for i, gw in enumerate(doc.ha.gateways)]
        if doc.ha.conntrackd is not None:
            own += [
                (("ha", "conntrackd", name), getattr(doc.ha.conntrackd, name))
                for name in ("source", "peer")
            ]
    if doc.bgp is not None:
        own.append((("bgp", "router_id"), doc.bgp.router_id))
        for i, peer in enumerate(doc.bgp.peers):
            own.append((("bgp", "peers", i, "address"), peer.address))
            if peer.source is not None:
                own.append((("bgp", "peers", i, "source"), peer.source))
    if doc.api is not None:
        own.append((("api", "listen"), doc.api.host))
    if doc.snat is not None:
        own += [(("snat", "addresses", i), a) for i, a in enumerate(doc.snat.addresses)]
    for index, pool in enumerate(c.pools):
        for where, text in own:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                continue  # a host name, "::" and the like: not an address a pool can hold
            if pool.contains(address) and not address.is_unspecified:
                label = ".".join(
                    str(part) if isinstance(part, str) else f"[{part}]" for part in where
                ).replace(".[", "[")
                raise Refusal(
                    ("pools", index, "addresses"),
                    f"pool {pool.name!r} holds "
                    f"{text}, this box's own address ({label}): a Service would be "
                    "given it, and could take the box's ports",
                )


def paths_apart(c: _Compiling) -> None:
    """What the director writes never names what it reads, or another file it writes: a
    bgp.config_file that is the configuration file itself would be overwritten with FRR's
    text at the first announcement."""
    doc = c.doc
    reads: list[tuple[tuple[str | int, ...], str | None]] = [((), c.source)]
    writes: list[tuple[tuple[str | int, ...], str | None]] = []
    if doc.api is not None:
        reads += [
            (("api", name), getattr(doc.api, name))
            for name in ("token_file", "tls_cert", "tls_key")
        ]
        writes.append((("api", "intents_file"), doc.api.intents_file))
    if doc.kubernetes is not None:
        reads.append((("kubernetes", "kubeconfig"), doc.kubernetes.kubeconfig))
    if doc.ha is not None:
        reads.append((("ha", "pid_file"), doc.ha.pid_file))
        writes += [(("ha", "config_file"), doc.ha.config_file), (("ha", "fifo"), doc.ha.fifo)]
        if doc.ha.conntrackd is not None:
            writes.append((("ha", "conntrackd", "config_file"), doc.ha.conntrackd.config_file))
    if doc.bgp is not None:
        writes.append((("bgp", "config_file"), doc.bgp.config_file))
    seen: dict[str, tuple[str | int, ...]] = {}
    for where, path in reads:
        if path:
            seen.setdefault(_normal(path), where)
    for where, path in writes:
        if not path:
            continue
        other = seen.get(_normal(path))
        if other is not None:
            named = ".".join(str(p) for p in other) or "the configuration file itself"
            raise Refusal(
                where,
                f"{path} is also {named}: the director writes this file, and would overwrite it",
            )
        seen[_normal(path)] = where


def _normal(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def services_unique_and_owned(c: _Compiling) -> None:
    defaults = c.doc.defaults or Defaults()
    first: dict[object, int] = {}
    for index, entry in enumerate(c.doc.services):
        here = ("services", index)
        try:
            vs = entry.compile(defaults)
        except Refusal as exc:
            first_path = (*here, *exc.first) if exc.first is not None else None
            raise Refusal((*here, *exc.path), exc.reason, first_path) from None
        if vs.key in c.services:
            reason = f"{vs.key} is declared twice (first on line {{first}})"
            raise Refusal(here, reason, ("services", first[vs.key]))
        if vs.origin != "static" and vs.origin in first:
            reason = f"the name {vs.origin.partition('/')[2]!r} is taken (first on line {{first}})"
            raise Refusal((*here, "name"), reason, ("services", first[vs.origin]))
        if not c.ownership.owns(vs.key):
            raise Refusal(
                here,
                f"{vs.key} is outside the owned ranges "
                f"({c.ownership.describe()}); add its network to ownership.networks "
                "(or its mark to ownership.fwmarks)",
            )
        first[vs.origin] = first[vs.key] = index
        c.services[vs.key] = vs


def bgp_pools_have_peers(c: _Compiling) -> None:
    """A pool announced over BGP needs the speaker (``bgp:``), and its static services a
    forwarding method that lets any director serve the middle of a connection, and, unless
    the entry names its scheduler, Maglev hashing (``mh`` with ``mh-port``): every director
    then sends a flow to the same real server, as for Kubernetes Services."""
    index = next((i for i, pool in enumerate(c.pools) if pool.announce.bgp), None)
    if index is not None and c.doc.bgp is None:
        raise Refusal(
            ("pools", index, "announce"),
            f"pool {c.pools[index].name!r} is announced "
            "over BGP: add a bgp: section with its peers",
        )
    bgp_pools = [pool for pool in c.pools if pool.announce.bgp]
    defaults = c.doc.defaults or Defaults()
    for index, (key, vs) in enumerate(list(c.services.items())):
        if key.fwmark or not any(p.contains(ipaddress.ip_address(key.address)) for p in bgp_pools):
            continue
        for rs_index, rs in enumerate(vs.real_servers.values()):
            if rs.forwarding is Forwarding.NAT:
                raise Refusal(("services", index, "real_servers", rs_index), NAT_OVER_BGP)
        entry = c.doc.services[index]
        if entry.scheduler is None and defaults.scheduler not in HASHING:
            scheduler, flags = BGP_SCHEDULER
            try:
                chosen = check_flags(scheduler, flags | frozenset(entry.flags), key.protocol)
            except ValueError as exc:
                raise Refusal(("services", index, "flags"), str(exc)) from None
            config = dataclasses.replace(vs.config, scheduler=scheduler, flags=chosen)
            c.services[key] = dataclasses.replace(vs, config=config)


def bgp_notes(settings: Settings) -> list[str]:
    """What ``director check`` and ``director run`` say about static services announced
    over BGP that name a scheduler which does not hash: a flow moved by ECMP to another
    director meets another choice of real server there, and breaks."""
    pools = settings.bgp_pools
    out = []
    for key, vs in settings.services.items():
        if key.fwmark or vs.config.scheduler in HASHING:
            continue
        if any(p.contains(ipaddress.ip_address(key.address)) for p in pools):
            out.append(
                f"{vs.origin or key}: scheduler {vs.config.scheduler} on an address announced "
                "over BGP: connections break whenever the routers' ECMP moves a flow to another "
                "director (mh, the default there, keeps them)"
            )
    return out


# The source ports nf_nat picks from when snat.ports is unset (a client's own port is kept
# where it is free; otherwise one above the privileged ones).
KERNEL_SNAT_PORTS = (1024, 65535)


def snat_notes(settings: Settings) -> list[str]:
    """What ``director check`` and ``director run`` say when the SNAT addresses cannot carry
    the connections the real servers' upper thresholds allow: each SNAT address gives a real
    server address and port as many connections at once as it has source ports, and a
    connection beyond them is dropped, whatever IPVS would still have scheduled. A real
    server without a threshold (unbounded) or without full NAT is not counted."""
    if settings.snat is None:
        return []
    low, high = settings.snat.ports or KERNEL_SNAT_PORTS
    ports = high - low + 1
    addresses: dict[Family, int] = {}
    for address in settings.snat.addresses:
        family = Family.of(address)
        addresses[family] = addresses.get(family, 0) + 1
    allowed: dict[tuple[str, int, str], int] = {}  # real server, protocol: thresholds' sum
    unbounded: set[tuple[str, int, str]] = set()
    families: dict[tuple[str, int, str], Family] = {}
    for key in settings.static_snat:
        vs = settings.services.get(key)
        if vs is None or key.protocol is None:
            continue
        for rs in vs.real_servers.values():
            end = (rs.address, rs.port, key.protocol.label)
            families[end] = key.family
            allowed[end] = allowed.get(end, 0) + rs.upper_threshold
            if not rs.upper_threshold:
                unbounded.add(end)
    out = []
    for end in sorted(set(allowed) - unbounded):
        count = addresses.get(families[end], 0)
        capacity = count * ports
        if allowed[end] > capacity:
            out.append(
                f"real server {format_endpoint(end[0], end[1])}/{end[2]}: its upper_threshold "
                f"lets full NAT send it {allowed[end]} connections at once, but the snat "
                f"addresses carry {capacity} to it ({count} address(es) x {ports} source "
                "ports): the rest are dropped (director_conntrack_insert_failed_total); add "
                "snat addresses or widen snat.ports"
            )
    return out


def static_checks_parse(c: _Compiling) -> None:
    health = c.doc.health or HealthSettings()
    for index, (entry, key) in enumerate(zip(c.doc.services, c.services, strict=True)):
        if entry.health_check is None:
            continue
        if entry.health_check == "none":
            c.static_checks[key] = None
            continue
        parsed = health.parse(entry.health_check)
        if isinstance(parsed, str):
            raise Refusal(("services", index, "health_check"), parsed)
        c.static_checks[key] = parsed


def fullnat_has_its_addresses(c: _Compiling) -> None:
    """Full NAT needs the box's SNAT address of the service's family, and is the whole
    service's (its real servers are NAT in IPVS); the SNAT addresses are no service's."""
    doc = c.doc
    defaults = doc.defaults or Defaults()
    if defaults.forwarding is Forwarding.FULLNAT and doc.snat is None:
        raise Refusal(
            ("defaults", "forwarding"),
            "fullnat needs snat.addresses (the box's address the real servers see and reply to)",
        )
    families = {Family.of(a) for a in (doc.snat.addresses if doc.snat else ())}
    for index, entry in enumerate(doc.pools):
        if entry.forwarding is Forwarding.FULLNAT and not families:
            raise Refusal(
                ("pools", index, "forwarding"),
                "fullnat needs snat.addresses (the "
                "box's address the real servers see and reply to)",
            )
        if entry.forwarding is Forwarding.NAT and entry.announce == "bgp":
            raise Refusal(("pools", index, "forwarding"), NAT_OVER_BGP)
    for index, (key, vs) in enumerate(list(c.services.items())):
        full = [rs.forwarding is Forwarding.FULLNAT for rs in vs.real_servers.values()]
        if not any(full):
            continue
        if not all(full):
            raise Refusal(
                ("services", index, "real_servers"),
                "fullnat is the whole service's: every real server of it, or none",
            )
        if key.family not in families:
            version = 4 if key.family is Family.INET else 6
            raise Refusal(
                ("services", index), f"fullnat needs an IPv{version} address in snat.addresses"
            )
        servers = {
            dest: rs._replace(forwarding=Forwarding.NAT) for dest, rs in vs.real_servers.items()
        }
        c.services[key] = dataclasses.replace(vs, real_servers=servers)
        c.static_snat.add(key)
    taken = {key.address: f"the address of {vs.origin or key}" for key, vs in c.services.items()}
    if doc.kubernetes is not None:
        taken.update({vip: "a NodePort VIP" for vip in doc.kubernetes.nodeport_vips})
    for index, address in enumerate(doc.snat.addresses if doc.snat else ()):
        if address in taken:
            raise Refusal(
                ("snat", "addresses", index),
                f"{address} is {taken[address]}: an SNAT address is the box's own, no service's",
            )
    snat_floats_with_conntrackd(c)


def snat_floats_with_conntrackd(c: _Compiling) -> None:
    """conntrackd carries a full-NAT connection's SNAT mapping to the peer; the peer can only
    use it if the SNAT address moves there too, with the VIPs: one of ha.gateways."""
    doc = c.doc
    if doc.ha is None or doc.ha.conntrackd is None or doc.snat is None:
        return
    floating = {ipaddress.ip_address(gw[0]) for gw in doc.ha.gateways}
    for index, address in enumerate(doc.snat.addresses):
        if ipaddress.ip_address(address) not in floating:
            raise Refusal(
                ("snat", "addresses", index),
                f"{address} stays on this box when the VIPs move: with ha.conntrackd the SNAT "
                "address must float with them (list it in ha.gateways), or the peer that takes "
                "the connections over has their mappings but not the address they are to",
            )


RULES: tuple[Rule, ...] = (
    owned_ranges,
    pools_apart,
    kubernetes_has_pools,
    pools_and_vips_are_owned,
    pools_hold_none_of_the_boxs_addresses,
    paths_apart,
    services_unique_and_owned,
    bgp_pools_have_peers,
    static_checks_parse,
    fullnat_has_its_addresses,
)


def _compile(doc: Document, source: str) -> Settings:
    c = _Compiling(doc, source=source)
    for rule in RULES:
        rule(c)
    return Settings(
        source,
        c.ownership,
        doc.defaults or Defaults(),
        c.services,
        doc.kubernetes,
        tuple(c.pools),
        doc.api,
        doc.ha,
        doc.health,
        c.static_checks,
        doc.bgp,
        doc.snat,
        frozenset(c.static_snat),
    )
