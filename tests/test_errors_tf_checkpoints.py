"""Bad TF checkpoints, bad name maps and unmappable torch.optim state: one clear error each,
and nothing changed (parameters, slots, beta powers and step counters as they were)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import trainop
import trainop.checkpoints as ckpt

NAMES = {"0.weight": ("dense/kernel", ckpt.transpose), "0.bias": "dense/bias"}


def _checkpoint(tmp_path, **changes):
    tensors = {
        "dense/kernel": torch.randn(3, 2), "dense/bias": torch.randn(2),
        "dense/kernel/Adam": torch.randn(3, 2), "dense/kernel/Adam_1": torch.rand(3, 2),
        "dense/bias/Adam": torch.randn(2), "dense/bias/Adam_1": torch.rand(2),
        "beta1_power": torch.tensor(0.9 ** 3), "beta2_power": torch.tensor(0.999 ** 3),
        "global_step": torch.tensor(2),
    }
    for name, value in changes.items():
        name = name.replace("__", "/")
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value
    ckpt.write_tf(tmp_path / "ck", tensors)
    return str(tmp_path / "ck")


def _setup():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    opt = trainop.AdamOptimizer(0.1, params=model.parameters())
    for _ in range(2):
        opt.apply_gradients([(torch.ones_like(p), p) for p in model.parameters()])
    return model, opt


def _snapshot(model, opt):
    return ([p.detach().clone() for p in model.parameters()],
            {k: v.clone() for k, v in opt.param_groups[0]["non_slot"].items()},
            [{k: v.clone() for k, v in opt.state[p].items()} for p in model.parameters()])


def _same(a, b) -> bool:
    params_a, non_slot_a, slots_a = a
    params_b, non_slot_b, slots_b = b
    return (all(torch.equal(x, y) for x, y in zip(params_a, params_b, strict=True))
            and non_slot_a.keys() == non_slot_b.keys()
            and all(torch.equal(non_slot_a[k], non_slot_b[k]) for k in non_slot_a)
            and all(s.keys() == t.keys() and all(torch.equal(s[k], t[k]) for k in s)
                    for s, t in zip(slots_a, slots_b, strict=True)))


def _truncate(path: str, suffix: str, keep: int) -> None:
    file = Path(path + suffix)
    file.write_bytes(file.read_bytes()[:keep])


def _flip(path: str, suffix: str, at: int) -> None:
    file = Path(path + suffix)
    data = bytearray(file.read_bytes())
    data[at] ^= 0x40
    file.write_bytes(bytes(data))


DATA = ".data-00000-of-00001"

# (id, checkpoint changes, damage to the files, load kwargs, error type, message pattern)
CASES = [
    ("index_truncated", {}, lambda p: _truncate(p, ".index", 30), {},
     ValueError, r"shorter than a table footer \(48\): truncated"),
    ("index_cut_at_footer", {}, lambda p: _truncate(p, ".index", 200), {},
     ValueError, r"no table magic number at the end: truncated"),
    ("index_corrupted", {}, lambda p: _flip(p, ".index", 10), {},
     ValueError, r"block at 0 fails its CRC-32C check: damaged"),
    ("data_truncated", {}, lambda p: _truncate(p, DATA, 20), {},
     ValueError, r"lie past the end of .*data-00000-of-00001.* truncated"),
    ("data_corrupted", {}, lambda p: _flip(p, DATA, 5), {},
     ValueError, r"the data fail their CRC-32C check: damaged"),
    ("data_missing", {}, lambda p: Path(p + DATA).unlink(), {},
     ValueError, r"the data file .* is missing"),
    ("wrong_shape", {"dense__kernel": torch.randn(2, 3)}, None, {},
     ValueError, r"parameter '0.weight' from 'dense/kernel': Expected shape \(2, 3\) after the "
                 r"layout transpose, got \(3, 2\) \(the checkpoint's shape is \(2, 3\)\)"),
    ("wrong_slot_shape", {"dense__bias__Adam_1": torch.rand(3)}, None, {},
     ValueError, r"slot 'v' of '0.bias' from 'dense/bias/Adam_1': Expected shape \(2,\)"),
    ("wrong_dtype", {"dense__bias": torch.randn(2, dtype=torch.float64)}, None, {},
     TypeError, r"parameter '0.bias' from 'dense/bias': Expected dtype torch.float32, the "
                r"checkpoint holds torch.float64"),
    ("not_finite", {"dense__kernel__Adam": torch.full((3, 2), float("nan"))}, None, {},
     ValueError, r"slot 'm' of '0.weight' .*Expected finite values, the checkpoint holds NaN"),
    ("missing_variable", {"dense__bias__Adam": None}, None, {},
     ValueError, r"Cannot load the TF checkpoint exactly \(strict=True\): missing from the "
                 r"checkpoint: 0.bias\[m\] \(TF variable 'dense/bias/Adam'\)\. Nothing "
                 r"was changed"),
    ("missing_beta_power", {"beta2_power": None}, None, {},
     ValueError,
     r"missing from the checkpoint: optimizer.beta2_power \(TF variable 'beta2_power'\)\."),
    ("unexpected_variable", {"other__w": torch.ones(1)}, None, {},
     ValueError, r"in the checkpoint but not mapped: other/w\. Nothing"),
    ("names_miss_a_parameter", {}, None, {"names": {"0.weight": "dense/kernel"}},
     ValueError, r"Expected `names` to map every parameter of the model \(to None to leave one "
                 r"out\), it misses \['0.bias'\]"),
    ("names_unknown_key", {}, None, {"names": {**NAMES, "1.weight": "x"}},
     ValueError, r"Expected the keys of `names` to be parameter names of the model, got "
                 r"\['1.weight'\]"),
    ("names_bad_value", {}, None, {"names": {**NAMES, "0.bias": 3}},
     TypeError, r"Expected `names\['0.bias'\]` to be a TF variable name, a pair \(name, "
                r"layout\) or None, got"),
    ("names_bad_layout", {}, None, {"names": {**NAMES, "0.bias": ("dense/bias", "T")}},
     TypeError, r"Expected the layout of `names\['0.bias'\]` to be a ckpt layout"),
    ("names_bad_tf_name", {}, None, {"names": {**NAMES, "0.bias": "dense/"}},
     ValueError, r"Expected `names\['0.bias'\]` to be a TF variable name such as"),
    ("names_two_for_one", {}, None,
     {"names": {"0.weight": ("dense/kernel", ckpt.transpose), "0.bias": "dense/kernel"}},
     ValueError, r"Expected the parameters mapped to the TF variable 'dense/kernel' .* to be its "
                 r"parts"),
    ("global_step_missing", {}, None, {"global_step": "step"},
     ValueError, r"missing from the checkpoint: optimizer.global_step \(TF variable 'step'\); "
                 r"in the checkpoint but not mapped: global_step\."),
    ("global_step_float", {"global_step": torch.tensor(2.0)}, None, {},
     TypeError, r"Expected the global step 'global_step' to be a 0-dim integer, got "
                r"torch.float32"),
    ("global_step_type", {}, None, {"global_step": 3},
     TypeError, r"Expected `global_step` to be the TF name of the step variable"),
    ("strict_not_bool", {}, None, {"strict": "yes"},
     TypeError, r"strict"),
    ("no_such_checkpoint", {}, lambda p: Path(p + ".index").unlink(), {},
     FileNotFoundError, r"No TF checkpoint at .*: .*\.index' does not exist"),
    ("not_a_trainop_optimizer", {}, None, {"optimizer": "adam"},
     TypeError, r"Expected `optimizer` to be a trainop optimizer"),
    ("optimizer_without_the_params", {}, None, {"optimizer": trainop.AdamOptimizer(0.1)},
     ValueError, r"Expected `optimizer` to update parameters of the model, it updates none of "
                 r"\['0.weight', '0.bias'\] \(construct it with the model's parameters"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_checkpoint_changes_nothing(tmp_path, case):
    _, changes, damage, kwargs, error, pattern = case
    path = _checkpoint(tmp_path, **changes)
    if damage is not None:
        damage(path)
    model, opt = _setup()
    before = _snapshot(model, opt)
    kwargs = {"names": NAMES, **kwargs}
    optimizer = kwargs.pop("optimizer", opt)
    with pytest.raises(error, match=pattern):
        ckpt.load_tf(path, model, optimizer, **kwargs)
    assert _same(before, _snapshot(model, opt))


def test_strict_false_reports_instead(tmp_path):
    path = _checkpoint(tmp_path, dense__bias__Adam=None, other__w=torch.ones(1))
    model, opt = _setup()
    report = ckpt.load_tf(path, model, opt, names=NAMES, strict=False)
    assert report.left_at_initial == ["0.bias[m]"]
    assert report.skipped == ["other/w"]
    assert "left at initial value 1" in str(report)


def test_corrupted_index_entry(tmp_path):
    """A damaged entry inside a block whose CRC was recomputed (a writer bug, not a disk
    error) is still caught by the entry's own checks."""
    path = _checkpoint(tmp_path)
    from trainop.interfaces.checkpoints.sstable import read_table, write_table

    entries = read_table(Path(path + ".index").read_bytes(), "x")
    entries = [(k, v[:-3] if k == b"dense/bias" else v) for k, v in entries]
    Path(path + ".index").write_bytes(write_table(entries))
    model, opt = _setup()
    before = _snapshot(model, opt)
    with pytest.raises(ValueError, match=re.escape("entry 'dense/bias'") + ".*runs past"):
        ckpt.load_tf(path, model, opt, names=NAMES)
    assert _same(before, _snapshot(model, opt))


