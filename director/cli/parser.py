"""The ``director`` command's arguments: one parser, whose subcommands are made only for
the command being run (the others' parsers are made for ``--help`` and completion)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from director import __version__, logs

# The command's own options that come before its subcommand and take a value (the unit runs
# ``director --log-level info run ...``).
GLOBAL_VALUED = ("--log-level", "--log-format")

DESCRIPTION = (
    "An IPVS load balancer (LVS director) for on-prem Kubernetes and for services declared by "
    "hand: it programs the kernel's virtual services, keeps them true, and fails over with "
    "keepalived or scales out behind BGP."
)
EPILOG = (
    "Start with `director check --config FILE`; `director COMMAND --help` for each command. "
    "The README and docs/ describe the configuration, the admin API and operating it."
)


def _plan_and_apply(sub: Any) -> None:
    for name, text in (
        ("plan", "print what apply would change, changing nothing"),
        ("apply", "apply the configuration to the kernel once"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", required=True, help="the director's YAML configuration")
        p.add_argument("--netns", help="operate on the IPVS of this network namespace")
        p.add_argument("--json", action="store_true", help="machine-readable output")


def _run(sub: Any) -> None:
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


def _ctl(sub: Any) -> None:
    from director.cli import ctl

    ctl.build(sub)


def _check(sub: Any) -> None:
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


def _daemon_files(sub: Any) -> None:
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


def _kernel_and_schema(sub: Any) -> None:
    p = sub.add_parser("schedulers", help="list the IPVS schedulers this kernel offers")
    p.add_argument("--json", action="store_true", help='{"schedulers": [...]}')
    sub.add_parser(
        "schema",
        help="print the configuration file's JSON Schema (for editors and CI; the same "
        "schema director check applies)",
    )


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
        width = _columns() - 2  # as HelpFormatter sizes itself
        self._width = width
        self._max_help_position = min(
            self._help_position, max(width - 20, self._indent_increment * 2)
        )
        return super().format_help()


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` reads it ($COLUMNS, then the
    terminal of stdout, else 80), without loading shutil (and with it bz2, lzma and zlib)
    into every command: argparse formats a usage line when it makes the subcommands."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):  # not a terminal, or closed
            columns = 0
    return columns if columns > 0 else 80


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help is :class:`_Formatter`'s (its subcommands' too: they
    are made of the parent's class). A top-level parser made of one command's part
    (``whole_for``: the arguments it parses) leaves a refusal of its own (an option it does
    not know, after the command) to the whole parser, whose usage line lists every command."""

    whole_for: list[str] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        # no abbreviations: a prefix could change what a command writes (``run --dry`` was
        # taken for --dry-run, ``--net`` for --netns; issue 71, 6)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if self.whole_for is not None:  # the whole parser refuses it in its own words
            build_parser().parse_args(self.whole_for)
        super().error(message)


# Each command's part of the parser, in the order ``director --help`` lists them, by the
# commands each adds.
_PARTS: tuple[tuple[tuple[str, ...], Callable[[Any], None]], ...] = (
    (("plan", "apply"), _plan_and_apply),
    (("run",), _run),
    (("status", "ctl"), _ctl),
    (("check",), _check),
    (("keepalived-config", "conntrackd-config"), _daemon_files),
    (("schedulers", "schema"), _kernel_and_schema),
    (("decommission", "bundle", "metallb-pools", "completion"), _operations),
)
COMMANDS = frozenset(name for names, _ in _PARTS for name in names)


def build_parser(only: str | None = None) -> _Parser:
    """The command's parser; with ``only`` (one of COMMANDS), of that command's part alone:
    what it parses of that command's arguments is the same, without making the other
    commands' parsers (28 in all with ctl's own, most of their cost gettext looking for a
    catalogue for each one's headings)."""
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
    for names, part in _PARTS:
        if only is None or only in names:
            part(sub)
    for command in sub.choices.values():  # the logging options after the command too
        command.add_argument("--log-level", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.add_argument(
            "--log-format", choices=logs.FORMATS, default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    return parser


def subcommand(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """The subcommand and what follows it, past the command's own options."""
    at = 0
    while at < len(args) and args[at].startswith("-"):
        name, equals, _ = args[at].partition("=")
        at += 2 if name in GLOBAL_VALUED and not equals else 1
    return (args[at], list(args[at + 1 :])) if at < len(args) else (None, [])


def parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser ``argv`` needs: its command's part alone when it names one of COMMANDS
    and asks for no help before it (``director --help`` lists every command)."""
    command, rest = subcommand(argv)
    at = len(argv) - len(rest) - 1 if command is not None else len(argv)
    asks_help = any(arg in ("-h", "--help") for arg in argv[:at])
    if command not in COMMANDS or asks_help:
        return build_parser()
    parser = build_parser(command)
    parser.whole_for = list(argv)
    return parser
