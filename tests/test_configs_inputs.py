"""Issue #23's config rows: recipe files are data. Each hostile input runs in a forked child under
a timeout and a memory cap (``config_probes``) and must end in one ``trainop.RecipeError`` (or
the right value) quickly; a name in a config is never imported, on every way a name reaches the
loader (RETURNN ``.config``, OpenSeq2Seq ``.py``, YAML, JSON, ``Updater(path)``,
``check-config``, ``train``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from config_probes import ProbeServer

CANARY = """
import os
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "IMPORTED"), "w").close()
class X:
    pass
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("inputs")
    (path / "somemodule.py").write_text(CANARY)
    return path


@pytest.fixture(scope="module")
def server(workdir):
    server = ProbeServer(str(workdir))
    yield server
    server.close()


def _write(folder, name, text, mode="w"):
    path = folder / name
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text))
    return str(path)


def _load(server, path, timeout=30, memory_gb=2.0):
    return server.probe(f"trainop.load_recipe({path!r})", timeout=timeout, memory_gb=memory_gb)


def _recipe_error(answer, pattern=""):
    import re

    assert answer["status"] == "done", answer
    assert answer["error"] and answer["error"].startswith("RecipeError: "), answer
    assert "\n" not in answer["error"], answer["error"]  # one line
    assert re.search(pattern, answer["error"]), answer["error"]


# ------------------------------------------------------------------ the evaluator is bounded
@pytest.mark.parametrize("name,text,pattern", [
    ("shared.config", "a = [0] * 10**6\nb = [a] * 10**6\nlearning_rate = b\n",
     r"shared.config:2: the repeated sequence would hold more than 1,100,000 elements"),
    ("power.config", "a = 10**10000\nb = a**10000\nc = b**10000\nlearning_rate = 1\n",
     r"power.config:1: an integer would have more than 4,096 bits"),
    ("range.config", "learning_rates = range(3*10**8)\n",
     r"range.config:1: range\(300000000,\) would hold more than 1,100,000"),
    ("str.config", "a = (1, 2, 3) * 300000\nlearning_rate = str(a)\n",
     r"str.config:2: str\(\) of the value would hold more than"),
    ("terms.config", "learning_rate = " + "+".join(["1"] * 200_000) + "\n",
     r"terms.config: the Python syntax nests deeper than 200 levels"),
    ("nested.config", "learning_rate = [[[[[[[[[[0]]]]]]]]]]\n" + "x = " + "[" * 150 + "]" * 150,
     r"nested.config(:2)?: the Python syntax nests deeper than 200 levels|nests deeper"),
    ("comprehension.config", "x = [[0] * 1000 for j in range(2000)]\n",
     r"comprehension.config:1: the comprehension would hold more than 1,100,000"),
    ("loops.config", "x = [[i for i in range(1000)] for j in range(10000)]\n",
     r"loops.config:1: evaluating the file takes more than 2,000,000 steps"),
    ("work.config", "".join(f"x{k} = [0] * 400000\n" for k in range(8)),
     r"work.config:\d: evaluating the file takes more than 2,000,000 steps"),
    ("fstring.config", "a = [1.5] * 100000\nlearning_rate = f'{a}{a}{a}'\n",
     r"fstring.config:2: str\(\) of the value would hold more than"),
])
def test_bounded_values_are_refused_before_they_are_built(server, workdir, name, text, pattern):
    answer = _load(server, _write(workdir, name, text), memory_gb=1.0)
    _recipe_error(answer, pattern)
    assert answer["seconds"] < 30  # a backstop only (#39): the bound is in the message


def test_generous_limits_hold_real_sizes(server, workdir):
    """A 1,000-entry per-epoch list, a 100,000-element warm-up, a 10**6-element list and a
    4,096-bit integer load."""
    path = _write(workdir, "big.config", """
        import numpy
        learning_rate = 0.001
        learning_rates = [0.001] * 1000
        warm = list(numpy.linspace(0.0, 1.0, num=100000))
        flat = [0.0] * 10**6
        big = 2 ** 4095
    """)
    answer = server.probe(f"r = trainop.load_recipe({path!r}); "
                          f"result(len(r.options['learning_rates']))")
    assert answer["result"] == 1000, answer