TORCH_CASES = [
    ("amsgrad", lambda ps: torch.optim.Adam(ps, amsgrad=True),
     lambda ps: trainop.AdamOptimizer(0.1, params=ps), ValueError,
     r"Cannot map torch.optim.Adam with amsgrad=True \(group 0\) to AdamOptimizer: TF's rule "
     r"has no counterpart \(only amsgrad=False maps\)"),
    ("sgd_dampening", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1),
     lambda ps: trainop.MomentumOptimizer(0.1, 0.9, params=ps), ValueError,
     r"Cannot map torch.optim.SGD with dampening=0.1"),
    ("sgd_no_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1),
     lambda ps: trainop.MomentumOptimizer(0.1, 0.9, params=ps), ValueError,
     r"Cannot map torch.optim.SGD with momentum=0 \(group 0\) to MomentumOptimizer"),
    ("adagrad_lr_decay", lambda ps: torch.optim.Adagrad(ps, lr_decay=0.1),
     lambda ps: trainop.AdagradOptimizer(0.1, params=ps), ValueError,
     r"Cannot map torch.optim.Adagrad with lr_decay=0.1"),
    ("wrong_pair", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
     lambda ps: trainop.AdamOptimizer(0.1, params=ps), TypeError,
     r"Expected a torch.optim.Adam for AdamOptimizer, got torch.optim.SGD"),
    ("no_counterpart", lambda ps: torch.optim.Adam(ps),
     lambda ps: trainop.FtrlOptimizer(0.1, params=ps), TypeError,
     r"Expected `optimizer` to be one of AdamWOptimizer \(torch.optim.AdamW\), .* got "
     r"FtrlOptimizer"),
    ("groups_differ", lambda ps: torch.optim.Adam(ps[:1]),
     lambda ps: trainop.AdamOptimizer(0.1, params=ps), ValueError,
     r"Expected the torch optimizer to have the trainop optimizer's groups \(\[2\] "
     r"parameters\), got \[1\]"),
    ("not_torch", lambda ps: {"state": 1}, lambda ps: trainop.AdamOptimizer(0.1, params=ps),
     TypeError, r"Expected `torch_optimizer_or_state_dict` to be a torch.optim optimizer or "
                r"its state_dict"),
]


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_unmappable_torch_state_changes_nothing(case):
    _, make_torch, make_trainop, error, pattern = case
    params = [torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(2))]
    source = make_torch(params)
    if isinstance(source, torch.optim.Optimizer):
        for p in source.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        source.step()
    ours = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = make_trainop(ours)
    opt.apply_gradients([(torch.ones_like(p), p) for p in ours])
    before = [{k: v.clone() for k, v in opt.state[p].items()} for p in ours]
    with pytest.raises(error, match=pattern):
        ckpt.from_torch_optim(source, opt)
    after = [{k: v.clone() for k, v in opt.state[p].items()} for p in ours]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(before, after, strict=True) for k in a)


