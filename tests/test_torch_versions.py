"""trainop on an older torch than a feature needs: one clear message naming the torch version
needed and the one installed, never an AttributeError or ImportError from deep inside. The
missing API is mocked away (or the version lowered), so this runs on every torch in range."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import trainop
from trainop.kernels import torch_version
from trainop.kernels.torch_version import TorchVersionError


def _old_torch(monkeypatch, version="2.4.1+cu121"):
    monkeypatch.setattr(torch, "__version__", version)


def test_versions_parse_and_the_floor_is_pyprojects():
    assert torch_version._parse("2.14.1+cu130") == (2, 14, 1)
    assert torch_version._parse("2.6.0a0+git1234") == (2, 6, 0)
    assert torch_version.installed()[:2] >= torch_version.FLOOR  # what the suite runs on
    import pathlib

    pyproject = pathlib.Path(trainop.__file__).parents[2] / "pyproject.toml"
    if pyproject.exists():  # a source checkout
        assert '"torch>=2.13"' in pyproject.read_text()


def test_unknown_feature_is_a_value_error_listing_them():
    with pytest.raises(ValueError, match=r"Expected `feature` to be one of \[.*FSDP2.*got 'x'"):
        torch_version.supports("x")


@pytest.mark.parametrize("feature", sorted(torch_version.FEATURES))
def test_every_feature_is_there_in_range_and_named_when_older(monkeypatch, feature):
    assert torch_version.supports(feature)
    torch_version.require(feature)  # no error on a torch in range
    _old_torch(monkeypatch)
    needed = ".".join(map(str, torch_version.FEATURES[feature][0]))
    with pytest.raises(TorchVersionError) as caught:
        torch_version.require(feature)
    assert str(caught.value) == (
        f"trainop: {feature} needs torch>={needed}; torch 2.4.1+cu121 is installed (trainop is "
        f"tested on torch 2.13 to 2.14.1: pip install 'torch>={needed}')")


def test_a_missing_api_is_named_even_on_a_new_version(monkeypatch):
    import torch.distributed.fsdp as fsdp

    monkeypatch.delattr(fsdp, "fully_shard")
    with pytest.raises(TorchVersionError, match=r"^trainop: FSDP2 \(fully_shard\) needs "
                                                r"torch>=2\.6; torch .* is installed"):
        torch_version.require("FSDP2 (fully_shard)")


def test_fsdp2_benchmark_says_so_before_spawning_ranks(monkeypatch):
    import torch.distributed.fsdp as fsdp

    from trainop.bench import fsdp2

    monkeypatch.delattr(fsdp, "fully_shard")
    monkeypatch.setattr(fsdp2, "spawn_ranks", lambda *a, **k: pytest.fail("spawned"))
    with pytest.raises(TorchVersionError, match=r"FSDP2 \(fully_shard\) needs torch>=2\.6"):
        fsdp2.run_fsdp2_benchmark()


def test_numerics_checks_say_so_and_register_nothing(monkeypatch):
    model = torch.nn.Linear(2, 2)
    checker = trainop.NumericsChecker([model])
    _old_torch(monkeypatch)
    hooks = dict(torch.nn.modules.module._global_forward_hooks)
    with pytest.raises(TorchVersionError, match=r"numerics checks .* needs torch>=2\.6; "
                                                r"torch 2\.4\.1\+cu121 is installed"):
        checker.install()
    assert dict(torch.nn.modules.module._global_forward_hooks) == hooks
    assert checker._handles == []


def test_adagrad_foreach_says_so_without_foreach_rsqrt(monkeypatch):
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    opt = trainop.AdagradOptimizer(0.1, params=[p], implementation="foreach")
    monkeypatch.delattr(torch, "_foreach_rsqrt")
    monkeypatch.delattr(torch, "_foreach_rsqrt_")
    with pytest.raises(TorchVersionError, match=r"the foreach path of Adagrad, Adadelta and "
                                                r"ProximalAdagrad needs torch>=2\.6"):
        opt.step()


def test_import_warns_once_below_the_floor():
    code = ("import torch; torch.__version__ = '2.5.1+cu124'\n"
            "import warnings; warnings.simplefilter('always')\n"
            "import trainop, importlib; importlib.reload(trainop)\n")
    stderr = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=600, check=True).stderr
    assert stderr.count("TorchVersionWarning: trainop: torch 2.5.1+cu124 is installed, older "
                        "than torch 2.13, the oldest trainop is tested on (below 2.6 it "
                        "lacks torch._foreach_rsqrt") == 2  # import, reload
    assert "pip install 'torch>=2.13'" in stderr


def test_no_warning_in_range():
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch_version.TorchVersionWarning)
        torch_version.warn_below_floor()
