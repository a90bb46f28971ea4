"""Shell completion, written from the command's own argument parser (so it cannot fall behind
it): ``director completion bash`` and ``director completion zsh`` (a function of zsh's own
completion system, after compinit). Subcommands at every level, each level's options, the values of
options with fixed choices, and file names for the options that take a file."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

FILE_OPTIONS = {"--config", "--kubeconfig", "--state-file", "--token-file", "--ca-file", "--out"}

_BASH = r"""
_director() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} at=director word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        [[ $word == -* ]] && continue
        [[ " ${_director_commands[$at]} " == *" $word "* ]] && at="$at $word"
    done
    local key="$at|$prev"
    if [[ -n ${_director_choices[$key]+set} ]]; then
        COMPREPLY=($(compgen -W "${_director_choices[$key]}" -- "$cur"))
    elif [[ -n ${_director_files[$key]+set} ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "${_director_options[$at]}" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "${_director_commands[$at]}" -- "$cur"))
    fi
}
complete -o default -F _director director
"""
# zsh's own completion system (words[] is 1-based there; $path is zsh's PATH: not a name).
_ZSH = r"""
_director() {
    local cur=${words[CURRENT]} prev=${words[CURRENT-1]} at=director word i key
    for ((i = 2; i < CURRENT; i++)); do
        word=${words[i]}
        [[ $word == -* ]] && continue
        [[ " ${_director_commands[$at]} " == *" $word "* ]] && at="$at $word"
    done
    key="$at|$prev"
    if (( ${+_director_choices[$key]} )); then
        compadd -- ${=_director_choices[$key]}
    elif (( ${+_director_files[$key]} )); then
        _files
    elif [[ $cur == -* ]]; then
        compadd -- ${=_director_options[$at]}
    else
        compadd -- ${=_director_commands[$at]}
    fi
}
compdef _director director
"""


def _levels(
    parser: argparse.ArgumentParser, path: str = "director"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:  # argparse has no public walk of its subcommands
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _levels(child, f"{path} {name}")


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    commands: dict[str, list[str]] = {}
    options: dict[str, list[str]] = {}
    choices: dict[str, list[str]] = {}
    files: list[str] = []
    for path, level in _levels(parser):
        commands[path], options[path] = [], []
        for action in level._actions:
            if isinstance(action, argparse._SubParsersAction):
                commands[path] += list(action.choices)
                continue
            if not action.option_strings and action.choices is not None:  # completion SHELL
                commands[path] += [str(c) for c in action.choices]
            shown = [s for s in action.option_strings if action.help != argparse.SUPPRESS]
            options[path] += shown
            for flag in action.option_strings:
                if action.choices is not None and action.nargs != 0:
                    choices[f"{path}|{flag}"] = [str(c) for c in action.choices]
                elif flag in FILE_OPTIONS:
                    files.append(f"{path}|{flag}")

    def table(name: str, rows: dict[str, list[str]]) -> str:
        body = " ".join(f"[{shlex.quote(k)}]={shlex.quote(' '.join(v))}" for k, v in rows.items())
        return f"declare -gA {name}=({body})"

    lines = [
        "# director shell completion, written by `director completion " + shell + "`",
        table("_director_commands", commands),
        table("_director_options", options),
        table("_director_choices", choices),
        table("_director_files", {key: ["file"] for key in files}),
    ]
    return "\n".join(lines) + (_ZSH if shell == "zsh" else _BASH)