def test_to_torch_refuses_unmappable_target():
    ps = [torch.nn.Parameter(torch.randn(3))]
    opt = trainop.AdamOptimizer(0.1, params=ps)
    target = torch.optim.Adam([torch.nn.Parameter(torch.randn(3))], amsgrad=True)
    with pytest.raises(ValueError, match=r"Cannot map torch.optim.Adam with amsgrad=True"):
        ckpt.to_torch_optim(opt, target)
    with pytest.raises(TypeError, match=r"Expected `torch_optimizer` to be a torch.optim "
                                        r"optimizer, got"):
        ckpt.to_torch_optim(opt, {"state": {}})


def test_save_errors(tmp_path):
    model, opt = _setup()
    with pytest.raises(ValueError, match=r"Expected `global_step` to be an integer in "
                                         r"\[0, 2\*\*62\] \(the int64 counter must not wrap\) "
                                         r"or None, got -1"):
        ckpt.save_tf(tmp_path / "x", model, opt, names=NAMES, global_step=-1)
    with pytest.raises(TypeError, match=r"Expected variable 'a' to be a tensor of a dtype TF "
                                        r"checkpoints hold"):
        ckpt.write_tf(tmp_path / "y", {"a": [1.0]})
    with pytest.raises(ValueError, match=r"Expected TF variable names to be non-empty strings"):
        ckpt.write_tf(tmp_path / "y", {"": torch.ones(1)})
    with pytest.raises(ValueError, match=r"Two values for the TF variable 'dense/bias': check "
                                         r"`names`"):
        ckpt.save_tf(tmp_path / "x", model, opt, names={**NAMES, "0.weight[m]": "dense/bias"})
    with pytest.raises(TypeError, match=r"Expected a layout to be a pair of functions"):
        ckpt.layout(1, 2)
    with pytest.raises(TypeError, match=r"Expected `forget_bias` to be a float"):
        ckpt.lstm_bias_forget("1")
    assert not list(tmp_path.iterdir())


