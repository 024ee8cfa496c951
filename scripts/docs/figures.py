"""The site's pictures, drawn at build time from the code and the recorded data (no pasted
images): the learning-rate policies (``trainop.schedules.plot``), a ``trainop train`` run's
dashboard and its ``--compare-tf`` deviation per step, and the speed figures of BENCHMARKS.md.

Each function writes one file into ``out`` and returns its path; ``gen_figures.py`` copies
them into the site."""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The run drawn on the training pages: the main job's OpenSeq2Seq recipe, kept short.
TRAIN_RECIPE = ROOT / "examples" / "openseq2seq_transformer.py"
TRAIN_STEPS = 12


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def policies(out: Path) -> Path:
    """OpenSeq2Seq's and TF1's policies on one axis, drawn by ``trainop.schedules.plot``."""
    from trainop import schedules
    from trainop.schedules import openseq2seq, tf1

    drawn = [
        schedules.TransformerPolicy(learning_rate=0.4, d_model=512, warmup_steps=400),
        schedules.PolyDecay(0.001, decay_steps=1500, power=2.0, warmup_steps=200),
        openseq2seq.CosineDecay(0.001, decay_steps=1500, warmup_steps=200),
        schedules.ExponentialDecay(0.001, decay_steps=300, decay_rate=0.5, staircase=True),
        tf1.PiecewiseConstant([500, 1000], [0.001, 0.0005, 0.0001]),
    ]
    return Path(schedules.plot(drawn, 2000, out / "policies.png",
                               title="trainop.schedules: learning rate per step"))


def train_run(out: Path) -> tuple[Path, Path, str]:
    """``trainop train RECIPE --compare-tf`` (the CLI itself): its dashboard, and the largest
    relative deviation from TensorFlow's replay at every step drawn from the run's own numbers.
    Returns the two PNGs and what the command printed."""
    from trainop.__main__ import main
    from trainop.interfaces.train import compare_tf

    seen: list[float] = []
    original = compare_tf.deviations

    def recording(ours, theirs):
        seen[:] = original(ours, theirs)
        return seen

    run = Path(tempfile.mkdtemp(prefix="trainop-docs-run-"))
    printed = io.StringIO()
    compare_tf.deviations = recording
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            main(["train", str(TRAIN_RECIPE), "--steps", str(TRAIN_STEPS), "--compare-tf",
                  "--out", str(run), "--no-progress"])
    finally:
        compare_tf.deviations = original
    dashboard = out / "dashboard.png"
    dashboard.write_bytes((run / "dashboard.png").read_bytes())
    fig = _figure(7, 3)
    ax = fig.subplots()
    if seen:
        ax.semilogy(range(1, len(seen) + 1), [max(v, 1e-12) for v in seen], marker=".")
        ax.axhline(1e-5, color="firebrick", linestyle="--", linewidth=1)
        ax.text(1, 1.3e-5, "tolerance 1e-5", color="firebrick", fontsize=8)
        ax.set_xlabel("step")
        ax.set_ylabel("largest relative deviation")
    else:
        ax.text(0.5, 0.5, "no TensorFlow here: pip install -e '.[docs]' draws this plot",
                ha="center", va="center")
        ax.set_axis_off()
    ax.set_title(f"trainop train {TRAIN_RECIPE.name} --compare-tf: trainop vs TensorFlow",
                 fontsize=10)
    fig.tight_layout()
    deviation = out / "deviation.png"
    fig.savefig(deviation, dpi=90)
    return dashboard, deviation, printed.getvalue()


_MS = re.compile(r"`([^`]+)`[^|]*?([\d.]+) ms")


