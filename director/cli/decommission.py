"""``director decommission``: take this box out of service for good. It removes what the
director made and nothing else: the IPVS services in its owned ranges (its pools, its static
services, the NodePort VIP; a foreign service is listed and left), its nftables table
(``inet director``) and the VIPs of its BGP pools held on ``lo``. It refuses while the director
runs (stop it first: with BGP, the stop withdraws the routes). Without ``--yes`` it only says
what it would remove. A running director is found by the lock it holds on its configuration
file (``runlock``), and by its API where it has one."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import subprocess
import sys

from director.cli.plans import EXIT_FAILED_OPS, open_ipvs, print_plan
from director.daemon import runlock
from director.engine.reconcile import Reconciler
from director.schema.config import Settings, load_config

EXIT_RUNNING = 1
VIP_DEVICE = "lo"


def _running(settings: Settings) -> str | None:
    """Where the director's API answers, if it does (the director runs)."""
    if settings.api is None:
        return None
    listen = settings.api.listen
    host = "127.0.0.1" if listen.host in ("0.0.0.0", "") else listen.host
    try:
        with socket.create_connection((host, listen.port), timeout=1):
            return f"{host}:{listen.port}"
    except OSError:
        return None


def _ip(netns: str | None) -> list[str]:
    return ["ip", *(["-n", netns] if netns else [])]


def _nft(netns: str | None) -> list[str]:
    return [*(["ip", "netns", "exec", netns] if netns else []), "nft"]


def _bgp_vips(settings: Settings, netns: str | None) -> list[str]:
    """The addresses of this director's BGP pools held on ``lo``."""
    pools = [p for p in settings.pools if p.announce.bgp]
    done = subprocess.run(
        [*_ip(netns), "-o", "addr", "show", "dev", VIP_DEVICE],
        capture_output=True,
        text=True,
        check=False,
    )
    held = []
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) > 3 and words[2] in ("inet", "inet6"):
            address = ipaddress.ip_address(words[3].split("/")[0])
            if any(address in net for pool in pools for net in pool.networks()):
                held.append(str(address))
    return held


def cmd_decommission(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    if runlock.running(args.config):
        print(
            f"director: a director runs with {args.config} (it holds "
            f"{runlock.path_for(args.config)}); stop it first (systemctl stop director), "
            "then decommission",
            file=sys.stderr,
        )
        return EXIT_RUNNING
    where = _running(settings)
    if where is not None:
        print(
            f"director: the director is running (its API answers at {where}); stop it "
            "first (systemctl stop director), then decommission",
            file=sys.stderr,
        )
        return EXIT_RUNNING
    ipvs = open_ipvs(args.netns)
    try:
        report = Reconciler(ipvs, settings.ownership, dry_run=not args.yes).full_sync({})
    finally:
        ipvs.close()
    print_plan(settings, report.plan, "Removed by" if args.yes else "Decommission of")
    table = (
        subprocess.run(
            [*_nft(args.netns), "list", "table", "inet", "director"],
            capture_output=True,
            text=True,
            check=False,
        ).returncode
        == 0
    )
    vips = _bgp_vips(settings, args.netns)
    if table:
        print("nftables table inet director (source ranges)")
    for vip in vips:
        print(f"VIP {vip} on {VIP_DEVICE} (a BGP pool's)")
    if not args.yes:
        print("Nothing was changed: run again with --yes to remove all of the above.")
        return 0
    failed = len(report.result.errors)
    for failure in report.result.errors:
        print(f"FAILED {failure.describe()}", file=sys.stderr)
    if table:
        failed += (
            subprocess.run(
                [*_nft(args.netns), "delete", "table", "inet", "director"], check=False
            ).returncode
            != 0
        )
    for vip in vips:
        prefix = 128 if ":" in vip else 32
        failed += (
            subprocess.run(
                [*_ip(args.netns), "addr", "del", f"{vip}/{prefix}", "dev", VIP_DEVICE], check=False
            ).returncode
            != 0
        )
    return EXIT_FAILED_OPS if failed else 0