def test_index_naming_one_data_block_many_times(tmp_path):
    """A hostile index whose index block names the same data block again and again is refused
    at the second mention (before, each mention cost a CRC pass and a copy of the block's
    entries, and only the key order check caught it at the end)."""
    from trainop.interfaces.checkpoints.sstable import (
        MAGIC,
        _append_block,
        _build_block,
        read_table,
    )

    out = bytearray()
    handle = _append_block(out, _build_block([(b"a", b"x"), (b"b", b"y")]))
    meta = _append_block(out, _build_block([]))
    index = _append_block(out, _build_block([(b"b%06d" % i, handle) for i in range(10000)]))
    footer = meta + index
    out += footer + b"\x00" * (40 - len(footer)) + MAGIC.to_bytes(8, "little")
    with pytest.raises(ValueError, match=r"x: data block at 0 overlaps or precedes the "
                                         r"previous one \(which ends at 23\): damaged"):
        read_table(bytes(out), "x")


def test_index_keys_unpacking_quadratically():
    """A block of entries each sharing the whole previous key and adding one byte (4 bytes an
    entry, keys in order) would unpack to memory quadratic in the file; TF stores a key whole
    every 16 entries, so more than 16 key bytes per block byte is refused while reading."""
    from trainop.interfaces.checkpoints.sstable import _entries
    from trainop.interfaces.checkpoints.wire import encode_varint

    n = 2000
    body = b"".join(encode_varint(i) + encode_varint(1) + b"\x00" + b"a" for i in range(n))
    block = body + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
    with pytest.raises(ValueError, match=rf"x: a block of {len(block)} bytes unpacks to more "
                                         rf"than 16 times as many key bytes: damaged"):
        list(_entries(block, "x"))


def test_negative_dimensions_are_refused(tmp_path):
    """Two negative sizes multiply to a positive byte count: refused by name, not left to a
    torch reshape error."""
    from trainop.interfaces.checkpoints.sstable import read_table, write_table
    from trainop.interfaces.checkpoints.wire import encode

    path = _checkpoint(tmp_path)
    entries = read_table(Path(path + ".index").read_bytes(), "x")
    old = dict(entries)[b"dense/kernel"]
    dims = b"".join(encode([(2, encode([(1, n)]))]) for n in (-3, -2))
    fields = [(1, 1), (2, dims)] + [(n, v) for n, v in _fields(old) if n not in (1, 2)]
    new = encode(fields, fixed32=frozenset({6}))
    entries = [(k, new if k == b"dense/kernel" else v) for k, v in entries]
    Path(path + ".index").write_bytes(write_table(entries))
    model, opt = _setup()
    before = _snapshot(model, opt)
    with pytest.raises(ValueError, match=re.escape("entry 'dense/kernel': the shape (-3, -2) "
                                                   "has a negative size")):
        ckpt.load_tf(path, model, opt, names=NAMES)
    assert _same(before, _snapshot(model, opt))


def _fields(value: bytes) -> list[tuple[int, int | bytes]]:
    from trainop.interfaces.checkpoints.wire import parse

    return [(n, v) for n, values in parse(value, "x").items() for v in values]
