"""What a user types is checked whole and at once: every ``--set`` is applied and validated at
load exactly as the file's own value would be (``check-config`` and ``train`` alike) and says
where it took effect, or is refused in one line saying why; every top-level key of an
OpenSeq2Seq config is a training option, a known upstream parameter listed as ignored, or an
error naming the closest. RETURNN's own ``Config`` is the oracle for the ``--set`` forms it
accepts."""

from __future__ import annotations

import subprocess
import sys

import pytest

import trainop
from trainop.__main__ import main
from trainop.configs import RecipeError, Text
from trainop.configs.bounds import MAX_SAME_HASH

RETURNN = "#!rnn.py\noptimizer = {'class': 'adam', 'epsilon': 1e-8}\nlearning_rate = 0.01\n" \
          "lr = config.float('lr', 0.01)\nlearning_rates = [lr, lr / 2]\nbatch_size = 5000\n"
OS2S = """from open_seq2seq.models import Speech2Text
base_params = {"optimizer": "Adam", "optimizer_params": {"beta1": 0.9},
               "lr_policy": "poly_decay", "lr_policy_params": {"learning_rate": 0.01,
               "power": 2.0}, "max_steps": 100, "batch_size_per_gpu": 32, "num_gpus": 1,
               "use_horovod": False, "logdir": "x", "data_layer_params": {}}
"""


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def files(tmp_path):
    (tmp_path / "r.config").write_text(RETURNN)
    (tmp_path / "o.py").write_text(OS2S)
    return tmp_path


@pytest.mark.parametrize("file,setting,message", [
    # a dotted override: checked as the file's own value (train raised a traceback at step 1)
    ("r.config", "optimizer.class=sgd", "Unknown key 'epsilon' in `optimizer` "
                                        "(GradientDescentOptimizer); valid keys"),
    ("r.config", "optimizer.epsilon=nan", "Expected `epsilon` to be a real number, got 'nan'"),
    ("r.config", "optimizer.epsilon=-1", "Expected `epsilon` in [0, inf), got -1"),
    ("r.config", "optimizer.__class__=1", "Unknown key '__class__' in `optimizer`"),
    ("r.config", "optimizer={}", "got {}: RETURNN's TF updater silently falls back to plain "
                                 "gradient descent; write {'class': 'sgd'}"),
    # a name that changes nothing: the flag, the closest, or what it is for
    ("r.config", "num_epochs=3", "--set num_epochs=3 changes no training option: trainop train "
                                 "takes the run length from --steps"),
    ("r.config", "nonsense_name=3", "neither sets nor reads 'nonsense_name'"),
    ("r.config", "lrr=0.1", "did you mean 'lr'"),
    ("r.config", "batch_size=10", "the file sets 'batch_size' only for what trainop does not "
                                  "train"),
    ("o.py", "optimizer_params.beta1=2", "Expected `beta1` in [0, 1), got 2"),
    ("o.py", "max_steps=abc", "Expected `max_steps` to be an integer, got 'abc'"),
    ("o.py", "nonsense_name=3", "Unknown key 'nonsense_name' in the overrides (OpenSeq2Seq's "
                                "training options)"),
    ("o.py", "max_stepz=3", "did you mean 'max_steps'"),
    ("o.py", "random_seed=3", "changes nothing trainop uses (the model's seed (trainop train: "
                              "--seed))"),
])
def test_a_set_is_refused_alike_by_check_config_and_train(files, capsys, setting, file,
                                                          message):
    for command in ("check-config", "train"):
        extra = ["--out", str(files / "run"), "--steps", "1", "--no-progress"] \
            if command == "train" else []
        status, out, err = _run(capsys, command, str(files / file), "--set", setting, *extra)
        assert (status, out) == (1, ""), (command, out, err)
        assert message in err and err.count("\n") == 1, (command, err)
    assert not (files / "run").exists()


@pytest.mark.parametrize("setting", ["max_steps=50", "num_epochs=2"])
def test_a_set_run_length_beside_num_steps_is_refused(files, capsys, setting):
    """--num-steps replaces max_steps/num_epochs: a --set of either beside it would change
    nothing, unseen; both commands refuse the pair in one line and train writes nothing."""
    for command in ("check-config", "train"):
        extra = ["--out", str(files / "run"), "--steps", "1", "--no-progress"] \
            if command == "train" else []
        status, out, err = _run(capsys, command, str(files / "o.py"), "--set", setting,
                                "--num-steps", "20", *extra)
        assert (status, out) == (1, ""), (command, out, err)
        assert err == (f"trainop {command}: --set {setting} and --num-steps 20 both give the "
                       f"run length, and --num-steps would replace the config's max_steps and "
                       f"num_epochs: give one\n"), (command, err)
    assert not (files / "run").exists()


def test_a_set_says_where_it_took_effect(files, capsys):
    status, out, err = _run(capsys, "check-config", str(files / "r.config"), "--set",
                            "lr=0.5", "--set", "learning_rate=0.2", "--set",
                            "optimizer.epsilon=0.001")
    assert status == 0, err
    lines = out.splitlines()[1:4]
    assert lines == ["  --set lr=0.5: changes learning_rates = [0.5, 0.25]",
                     "  --set learning_rate=0.2: the training option learning_rate = 0.2",
                     "  --set optimizer.epsilon=0.001: optimizer.epsilon = 0.001"]
    assert "epsilon=0.001" in out
    status, out, err = _run(capsys, "check-config", str(files / "o.py"), "--set",
                            "max_steps=50", "--set", "optimizer_params.beta1=0.5")
    assert status == 0, err
    assert out.splitlines()[1:3] == ["  --set max_steps=50: max_steps = 50",
                                     "  --set optimizer_params.beta1=0.5: "
                                     "optimizer_params.beta1 = 0.5"]
    assert "'decay_steps': 50" in out and "beta1=0.5" in out  # the schedule spans 50 steps


