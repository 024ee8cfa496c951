"""``trainop check-config``'s whole report, line by line, for each kind of recipe: the order of
its sections, each ``--set``, the optimizer's hyperparameters (TF's signature defaults, or the
built ``torch.optim`` optimizer's), the pipeline numbered from 1, the schedule's rows (values
from the policies' formulas, written out here), the notes on the run length, the long table's
summary at every length around its threshold, the plot line for each way of asking (or not),
the ignored and needs-code sections, the warnings, and the one-line errors."""

from __future__ import annotations

import itertools
import math
import textwrap

import pytest
import torch

from trainop.__main__ import build_parser, main
from trainop.interfaces import check_config
from trainop.interfaces.recipes.notes import TF_NOTES


def _check(capsys, *argv: str) -> tuple[int, list[str], str]:
    status = main(["check-config", *argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def _write(folder, name: str, text: str):
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def _table(rows) -> list[str]:
    """The schedule table's rows as check-config prints them (unit right-aligned in 8)."""
    return [f"  {x:>8d}  {lr:.6g}" for x, lr in rows]


ADAM_NOTE = "  TF numerics: " + TF_NOTES["AdamOptimizer"]
MOMENTUM_NOTE = "  TF numerics: " + TF_NOTES["MomentumOptimizer"]

RETURNN = """
    #!rnn.py
    learning_rate = 0.01
    optimizer = {"class": "adam", "epsilon": 1e-8}
    gradient_clip = 2.0
    learning_rate_control = "newbob_multi_epoch"
    num_epochs = 4
"""


def test_a_returnn_config_line_by_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "a.config", RETURNN)
    status, lines, err = _check(capsys, "a.config", "--set", "learning_rate=0.02",
                                "--set", "optimizer.epsilon=1e-7")
    assert (status, err) == (0, "")
    assert lines == [
        "recipe: a.config (format: returnn; builds: Updater)",
        "  --set learning_rate=0.02: the training option learning_rate = 0.02",
        "  --set optimizer.epsilon=1e-7: optimizer.epsilon = 1e-07",
        "optimizer: trainop.optimizers.adam.AdamOptimizer",
        # TF1's AdamOptimizer signature: beta1=0.9, beta2=0.999, use_locking=False
        "  beta1=0.9, beta2=0.999, epsilon=1e-07, use_locking=False, implementation=None",
        ADAM_NOTE,
        "gradient pipeline (in order):",
        "  1. backward of loss",
        "  2. clip values to [-2.0, 2.0] (gradient_clip)",
        "  3. AdamOptimizer update; global_train_step += 1",
        "learning rate: learning_rates per epoch, then newbob_multi_epoch (x1.0)",
        "  note: learning_rate_control='newbob_multi_epoch': epochs without a fixed rate follow "
        "the scores (here: none yet)",
        "     epoch  learning rate",
        *_table([(1, 0.02)]),
        "plot: none written (--plot FILE.png or --out FOLDER)",
    ]


OS2S = """
    import tensorflow as tf
    from open_seq2seq.models import Text2Text
    from open_seq2seq.optimizers.lr_policies import exp_decay

    base_model = Text2Text
    base_params = {{
        "use_horovod": False,
        "num_gpus": 1,
        "max_steps": 30,
        "iter_size": {iter_size},
        "optimizer": "Momentum",
        "optimizer_params": {{"momentum": 0.9}},
        "lr_policy": exp_decay,
        "lr_policy_params": {{"learning_rate": 0.1, "begin_decay_at": 10, "decay_steps": 10,
                             "decay_rate": 0.5, "use_staircase_decay": True, "min_lr": 0.01}},
        "max_grad_norm": 1.0,
        "dtype": tf.float32,
        "logdir": "run",
        "encoder_params": {{"initializer": tf.variance_scaling_initializer(scale=1.0)}},
    }}
"""


def _exp_decay(step: int) -> float:
    """OpenSeq2Seq's exp_decay with the recipe's parameters: staircase halvings every 10
    steps from step 10, never below min_lr 0.01."""
    if step < 10:
        return 0.1
    return max(0.1 * 0.5 ** math.floor((step - 10) / 10), 0.01)


@pytest.mark.parametrize("iter_size", [1, 2])
def test_an_openseq2seq_config_line_by_line(tmp_path, capsys, monkeypatch, iter_size):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "os2s.py", OS2S.format(iter_size=iter_size))
    status, lines, err = _check(capsys, "os2s.py", "--no-plot")
    assert (status, err) == (0, "")
    accumulate = ["  3. accumulate g/2 over iter_size=2 micro-steps (update on micro-steps "
                  "k % 2 == 0)"] if iter_size == 2 else []
    k = len(accumulate)
    head = [
        "recipe: os2s.py (format: openseq2seq; builds: TrainOp)",
        "optimizer: trainop.optimizers.momentum.MomentumOptimizer",
        "  momentum=0.9, use_locking=False, use_nesterov=False, implementation=None",
        MOMENTUM_NOTE,
        "gradient pipeline (in order):",
        "  1. loss = float32(model loss)",
        "  2. backward of loss",
        *accumulate,
        f"  {3 + k}. global_gradient_norm (float32)",
        f"  {4 + k}. clip by global norm 1.0 (max_grad_norm)",
        f"  {5 + k}. MomentumOptimizer update; global_step += 1 when applied",
        "learning rate: exp_decay({'learning_rate': 0.1, 'begin_decay_at': 10, "
        "'decay_steps': 10, 'decay_rate': 0.5, 'use_staircase_decay': True, 'min_lr': 0.01})",
        "      step  learning rate",
    ]
    assert lines[:len(head)] == head
    rest = lines[len(head):]
    table = list(itertools.takewhile(lambda line: line.split()[0].isdigit(), rest))
    steps = [int(line.split()[0]) for line in table]
    assert table == _table([(s, _exp_decay(s)) for s in steps])
    assert steps[0] == 0 and steps[-1] == 30 and steps == sorted(set(steps))
    assert rest[len(table):] == [
        "needs code, not run (not a training option, ignored):",
        "  encoder_params.initializer: os2s.py:19: calls "
        "tf.variance_scaling_initializer(...): code is not run",
        "ignored (OpenSeq2Seq parameters trainop does not need):",
        "  num_gpus: devices (trainop trains where the model is; several processes: "
        "torch.distributed)",
        "  logdir: OpenSeq2Seq's run: logging, checkpoints, evaluation (trainop train: --out)",
        "  encoder_params: the model and its data (trainop trains the model you build; "
        "trainop train: its own)",
        *(["warning: iter_size > 1 without use_horovod: OpenSeq2Seq refuses it; trainop "
           "accumulates on one process"] if iter_size == 2 else []),
    ]


