"""The ``director`` command: the composition root, the one place real adapters are built.

Each command imports what it uses when it runs: ``director status`` and ``director ctl`` (an
operator's quick look) load neither the configuration's schema (pydantic) nor the engine."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from director import logs
from director.cli.parser import build_parser, parser_for
from director.cli.plans import (
    EXIT_CONFIG,
    EXIT_FAILED_OPS,
    EXIT_NO_IPVS,
    SHOWN_FAULTS,
    open_ipvs,
    plan_json,
    print_plan,
)
from director.core.errors import DirectorError

_log = logging.getLogger("director.cli")


def cmd_plan(args: argparse.Namespace, apply: bool) -> int:
    from director.engine.reconcile import Reconciler
    from director.schema.config import load_config

    settings = load_config(args.config)
    if apply and settings.static_snat:
        # full NAT is IPVS's NAT plus the director's nftables SNAT, which only ``run`` keeps:
        # programmed alone, the service would reach its real servers with the client's
        # address and their replies would bypass the box
        names = ", ".join(
            sorted(settings.services[k].origin or str(k) for k in settings.static_snat)
        )
        print(
            f"director: {settings.source}: {names}: full NAT needs the SNAT rule that "
            "`director run` keeps in nftables; `apply` programs IPVS alone and would serve "
            "it as plain NAT: nothing was applied (run the director, or use nat for it)",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    ipvs = open_ipvs(args.netns)
    try:
        reconciler = Reconciler(ipvs, settings.ownership, dry_run=not apply)
        report = reconciler.full_sync(settings.services)
    finally:
        ipvs.close()
    if args.json:
        print(plan_json(report.plan))
    else:
        print_plan(settings, report.plan, "Applied" if apply else "Plan for")
    if apply:
        for failure in report.result.errors:
            print(f"FAILED {failure.describe()}", file=sys.stderr)
        if report.result.errors:
            return EXIT_FAILED_OPS
    return 0


def cmd_keepalived_config(args: argparse.Namespace) -> int:
    """keepalived.conf for the static services' VIPs: what an edge box starts with before
    the director's first sync (the director rewrites it with every VIP set change)."""
    from director.adapters.pair.keepalived import render_keepalived
    from director.schema.config import load_config

    settings = load_config(args.config)
    if settings.ha is None:  # a valid file: a box that runs no VRRP pair
        print(
            f"director: {settings.source} is valid but has no ha: section: there is no "
            "keepalived.conf to render for a box that runs no VRRP pair",
            file=sys.stderr,
        )
        return 1
    vips = {key.address for key in settings.services if not key.fwmark}
    sys.stdout.write(render_keepalived(settings.ha, vips, settings.source))
    return 0


def cmd_conntrackd_config(args: argparse.Namespace) -> int:
    """conntrackd.conf for this box's half of the pair (ha.conntrackd): what conntrackd
    starts with on a new box (the director keeps the file as rendered from then on)."""
    from director.adapters.pair.conntrackd import box_table_max, render_conntrackd
    from director.schema.config import load_config

    settings = load_config(args.config)
    if settings.ha is None or settings.ha.conntrackd is None:
        print(
            f"director: {settings.source} is valid but has no ha.conntrackd section: this "
            "box runs no conntrackd",
            file=sys.stderr,
        )
        return 1
    text = render_conntrackd(settings.ha.conntrackd, settings.source, table_max=box_table_max())
    sys.stdout.write(text)
    return 0


def cmd_schedulers(args: argparse.Namespace) -> int:
    from director.dataplane.interface import IpvsUnavailable
    from director.dataplane.modules import offered_schedulers

    offered = sorted(offered_schedulers())
    if not offered:  # as plan and apply say it: exit 3, one sentence
        raise IpvsUnavailable(
            "this kernel offers no IPVS scheduler (built without IPVS, or "
            "its modules are not installed)"
        )
    print(json.dumps({"schedulers": offered}) if args.json else " ".join(offered))
    return 0


def cmd_metallb_pools(args: argparse.Namespace) -> int:
    from director.schema.metallb import convert

    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
        converted = convert(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"director: {args.file}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    sys.stdout.write(converted.text(args.file))
    return 0 if converted.pools else EXIT_CONFIG


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser_for(given).parse_args(given)
    logs.setup(args.log_level or ("INFO" if args.command == "run" else "WARNING"), args.log_format)
    if args.command in ("ctl", "status"):  # the light commands: no schema, no engine
        from director.cli.ctl import main_ctl

        return main_ctl(args)
    from director.schema.config import ConfigError, json_schema_text

    try:
        if args.command in ("plan", "apply"):
            return cmd_plan(args, apply=args.command == "apply")
        if args.command == "run":  # each loads only its own module
            from director.daemon.run import cmd_run

            return cmd_run(args)
        if args.command == "check":
            from director.cli.check import cmd_check

            return cmd_check(args)
        simple = {
            "keepalived-config": cmd_keepalived_config,
            "conntrackd-config": cmd_conntrackd_config,
            "metallb-pools": cmd_metallb_pools,
        }
        if args.command in simple:
            return simple[args.command](args)
        if args.command == "decommission":
            from director.cli.decommission import cmd_decommission

            return cmd_decommission(args)
        if args.command == "bundle":
            from director.cli.bundle import cmd_bundle

            return cmd_bundle(args)
        if args.command == "completion":
            from director.cli.completion import script

            sys.stdout.write(script(build_parser(), args.shell))
            return 0
        if args.command == "schema":
            sys.stdout.write(json_schema_text())
            return 0
        return cmd_schedulers(args)
    except ConfigError as exc:
        for fault in exc.faults[:SHOWN_FAULTS]:
            print(f"director: invalid configuration: {fault}", file=sys.stderr)
        if len(exc.faults) > SHOWN_FAULTS:
            print(
                f"director: and {len(exc.faults) - SHOWN_FAULTS} more faults in the file "
                "(director check --json lists them all)",
                file=sys.stderr,
            )
        return EXIT_CONFIG
    except DirectorError as exc:  # the dataplane's module is loaded by the commands using it
        from director.dataplane.interface import IpvsUnavailable

        if not isinstance(exc, IpvsUnavailable):
            raise
        print(f"director: {exc}.", file=sys.stderr)
        return EXIT_NO_IPVS


if __name__ == "__main__":
    sys.exit(main())