def headline_rows(text: str) -> list[tuple[str, str, float, str, float]]:
    """BENCHMARKS.md's headline table: (workload, trainop, ms, best peer, ms) per row."""
    section = text.split("## Headline", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("("):
            continue
        ours, peer = _MS.search(cells[1]), _MS.search(cells[2])
        if ours and peer:
            rows.append((cells[0], ours.group(1), float(ours.group(2)),
                         peer.group(1), float(peer.group(2))))
    return rows


def train_step_rows(text: str) -> list[tuple[str, float, float]]:
    """BENCHMARKS.md's training-step table: (comparison, torch ms, trainop ms) per row."""
    section = text.split("## Training step", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"[\d.]+", cells[1]) and \
                re.fullmatch(r"[\d.]+", cells[2]):
            rows.append((cells[0], float(cells[1]), float(cells[2])))
    return rows


def _wrapped(label: str, width: int) -> str:
    """A bar's label on lines of at most ``width`` characters, broken between words only."""
    import textwrap

    return "\n".join(textwrap.fill(part, width, break_long_words=False, break_on_hyphens=False)
                     for part in label.split("\n"))


def _bars(out: Path, name: str, title: str, labels: list[str], series: dict[str, list[float]],
          xlabel: str, log: bool = False) -> Path:
    path = out / name
    bar_figure(title, labels, series, xlabel, log).savefig(path, dpi=90, bbox_inches="tight")
    return path


def bar_figure(title: str, labels: list[str], series: dict[str, list[float]], xlabel: str,
               log: bool = False):
    """Horizontal bars, one group per label; the series named ``trainop...`` gets trainop's
    colour in every chart; the legend sits under the plot, where it covers no bar."""
    labels = [_wrapped(label, 34) for label in labels]
    lines = max(label.count("\n") + 1 for label in labels)
    fig = _figure(9, 1.3 + (0.35 + 0.16 * lines) * len(labels))
    ax = fig.subplots()
    height = 0.8 / len(series)
    for i, (legend, values) in enumerate(series.items()):
        ys = [k + i * height for k in range(len(labels))]
        color = COLORS["trainop"] if legend.startswith("trainop") else COLORS["peer"]
        bars = ax.barh(ys, values, height=height, label=legend, color=color)
        ax.bar_label(bars, labels=[f"{v:g} ms" for v in values], fontsize=7, padding=2)
    ax.set_yticks([k + height * (len(series) - 1) / 2 for k in range(len(labels))], labels,
                  fontsize=7)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.margins(x=0.18)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.9 / fig.get_figheight()),
              ncol=len(series), frameon=False)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def headline_chart(text: str) -> tuple:
    """``bar_figure``'s arguments for the headline chart."""
    rows = headline_rows(text)
    if not rows:
        raise ValueError("BENCHMARKS.md: no rows in the Headline table to chart")
    return ("Optimizer step, CPU (2-vCPU AMD EPYC), float32: lower is faster",
            [f"{w}\n{o} / {p}" for w, o, _, p, _ in rows],
            {"trainop": [r[2] for r in rows], "best peer": [r[4] for r in rows]},
            "step time (ms)")


def train_step_chart(text: str) -> tuple:
    """``bar_figure``'s arguments for the training-step chart."""
    rows = train_step_rows(text)
    if not rows:
        raise ValueError("BENCHMARKS.md: no rows in the Training step table to chart")
    return ("Training step, CPU (2 cores), float32: torch recipe vs trainop",
            [label.replace("`", "") for label, _, _ in rows],
            {"torch (GradScaler + clip + fused Adam)": [r[1] for r in rows],
             "trainop.optimize_loss": [r[2] for r in rows]}, "time (ms, log scale)", True)


def bench_headline(out: Path, text: str) -> Path:
    """The headline workloads: trainop's step time against the best peer's (CPU)."""
    return _bars(out, "bench-headline.png", *headline_chart(text))


def bench_train_step(out: Path, text: str) -> Path:
    """The training step through ``optimize_loss`` against torch's recipe (CPU)."""
    return _bars(out, "bench-train-step.png", *train_step_chart(text))


