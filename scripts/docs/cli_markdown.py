"""The ``trainop`` command's reference as Markdown, read from its argparse parser
(``trainop.__main__.build_parser``): every command, its usage, and every flag with its help."""

from __future__ import annotations

import argparse


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    return ", ".join(f"`{s}`" for s in action.option_strings)


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's arguments a user types (the subcommand selector left out)."""
    return [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The top-level parser under ``trainop`` and each subcommand's parser under its name."""
    return {"trainop": parser, **{f"trainop {k}": v for k, v in _subcommands(parser).items()}}


def markdown(parser: argparse.ArgumentParser) -> str:
    helps = _helps(parser)
    out = ["# The `trainop` command", "",
           "Generated at build time from the command's argument parser "
           "(`trainop.__main__.build_parser`), so every command and flag here is the one the "
           "installed `trainop` accepts. `python -m trainop` is the same command.", ""]
    for name, sub in commands(parser).items():
        out += [f"## `{name}`", ""]
        summary = helps.get(name.split(" ")[-1]) or sub.description
        if summary:
            out += [_cell(summary), ""]
        out += ["```text", sub.format_usage().strip(), "```", "",
                "| argument | default | meaning |", "|---|---|---|"]
        for action in flags(sub):
            default = action.default
            shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 \
                else f"`{default!r}`"
            out.append(f"| {_flag(action)} | {shown} | {_cell(action.help)} |")
        if sub.epilog:
            out += ["", "```text", sub.epilog.strip(), "```"]
        out.append("")
    return "\n".join(out)
