"""The command's arguments: a command is parsed by its own part of the parser exactly as by
the whole one, and ``--help`` and a mistyped command still see every command."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from director.cli import parser as cli_parser

# One command line for each command, with its options (a value where one is taken).
LINES = [
    ["plan", "--config", "d.yaml", "--json"],
    ["apply", "--config", "d.yaml", "--netns", "edge"],
    ["--log-level", "info", "run", "--config", "d.yaml", "--dry-run", "--state-file", "s"],
    ["status", "--url", "http://127.0.0.1:9100"],
    ["ctl", "scheduler", "set", "default/web", "sh", "--flag", "sh-port", "--json"],
    ["ctl", "maintenance", "on", "--reason", "kernel upgrade"],
    ["check", "--config", "d.yaml", "--offline", "--json", "--log-format", "json"],
    ["keepalived-config", "--config", "d.yaml"],
    ["conntrackd-config", "--config", "d.yaml"],
    ["schedulers", "--json"],
    ["schema"],
    ["decommission", "--config", "d.yaml", "--yes"],
    ["bundle", "--config", "d.yaml", "--lines", "10"],
    ["metallb-pools", "-"],
    ["completion", "zsh"],
]


def test_every_command_has_a_line_here() -> None:
    assert {cli_parser.subcommand(line)[0] for line in LINES} == cli_parser.COMMANDS


@pytest.mark.parametrize("line", LINES, ids=" ".join)
def test_a_command_parses_by_its_own_part_as_by_the_whole_parser(line: list[str]) -> None:
    whole = cli_parser.build_parser().parse_args(line)
    own = cli_parser.parser_for(line)
    assert own.parse_args(line) == whole
    made = [a for a in own._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(made[0].choices) < len(cli_parser.COMMANDS)  # the others were not made


@pytest.mark.parametrize(
    "line", [["check", "--config"], ["check", "--nonsense"], ["completion", "fish"], ["run"]]
)
def test_a_command_refused_by_its_own_part_is_refused_as_by_the_whole(
    line: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as whole:
        cli_parser.build_parser().parse_args(line)
    said = capsys.readouterr().err
    with pytest.raises(SystemExit) as own:
        cli_parser.parser_for(line).parse_args(line)
    assert own.value.code == whole.value.code == 2
    assert capsys.readouterr().err == said


def test_help_and_a_mistyped_command_see_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for line in (["--help"], ["-h", "check"], ["--log-level", "info", "--help", "run"]):
        with pytest.raises(SystemExit):
            cli_parser.parser_for(line).parse_args(line)
        listed = capsys.readouterr().out
        assert all(name in listed for name in cli_parser.COMMANDS), line
    with pytest.raises(SystemExit):
        cli_parser.parser_for(["chek"]).parse_args(["chek"])
    refused = capsys.readouterr().err
    assert "invalid choice: 'chek'" in refused and "check" in refused and "completion" in refused


def test_help_is_sized_to_the_columns_the_operator_has() -> None:
    def help_of(columns: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "director", "check", "--help"],
            capture_output=True,
            text=True,
            check=True,
            env={"COLUMNS": columns, "PATH": "/usr/bin:/bin"},
        )
        return done.stdout.splitlines()

    narrow, wide = help_of("50"), help_of("150")
    assert max(map(len, narrow)) <= 48 < max(map(len, wide))
    assert max(map(len, wide)) <= 148


@pytest.mark.parametrize(
    "line",
    [
        ["run", "--config", "d.yaml", "--dry"],
        ["run", "--config", "d.yaml", "--net", "edge"],
        ["apply", "--conf", "d.yaml"],
    ],
    ids=" ".join,
)
def test_no_option_is_taken_by_a_prefix(
    line: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 71, 6: ``run --dry`` was read as --dry-run (a shadow run that still wrote to
    the kernel), ``--net NS`` as --netns. A prefix is refused as an unknown option."""
    with pytest.raises(SystemExit) as refused:
        cli_parser.parser_for(line).parse_args(line)
    assert refused.value.code == 2
    said = capsys.readouterr().err
    assert "unrecognized arguments" in said or "arguments are required: --config" in said
