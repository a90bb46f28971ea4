"""FRR's configuration as text, pure: the ``bgp:`` section and the routes the loop decided
-> frr.conf (``render_frr``, from ``templates/frr.conf.j2``); the ``network`` lines that
change between two texts (``network_delta``); the file FRR boots from (``boot_text``).

The template holds only layout; ``template_vars`` builds plain values, all validated by the
schema (addresses canonical, numbers bounded, passwords one word), so nothing from the
cluster can inject configuration.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from director.adapters.render import TEMPLATES, environment
from director.core.announce import PeerState, Route
from director.core.pools import Pool
from director.schema.bgp import BgpSettings


def template_vars(
    bgp: BgpSettings, routes: Mapping[str, Route], pools: tuple[Pool, ...], source_config: str
) -> dict[str, Any]:
    announced = sorted((r for r in routes.values() if r.announced), key=_route_order)
    profiles: dict[tuple[int, int], str] = {}
    peers = []
    for peer in bgp.peers:
        timing = (peer.bfd_interval_ms, peer.bfd_multiplier)
        profile = profiles.setdefault(timing, f"director-{timing[0]}ms-x{timing[1]}")
        peers.append(
            {
                **{
                    k: getattr(peer, k)
                    for k in (
                        "address",
                        "asn",
                        "port",
                        "password",
                        "source",
                        "multihop",
                        "keepalive",
                        "hold",
                        "bfd",
                    )
                },
                "bfd_profile": profile,
            }
        )
    families = []
    for name, version in (("ipv4", 4), ("ipv6", 6)):
        family_peers = [p.address for p in bgp.peers if _version(p.address) == version]
        family_routes = [r for r in announced if _version(r.vip) == version]
        if family_peers:
            families.append({"name": name, "peers": family_peers, "routes": family_routes})
    return {
        "source_config": "".join(c if c.isprintable() else "?" for c in source_config)[:200],
        "hostname": bgp.hostname or "director",
        "asn": bgp.asn,
        "router_id": bgp.router_id,
        "peers": peers,
        "families": families,
        "pools": [
            {
                "name": p.name,
                "communities": p.announce.communities,
                "large_communities": p.announce.large_communities,
                "local_preference": p.announce.local_preference,
            }
            for p in pools
            if p.announce.bgp
        ],
        "bfd_profiles": [
            {"name": name, "interval": interval, "multiplier": multiplier}
            for (interval, multiplier), name in profiles.items()
            if any(p.bfd for p in bgp.peers)
        ],
    }


def network_delta(old: str | None, new: str, asn: int) -> list[str] | None:
    """The vtysh commands that turn ``old`` into ``new`` when they differ only in their
    ``network`` lines (announced prefixes); None when anything else differs."""
    if old is None:
        return None
    old_rest, old_nets = split_networks(old)
    new_rest, new_nets = split_networks(new)
    if old_rest != new_rest:
        return None
    return net_commands(old_nets, new_nets, asn)


Networks = dict[str, dict[str, str]]  # address family -> prefix -> its network line


def net_commands(old_nets: Networks, new_nets: Networks, asn: int) -> list[str]:
    """The vtysh commands that change the announced prefixes from ``old_nets`` to
    ``new_nets`` under ``router bgp asn`` ([] for none)."""
    commands: list[str] = []
    for family in sorted(old_nets.keys() | new_nets.keys()):
        before, after = old_nets.get(family, {}), new_nets.get(family, {})
        lines = [f"no network {prefix}" for prefix in sorted(before.keys() - after.keys())]
        lines += [after[prefix] for prefix in sorted(after.keys() - before.keys())]
        lines += [after[p] for p in sorted(after.keys() & before.keys()) if after[p] != before[p]]
        if lines:
            commands += [f"address-family {family} unicast", *lines, "exit-address-family"]
    if not commands:
        return []
    return ["configure terminal", f"router bgp {asn}", *commands, "end"]


def split_networks(text: str) -> tuple[list[str], Networks]:
    """The lines that are not ``network``, and the network lines by family and prefix."""
    rest: list[str] = []
    nets: Networks = {}
    family = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("address-family "):
            family = stripped.split()[1]
        if stripped.startswith("network "):
            nets.setdefault(family, {})[stripped.split()[1]] = stripped
        else:
            rest.append(line)
    return rest, nets


def same_but_routes(one: str, other: str) -> bool:
    return split_networks(one)[0] == split_networks(other)[0]


def _version(address: str) -> int:
    return ipaddress.ip_address(address).version


def _route_order(route: Route) -> tuple[int, int]:
    address = ipaddress.ip_address(route.vip)
    return address.version, int(address)


def render_frr(
    bgp: BgpSettings,
    routes: Mapping[str, Route],
    pools: tuple[Pool, ...],
    source_config: str = "director",
    templates: Path = TEMPLATES,
) -> str:
    variables = template_vars(bgp, routes, pools, source_config)
    return environment(templates).get_template("frr.conf.j2").render(**variables)


def boot_text(text: str) -> str:
    """``text`` without its ``network`` lines: the file FRR boots from. FRR started from it
    (a reboot, a restart of the daemons with no director running) announces nothing the
    director has not confirmed; the director sends the prefixes once IPVS serves them."""
    return "".join(
        line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("network ")
    )


def parse_peers(bgp: BgpSettings, summary: Any, bfd: Any) -> list[PeerState]:
    """Each configured peer's session from FRR's ``show bgp summary json`` and ``show bfd
    peers json`` (anything else in either, or nothing, reads as "unknown" and "-")."""
    found: dict[str, dict[str, Any]] = {}
    for family in summary.values() if isinstance(summary, dict) else ():
        if isinstance(family, dict):
            for address, data in (family.get("peers") or {}).items():
                found.setdefault(str(address), data if isinstance(data, dict) else {})
    bfd_state = {
        str(p.get("peer")): str(p.get("status", "-"))
        for p in (bfd if isinstance(bfd, list) else [])
        if isinstance(p, dict)
    }
    out = []
    for peer in bgp.peers:
        data = found.get(peer.address)
        state = str(data.get("state", "unknown")) if data is not None else "unknown"
        out.append(
            PeerState(
                peer.address,
                peer.asn,
                state,
                float(data.get("peerUptimeMsec", 0) or 0) / 1000 if data else 0.0,
                int(data.get("pfxSnt", 0) or 0) if data else 0,
                bfd_state.get(peer.address, "-") if peer.bfd else "-",
            )
        )
    return out


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def frr_words(done: subprocess.CompletedProcess[str]) -> str:
    """FRR's own error lines ("% Can not configure the local system as neighbor", "line 2:
    % Unknown command"), each once and in order; else the last of what it printed."""
    lines = [ANSI.sub("", line).strip() for line in (done.stderr + done.stdout).splitlines()]
    errors = [line for line in lines if line.startswith("%") or re.match(r"line \d+: %", line)]
    text = " | ".join(dict.fromkeys(errors)) or " | ".join(line for line in lines if line)
    return text[:1000] if errors else text[-1000:] or f"exited {done.returncode}"