def test_a_torch_optimizer_shows_what_torch_built(tmp_path, capsys, monkeypatch):
    """RETURNN's PyTorch backend: the hyperparameters are the built ``torch.optim.AdamW``'s
    (``epsilon`` read as ``eps``), without its ``lr`` (the schedule's line says it)."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "t.config", """
        #!rnn.py
        backend = "torch"
        learning_rate = 0.01
        optimizer = {"class": "adamw", "epsilon": 1e-7, "weight_decay": 0.01}
    """)
    status, lines, err = _check(capsys, "t.config", "--no-plot")
    assert (status, err) == (0, "")
    defaults = torch.optim.AdamW([torch.zeros(1)], lr=0.01, eps=1e-7,
                                 weight_decay=0.01).defaults
    shown = ", ".join(f"{k}={v!r}" for k, v in defaults.items() if k != "lr")
    assert lines[:3] == ["recipe: t.config (format: returnn; builds: Updater)",
                         "optimizer: torch.optim.adamw.AdamW", "  " + shown]
    assert "TF numerics" not in "\n".join(lines)
    assert lines[3:] == [
        "gradient pipeline (in order):",
        "  1. backward of loss",
        "  2. every group's lr set, AdamW.step() (RETURNN's PyTorch backend: weight-decay "
        "groups, docs/updater.md); global_train_step += 1",
        "learning rate: constant learning_rate=0.01 (x1.0)",
        "      step  learning rate",
        *_table([(0, 0.01)]),
    ]


# ------------------------------------------------------------------ the long table's summary
@pytest.mark.parametrize("n", [1, 22, 23, 24, 25, 40, 600])
def test_a_per_epoch_table_is_summarised_past_24_rows(tmp_path, capsys, monkeypatch, n):
    """``learning_rates`` of ``n`` epochs: ``n`` rows and the next epoch's; past 24 rows the
    first and last 8 around one line with the count."""
    monkeypatch.chdir(tmp_path)
    rates = [round(0.001 * (1 + i % 7), 6) for i in range(n)]
    _write(tmp_path, "r.config", f"#!rnn.py\noptimizer = {{'class': 'adam'}}\n"
                                 f"optimizer_epsilon = 1e-8\nlearning_rates = {rates}\n")
    status, lines, err = _check(capsys, "r.config", "--no-plot")
    assert (status, err) == (0, "")
    table = lines[lines.index("     epoch  learning rate") + 1:]
    rows = [(e, rates[e - 1]) for e in range(1, n + 1)] + [(n + 1, rates[-1])]
    if len(rows) <= 24:
        assert table == _table(rows)
    else:
        assert table == [*_table(rows[:8]),
                         f"       ... {len(rows) - 16} more rows ({len(rows)} in all; the plot "
                         f"shows every one) ...",
                         *_table(rows[-8:])]


# ------------------------------------------------------------------ the notes on the run length
LENGTHS = {"max_steps": '"max_steps": 12,', "num_epochs": '"num_epochs": 3,', "neither": ""}


def _os2s_length(folder, length: str):
    return _write(folder, "len.py", f"""
        base_params = {{
            "optimizer": "Adam",
            "lr_policy": "fixed_lr",
            "lr_policy_params": {{"learning_rate": 0.001}},
            {LENGTHS[length]}
        }}
    """)


@pytest.mark.parametrize("flags", [(), ("--num-steps", "7"), ("--steps-per-epoch", "4")],
                         ids=["defaults", "num-steps", "steps-per-epoch"])
@pytest.mark.parametrize("length", sorted(LENGTHS))
def test_the_run_length_and_its_note(tmp_path, capsys, monkeypatch, length, flags):
    """The note names train's default where the run length comes from one (10 micro-steps an
    epoch; 60 steps without max_steps or num_epochs), and nothing where the config or a flag
    gives it; the table's last row is the run's last step."""
    monkeypatch.chdir(tmp_path)
    _os2s_length(tmp_path, length)
    status, lines, err = _check(capsys, "len.py", "--no-plot", *flags)
    assert (status, err) == (0, "")
    notes = [line for line in lines if line.startswith("  note:")]
    table = lines[lines.index("      step  learning rate") + 1:]
    table = table[:next((i for i, x in enumerate(table) if not x.startswith("    ")),
                        len(table))]
    if flags[:1] == ("--num-steps",):
        last, want = 7, []
    elif length == "max_steps":
        last, want = 12, []
    elif length == "num_epochs":
        per_epoch = int(flags[1]) if flags else 10
        last = 3 * per_epoch
        want = [] if flags else [
            "  note: num_epochs=3 x 10 step(s) per epoch: the default --steps-per-epoch 10 "
            "of trainop train and check-config (micro-steps // iter_size)"]
    else:
        last, want = 60, ["  note: the config has neither max_steps nor num_epochs: the "
                          "default run of trainop train, 60 steps (--num-steps)"]
    assert notes == want
    assert table[0] == _table([(0, 0.001)])[0] and table[-1] == _table([(last, 0.001)])[0]


def test_both_set_and_num_steps_give_the_length(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _os2s_length(tmp_path, "max_steps")
    status, lines, err = _check(capsys, "len.py", "--set", "max_steps=5", "--num-steps", "9")
    assert (status, lines) == (1, [])
    assert err == ("trainop check-config: --set max_steps=5 and --num-steps 9 both give the run "
                   "length, and --num-steps would replace the config's max_steps and "
                   "num_epochs: give one\n")


# ------------------------------------------------------------------ the plot line
RATES = "#!rnn.py\noptimizer = {'class': 'adam'}\noptimizer_epsilon = 1e-8\n" \
        "learning_rates = [0.01, 0.005]\n"


@pytest.mark.parametrize("ask", ["none", "no-plot", "plot", "out", "new-folder",
                                 "no-plot-with-plot"])
def test_the_plot_line(tmp_path, capsys, monkeypatch, ask):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "r.config", RATES)
    written = []
    monkeypatch.setattr(check_config, "_plot",
                        lambda schedule, path, title: written.append((path, title)))
    flags, path = {
        "none": ([], None), "no-plot": (["--no-plot"], None),
        "plot": (["--plot", "p.png"], "p.png"),
        "out": (["--out", "."], "./r.lr.png"),
        "new-folder": (["--out", "a/b"], "a/b/r.lr.png"),
        "no-plot-with-plot": (["--no-plot", "--plot", "p.png"], None)}[ask]
    status, lines, err = _check(capsys, "r.config", *flags)
    assert (status, err) == (0, "")
    tail = lines[lines.index("         3  0.005") + 1:]
    title = "r.config: learning_rates per epoch, then constant (x1.0)"
    if path is None:
        assert written == []
        assert tail == ([] if "--no-plot" in flags
                        else ["plot: none written (--plot FILE.png or --out FOLDER)"])
    else:
        assert written == [(path, title)]
        assert tail == [f"plot: {tmp_path / path.removeprefix('./')}"]
    assert (tmp_path / "a" / "b").is_dir() is (ask == "new-folder")


def test_without_matplotlib_the_plot_line_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "r.config", RATES)

    def missing(*args):
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(check_config, "_plot", missing)
    status, lines, err = _check(capsys, "r.config", "--plot", "p.png")
    assert (status, err) == (0, "")
    assert lines[-1] == "plot: not written: matplotlib is missing (pip install 'trainop[plot]')"


@pytest.fixture
def saved_figures(monkeypatch) -> list:
    """Each ``(figure, savefig's keywords)`` saved while the test runs (and the file written)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    saved = []
    real = Figure.savefig

    def keep(fig, path, **kw):
        saved.append((fig, kw))
        real(fig, path, **kw)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


class _Schedule:
    """What ``_plot`` reads of a schedule; ``curve`` keeps the points asked for."""

    def __init__(self, unit: str, last: int) -> None:
        self.unit, self.last, self.asked = unit, last, []

    def curve(self, xs):
        self.asked.append(list(xs))
        return [1.0 / (1 + x) for x in xs]


@pytest.mark.parametrize("unit,last", [("step", 0), ("step", 1), ("step", 1999),
                                       ("step", 4000), ("step", 4001), ("epoch", 1),
                                       ("epoch", 600), ("epoch", 6001)])
def test_the_plot_has_every_point_up_to_2000_then_a_stride(tmp_path, saved_figures, unit,
                                                           last):
    """Steps from 0, epochs from 1, to the last (at least 1), every ``last // 2000``-th."""
    schedule = _Schedule(unit, last)
    path = tmp_path / "s.png"
    check_config._plot(schedule, str(path), "the title")
    end = max(last, 1)
    stride = max(1, end // 2000)
    assert schedule.asked == [list(range(1 if unit == "epoch" else 0, end + 1, stride))]
    ((fig, _),) = saved_figures
    (ax,) = fig.axes
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == (
        f"global {unit}", "learning rate", "the title")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == schedule.asked[0]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ errors in one line
def test_an_invalid_recipe_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "bad.yaml", "format: trainop\noptimizer: {class: adam}\n"
                                 "gradient_clip_globl_norm: 1.0\n")
    status, lines, err = _check(capsys, "bad.yaml")
    assert (status, lines) == (1, [])
    assert err.startswith("trainop check-config: invalid recipe bad.yaml: ValueError: ")
    assert err.count("\n") == 1 and "  " not in err and "gradient_clip_globl_norm" in err


def test_an_error_of_many_lines_is_printed_in_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "r.config", RATES)

    def fails(recipe, args):
        raise TypeError("first line\n   second\tline  ")

    monkeypatch.setattr(check_config, "_report", fails)
    status, lines, err = _check(capsys, "r.config")
    assert (status, lines) == (1, [])
    assert err == "trainop check-config: invalid recipe r.config: TypeError: first line " \
                  "second line\n"


