"""RETURNN's ``config.<lookup>`` in a config: a name is found in constant time (nothing is
copied per lookup), and the work budget counts what a lookup reads."""

from __future__ import annotations

import pytest

from trainop.configs import RecipeError, Text, pyconfig
from trainop.configs.bounds import MAX_WORK
from trainop.configs.pyconfig import evaluate_python_config


def test_a_lookup_reads_the_names_in_place(monkeypatch):
    # each lookup used to copy every name set so far ({**given, **values}): 60,000 names and
    # 200,000 lookups ran past a minute. The mapping a lookup reads is a view of the file's
    # names: a name assigned after the lookup is in it (a copy would not have it).
    seen = []
    real = pyconfig.config_lookup

    def spy(method, typed, args, kwargs):
        seen.append(typed)
        return real(method, typed, args, kwargs)

    monkeypatch.setattr(pyconfig, "config_lookup", spy)
    parsed = evaluate_python_config("a = 1\nb = config.has('a')\nc = config.int('d', 2)\n"
                                    "late = 3\n", "v.config", config_values={"d": Text("5")})
    assert parsed.values == {"a": 1, "b": True, "c": 5, "late": 3, "d": 5}
    assert len(seen) == 2 and all("late" in typed and "d" in typed for typed in seen)


def test_the_work_budget_counts_the_text_a_lookup_splits():
    # config.int(name, 0) of command-line text splits the text at commas: its characters
    # are work. 10 lookups of 300,000 characters pass MAX_WORK; 2 stay within it.
    text = Text("1" + " " * 299_999)
    assert len(text) * 10 > MAX_WORK > len(text) * 2 + 100
    ok = evaluate_python_config("x = [config.int('t', 0) for i in range(2)]\n", "w.config",
                                config_values={"t": text})
    assert ok.values["x"] == [1, 1]
    with pytest.raises(RecipeError, match="MAX_WORK"):
        evaluate_python_config("x = [config.int('t', 0) for i in range(10)]\n", "w.config",
                               config_values={"t": text})