# ------------------------------------------------------------------ the file read is bounded
def test_fifo_and_devices_are_refused_without_blocking(server, workdir):
    fifo = str(workdir / "fifo.config")
    os.mkfifo(fifo)
    _recipe_error(_load(server, fifo, timeout=10), r"fifo.config: is not a regular file "
                                                   r"\(a FIFO\)")
    link = str(workdir / "zero.config")
    os.symlink("/dev/zero", link)
    _recipe_error(_load(server, link, timeout=10), r"zero.config: is not a regular file "
                                                   r"\(a character device\)")
    _recipe_error(_load(server, str(workdir), timeout=10), r"is not a regular file "
                                                           r"\(a directory\)")
    for yaml_fifo in ("fifo.yaml", "fifo.json"):
        os.mkfifo(workdir / yaml_fifo)
        _recipe_error(_load(server, str(workdir / yaml_fifo), timeout=10), "a FIFO")


def test_a_file_over_the_size_limit_is_refused(server, workdir):
    path = _write(workdir, "huge.config", "learning_rate = 0.1\n" + "#" * (5 << 20) + "\n")
    _recipe_error(_load(server, path), r"huge.config: is 5,242,901 bytes, more than the "
                                       r"4,194,304 a recipe may have")


# ------------------------------------------------------------------ one error type
@pytest.mark.parametrize("name,data,pattern", [
    ("alias.yaml", "format: trainop\n" + "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]\n" for k in range(1, 9)) + "x: *a8\n",
     r"alias.yaml: the YAML document \(aliases expanded\) would hold more than 1,100,000"),
    ("syntax.yaml", "format: trainop\nlearning_rate: [1, 2\n",
     r"syntax.yaml:3: invalid YAML: while parsing a flow sequence"),
    ("tag.yaml", "format: trainop\nlearning_rate: !!python/object/apply:os.system [ls]\n",
     r"tag.yaml:2: invalid YAML: could not determine a constructor for the tag "
     r"'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("recursive.yaml", "format: trainop\na: &a [*a]\n", r"recursive.yaml(:2)?: invalid YAML|"
                                                       r"nests deeper"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, r"deep.json: the JSON document nests deeper "
                                                 r"than 100 levels"),
    ("deep2.json", '{"format": "trainop", "x": ' + "[" * 150 + "]" * 150 + "}",
     r"deep2.json: .*nests deeper than 100 levels"),
    ("syntax.json", '{"format": "trainop",\n "learning_rate": }', r"syntax.json:2: invalid JSON "
                                                                   r"at column 19"),
    ("syntax.py", "base_params = {\n  'optimizer': 'Adam',,\n}\n",
     r"syntax.py:2: invalid Python: invalid syntax"),
    ("bytes.config", b"learning_rate = 0.1\nx = '\xff\xfe'\n", r"bytes.config:2: is not UTF-8 "
                                                               r"text \(byte 0xff at offset 25\)"),
    ("parens.config", "(" * 5000, r"parens.config:1: invalid Python: too many nested "
                                  r"parentheses"),
    ("nul.config", "learning_rate = 0.1\x00\n", r"nul.config:1: invalid Python: a NUL byte"),
    ("print.config", 'learning_rate = 0.1\nprint "hello"\n',
     r"print.config:2: invalid Python: Missing parentheses in call to 'print'"),
])
def test_every_bad_file_is_one_recipe_error(server, workdir, name, data, pattern):
    path = _write(workdir, name, data, "wb" if isinstance(data, bytes) else "w")
    answer = _load(server, path, memory_gb=1.0)
    _recipe_error(answer, pattern)
    assert answer["seconds"] < 30  # a backstop only (#39): the bound is in the message


def test_unparsable_python_is_not_read_as_the_line_format(server, workdir):
    """The issue's row: '= 0.01' was read as a line-format value."""
    path = _write(workdir, "py.config", "learning_rate = 0.01\nadam = (\n")
    _recipe_error(_load(server, path), r"py.config:\d: invalid Python: '\(' was never closed")
    lines = _write(workdir, "lines.config", "learning_rate 0.01\nadam true\n")
    answer = server.probe(f"r = trainop.load_recipe({lines!r}); "
                          f"result(r.options['learning_rate'])")
    assert answer["result"] == 0.01, answer


def test_recipe_error_is_a_value_error_with_fields():
    import trainop

    error = trainop.RecipeError("a.config", 3, "invalid Python:\n  invalid syntax")
    assert isinstance(error, ValueError)
    assert str(error) == "a.config:3: invalid Python: invalid syntax"
    assert (error.filename, error.line, error.reason) == ("a.config", 3,
                                                          "invalid Python: invalid syntax")
    assert str(trainop.RecipeError("a.yaml", None, "x")) == "a.yaml: x"
    import pickle

    assert str(pickle.loads(pickle.dumps(error))) == str(error)


