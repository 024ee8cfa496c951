"""``trainop train FILE``: train the built-in small model with a recipe and show what happened.

The recipe (an OpenSeq2Seq config, a RETURNN config, or trainop's YAML/JSON: see
``trainop.load_recipe``) builds its training object around the built-in model
(``model.LSTMCellModel``: a one-layer LSTM on generated sine-wave sequences; nothing is
downloaded), which trains for ``--steps`` micro-steps with a progress bar (loss, learning rate,
loss scale, skipped updates). Written to ``--out``: TensorBoard event files (``tensorboard/``,
when the ``tensorboard`` package is installed) and ``dashboard.png`` (loss, learning rate,
global gradient norm, loss scale, skipped updates); then a one-paragraph summary.

``--compare-tf``: the same run replayed with TensorFlow's own ops in TF1 compat graph mode
(``compare_tf``), printing the largest relative deviation of the parameters per step; exit
status 1 above ``--tolerance`` (default 1e-5).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train", help="train the built-in small model with a recipe; dashboard and summary",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="recipe: OpenSeq2Seq config (.py), RETURNN config "
                                "(.config/.py) or trainop YAML/JSON")
    p.add_argument("--steps", type=int, default=60, help="micro-steps (default: 60)")
    p.add_argument("--out", default="trainop-run", help="output directory (default: "
                                                         "./trainop-run)")
    p.add_argument("--seed", type=int, default=0, help="model and data seed (default: 0)")
    p.add_argument("--compare-tf", action="store_true",
                   help="replay the run with TensorFlow's own ops and print the largest "
                        "deviation per step (needs tensorflow)")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="--compare-tf: largest relative deviation allowed (default: 1e-5)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    return p


def _progress(total: int, enabled: bool):
    """A callback drawing a tqdm bar (or nothing) with loss, lr, loss scale and skips."""
    if not enabled:
        return None, None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency of the cli extra
        return None, None
    bar = tqdm(total=total, unit="step", file=sys.stderr, leave=False)

    def update(k, history) -> None:
        scale = history.loss_scale[-1]
        bar.set_postfix(loss=f"{history.loss[-1]:.4g}", lr=f"{history.learning_rate[-1]:.3g}",
                        scale="-" if scale != scale else f"{scale:.3g}",
                        skipped=history.skipped[-1], refresh=False)
        bar.update(1)
    return update, bar


def _writer(out: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(out / "tensorboard"))


def run(args: argparse.Namespace) -> int:
    from trainop.interfaces.recipes import load_recipe
    from trainop.interfaces.train.compare_tf import deviations, replay_in_tf
    from trainop.interfaces.train.dashboard import write_dashboard
    from trainop.interfaces.train.loop import train_model
    from trainop.interfaces.train.model import LSTMCellModel, make_batches

    if args.steps < 1:
        print(f"trainop train: expected --steps >= 1, got {args.steps}", file=sys.stderr)
        return 2
    # The built-in model is tiny: one thread is fastest, and spares a busy machine the
    # oversubscription that made a step 50x slower with 2 threads beside other work.
    torch.set_num_threads(1)
    try:
        recipe = load_recipe(args.file)
        model = LSTMCellModel(seed=args.seed)
        initial = copy.deepcopy(model)
        batches = make_batches(args.steps, seed=args.seed + 1)

        def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.mse_loss(model(x), y)

        built = recipe.build(model, loss, num_steps=args.steps)
    except (ValueError, TypeError, OSError) as error:
        print(f"trainop train: {error}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    writer = _writer(out)
    snapshots: list[dict] = []
    draw, bar = _progress(args.steps, not args.no_progress)

    def after_step(k, history) -> None:
        if args.compare_tf:
            snapshots.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        if draw is not None:
            draw(k, history)

    print(f"trainop train: {args.file} ({recipe.format}), {type(built).__name__} with "
          f"{recipe.optimizer_class.__name__}, {args.steps} micro-steps")
    history = train_model(built, model, batches, writer=writer, progress=after_step)
    if bar is not None:
        bar.close()
    if writer is not None:
        writer.close()
        print(f"TensorBoard event files: {out / 'tensorboard'}")
    dashboard = write_dashboard(history, out / "dashboard.png",
                                f"{Path(args.file).name}: {recipe.optimizer_class.__name__}")
    print(f"dashboard: {dashboard}")
    print(history.summary())
    if not args.compare_tf:
        return 0
    try:
        theirs = replay_in_tf(initial, built, batches, history.learning_rate)
    except ImportError:
        print("trainop train --compare-tf: TensorFlow is not installed (pip install "
              "'trainop[test]' has tensorflow-cpu)", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"trainop train --compare-tf: {error}", file=sys.stderr)
        return 1
    worst = deviations(snapshots, theirs)
    print("largest relative deviation of the parameters from TensorFlow's, per step:")
    for k, value in enumerate(worst):
        if k < 5 or k == len(worst) - 1 or k % 10 == 9:
            print(f"  step {k + 1:4d}: {value:.2e}")
    top = max(worst)
    verdict = "PASS" if top <= args.tolerance else "FAIL"
    print(f"largest over {len(worst)} steps: {top:.2e} (tolerance {args.tolerance:.0e}): "
          f"{verdict}")
    return 0 if verdict == "PASS" else 1
