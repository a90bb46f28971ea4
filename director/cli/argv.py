"""The command line read before the parser is made (the parser is the command's own:
:mod:`director.cli.parser`): which command it names, and the few options ``director run``'s
first moments need (:mod:`director.cli.boot`). Nothing here loads argparse."""

from __future__ import annotations

from collections.abc import Sequence

# The command's own options that come before its subcommand and take a value (the unit runs
# ``director --log-level info run ...``); a test holds this to the parser.
GLOBAL_VALUED = ("--log-level", "--log-format")


def subcommand(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """The subcommand and what follows it, past the command's own options."""
    at = 0
    while at < len(args) and args[at].startswith("-"):
        name, equals, _ = args[at].partition("=")
        at += 2 if name in GLOBAL_VALUED and not equals else 1
    return (args[at], list(args[at + 1 :])) if at < len(args) else (None, [])


def options(args: Sequence[str], names: tuple[str, ...]) -> dict[str, str]:
    """``--name VALUE`` and ``--name=VALUE`` of ``names`` (the last one given wins)."""
    found: dict[str, str] = {}
    for position, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name in names:
            if equals:
                found[name] = value
            elif position + 1 < len(args):
                found[name] = args[position + 1]
    return found
