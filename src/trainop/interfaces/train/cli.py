"""``trainop train FILE``: train the built-in small model with a recipe and show what happened.

The recipe (an OpenSeq2Seq config, a RETURNN config, or trainop's YAML/JSON: see
``trainop.load_recipe``) builds its training object around the built-in model
(``model.LSTMCellModel``: a one-layer LSTM on generated sine-wave sequences; nothing is
downloaded; float16 weights when the recipe's dtype is 'mixed' or float16), which trains for
``--steps`` micro-steps with a progress bar (loss, learning rate, loss scale, skipped updates).
Written to ``--out``: TensorBoard event files (``tensorboard/``, when the ``tensorboard``
package is installed), ``history.csv`` and ``dashboard.png`` (loss, learning rate, global
gradient norm, loss scale, skipped updates; when matplotlib is installed); then a one-paragraph
summary. An earlier run's files in ``--out`` are moved to ``--out/previous/<n>`` once the
recipe and the arguments are valid, before the run writes anything (one line on stderr says
where), so every run starts clean and a refused run moves nothing; each file is written
whole or not at all (an interrupted run leaves no truncated PNG).

The recipe's own rates: a RETURNN recipe runs in epochs of ``--steps-per-epoch`` micro-steps
(default 10) under RETURNN's learning-rate control (``learning_rates`` per epoch, newbob on
each epoch's mean training loss): epoch 1 trains at epoch 1's rate. An OpenSeq2Seq recipe's
schedule spans its run (``max_steps``, or ``num_epochs`` x (``--steps-per-epoch`` //
``iter_size``) steps, as OpenSeq2Seq counts them; ``--num-steps`` overrides), which fills
``decay_steps``/``begin_decay_at``/``steps_per_epoch`` as OpenSeq2Seq does.

``--compare-tf``: the same run replayed with TensorFlow's own ops in TF1 compat graph mode
(``compare_tf``), printing the largest relative deviation of the parameters per step; exit
status 1 above ``--tolerance`` (a finite number > 0; default 1e-5; 2e-2 for float16
weights). A recipe TensorFlow 1
cannot express is refused before training.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop.interfaces.recipes.settings import add_set_argument

__all__ = ["DEFAULT_STEPS", "DEFAULT_STEPS_PER_EPOCH", "BuiltRun", "add_parser", "build_run",
           "RUN_FILES", "is_recipe_error", "run", "run_length", "set_aside"]

PROG = "trainop train"
DEFAULT_STEPS = 60
DEFAULT_STEPS_PER_EPOCH = 10


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train", help="train the built-in small model with a recipe; dashboard and summary",
        description=__doc__.partition("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="recipe: OpenSeq2Seq config (.py), RETURNN config "
                                "(.config/.py) or trainop YAML/JSON")
    add_set_argument(p)
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help="micro-steps (default: %(default)s)")
    p.add_argument("--steps-per-epoch", type=int, default=DEFAULT_STEPS_PER_EPOCH,
                   help="micro-steps per epoch: RETURNN's per-epoch learning rates, "
                        "OpenSeq2Seq's num_epochs (default: %(default)s)")
    p.add_argument("--num-steps", type=int, default=None,
                   help="OpenSeq2Seq: the schedule's run length in steps (default: the "
                        "config's max_steps, else num_epochs x steps per epoch, else --steps)")
    p.add_argument("--out", default="trainop-run", help="output directory (default: "
                                                         "./trainop-run)")
    p.add_argument("--seed", type=int, default=0, help="model and data seed (default: 0)")
    p.add_argument("--compare-tf", action="store_true",
                   help="replay the run with TensorFlow's own ops and print the largest "
                        "deviation per step (needs tensorflow)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="--compare-tf: largest relative deviation allowed (default: 1e-5; "
                        "2e-2 with float16 weights)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    return p


def _fail(message: str) -> int:
    """``message`` on one line of stderr, exit status 1."""
    print(f"{PROG}: " + " ".join(str(message).split()), file=sys.stderr)
    return 1


def _progress(total: int, enabled: bool):
    """A callback drawing a tqdm bar (or nothing) with loss, lr, loss scale and skips; without
    tqdm (a dependency of trainop, so only where it was removed) one line says so."""
    if not enabled:
        return None, None
    try:
        from tqdm import tqdm
    except ImportError:
        print(f"{PROG}: no progress bar: the tqdm package is missing (pip install tqdm)",
              file=sys.stderr)
        return None, None
    bar = tqdm(total=total, unit="step", file=sys.stderr, leave=False)

    def update(k, history) -> None:
        scale = history.loss_scale[-1]
        bar.set_postfix(loss=f"{history.loss[-1]:.4g}", lr=f"{history.learning_rate[-1]:.3g}",
                        scale="-" if scale != scale else f"{scale:.3g}",
                        skipped=history.skipped[-1], refresh=False)
        bar.update(1)
    return update, bar


def _writer(out: Path, *, later: bool = False):
    """A TensorBoard ``SummaryWriter`` in ``out/tensorboard``, or None without tensorboard
    (TensorBoard imports TensorFlow where it is installed: its log lines are dropped).
    ``later``: a ``LaterWriter`` that opens it at the first summary (no file before)."""
    from trainop.interfaces.train.quiet import tf_logs_dropped

    with tf_logs_dropped():
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            return None
        if later:
            from trainop.interfaces.train.later_writer import LaterWriter

            return LaterWriter(lambda: SummaryWriter(str(out / "tensorboard")))
        return SummaryWriter(str(out / "tensorboard"))


#: What a run writes to ``--out``; an earlier run's are moved aside (``set_aside``).
RUN_FILES = ("history.csv", "dashboard.png", "tensorboard")


def set_aside(out: Path) -> Path | None:
    """Move an earlier run's files in ``out`` (``RUN_FILES``) into ``out/previous/<n>`` (the
    next free number), so that this run starts clean and no two runs' TensorBoard events
    overlay; the folder they went to, or None when there were none."""
    found = [out / name for name in RUN_FILES if (out / name).exists()]
    if not found:
        return None
    n = 1
    while (out / "previous" / str(n)).exists():
        n += 1
    target = out / "previous" / str(n)
    target.mkdir(parents=True)
    for path in found:
        path.rename(target / path.name)
    return target


def is_recipe_error(error: BaseException) -> bool:
    """Whether ``error`` is the recipe's fault (printed in one line), not trainop's."""
    return isinstance(error, ValueError | TypeError | OSError | SyntaxError) or \
        type(error).__module__.split(".")[0] == "yaml"


#: The most micro-steps of one run: the built-in model is a demonstration, and the run's
#: history keeps a row per micro-step (the batches are made while training, one at a time).
MAX_STEPS = 1_000_000


#: Config names that give an OpenSeq2Seq run's length, which ``--num-steps`` replaces.
LENGTH_NAMES = ("max_steps", "num_epochs")


def length_set_twice(settings: list[str] | None, num_steps: int | None) -> str | None:
    """The problem when ``--set`` gives the run length and ``--num-steps`` does too (the flag
    would win and the ``--set`` change nothing, unseen); ``None`` otherwise."""
    if num_steps is None:
        return None
    named = [item for item in settings or () if item.partition("=")[0] in LENGTH_NAMES]
    if not named:
        return None
    return (f"--set {named[0]} and --num-steps {num_steps} both give the run length, and "
            f"--num-steps would replace the config's max_steps and num_epochs: give one")


def _check_args(args: argparse.Namespace) -> str | None:
    twice = length_set_twice(getattr(args, "set", None), args.num_steps)
    if twice:
        return twice
    for name in ("steps", "steps_per_epoch", "num_steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"expected --{name.replace('_', '-')} >= 1, got {value}"
    if args.steps > MAX_STEPS:
        return (f"expected --steps <= {MAX_STEPS:,} (the history keeps a row per micro-step), "
                f"got {args.steps:,}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return f"expected --out to be a directory (new or existing), got the file {out}"
    if args.tolerance is not None and not (math.isfinite(args.tolerance) and
                                           args.tolerance > 0):
        return f"expected --tolerance to be a finite number > 0, got {args.tolerance}"
    if args.compare_tf:
        from trainop.interfaces.tensorflow_import import import_tensorflow
        from trainop.interfaces.train.quiet import tf_logs_dropped

        try:  # imported here, before training, and its start-up lines dropped
            with tf_logs_dropped():
                import_tensorflow()
        except ImportError as error:
            return (f"--compare-tf needs TensorFlow, which cannot be imported ({error}; pip "
                    f"install 'trainop[tensorflow]' installs it)")
    return None


def run_length(recipe, num_steps: int | None = None, steps_per_epoch: int | None = None,
               steps: int = DEFAULT_STEPS) -> dict[str, int]:
    """``build``'s ``num_steps``/``steps_per_epoch`` for an OpenSeq2Seq recipe, the one rule of
    ``trainop train`` and ``check-config`` (see the module doc): ``num_steps`` where given or
    where the config has neither ``max_steps`` nor ``num_epochs`` (then ``steps``, the run's
    micro-steps); nothing with ``max_steps``; with ``num_epochs``, ``steps_per_epoch``
    micro-steps (default ``DEFAULT_STEPS_PER_EPOCH``) // ``iter_size`` updates per epoch."""
    if recipe.builds != "TrainOp":
        return {}
    o = recipe.options
    if num_steps is not None or (o["max_steps"] is None and o["num_epochs"] is None):
        return {"num_steps": num_steps or steps}
    if o["max_steps"] is not None:
        return {}
    micro = steps_per_epoch or DEFAULT_STEPS_PER_EPOCH
    per_epoch = micro // o["iter_size"]  # OpenSeq2Seq: steps_in_epoch //= iter_size
    if per_epoch < 1:
        raise ValueError(f"Expected --steps-per-epoch >= iter_size {o['iter_size']} (an "
                         f"epoch of at least one update), got {micro}")
    return {"steps_per_epoch": per_epoch}


