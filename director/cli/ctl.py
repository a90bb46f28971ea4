"""``director ctl`` and ``director status``: the admin API from the command line, each
command's request and how its answer is shown. Where the director is and with what token is
``director.cli.client``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from director.cli.client import EXIT_CHANGES, CtlError, add_arguments, call, resolve
from director.core.model import canonical_address
from director.schema import paths


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)


def _origin(o: dict[str, str]) -> str:
    if o.get("kind") == "static":
        return f"static/{o.get('name', '')}"
    cluster = f"{o['cluster']}/" if o.get("cluster") else ""
    return f"{cluster}{o.get('namespace')}/{o.get('name')}:{o.get('port_name')}"


def _endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _scheduler_path(text: str) -> str:
    """NAMESPACE/NAME, CLUSTER/NAMESPACE/NAME (several clusters) or static/NAME -> the path
    of its scheduler."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise CtlError(
            f"{text!r}: write NAMESPACE/NAME, CLUSTER/NAMESPACE/NAME where the director "
            "serves several clusters, or static/NAME for a static service"
        )
    if len(parts) == 2 and parts[0] == "static":
        return paths.url(paths.STATIC_SCHEDULER, name=parts[1])
    *cluster, namespace, name = parts
    url = paths.url(paths.SERVICE_SCHEDULER, namespace=namespace, name=name)
    from urllib.parse import urlencode  # here, not above: every command builds ctl's parser

    return f"{url}?{urlencode({'cluster': cluster[0]})}" if cluster else url


