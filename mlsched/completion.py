"""Shell completion scripts, generated from the command's own parser (``mlsched completion``)."""

from __future__ import annotations

import argparse

_BASH = """\
# mlsched completion for bash (zsh: autoload -U bashcompinit && bashcompinit first).
# Install: mlsched completion bash > /etc/bash_completion.d/mlsched
_mlsched() {
    local cur="${COMP_WORDS[COMP_CWORD]}" sub="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in -*) ;; *) sub="${COMP_WORDS[i]}"; break ;; esac
    done
    local words
    case "$sub" in
%(cases)s
        *) words="%(commands)s" ;;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _mlsched mlsched
"""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers here, and only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(s for a in parser._actions for s in a.option_strings if s.startswith("--"))


def bash_script(parser: argparse.ArgumentParser) -> str:
    """A bash completion function: subcommands first, then each subcommand's options."""
    commands = _subcommands(parser)
    cases = "\n".join(
        f'        {name}) words="{" ".join(_options(sub))}" ;;' for name, sub in commands.items()
    )
    return _BASH % {"cases": cases, "commands": " ".join([*commands, *_options(parser)])}
