"""A way in from MetalLB: its ``IPAddressPool`` objects (with the ``L2Advertisement`` and
``BGPAdvertisement`` objects that announce them), as ``kubectl get -o yaml`` prints them, made
into the director's ``pools:`` section. What does not carry over is said in notes, never
dropped silently: the output is checked by the same schema the director applies."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from director.core.pools import Announce, Pool
from director.schema.bgp import COMMUNITY_RE, LARGE_COMMUNITY_RE
from director.schema.fields import DNS_LABEL_RE
from director.schema.pool_entries import PoolEntry
from director.schema.sections_base import Invalid

KINDS = ("IPAddressPool", "L2Advertisement", "BGPAdvertisement")


@dataclass
class Converted:
    """MetalLB's pools as the director's, and notes on what did not carry over."""

    pools: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self, source: str) -> str:
        out = [
            f"# Converted from MetalLB ({_comment(source)}) by `director metallb-pools`.",
            "# Read the notes, then put this in the director's configuration, with",
            "# kubernetes.metallb_annotations: true so that Services keep their annotations.",
            "pools:" if self.pools else "pools: []",
        ]
        for pool in self.pools:
            out.append(f"  - name: {pool['name']}")
            out.append(f"    addresses: [{', '.join(_quote(a) for a in pool['addresses'])}]")
            for key in ("auto_assign", "all_addresses", "announce", "local_preference"):
                if key in pool:
                    value = pool[key]
                    shown = str(value).lower() if isinstance(value, bool) else value
                    out.append(f"    {key}: {shown}")
            for key in ("communities", "large_communities"):
                if pool.get(key):
                    listed = ", ".join(_quote(c) for c in pool[key])
                    out.append(f"    {key}: [{listed}]")
            if pool.get("allocate_to"):  # JSON is YAML: one line, every string quoted
                out.append(f"    allocate_to: {json.dumps(pool['allocate_to'])}")
        out += [f"# note: {_comment(note)}" for note in self.notes]
        return "\n".join(out) + "\n"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _comment(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:300]


def _objects(text: str) -> list[Mapping[str, Any]]:
    """MetalLB's objects in ``text``: one object, a List (kubectl get -o yaml), or several
    documents. Raises ValueError when it is not YAML."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML: {exc}") from None
    found: list[Mapping[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        items = doc.get("items") if doc.get("kind") == "List" else [doc]
        for item in items if isinstance(items, list) else []:
            if isinstance(item, Mapping) and str(item.get("apiVersion", "")).startswith(
                "metallb.io/"
            ):
                found.append(item)
    return found


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _selected(adverts: Iterable[Mapping[str, Any]], pool: str, notes: list[str]) -> list[Any]:
    """The advertisements that announce ``pool`` (MetalLB: one that names no pool and has no
    pool selector announces every pool)."""
    chosen = []
    for advert in adverts:
        spec = _spec(advert)
        named, selectors = _strings(spec.get("ipAddressPools")), spec.get("ipAddressPoolSelectors")
        if pool in named or (not named and not selectors):
            chosen.append(advert)
        elif selectors and not named:
            notes.append(
                f"{advert.get('kind')} {_name(advert)} selects pools by label: not "
                f"resolved here; check whether it announces pool {pool}"
            )
    return chosen


def convert(text: str) -> Converted:
    objects = _objects(text)
    result = Converted()
    by_kind = {kind: [o for o in objects if o.get("kind") == kind] for kind in KINDS}
    if not by_kind["IPAddressPool"]:
        result.notes.append(
            "no IPAddressPool (apiVersion metallb.io/...) found: give the "
            "output of kubectl get ipaddresspools -n metallb-system -o yaml"
        )
    taken: list[tuple[int, int, int]] = []  # the addresses of the pools kept so far
    names = {_name(p) for p in by_kind["IPAddressPool"]}
    # Pools whose names need no change first: one renamed never takes a real one's place.
    pools = sorted(by_kind["IPAddressPool"], key=lambda p: _name(p) != _label(_name(p)))
    seen: set[str] = set()
    for pool in pools:
        entry = _pool(pool, by_kind, result.notes)
        if entry is None:
            continue
        name = entry["name"]
        if name in seen:
            entry["name"] = _free(name, seen | {_label(n) for n in names})
            result.notes.append(
                f"pool {_name(pool)} is named {entry['name']} here: {name} is taken by another pool"
            )
        if not _apart(entry, taken, result.notes):
            continue
        seen.add(entry["name"])
        result.pools.append(entry)
    for kind in ("L2Advertisement", "BGPAdvertisement"):
        for advert in by_kind[kind]:
            for key in (
                "nodeSelectors",
                "interfaces",
                "peers",
                "aggregationLength",
                "aggregationLengthV6",
            ):
                if _spec(advert).get(key):
                    result.notes.append(
                        f"{kind} {_name(advert)}: {key} has no counterpart "
                        "(the director announces from every director)"
                    )
    return result


def _label(name: str) -> str:
    """A MetalLB pool's name as a pool name here (a DNS label)."""
    return name.lower().replace(".", "-")


def _free(name: str, taken: set[str]) -> str:
    for n in range(2, 1000):
        candidate = f"{name[:59]}-{n}"
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free name for pool {name}")  # pragma: no cover


def _apart(entry: dict[str, Any], taken: list[tuple[int, int, int]], notes: list[str]) -> bool:
    """MetalLB lets pools overlap, the director does not: the addresses an earlier pool holds
    are taken out of this one (said in a note); False when nothing is left."""
    pool = Pool.parse(
        entry["name"], entry["addresses"], True, bool(entry.get("all_addresses")), Announce()
    )
    kept: list[tuple[int, int, int]] = []
    for family, first, last in pool.ranges:
        pieces = [(first, last)]
        for fam, low, high in taken:
            if fam != family:
                continue
            pieces = [
                part
                for a, b in pieces
                for part in ((a, min(b, low - 1)), (max(a, high + 1), b))
                if part[0] <= part[1]
            ]
        kept += [(family, a, b) for a, b in pieces]
    if kept == list(pool.ranges):
        taken.extend(kept)
        return True
    if not kept:
        notes.append(
            f"pool {entry['name']}: every address is also in a pool before it "
            "(MetalLB allows overlapping pools, the director does not); left out"
        )
        return False
    entry["addresses"] = [_range(family, a, b) for family, a, b in kept]
    notes.append(
        f"pool {entry['name']}: the addresses it shares with a pool before it are "
        "left out (MetalLB allows overlapping pools, the director does not); it "
        f"holds {', '.join(entry['addresses'])} here"
    )
    taken.extend(kept)
    return True


def _range(family: int, first: int, last: int) -> str:
    make = ipaddress.IPv4Address if family == 4 else ipaddress.IPv6Address
    return str(make(first)) if first == last else f"{make(first)}-{make(last)}"


def _pool(
    obj: Mapping[str, Any], by_kind: Mapping[str, list[Mapping[str, Any]]], notes: list[str]
) -> dict[str, Any] | None:
    original, spec = _name(obj), _spec(obj)
    name = _label(original)
    if not re.fullmatch(DNS_LABEL_RE, name):
        notes.append(f"pool {original!r}: no DNS label can stand for its name; left out")
        return None
    if name != original:
        notes.append(
            f"pool {original} is named {name} here (a pool name is a DNS label); "
            f"Services that name it in metallb.io/address-pool need the new name"
        )
    entry: dict[str, Any] = {
        "name": name,
        "addresses": [a.strip() for a in _strings(spec.get("addresses"))],
    }
    if spec.get("autoAssign") is False:
        entry["auto_assign"] = False
    if spec.get("avoidBuggyIPs") is True:
        notes.append(
            f"pool {name}: avoidBuggyIPs skips every address ending in .0 or .255; "
            "the director skips the network and broadcast address of each CIDR"
        )
    else:  # MetalLB gives out every address of a CIDR, network and broadcast included
        entry["all_addresses"] = True
    allocation = _allocation(spec.get("serviceAllocation"), entry, notes)
    if allocation:
        entry["allocate_to"] = allocation
    bgp = _selected(by_kind["BGPAdvertisement"], original, notes)
    l2 = _selected(by_kind["L2Advertisement"], original, notes)
    if bgp:
        entry["announce"] = "bgp"
        _bgp(entry, bgp, notes)
        if l2:
            notes.append(f"pool {name} is announced by L2 and BGP in MetalLB; here by BGP only")
    elif not l2:
        notes.append(
            f"pool {name}: no advertisement announces it in MetalLB; here the VRRP "
            "pair holds its addresses (announce: vrrp)"
        )
    try:  # as the director would read it
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()
        }
        PoolEntry(**fields).compile()
    except Invalid as exc:
        notes.append(f"pool {name}: {exc.faults[0].reason}; left out")
        return None
    except ValueError as exc:
        notes.append(f"pool {name}: {exc}; left out")
        return None
    return entry


def _allocation(raw: object, entry: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """MetalLB's serviceAllocation as the pool's ``allocate_to``. What cannot be carried
    over is said, and never leaves the pool serving more Services than it did."""
    name = entry["name"]
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        notes.append(
            f"pool {name}: serviceAllocation is not a mapping; the pool is given only "
            "to Services that name it (auto_assign: false)"
        )
        entry["auto_assign"] = False
        return {}
    out: dict[str, Any] = {}
    priority = raw.get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool) and priority > 0:
        out["priority"] = priority  # MetalLB: 0 or unset is no priority
    namespaces = _strings(raw.get("namespaces"))
    if namespaces:
        out["namespaces"] = namespaces
    selectors = []
    for selector in raw.get("serviceSelectors") or ():
        if not isinstance(selector, Mapping):
            continue
        ours: dict[str, Any] = {}
        if isinstance(selector.get("matchLabels"), Mapping) and selector["matchLabels"]:
            ours["match_labels"] = dict(selector["matchLabels"])
        expressions = [
            {
                "key": e.get("key"),
                "operator": e.get("operator"),
                **({"values": list(e["values"])} if e.get("values") else {}),
            }
            for e in selector.get("matchExpressions") or ()
            if isinstance(e, Mapping)
        ]
        if expressions:
            ours["match_expressions"] = expressions
        selectors.append(ours)
    if selectors:
        out["service_selectors"] = selectors
    if raw.get("namespaceSelectors"):
        if namespaces:
            notes.append(
                f"pool {name}: namespaceSelectors are not carried over (the director "
                "does not read Namespace labels); it serves the namespaces listed "
                "alone: add the selected ones to allocate_to.namespaces"
            )
        else:
            entry["auto_assign"] = False
            notes.append(
                f"pool {name}: namespaceSelectors are not carried over (the director "
                "does not read Namespace labels); the pool is given only to Services "
                "that name it (auto_assign: false) until its namespaces are listed in "
                "allocate_to.namespaces"
            )
    return out


def _bgp(entry: dict[str, Any], adverts: list[Mapping[str, Any]], notes: list[str]) -> None:
    communities: list[str] = []
    prefs: set[int] = set()
    for advert in adverts:
        pref = _spec(advert).get("localPref")
        if pref is None:
            continue
        if isinstance(pref, bool) or not isinstance(pref, int) or not 0 <= pref <= 2**32 - 1:
            notes.append(
                f"pool {entry['name']}: {advert.get('kind')} {_name(advert)} has "
                f"localPref {_comment(repr(pref))}, not a number from 0 to "
                "4294967295; not carried over"
            )
            continue
        prefs.add(pref)
    large: list[str] = []
    for advert in adverts:
        for community in _strings(_spec(advert).get("communities")):
            # MetalLB writes a large community as large:GLOBAL:LOCAL1:LOCAL2
            big = community.removeprefix("large:")
            if big != community and re.fullmatch(LARGE_COMMUNITY_RE, big):
                if big not in large:
                    large.append(big)
            elif not re.fullmatch(COMMUNITY_RE, community):
                notes.append(
                    f"pool {entry['name']}: community {community!r} (a Community "
                    "object's name) is not carried over"
                )
            elif community not in communities:
                communities.append(community)
    if communities:
        entry["communities"] = communities
    if large:
        entry["large_communities"] = large
    if len(prefs) == 1:
        entry["local_preference"] = prefs.pop()
    elif prefs:
        notes.append(
            f"pool {entry['name']}: advertisements give it different localPref "
            f"values {sorted(map(str, prefs))}; none is carried over"
        )
