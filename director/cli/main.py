"""The ``director`` command: the composition root, the one place real adapters are built.

Each command imports what it uses when it runs: ``director status`` and ``director ctl`` (an
operator's quick look) load neither the configuration's schema (pydantic) nor the engine."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from director import __version__, logs
from director.cli import ctl
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
DESCRIPTION = (
    "An IPVS load balancer (LVS director) for on-prem Kubernetes and for services declared by "
    "hand: it programs the kernel's virtual services, keeps them true, and fails over with "
    "keepalived or scales out behind BGP."
)
EPILOG = (
    "Start with `director check --config FILE`; `director COMMAND --help` for each command. "
    "The README and docs/ describe the configuration, the admin API and operating it."
)


def cmd_plan(args: argparse.Namespace, apply: bool) -> int:
    from director.engine.reconcile import Reconciler
    from director.schema.config import load_config

    settings = load_config(args.config)
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
    from director.adapters.keepalived import render_keepalived
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
    from director.adapters.conntrackd import render_conntrackd
    from director.schema.config import load_config

    settings = load_config(args.config)
    if settings.ha is None or settings.ha.conntrackd is None:
        print(
            f"director: {settings.source} is valid but has no ha.conntrackd section: this "
            "box runs no conntrackd",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(render_conntrackd(settings.ha.conntrackd, settings.source))
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


def _operations(sub: Any) -> None:
    """The commands for running a box over the years: decommission, a support bundle, the
    way in from MetalLB, shell completion."""
    p = sub.add_parser(
        "decommission",
        help="take this box out of service for good: remove the IPVS services it owns (never "
        "a foreign one), its nftables table and its BGP VIPs on lo; the director must be "
        "stopped; without --yes, only say what would go",
    )
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p.add_argument("--netns", help="the IPVS of this network namespace")
    p.add_argument("--yes", action="store_true", help="remove it (without: only show)")
    p = sub.add_parser(
        "bundle",
        help="write a support bundle (tar.gz) for a bug report: the configuration with "
        "secrets redacted, status and plan from the API, the IPVS table, sysctls, keepalived's "
        "and FRR's files, recent logs; changes nothing",
    )
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p.add_argument("--out", help="the file to write (default: director-bundle-HOST-TIME.tar.gz)")
    p.add_argument("--lines", type=int, default=2000, help="journal lines per unit")
    p.add_argument("--url", help="the admin API (default: from the configuration)")
    p.add_argument("--token-file", help="the API token (default: from the configuration)")
    p.add_argument("--ca-file", help="CA for an https API (default: api.tls_cert)")
    p = sub.add_parser(
        "metallb-pools",
        help="print a pools: section made from MetalLB's IPAddressPool and advertisement "
        "objects (kubectl get ipaddresspools,l2advertisements,bgpadvertisements -n "
        "metallb-system -o yaml); what does not carry over is said in notes",
    )
    p.add_argument("file", help="the YAML (- for standard input)")
    p = sub.add_parser(
        "completion",
        help='print shell completion: eval "$(director completion bash)" in ~/.bashrc (zsh: '
        "the same in ~/.zshrc)",
    )
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete for")


class _Formatter(argparse.HelpFormatter):
    """argparse's help, sized to the terminal when it is written, not when it is made.

    Python 3.11's add_argument makes a formatter for every argument only to check its
    metavar, and each sized itself to the terminal: shutil imported and a hundred
    terminal-size reads at the start of every command, for no help shown."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24) -> None:
        super().__init__(prog, indent_increment, max_help_position, width=80)
        self._help_position = max_help_position

    def format_help(self) -> str:
        import shutil

        width = shutil.get_terminal_size().columns - 2  # as HelpFormatter sizes itself
        self._width = width
        self._max_help_position = min(
            self._help_position, max(width - 20, self._indent_increment * 2)
        )
        return super().format_help()


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help is :class:`_Formatter`'s (its subcommands' too: they
    are made of the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="director", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"director {__version__}")
    parser.add_argument(
        "--log-level", help="DEBUG, INFO, WARNING, ERROR (default: INFO for run, else WARNING)"
    )
    parser.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="logfmt",
        help="logfmt (default) or json, one line per event",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("plan", "print what apply would change, changing nothing"),
        ("apply", "apply the configuration to the kernel once"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", required=True, help="the director's YAML configuration")
        p.add_argument("--netns", help="operate on the IPVS of this network namespace")
        p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("run", help="run the director: follow the cluster, program IPVS")
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p.add_argument("--netns", help="program the IPVS of this network namespace")
    p.add_argument("--kubeconfig", help="overrides kubernetes.kubeconfig of the config")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="shadow mode: write nothing to the kernel or the cluster, log what would change",
    )
    p.add_argument("--state-file", help="keep the desired table (JSON) current in this file")
    p.add_argument(
        "--config-cache",
        help="keep the parsed file here, and start from it while the file and the director are "
        "unchanged (default: config.cache in systemd's $STATE_DIRECTORY; '' for none)",
    )
    ctl.build(sub)
    p = sub.add_parser("check", help="validate a configuration file (and a kubeconfig) and exit")
    p.add_argument("--config", help="the director's YAML configuration to validate")
    p.add_argument("--kubeconfig", help="also check that this kubeconfig loads")
    clusters = "with --config: also check each cluster's kubeconfig and Lease"
    p.add_argument("--clusters", action="store_true", help=clusters)
    p.add_argument(
        "--offline",
        action="store_true",
        help="skip what only the box itself can tell (the API's listen address is one of its "
        "own): for building an image",
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON object: what was checked, notes, refusal"
    )
    p = sub.add_parser(
        "keepalived-config",
        help="print this director's keepalived.conf for its static VIPs (the Ansible role "
        "installs it once, checked with keepalived -t; the director rewrites it from then on)",
    )
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p = sub.add_parser(
        "conntrackd-config",
        help="print this director's conntrackd.conf (ha.conntrackd; the Ansible role installs "
        "it once, the director keeps it as rendered from then on)",
    )
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p = sub.add_parser("schedulers", help="list the IPVS schedulers this kernel offers")
    p.add_argument("--json", action="store_true", help='{"schedulers": [...]}')
    sub.add_parser(
        "schema",
        help="print the configuration file's JSON Schema (for editors and CI; the same "
        "schema director check applies)",
    )
    _operations(sub)
    for command in sub.choices.values():  # the logging options after the command too
        command.add_argument("--log-level", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.add_argument(
            "--log-format", choices=logs.FORMATS, default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.setup(args.log_level or ("INFO" if args.command == "run" else "WARNING"), args.log_format)
    if args.command in ("ctl", "status"):  # the light commands: no schema, no engine
        return ctl.main_ctl(args)
    from director.schema.config import ConfigError, json_schema_text

    try:
        if args.command in ("plan", "apply"):
            return cmd_plan(args, apply=args.command == "apply")
        if args.command == "run":  # each loads only its own module
            from director.cli.run import cmd_run

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