def _regularizer(recipe):
    """The OpenSeq2Seq recipe's regularizer object (``l2_regularizer(scale)``), or None."""
    o = recipe.options
    if recipe.builds != "TrainOp" or o["regularizer"] is None:
        return None
    factory, params = o["regularizer"], o["regularizer_params"]
    return factory(**params)


def _half_dtype(recipe):
    import torch

    dtype = recipe.options.get("dtype") if recipe.builds == "TrainOp" else None
    if dtype == "mixed":
        return torch.float16
    return dtype if dtype in (torch.float16, torch.bfloat16) else None


@dataclass
class BuiltRun:
    """What ``trainop train`` trains (``build_run``): the recipe, the built-in model (float16
    weights when the recipe is mixed: ``half``) and a copy of its initial weights, the batches,
    the built training object, RETURNN's learning-rate control (or None), OpenSeq2Seq's
    regularizer object (or None), the recipe's own summary writer (or None) and notes."""

    recipe: Any
    model: Any
    initial: Any
    batches: Any
    built: Any
    control: Any
    regularizer: Any
    half: Any
    writer: Any
    notes: list[str]


def build_run(args: argparse.Namespace) -> BuiltRun:
    """Load ``args.file`` and build it around the built-in model as ``trainop train`` does
    (``args``: the command's options, e.g. ``parse_args(["train", FILE])`` of the ``trainop``
    parser). The recipe's errors raise (``ValueError``, ``TypeError``, ...: see
    ``is_recipe_error``); a recipe with ``debug_grad_summaries`` opens its writer in
    ``args.out``."""
    import torch

    from trainop.interfaces.recipes.settings import load_with_settings, parse_settings
    from trainop.interfaces.train.model import Batches, LSTMCellModel

    writer, notes = None, []
    recipe = load_with_settings(args.file, parse_settings(getattr(args, "set", None)))
    if recipe.builds == "Updater" and recipe.options.get("debug_grad_summaries"):
        # the recipe's summaries are written with the run's, opened at the first summary
        # (after an earlier run's files are set aside)
        writer = _writer(Path(args.out), later=True)
        if writer is None:
            recipe.options = dict(recipe.options, debug_grad_summaries=False)
            notes.append("debug_grad_summaries: not written: the tensorboard package is "
                         "missing (pip install 'trainop[tensorboard]')")
    half = _half_dtype(recipe)
    model = LSTMCellModel(seed=args.seed)
    batches = Batches(args.steps, seed=args.seed + 1, dtype=half)  # made while training
    if half is not None:
        model = model.to(half)
    initial = copy.deepcopy(model)

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(x), y)

    built = recipe.build(model, loss, summary_writer=writer, **run_length(recipe, args.num_steps,
                                                                     args.steps_per_epoch,
                                                                     args.steps))
    control = recipe.learning_rate_control() if recipe.builds == "Updater" else None
    return BuiltRun(recipe, model, initial, batches, built, control, _regularizer(recipe), half,
                    writer, notes)