#: The home page's parity figure: each optimizer as TensorFlow builds it, as trainop builds it
#: and as torch.optim builds it (same hyperparameters under their own names).
PARITY_STEPS = 100
#: (label, TF1 class and arguments, torch.optim class and the same arguments in torch's names)
PARITY_RUNS = (
    ("Adam, epsilon 1e-3", "AdamOptimizer", {"learning_rate": 0.001, "epsilon": 1e-3},
     "Adam", {"lr": 0.001, "eps": 1e-3}),
    ("RMSProp", "RMSPropOptimizer", {"learning_rate": 0.0001, "decay": 0.9},
     "RMSprop", {"lr": 0.0001, "alpha": 0.9, "eps": 1e-10}),
    ("Adagrad", "AdagradOptimizer", {"learning_rate": 0.05},
     "Adagrad", {"lr": 0.05}),
)
#: One colour per library, in every chart of the site.
COLORS = {"trainop": "#3949ab", "peer": "#ef6c00"}


def _problem():
    import numpy as np

    rng = np.random.default_rng(0)
    return (rng.standard_normal((64, 16)).astype("float32"),
            rng.standard_normal(64).astype("float32"))


def _tf_trajectory(tf_class: str, kwargs: dict) -> list:
    import tensorflow as tf

    a, b = _problem()
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        w = tf1.get_variable("w", initializer=tf.zeros(16, tf.float32))
        loss = 0.5 * tf.reduce_sum(tf.square(tf.linalg.matvec(a, w) - b))
        train = getattr(tf1.train, tf_class)(**kwargs).minimize(loss)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            out = []
            for _ in range(PARITY_STEPS):
                sess.run(train)
                out.append(sess.run(w))
    return out


def _torch_trajectory(make) -> list:
    import torch

    a, b = (torch.from_numpy(x) for x in _problem())
    w = torch.zeros(16, requires_grad=True)
    opt = make([w])
    out = []
    for _ in range(PARITY_STEPS):
        opt.zero_grad()
        (0.5 * ((a @ w - b) ** 2).sum()).backward()
        opt.step()
        out.append(w.detach().numpy().copy())
    return out


def _deviation(ours: list, theirs: list) -> list[float]:
    import numpy as np

    return [float(np.max(np.abs(o - t)) / max(float(np.max(np.abs(t))), 1e-30))
            for o, t in zip(ours, theirs, strict=True)]


def parity(out: Path) -> Path:
    """What trainop is for: the same optimizer run by TensorFlow 1, by trainop and by
    ``torch.optim`` on one small least-squares problem (float32, each library computing its
    own gradients); per step, the largest deviation of the weights from TensorFlow's, relative
    to their size. trainop stays at float32 rounding; torch.optim's versions of the same
    optimizers drift away (Adam's epsilon placement, RMSProp's and Adagrad's starting
    accumulators)."""
    import torch

    import trainop

    fig = _figure(8, 3.6)
    ax = fig.subplots()
    styles = ("-", "--", ":")
    for (label, tf_class, kwargs, torch_class, torch_kwargs), style in zip(
            PARITY_RUNS, styles, strict=True):
        theirs = _tf_trajectory(tf_class, kwargs)
        ours = _torch_trajectory(lambda p, c=tf_class, k=kwargs: getattr(trainop, c)(
            params=p, **k))
        peer = _torch_trajectory(lambda p, c=torch_class, k=torch_kwargs: getattr(
            torch.optim, c)(p, **k))
        steps = range(1, PARITY_STEPS + 1)
        ax.semilogy(steps, [max(v, 1e-9) for v in _deviation(ours, theirs)], style,
                    color=COLORS["trainop"], label=f"trainop: {label}")
        ax.semilogy(steps, [max(v, 1e-9) for v in _deviation(peer, theirs)], style,
                    color=COLORS["peer"], label=f"torch.optim: {label}")
    ax.axhline(1e-5, color="grey", linewidth=0.8)
    ax.text(PARITY_STEPS, 1.4e-5, "float32 tolerance of the parity tests (1e-5)", ha="right",
            fontsize=7, color="grey")
    ax.set_ylim(5e-10, 10)
    ax.set_xlabel("step")
    ax.set_ylabel("deviation from TensorFlow\n(largest, relative; 1e-9 = equal)", fontsize=8)
    ax.set_title("The same optimizer in TensorFlow 1, trainop and torch.optim (float32)",
                 fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22),
              frameon=False)
    fig.tight_layout()
    path = out / "parity.png"
    fig.savefig(path, dpi=90)
    return path
