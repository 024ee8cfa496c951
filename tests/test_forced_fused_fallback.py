"""An explicit ``implementation="fused"`` whose hyperparameters the fused kernel cannot take
this step (a tensor, callable or schedule learning rate: torch's fused kernels read Python
numbers) runs ``foreach``, as ``_choose_implementation`` and docs/design.md say: never the
native C kernel (the default's choice), never the fused one."""

from __future__ import annotations

import pytest
import torch
from optimizer_kwargs import kwargs_for

from trainop.kernels import dispatch
from trainop.registry import OPTIMIZER_CLASSES
from trainop.schedules import ExponentialDecay

FUSED = sorted(n for n, c in OPTIMIZER_CLASSES.items() if "fused" in c.IMPLEMENTATIONS)
RATES = {"tensor": lambda: torch.tensor(0.1), "callable": lambda: (lambda: torch.tensor(0.1)),
         "schedule": lambda: ExponentialDecay(0.1, 10, 0.5), "float": lambda: 0.1}


@pytest.mark.parametrize("rate", sorted(RATES))
@pytest.mark.parametrize("name", FUSED)
def test_forced_fused_runs_foreach_where_the_kernel_cannot(name, rate, monkeypatch):
    ran = []
    monkeypatch.setattr(dispatch.native, "run", lambda *a, **k: ran.append("native"))
    cls = OPTIMIZER_CLASSES[name]
    kwargs = {**kwargs_for(name), "learning_rate": RATES[rate]()}
    w = torch.nn.Parameter(torch.ones(3))
    opt = cls(params=[w], implementation="fused", **kwargs)
    for kind in ("fused", "foreach"):
        method = getattr(opt, f"_apply_{kind}")
        monkeypatch.setattr(opt, f"_apply_{kind}",
                            lambda *a, _m=method, _k=kind, **k: (ran.append(_k), _m(*a, **k)))
    w.grad = torch.ones(3)
    opt.step()
    assert ran == (["fused"] if rate == "float" else ["foreach"])