def _writable(out: Path) -> str | None:
    """Why the run's files cannot be written in ``out`` (``/proc/self``, ``/sys/...``,
    ``/dev/full/x``), or None: the folder is made and a file written and removed in it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out) as probe:
            probe.write(b"x")
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as error:
        return f"cannot write the run's files in --out {out}: {error.strerror or error}"
    return None


def run(args: argparse.Namespace) -> int:
    """``trainop train`` with parsed ``args``; the exit status. Library code: torch's thread
    count, set to 1 for the run, is restored when it returns or raises."""
    problem = _check_args(args)
    if problem:
        return _fail(problem)
    import torch

    # The built-in model is tiny: one thread is fastest, and spares a busy machine the
    # oversubscription that made a step 50x slower with 2 threads beside other work.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(args)
    except BrokenPipeError:  # the output piped into `head`: the command's caller handles it
        raise
    except OSError as error:  # writing the run's files (a disk filling up while training)
        return _fail(f"cannot write the run's files in --out {args.out}: "
                     f"{error.strerror or error}")
    finally:
        torch.set_num_threads(threads)


def _run(args: argparse.Namespace) -> int:
    from trainop.interfaces.train.loop import train_model

    out = Path(args.out)
    try:
        prepared = build_run(args)  # validates the recipe and --set; writes nothing
    except Exception as error:  # noqa: BLE001 - the recipe's errors in one line, others raise
        if not is_recipe_error(error):
            raise
        return _fail(f"invalid recipe {args.file}: {error}")
    recipe, model, initial, batches = (prepared.recipe, prepared.model, prepared.initial,
                                       prepared.batches)
    built, control, half, writer = (prepared.built, prepared.control, prepared.half,
                                    prepared.writer)
    plan = None
    if args.compare_tf:
        from trainop.interfaces.train.replay_plan import tf_plan

        try:  # refused here, before training, where TensorFlow 1 cannot replay the recipe
            plan = tf_plan(built, prepared.regularizer)
        except ValueError as error:
            return _fail(f"--compare-tf cannot replay {args.file}: {error}")
    problem = _writable(out)
    if problem:
        return _fail(problem)
    moved = set_aside(out)  # only a run that starts sets the earlier one aside
    if moved is not None:
        print(f"{PROG}: --out {args.out} held an earlier run: its files are now in {moved}",
              file=sys.stderr)
    if writer is None:
        writer = _writer(out)
    snapshots: list[dict] = []
    draw, bar = _progress(args.steps, not args.no_progress)

    def after_step(k, history) -> None:
        if plan is not None:
            snapshots.append({n: p.detach().float().numpy().copy()
                              for n, p in model.named_parameters()})
        if draw is not None:
            draw(k, history)

    epochs = (f", epochs of {args.steps_per_epoch} micro-steps under RETURNN's learning-rate "
              f"control" if control is not None else "")
    print(f"{PROG}: {args.file} ({recipe.format}), {type(built).__name__} with "
          f"{recipe.optimizer_class.__name__}, {args.steps} micro-steps{epochs}")
    from trainop.interfaces.recipes.explain import optimizer_modes

    for mode in optimizer_modes(recipe):
        print(f"  mode: {mode}")
    for note in recipe.notes:  # once, before the run starts
        sys.stderr.write(f"{PROG}: warning: {note}\n")
    sys.stderr.flush()
    history = train_model(built, model, batches, writer=writer, progress=after_step,
                          control=control, steps_per_epoch=args.steps_per_epoch)
    if bar is not None:
        bar.close()
    for note in prepared.notes:
        print(note)
    print(f"history: {history.write_csv(out / 'history.csv')}")
    if writer is not None:
        writer.close()
        print(f"TensorBoard event files: {out / 'tensorboard'}")
    else:
        print("TensorBoard event files: not written: the tensorboard package is missing "
              "(pip install 'trainop[tensorboard]')")
    try:
        from trainop.interfaces.train.dashboard import write_dashboard

        dashboard = write_dashboard(history, out / "dashboard.png",
                                    f"{Path(args.file).name}: {recipe.optimizer_class.__name__}")
        print(f"dashboard: {dashboard}")
    except ImportError:
        print("dashboard: not written: matplotlib is missing (pip install 'trainop[plot]')")
    print(history.summary())
    if recipe.notes:  # each printed once, before the run
        print(f"{len(recipe.notes)} warning(s) about the recipe: printed before the run "
              f"(stderr)")
    if plan is None:
        return 0
    return _compare(args, plan, initial, batches, history, snapshots, half)


def _compare(args, plan, initial, batches, history, snapshots, half) -> int:
    from trainop.interfaces.train.compare_tf import deviations, replay_in_tf

    try:
        theirs = replay_in_tf(initial, plan, batches, history.learning_rate)
    except ValueError as error:
        return _fail(f"--compare-tf cannot replay {args.file}: {error}")
    worst = deviations(snapshots, theirs)
    tolerance = args.tolerance if args.tolerance is not None else (
        1e-5 if half is None else 2e-2)
    for note in plan.notes:  # where trainop is configured unlike the upstream replay
        print(f"--compare-tf: {note}")
    top = max(worst)
    at = worst.index(top)
    print("largest relative deviation of the parameters from TensorFlow's, per step:")
    for k, value in enumerate(worst):
        if k < 5 or k == len(worst) - 1 or k % 10 == 9 or k == at:
            print(f"  step {k + 1:4d}: {value:.2e}" + ("  (the largest)" if k == at else ""))
    verdict = "PASS" if top <= tolerance else "FAIL"
    margin = (f"{tolerance / top:.3g}x below the tolerance" if top <= tolerance and top > 0
              else "0 (identical)" if top == 0 else f"{top / tolerance:.3g}x the tolerance")
    print(f"largest over {len(worst)} steps: {top:.2e} at step {at + 1} (tolerance "
          f"{tolerance:.0e}; margin: {margin}): {verdict}")
    return 0 if verdict == "PASS" else 1