def _split_endpoint(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if port and not (port.isascii() and port.isdigit()):
        raise CtlError(f"{text!r}: write ADDRESS or ADDRESS:PORT ([v6]:PORT)")
    try:  # the API keeps addresses canonical: 2001:DB8::1 is 2001:db8::1
        host = canonical_address(host)
    except ValueError as exc:
        raise CtlError(str(exc)) from None
    return host, int(port) if port else None


def run(args: argparse.Namespace) -> int:
    out = _dispatch(args)
    if out is not None:
        print(out)
    return 0


def _dispatch(args: argparse.Namespace) -> str | None:
    command = "status" if args.command == "status" else args.what
    handler = _COMMANDS.get(command)
    if handler is None:
        raise CtlError(f"unknown ctl command {command!r}")
    return handler(args)


def _status(args: argparse.Namespace) -> str:
    status = call(args, "GET", paths.STATUS)
    if args.json:
        return json.dumps(status, indent=2)
    k = status["kubernetes"]
    kube = (
        "not configured"
        if not k["configured"]
        else ("connected" if k["connected"] else f"DISCONNECTED since {k['disconnected_since']}")
    )
    counts = status["counts"]
    bgp = [_bgp_line(status["bgp"])] if "bgp" in status else []
    return "\n".join(
        [
            f"role:        {status['role']}{'  (shadow mode)' if status['dry_run'] else ''}",
            f"ready:       {_ready(status)}",
            f"kubernetes:  {kube}; leader: {'yes' if status['leader'] else 'no'}"
            + (f" (NOT READY: {status['lease_refused']})" if status.get("lease_refused") else ""),
            *_cluster_lines(k.get("clusters", {})),
            f"last sync:   {status['last_sync'] or 'never'} ({status['last_sync_seconds']} s)",
            f"last error:  {status['last_error'] or '-'}",
            f"programmed:  {counts['virtual_services']} virtual services, "
            f"{counts['real_servers']} real servers, {counts['drains']} drains",
            *bgp,
            *_owned_lines(status.get("owned", [])),
        ]
    )


def _cluster_lines(clusters: dict[str, dict[str, bool]]) -> list[str]:
    """Several clusters: each one's watches and Lease, a line each."""
    return [
        f"  {name}: {'connected' if c['connected'] else 'DISCONNECTED'}; "
        f"leader: {'yes' if c['leader'] else 'no'}"
        for name, c in clusters.items()
    ]


def _owned_lines(owned: list[dict[str, Any]]) -> list[str]:
    """What the director writes, as it reads back: one line when all is in sync, a line per
    resource that is not."""
    if not owned:
        return []
    repairs = sum(o["repairs"] for o in owned)
    out = [o for o in owned if not o["in_sync"]]
    head = (
        f"owned:       {len(owned) - len(out)}/{len(owned)} in sync "
        f"({', '.join(o['resource'] for o in owned)}); {repairs} repairs"
    )
    return [head] + [
        f"  OUT OF SYNC {o['resource']} since {o['since'] or '-'} ({o['kind'] or 'drift'}): "
        f"{o['last_error'] or '-'}"
        for o in out
    ]


def _bgp_line(bgp: dict[str, Any]) -> str:
    up = sum(1 for p in bgp["peers"] if p["state"] == "Established")
    line = (
        f"bgp:         {bgp['announced']} announced, {bgp['withdrawn']} withdrawn; "
        f"sessions up {up}/{len(bgp['peers'])}"
    )
    return line + (f"; MAINTENANCE: {bgp['maintenance']}" if bgp["maintenance"] else "")


def _bgp(args: argparse.Namespace) -> str:
    bgp = call(args, "GET", paths.BGP)
    if args.json:
        return json.dumps(bgp, indent=2)
    peers = [
        [
            p["address"],
            str(p["asn"]),
            p["state"],
            f"{p['uptime_seconds']:g}",
            str(p["prefixes_sent"]),
            p["bfd"],
        ]
        for p in bgp["peers"]
    ]
    routes = [
        [r["vip"], r["pool"], "announced" if r["announced"] else "withdrawn", r["reason"]]
        for r in bgp["routes"]
    ]
    return "\n\n".join(
        [
            _bgp_line(bgp),
            _table(peers, ["PEER", "ASN", "STATE", "UPTIME", "SENT", "BFD"]),
            _table(routes, ["VIP", "POOL", "STATE", "WHY"]),
        ]
    )


def _maintenance(args: argparse.Namespace) -> str:
    if args.action == "on":
        bgp = call(args, "PUT", paths.MAINTENANCE, {"reason": args.reason})
    else:
        bgp = call(args, "DELETE", paths.MAINTENANCE)
    return json.dumps(bgp, indent=2) if args.json else _bgp_line(bgp)


def _ready(status: dict[str, Any]) -> str:
    if not status["ready"]:
        return "no (first sync pending)"
    if status.get("lease_refused"):
        return "no (the status Lease is refused: see kubernetes)"
    out = [o["resource"] for o in status.get("owned", []) if not o["in_sync"]]
    if out:
        return f"no (out of sync, being repaired: {', '.join(out)})"
    return "yes"


def _services(args: argparse.Namespace) -> str:
    items = call(args, "GET", paths.SERVICES)["items"]
    if args.json:
        return json.dumps(items, indent=2)
    rows = []
    for vs in items:
        servers = vs["real_servers"]
        rows.append(
            [
                vs["service"],
                _origin(vs["origin"]),
                f"{vs['scheduler']}{':' + ','.join(vs['flags']) if vs['flags'] else ''}",
                vs["scheduler_source"],
                f"{sum(1 for r in servers if r['state'] == 'active')}/{len(servers)}",
                str(sum(r["active_connections"] for r in servers)),
                "yes" if vs["programmed"] else "NO",
            ]
        )
    header = ["SERVICE", "ORIGIN", "SCHEDULER", "FROM", "ACTIVE", "CONNS", "PROGRAMMED"]
    if getattr(args, "output", None) == "wide":
        return _table(
            _wide(items),
            [*header[:3], "REAL-SERVER", "FWD", "WEIGHT", "STATE", "ACTIVECONN", "INACTCONN"],
        )
    return _table(rows, header)


def _wide(items: list[dict[str, Any]]) -> list[list[str]]:
    """One row per real server (as ipvsadm -Ln), the service's columns on its first row."""
    rows: list[list[str]] = []
    for vs in items:
        first = [
            vs["service"],
            _origin(vs["origin"]),
            f"{vs['scheduler']}{':' + ','.join(vs['flags']) if vs['flags'] else ''}",
        ]
        if not vs["real_servers"]:
            rows.append([*first, "-", "", "", "", "", ""])
        for i, rs in enumerate(vs["real_servers"]):
            rows.append(
                [
                    *(first if i == 0 else ["", "", ""]),
                    _endpoint(rs["address"], rs["port"]),
                    rs["forwarding"],
                    str(rs["weight"]),
                    rs["state"],
                    str(rs["active_connections"]),
                    str(rs["inactive_connections"]),
                ]
            )
    return rows


def _scheduler(args: argparse.Namespace) -> str:
    path, label = _scheduler_path(args.target), args.target
    if args.action == "set":
        body = {"scheduler": args.scheduler, "flags": args.flag or []}
        result = call(args, "PUT", path, body)
    else:
        result = call(args, "DELETE", path)
    if args.json:
        return json.dumps(result, indent=2)
    if args.action == "set":
        return f"{label}: scheduler {result['scheduler']} ({result['stored_in']})"
    return f"{label}: scheduler back to the {result['source']}"


def _drain(args: argparse.Namespace) -> str:
    address, port = _split_endpoint(args.endpoint)
    request: dict[str, Any] = {"address": address, "port": port}
    if args.service:
        request["service"] = args.service
    result = call(args, "POST", paths.DRAINS, request)
    return (
        json.dumps(result, indent=2)
        if args.json
        else (f"draining {args.endpoint} (id {result['id']}); watch: director ctl drains")
    )


def _undrain(args: argparse.Namespace) -> str:
    address, port = _split_endpoint(args.endpoint)
    items = call(args, "GET", paths.DRAINS)["items"]
    found = [d for d in items if d["address"] == address and d["port"] == port]
    if not found:
        raise CtlError(f"{args.endpoint} is not drained")
    for drain in found:
        call(args, "DELETE", paths.url(paths.DRAIN, id=str(drain["id"])))
    return f"undrained {args.endpoint}"


def _drains(args: argparse.Namespace) -> str:
    items = call(args, "GET", paths.DRAINS)["items"]
    if args.json:
        return json.dumps(items, indent=2)
    rows = [
        [
            d["id"],
            _endpoint(d["address"], d["port"]) if d["port"] else d["address"],
            d["service"] or "everywhere",
            str(len(d["real_servers"])),
            str(sum(r["active_connections"] for r in d["real_servers"])),
            "done" if d["done"] else "draining",
        ]
        for d in items
    ]
    return _table(rows, ["ID", "REAL SERVER", "WHERE", "IN", "ACTIVE", "STATE"])


def _plan(args: argparse.Namespace) -> str:
    plan = call(args, "GET", paths.PLAN)
    if args.json:
        text = json.dumps(plan, indent=2)
    else:
        lines = [f"{op['detail']}   [{op['origin']}]" for op in plan["ops"]]
        lines.append(
            f"{len(plan['ops'])} changes pending."
            if plan["ops"]
            else "No changes: the kernel matches."
        )
        text = "\n".join(lines)
    if plan["ops"] and getattr(args, "exit_code", False):
        print(text)
        raise SystemExit(EXIT_CHANGES)
    return text


_COMMANDS: dict[str, Callable[[argparse.Namespace], str]] = {
    "status": _status,
    "services": _services,
    "scheduler": _scheduler,
    "drain": _drain,
    "undrain": _undrain,
    "drains": _drains,
    "plan": _plan,
    "bgp": _bgp,
    "maintenance": _maintenance,
}


TARGET_HELP = "[CLUSTER/]NAMESPACE/NAME of a Service, or static/NAME of a static service"


def build(sub: Any) -> None:
    status = sub.add_parser("status", help="the director's state, from its admin API")
    add_arguments(status)
    ctl = sub.add_parser("ctl", help="drive a running director through its admin API")
    add_arguments(ctl)
    # --json is accepted after the subcommand too (director ctl services --json).
    late = argparse.ArgumentParser(add_help=False)
    late.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON"
    )
    what = ctl.add_subparsers(dest="what", required=True)
    services = what.add_parser(
        "services", parents=[late], help="virtual services, schedulers, real servers"
    )
    services.add_argument(
        "-o", "--output", choices=("wide",), help="wide: a row per real server (as ipvsadm -Ln)"
    )
    sched = what.add_parser("scheduler", help="set or unset a service's scheduler")
    action = sched.add_subparsers(dest="action", required=True)
    set_ = action.add_parser(
        "set", parents=[late], help="NAMESPACE/NAME (or static/NAME) SCHEDULER"
    )
    set_.add_argument("target", help=TARGET_HELP)
    set_.add_argument("scheduler", help="one the kernel offers (director schedulers)")
    set_.add_argument("--flag", action="append", help="a scheduler flag (repeat for more)")
    unset = action.add_parser(
        "unset", parents=[late], help="back to the annotation, config or default"
    )
    unset.add_argument("target", help=TARGET_HELP)
    drain = what.add_parser("drain", parents=[late], help="weight 0 for ADDRESS[:PORT] everywhere")
    drain.add_argument("endpoint", help="ADDRESS or ADDRESS:PORT ([v6]:PORT) of a real server")
    drain.add_argument("--service", help="only in this virtual service ('tcp VIP:PORT')")
    undrain = what.add_parser("undrain", help="undo a drain")
    undrain.add_argument("endpoint", help="ADDRESS or ADDRESS:PORT, as it was drained")
    what.add_parser("drains", parents=[late], help="drains and their progress")
    what.add_parser("bgp", parents=[late], help="BGP sessions, and each VIP's announcement")
    maintenance = what.add_parser("maintenance", help="withdraw every BGP route, or undo it")
    toggle = maintenance.add_subparsers(dest="action", required=True)
    on = toggle.add_parser("on", parents=[late], help="withdraw (kept across restarts)")
    on.add_argument("--reason", default="operator", help="shown in status (default: operator)")
    toggle.add_parser("off", parents=[late], help="announce again")
    plan = what.add_parser("plan", parents=[late], help="what the director would change now")
    plan.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 2 when changes are pending (0: none; others: errors)",
    )


def main_ctl(args: argparse.Namespace) -> int:
    try:
        resolve(args)
        return run(args)
    except CtlError as exc:
        print(f"director: {exc}", file=sys.stderr)
        return exc.code
