"""The command line read before the parser is made: the command it names, past the
command's own options, and the options ``director run``'s first moments read."""

from __future__ import annotations

from director.cli import argv
from director.cli.parser import build_parser


def test_the_subcommand_is_found_past_the_commands_own_options() -> None:
    """The unit runs ``director --log-level info run --config ...``."""
    args = ["--log-level", "info", "--log-format=json", "run", "--config", "d.yaml"]
    assert argv.subcommand(args) == ("run", ["--config", "d.yaml"])
    assert argv.subcommand(["run"]) == ("run", [])
    assert argv.subcommand(["--version"]) == (None, [])
    assert argv.subcommand(["--log-level=debug", "check"]) == ("check", [])


def test_the_options_read_as_taking_a_value_are_the_parsers() -> None:
    valued = {
        option
        for action in build_parser()._actions
        if action.option_strings and action.nargs != 0 and action.dest not in ("help", "version")
        for option in action.option_strings
    }
    assert valued == set(argv.GLOBAL_VALUED)


def test_an_option_is_read_in_either_spelling_and_the_last_one_wins() -> None:
    given = ["--config", "a.yaml", "--netns=edge", "--config=b.yaml", "--dry-run", "--netns"]
    assert argv.options(given, ("--config", "--netns")) == {"--config": "b.yaml", "--netns": "edge"}