# ------------------------------------------------------------------ names never import
def _canary_files(folder):
    return {
        "returnn.config": """
            learning_rate = 0.01
            optimizer = {"class": "somemodule.X"}
        """,
        "unittest.config": """
            learning_rate = 0.01
            optimizer = {"class": "unittest.__main__.X"}
        """,
        "lib2to3.config": """
            learning_rate = 0.01
            optimizer = {"class": "lib2to3.__main__.X"}
        """,
        "os2s.py": """
            from somemodule import X
            base_params = {"optimizer": X, "lr_policy": "fixed_lr",
                           "lr_policy_params": {"learning_rate": 0.1}, "max_steps": 10}
        """,
        "os2s_name.py": """
            base_params = {"optimizer": "somemodule.X", "lr_policy": "fixed_lr",
                           "lr_policy_params": {"learning_rate": 0.1}, "max_steps": 10}
        """,
        "recipe.yaml": """
            format: trainop
            learning_rate: 0.01
            optimizer: {class: somemodule.X}
        """,
        "recipe.json": '{"format": "trainop", "learning_rate": 0.01, '
                       '"optimizer": {"class": "somemodule.X"}}',
        "returnn.json.config": '{"learning_rate": 0.01, "optimizer": {"class": "somemodule.X"}}',
        "torch.config": """
            backend = "torch"
            learning_rate = 0.01
            optimizer = {"class": "somemodule.X"}
        """,
    }


def test_names_in_configs_are_never_imported(server, workdir):
    """load_recipe and Updater(path) on every format: a clear ValueError, no import."""
    for name, text in _canary_files(workdir).items():
        path = _write(workdir, name, text)
        for call in (f"trainop.load_recipe({path!r})",
                     f"import torch; trainop.Updater({path!r}, torch.nn.Linear(2, 1))"):
            if name.startswith("os2s") and "Updater" in call:
                continue
            answer = server.probe(call)
            assert answer["status"] == "done", (name, answer)
            assert answer["error"] and answer["error"].startswith("ValueError: "), (name, answer)
            assert "SystemExit" not in answer["error"]
            assert not (workdir / "IMPORTED").exists(), (name, call)


@pytest.mark.parametrize("command,name", [("check-config", "returnn.config"),
                                          ("train", "recipe.yaml")])
def test_the_commands_never_import_a_named_module(workdir, command, name):
    """``python -m trainop`` puts the working directory on sys.path: the canary would run."""
    src = os.path.join(os.path.dirname(__file__), os.pardir, "src")
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    path = _write(workdir, name, _canary_files(workdir)[name])
    extra = ["--no-plot"] if command == "check-config" else [
        "--steps", "1", "--out", str(workdir / "run"), "--no-progress"]
    done = subprocess.run([sys.executable, "-m", "trainop", command, path, *extra],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    assert "somemodule" in done.stderr, done.stderr
    assert not (workdir / "IMPORTED").exists(), name


def test_a_class_of_ones_own_is_passed_from_python(tmp_path):
    """``classes=``: the config names it, Python supplies it (Updater, load_recipe)."""
    import torch

    import trainop

    class Halve(torch.optim.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, {"lr": lr})

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    p.mul_(0.5)

    config = _write(tmp_path, "own.config", """
        learning_rate = 0.1
        optimizer = {"class": "mypkg.Halve"}
    """)
    model = torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in model.parameters()]
    updater = trainop.Updater(config, model, classes={"mypkg.Halve": Halve})
    updater.step(model(torch.ones(3, 2)).sum())
    for p, b in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close(p.detach(), b * 0.5)
    recipe = trainop.load_recipe(config, classes={"mypkg.Halve": Halve})
    assert recipe.optimizer_class is Halve
    assert isinstance(recipe.build(model).optimizer, Halve)
    os2s = _write(tmp_path, "own.py", """
        from mypkg import Opt
        base_params = {"optimizer": Opt, "optimizer_params": {"momentum": 0.9},
                       "lr_policy": "fixed_lr", "lr_policy_params": {"learning_rate": 0.1},
                       "max_steps": 10}
    """)
    assert trainop.load_recipe(os2s, classes={"mypkg.Opt": trainop.MomentumOptimizer},
                               ).optimizer_class is trainop.MomentumOptimizer
    torch_dotted = trainop.Updater({"optimizer": {"class": "torch.optim.adamw.AdamW",
                                                  "weight_decay": 0.0}}, model)
    assert type(torch_dotted.optimizer) is torch.optim.AdamW  # torch.optim's names: looked up
