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
    real = sys.stdout
    sys.stdout = _Output(real)
    command = "trainop"
    try:
        args = parser.parse_args(argv)  # (--help and --version write here too)
        if args.command is None:
            parser.print_help()
            return 0
        command = f"trainop {args.command}"
        status = args.func(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:  # the output piped into a command that stopped reading (`| head`)
        _drop(real)
        return 0
    except _OutputError as exc:  # `> /dev/full`, a full disk: one line, not a traceback
        _drop(real)
        sys.stderr.write(f"{command}: cannot write the output: {exc}\n")
        return 1
    finally:
        if isinstance(sys.stdout, _Output):
            sys.stdout = real


class _OutputError(Exception):
    """Standard output could not be written (not another file the command writes)."""


class _Output:
    """Standard output as the command writes it, a failed write raised as ``_OutputError``
    (a broken pipe as itself); everything else is the stream's."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _OutputError(exc.strerror or str(exc)) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _OutputError(exc.strerror or str(exc)) from exc

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _drop(stream) -> None:
    """``stream`` (standard output) sent to the null device, so that what is left in its buffer
    does not fail again at exit; only where it is a real file descriptor."""
    import os

    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # replaced by a test or an embedding
        return
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


if __name__ == "__main__":
    sys.exit(main())