def test_openseq2seq_keys_are_used_listed_or_refused(files, capsys):
    (files / "typo.py").write_text(OS2S.replace('"num_gpus": 1', '"num_gpus": 1, '
                                                '"optimizer_parms": {"momentum": 0.9}'))
    with pytest.raises(ValueError, match=r"Unknown key 'optimizer_parms' in base_params "
                                         r"\(OpenSeq2Seq's check_params refuses an unknown "
                                         r"parameter\); did you mean 'optimizer_params'\?"):
        trainop.load_recipe(str(files / "typo.py"))
    from trainop.interfaces.recipes.openseq2seq import IGNORED

    recipe = trainop.load_recipe(str(files / "o.py"))
    assert recipe.ignored == {k: IGNORED[k] for k in ("batch_size_per_gpu", "num_gpus",
                                                      "logdir", "data_layer_params")}
    status, out, err = _run(capsys, "check-config", str(files / "o.py"))
    assert status == 0, err
    listed = out.split("ignored (OpenSeq2Seq parameters trainop does not need):\n")[1]
    assert listed.splitlines()[:4] == [f"  {k}: {recipe.ignored[k]}" for k in recipe.ignored]
    assert "logdir: OpenSeq2Seq's run: logging, checkpoints, evaluation (trainop train: --out)" \
        in listed


def test_set_text_has_the_evaluators_bounds():
    # through the API, 40,000 colliding keys took 24-42 s in ast.literal_eval; now the
    # evaluator's MAX_SAME_HASH refuses the 17th, and 16 are data
    def colliding(n):
        return Text("{" + ", ".join(f"{i * (2**61 - 1)}: 0" for i in range(n)) + "}")

    ok = trainop.load_recipe({"base_params": {
        "optimizer": "Adam", "lr_policy": "poly_decay", "lr_policy_params": {
            "learning_rate": 0.1, "power": 1.0}, "max_steps": 10}},
        overrides={"lr_policy_params.power": Text("2.0")})
    assert ok.options["lr_policy_params"]["power"] == 2.0
    from trainop.configs.pyconfig import text_value

    assert len(text_value(colliding(MAX_SAME_HASH))) == MAX_SAME_HASH
    with pytest.raises(RecipeError, match="MAX_SAME_HASH"):
        text_value(colliding(MAX_SAME_HASH + 1))


RETURNN_FORMS = ["", ",a", ",", "a,b", "1,2", " 1", "[1, 2]", "{}", "None", "x y", "1e-3",
                 "+-0.1"]


def test_set_forms_returnn_accepts_agree_with_returnns_config(tmp_path):
    # RETURNN's Config is the oracle: config.value/list/has/float of each text, and a dotted
    # name (which RETURNN keeps as a plain key)
    pytest.importorskip("returnn")
    from returnn.config import Config

    lookups = ("value", "list", "has")
    lines = ["#!rnn.py", "optimizer = {'class': 'adam'}"]
    for k in range(len(RETURNN_FORMS)):
        lines += [f"{m}{k} = config.{m}('s{k}'{', None' if m == 'value' else ''})"
                  for m in lookups]
    path = tmp_path / "forms.config"
    path.write_text("\n".join(lines) + "\n")
    values = {f"s{k}": Text(text) for k, text in enumerate(RETURNN_FORMS)}
    from trainop.configs.pyconfig import evaluate_python_config

    ours = evaluate_python_config(path.read_text(), str(path), config_values=values).values
    config = Config()
    for k, text in enumerate(RETURNN_FORMS):
        config.add_line(f"s{k}", text)
    for k in range(len(RETURNN_FORMS)):
        assert ours[f"value{k}"] == config.value(f"s{k}", None), k
        assert ours[f"list{k}"] == config.list(f"s{k}"), k
        assert ours[f"has{k}"] == config.has(f"s{k}") is True, k
    config.add_line("optimizer.epsilon", "0.1")  # RETURNN: a plain key; trainop: an override
    assert config.value("optimizer.epsilon", None) == "0.1"
    recipe = trainop.load_recipe(str(path), overrides={"optimizer.epsilon": Text("0.1")})
    assert recipe.options["optimizer"]["epsilon"] == 0.1
    with pytest.raises(ValueError, match="Unknown key 'optimiser' in the overrides"):
        trainop.load_recipe(str(path), overrides={"optimiser.epsilon": Text("0.1")})


def test_set_through_the_command_in_a_subprocess(files):
    run = subprocess.run([sys.executable, "-m", "trainop", "check-config",
                          str(files / "o.py"), "--set", "max_steps=abc"],
                         capture_output=True, text=True, timeout=300, cwd=files)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == (f"trainop check-config: invalid recipe {files / 'o.py'}: TypeError: "
                          f"Expected `max_steps` to be an integer, got 'abc' (str)\n")
    assert not list(files.glob("*.png"))


@pytest.mark.parametrize("command", ["train", "check-config"])
def test_the_help_says_what_set_takes_and_that_its_value_is_never_run(capsys, command):
    # the option's documentation, the same in both commands (docs/recipes.md, "--set")
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "[--set NAME=VALUE]" in text
    assert ("--set NAME=VALUE set a name the config reads (RETURNN's ++NAME VALUE: "
            "config.bool/int/float/value/list/has see it), or a training option the file "
            "computes with code (lr_policy_params.decay_steps=1000); VALUE is read as data, "
            "never run; repeatable") in text