@pytest.mark.parametrize("error", [RuntimeError("a bug of trainop's"), KeyError("k"),
                                   BrokenPipeError(32, "Broken pipe")])
def test_an_error_not_the_recipes_is_raised(tmp_path, capsys, monkeypatch, error):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "r.config", RATES)

    def fails(recipe, args):
        raise error

    monkeypatch.setattr(check_config, "_report", fails)
    with pytest.raises(type(error)):
        check_config.run(build_parser().parse_args(["check-config", "r.config"]))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("pending", [["learning_rate_control"],
                                     ["learning_rate_control", "gradient_clip"]])
def test_training_options_that_need_code_are_refused(tmp_path, capsys, monkeypatch, pending):
    monkeypatch.chdir(tmp_path)
    body = {"learning_rate_control": "learning_rate_control = make_control()",
            "gradient_clip": "gradient_clip = compute_clip()"}
    text = "#!rnn.py\noptimizer = {'class': 'adam'}\nlearning_rate = 0.01\n" + \
        "".join(body[k] + "\n" for k in pending)
    _write(tmp_path, "c.config", text)
    status, lines, err = _check(capsys, "c.config")
    assert (status, lines) == (1, [])
    where = {k: f"c.config:{4 + i}" for i, k in enumerate(pending)}
    assert err.startswith("trainop check-config: invalid recipe c.config: ValueError: "
                          "training options need code (never run): ")
    found = err.split("(never run): ", 1)[1].split("; set them with ")
    assert [part.split(" at ")[0] for part in found[0].split("; ")] == pending
    for part, key in zip(found[0].split("; "), pending, strict=True):
        assert part.split(" at ", 1)[1].startswith(where[key] + ":")
    assert found[1] == " ".join(f"--set {k}=VALUE" for k in pending) + "\n"


