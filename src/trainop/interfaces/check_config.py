"""``trainop check-config FILE``: load a recipe (never running it) and say what it means.

Prints the format, each ``--set`` and where it took effect, the resolved optimizer (class,
hyperparameters, where TF1's numerics differ from torch.optim's), the gradient pipeline in its
order, the learning-rate schedule as a short table (and a PNG plot, written only with ``--plot
FILE`` or ``--out FOLDER``), the keys it ignores (OpenSeq2Seq's model, data and run
parameters, with why), the values that need code (file:line) and warnings (e.g. RETURNN's
epsilon advice). Exit status 0 for a valid recipe; 1 with a message on stderr for an invalid
one (unknown key, bad value, a ``--set`` that changes nothing, an optimizer or policy trainop
does not have, a training option that needs code).
"""

from __future__ import annotations

import argparse
import os
import sys

from trainop.interfaces.recipes.settings import add_set_argument

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from trainop.interfaces.train.cli import DEFAULT_STEPS, DEFAULT_STEPS_PER_EPOCH

    p = subparsers.add_parser(
        "check-config", help="validate a recipe and show its optimizer, pipeline and schedule",
        description=__doc__.partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="an OpenSeq2Seq .py config, a RETURNN config, or a trainop "
                                ".yaml/.json recipe")
    add_set_argument(p)
    p.add_argument("--num-steps", type=int,
                   help="run length in steps (default: as trainop train: the config's "
                        f"max_steps, else num_epochs x steps per epoch, else {DEFAULT_STEPS})")
    p.add_argument("--steps-per-epoch", type=int,
                   help=f"micro-steps per epoch, for configs that run num_epochs (default: "
                        f"{DEFAULT_STEPS_PER_EPOCH}, as trainop train; divided by iter_size as "
                        "OpenSeq2Seq does)")
    p.add_argument("--plot", help="write the schedule plot to this PNG file (default: none)")
    p.add_argument("--out", help="folder for the schedule plot, <file name>.lr.png (default: "
                                 "no plot)")
    p.add_argument("--no-plot", action="store_true", help="write no plot (the default; "
                                                           "kept for scripts)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from trainop.interfaces.recipes.settings import load_with_settings, parse_settings
    from trainop.interfaces.train.cli import is_recipe_error, length_set_twice

    twice = length_set_twice(args.set, args.num_steps)
    if twice:
        sys.stderr.write(f"trainop check-config: {twice}\n")
        return 1
    path = _plot_path(args)
    if path is not None and _same_file(path, args.file):
        sys.stderr.write(f"trainop check-config: the plot would overwrite the recipe {args.file} "
                         f"(--plot {path}); nothing written, give the plot another name\n")
        return 1
    try:
        recipe = load_with_settings(args.file, parse_settings(args.set))
        pending = recipe.pending()
        if pending:
            raise ValueError("training options need code (never run): " + "; ".join(
                f"{k} at {v}" for k, v in pending.items()) + "; set them with " + " ".join(
                f"--set {k}=VALUE" for k in pending))
        _report(recipe, args)
    except BrokenPipeError:  # the reader stopped (`| head`): not the recipe's fault
        raise
    except Exception as exc:  # noqa: BLE001 - the recipe's errors in one line, others raise
        if not is_recipe_error(exc):
            raise
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        sys.stderr.write(f"trainop check-config: invalid recipe {args.file}: {text}\n")
        return 1
    return 0


def _report(recipe, args: argparse.Namespace) -> None:
    from trainop.interfaces.recipes.explain import (
        optimizer_modes,
        pipeline_steps,
        schedule,
        warnings_for,
    )
    from trainop.interfaces.recipes.notes import TF_NOTES, hyperparameters
    from trainop.interfaces.recipes.openseq2seq import optimizer_params
    from trainop.interfaces.train.cli import DEFAULT_STEPS, DEFAULT_STEPS_PER_EPOCH, run_length

    length = run_length(recipe, args.num_steps, args.steps_per_epoch)  # train's rule
    schedule_ = schedule(recipe, **length)  # may raise: first
    if "steps_per_epoch" in length and args.steps_per_epoch is None:
        schedule_.notes.append(f"num_epochs={recipe.options['num_epochs']} x "
                               f"{length['steps_per_epoch']} step(s) per epoch: the default "
                               f"--steps-per-epoch {DEFAULT_STEPS_PER_EPOCH} of trainop train "
                               f"and check-config (micro-steps // iter_size)")
    elif length.get("num_steps") == DEFAULT_STEPS and args.num_steps is None:
        schedule_.notes.append(f"the config has neither max_steps nor num_epochs: the default "
                               f"run of trainop train, {DEFAULT_STEPS} steps (--num-steps)")
    out = sys.stdout.write
    o = recipe.options
    cls = recipe.optimizer_class
    out(f"recipe: {args.file} (format: {recipe.format}; builds: {recipe.builds})\n")
    for line in recipe.settings:
        out(f"  {line}\n")
    # an Updater recipe's optimizer is a dict with its class (the loader checked it)
    given = optimizer_params(o) if recipe.builds == "TrainOp" else o["optimizer"]
    hyper = _built_torch_hyperparameters(recipe) or hyperparameters(cls, given)
    out(f"optimizer: {cls.__module__}.{cls.__name__}\n")
    out("  " + ", ".join(f"{k}={v!r}" for k, v in hyper.items()) + "\n")
    for mode in optimizer_modes(recipe):
        out(f"  mode: {mode}\n")
    if cls.__name__ in TF_NOTES:
        out(f"  TF numerics: {TF_NOTES[cls.__name__]}\n")
    out("gradient pipeline (in order):\n")
    for k, step in enumerate(pipeline_steps(recipe), 1):
        out(f"  {k}. {step}\n")
    out(f"learning rate: {schedule_.description}\n")
    for note in schedule_.notes:
        out(f"  note: {note}\n")
    out(f"  {schedule_.unit:>8s}  learning rate\n")
    for row in _summarised(schedule_.rows):
        out(f"  {row[0]:>8d}  {row[1]:.6g}\n" if row[0] is not None else f"  {row[1]}\n")
    path = _plot_path(args)
    if path is None and not args.no_plot:
        out("plot: none written (--plot FILE.png or --out FOLDER)\n")
    elif path is not None:
        if args.out:
            os.makedirs(args.out, exist_ok=True)
        try:
            _plot(schedule_, path, f"{os.path.basename(args.file)}: {schedule_.description}")
            out(f"plot: {os.path.abspath(path)}\n")
        except ImportError:
            out("plot: not written: matplotlib is missing (pip install 'trainop[plot]')\n")
    ignored = {k: v for k, v in recipe.unresolved.items() if k not in recipe.pending()}
    if ignored:
        out("needs code, not run (not a training option, ignored):\n")
        for key, where in ignored.items():
            out(f"  {key}: {where}\n")
    if recipe.ignored:
        out("ignored (OpenSeq2Seq parameters trainop does not need):\n")
        for key, why in recipe.ignored.items():
            out(f"  {key}: {why}\n")
    for warning in warnings_for(recipe):
        out(f"warning: {warning}\n")


def _plot_path(args: argparse.Namespace) -> str | None:
    """Where the plot goes: ``--plot``, else ``<recipe name>.lr.png`` in ``--out``; None for
    no plot."""
    if args.no_plot:
        return None
    return args.plot or (args.out and os.path.join(
        args.out, os.path.splitext(os.path.basename(args.file))[0] + ".lr.png"))


def _same_file(path: str, other: str) -> bool:
    """Whether ``path`` names the file ``other`` (through links or another spelling)."""
    try:
        return os.path.samefile(path, other)
    except OSError:  # one of them does not exist
        return os.path.realpath(path) == os.path.realpath(other)


def _built_torch_hyperparameters(recipe) -> dict | None:
    """For a ``torch.optim`` class (RETURNN's PyTorch backend), the hyperparameters of the
    optimizer the recipe builds (a stand-in parameter): RETURNN maps its own names
    (``epsilon`` -> ``eps``), so the config's dict is not what the optimizer has."""
    cls = recipe.optimizer_class
    if recipe.builds != "Updater" or not (isinstance(cls, type)
                                          and cls.__module__.startswith("torch.optim")):
        return None
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # loading warned already
        updater = recipe.build(torch.nn.Linear(1, 1))
        updater.get_optim_op()
    return {k: v for k, v in updater._groups[0].optimizer.defaults.items() if k != "lr"}


#: Rows shown in full; a longer table (a 600-epoch ``learning_rates`` list) shows its first and
#: last ``_EDGE`` rows around one line with the count.
_FULL_TABLE, _EDGE = 24, 8


def _summarised(rows: list) -> list:
    """``rows``, or their first and last ``_EDGE`` with a ``(None, "... N more ...")`` line."""
    if len(rows) <= _FULL_TABLE:
        return rows
    hidden = len(rows) - 2 * _EDGE
    return [*rows[:_EDGE], (None, f"     ... {hidden} more rows ({len(rows)} in all; the plot "
                                  f"shows every one) ..."), *rows[-_EDGE:]]


def _plot(schedule_, path: str, title: str) -> None:
    """The schedule over the whole run (at most ~2000 points) as a PNG (matplotlib, Agg)."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global figure

    last = max(schedule_.last, 1)
    stride = max(1, last // 2000)
    first = 1 if schedule_.unit == "epoch" else 0
    xs = list(range(first, last + 1, stride))
    fig = Figure(figsize=(7.0, 4.0), dpi=100)
    ax = fig.add_subplot()
    ax.plot(xs, schedule_.curve(xs))
    ax.set_xlabel(f"global {schedule_.unit}")
    ax.set_ylabel("learning rate")
    ax.set_title(title, fontsize=8, wrap=True)
    ax.grid(alpha=0.3)  # line properties turn the grid on
    fig.tight_layout()
    fig.savefig(path, format="png")
