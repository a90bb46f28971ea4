"""Shell completion follows the parser: bash and zsh complete the commands and options the
parser has, and what they complete as a file is an option of that command."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from director.cli import main as cli
from tests.cli.test_main import EXAMPLE


def completions(shell: str, *words: str) -> list[str]:
    """What the shell offers after ``words`` (the last one being typed), through the script
    `director completion SHELL` prints, run by the shell itself."""
    script = subprocess.run(
        [sys.executable, "-m", "director", "completion", shell],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    quoted = " ".join(f"'{w}'" for w in words)
    if shell == "bash":
        program = (
            f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1))\n"
            "_director; printf '%s\\n' \"${COMPREPLY[@]}\""
        )
        command = ["bash", "--norc", "-c", program]
    else:  # zsh's completion system: compadd and _files report what they were given
        program = (
            "autoload -U compinit && compinit -u -D\n"
            f'{script}\ncompadd() {{ shift; print -rl -- "$@"; }}\n'
            "_files() { print -r -- FILES; }\n"
            f"words=({quoted}); CURRENT=${{#words}}; _director"
        )
        command = ["zsh", "-f", "-c", program]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_shell_completion_follows_the_parser(shell: str) -> None:
    top = completions(shell, "director", "")
    assert {"run", "check", "ctl", "status", "schedulers", "completion"} <= set(top)
    assert "services" in completions(shell, "director", "ctl", "")
    assert completions(shell, "director", "ctl", "scheduler", "") == ["set", "unset"]
    assert "--output" in completions(shell, "director", "ctl", "services", "-")
    assert completions(shell, "director", "ctl", "services", "-o", "") == ["wide"]
    assert completions(shell, "director", "--log-format", "") == ["logfmt", "json"]
    assert completions(shell, "director", "completion", "") == ["bash", "zsh"]
    assert "--kubeconfig" in completions(shell, "director", "run", "--")
    files = completions(shell, "director", "run", "--config", EXAMPLE[:-3])
    assert files == (["FILES"] if shell == "zsh" else [EXAMPLE])
    for option in ("--ca-file", "--config", "--token-file"):  # --ca-file was --cacert here
        assert completions(shell, "director", "status", option, EXAMPLE[:-3]) == files, option
    if shell == "bash":  # bash filters by what is typed; zsh's compadd does it itself
        assert completions(shell, "director", "ct") == ["ctl"]


def test_every_option_completion_treats_as_a_file_is_an_option_of_the_command() -> None:
    from director.cli.completion import FILE_OPTIONS

    def options(parser: argparse.ArgumentParser) -> set[str]:
        found: set[str] = set()
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    found |= options(child)
        return found

    assert options(cli.build_parser()) >= FILE_OPTIONS