# ------------------------------------------------------------------ the help
def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def _entries(text: str) -> dict[str, str]:
    """``--help``'s argument entries: the argument as written -> its help in one line."""
    entries: dict[str, list[str]] = {}
    name = None
    for line in text.split("\n\n", 1)[1].splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            name, _, rest = line.strip().partition("  ")
            entries[name] = [rest.strip()] if rest.strip() else []
        elif line.startswith("   ") and name is not None:
            entries[name].append(line.strip())
        else:
            name = None
    return {k: " ".join(v) for k, v in entries.items()}


def test_the_help_says_what_each_argument_does_and_its_default(capsys):
    """The defaults the help states are train's (``DEFAULT_STEPS``, ``DEFAULT_STEPS_PER_EPOCH``)
    and those the tests above find: no plot unless asked."""
    from trainop.interfaces.train.cli import DEFAULT_STEPS, DEFAULT_STEPS_PER_EPOCH

    text = _help(capsys, "check-config")
    # the description: the module's documentation after its first paragraph, line for line
    assert check_config.__doc__.partition("\n\n")[2].strip() in text
    entries = _entries(text)
    assert entries["file"] == "an OpenSeq2Seq .py config, a RETURNN config, or a trainop " \
                              ".yaml/.json recipe"
    assert entries["--num-steps NUM_STEPS"] == (
        "run length in steps (default: as trainop train: the config's max_steps, else "
        f"num_epochs x steps per epoch, else {DEFAULT_STEPS})")
    assert entries["--steps-per-epoch STEPS_PER_EPOCH"] == (
        f"micro-steps per epoch, for configs that run num_epochs (default: "
        f"{DEFAULT_STEPS_PER_EPOCH}, as trainop train; divided by iter_size as OpenSeq2Seq does)")
    assert entries["--plot PLOT"] == "write the schedule plot to this PNG file (default: none)"
    assert entries["--out OUT"] == "folder for the schedule plot, <file name>.lr.png " \
                                   "(default: no plot)"
    assert entries["--no-plot"] == "write no plot (the default; kept for scripts)"
    assert entries["--set NAME=VALUE"].endswith("VALUE is read as data, never run; repeatable")
    lines = _help(capsys).splitlines()  # the command's list of subcommands
    start = lines.index("    check-config") + 1
    summary = itertools.takewhile(lambda line: line.startswith(" " * 8), lines[start:])
    assert " ".join(x.strip() for x in summary) == \
        "validate a recipe and show its optimizer, pipeline and schedule"


def test_the_help_keeps_the_descriptions_line_breaks(capsys):
    text = _help(capsys, "check-config")
    body = check_config.__doc__.partition("\n\n")[2].strip().splitlines()
    assert len(body) > 3
    lines = text.splitlines()
    start = lines.index(body[0])
    assert lines[start:start + len(body)] == body


# ------------------------------------------------------------------ the plot's look
def test_the_plot_is_a_700_by_400_png_with_a_small_title_and_a_faint_grid(tmp_path,
                                                                            saved_figures):
    import struct

    import matplotlib

    path = tmp_path / "s.png"
    title = "a long title " * 12
    with matplotlib.rc_context({"figure.dpi": 72}):  # a user's matplotlibrc: the same size
        check_config._plot(_Schedule("step", 100), str(path), title)
    png = path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (700, 400)  # the IHDR chunk: width, height
    ((fig, kw),) = saved_figures
    assert kw == {"format": "png"}
    (ax,) = fig.axes
    assert ax.title.get_fontsize() == 8 and ax.title.get_wrap()
    grid = ax.xaxis.get_gridlines() + ax.yaxis.get_gridlines()
    assert grid and all(g.get_visible() and g.get_alpha() == 0.3 for g in grid)
