"""The ``trainop`` command (also ``python -m trainop``): ``--version``; subcommands ``train``,
``check-config``, ``doctor`` and ``bench``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    """The ``trainop`` command's argument parser, with every subcommand (the docs' CLI page is
    generated from it)."""
    from trainop import __version__
    from trainop.bench import cli as bench_cli

    parser = argparse.ArgumentParser(
        prog="trainop", description="trainop command-line tools.")
    parser.add_argument("--version", action="version", version=f"trainop {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    from trainop.interfaces import check_config, doctor
    from trainop.interfaces.train import cli as train_cli

    # in the order a user meets them: train a recipe, check one, check the machine, measure
    train_cli.add_parser(subparsers)
    check_config.add_parser(subparsers)
    doctor.add_parser(subparsers)
    bench_cli.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trainop`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except BrokenPipeError:  # the output piped into a command that stopped reading (`| head`)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
