"""The bulk metadata reader (``kernels/native/csrc/metadata.cpp``) against the same reads done
in Python, and the step with it against the step without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fresh_process import run_fresh_with_stderr

import trainop
from trainop.kernels.native import _binding, boundary, metadata

reader = metadata.load()
needs_reader = pytest.mark.skipif(reader is None, reason=str(metadata.unavailable_reason()))


class Tagged(torch.Tensor):
    """A tensor subclass: the plan reads its metadata in Python (it may define behaviour)."""


def python_reads(monkeypatch):
    """Make the library read metadata tensor by tensor in Python, as without the reader."""
    monkeypatch.setattr(metadata.READER, "value", None)
    monkeypatch.setattr(metadata.READER, "reason", "switched off by the test")


def params_with_grads(n=5, dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    ps = [torch.randn(2 + i, 3, generator=g, dtype=dtype) for i in range(n)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g, dtype=dtype)
    return ps


def recorded(ps):
    """What a step plan records of its parameters (dtype, device, shape), as int64."""
    return np.asarray(reader.record(ps), dtype=np.int64)


def gradient_pass(ps, record):
    """The reader's gradient pass: ``(grads, ready, shared, reads)`` or ``None``."""
    reads = np.full(3 * len(ps), -7, dtype=np.int64)
    found = reader.gradients(ps, record.ctypes.data, len(record), boundary.PLAIN_TYPES,
                             reads.ctypes.data)
    return None if found is None else (*found, reads)


@needs_reader
def test_the_record_is_dtype_device_and_shape():
    ps = [torch.zeros(2, 3), torch.zeros((), dtype=torch.float64), torch.zeros(4, 1, 5)]
    # c10::ScalarType Float = 6, Double = 7; DeviceType CPU = 0, index -1; then the number
    # of dimensions, the sizes, the strides and the data pointer (a `p.data = t` shows)
    expected = []
    for p, scalar_type in zip(ps, (6, 7, 6), strict=True):
        expected += [scalar_type, 0, -1, p.dim(), *p.shape, *p.stride(), p.data_ptr()]
    assert expected[:10] == [6, 0, -1, 2, 2, 3, 3, 1, ps[0].data_ptr(), 7]
    assert reader.record(ps) == expected
    moved = ps[0].clone()
    ps[0].data = moved
    assert reader.record(ps)[8] == moved.data_ptr()
    assert reader.record([]) == []


@needs_reader
def test_gradients_are_the_parameters_own_grad_objects():
    ps = params_with_grads()
    grads, ready, shared, reads = gradient_pass(ps, recorded(ps))
    assert len(grads) == len(ps) and all(g is p.grad for g, p in zip(grads, ps, strict=True))
    assert shared is False  # every gradient a storage of its own
    assert ready is True  # and what the C boundary needs of them, read in the same pass:
    assert reads.tolist() == ([p.data_ptr() for p in ps] + [p.grad.data_ptr() for p in ps]
                              + [p.numel() for p in ps])
    assert gradient_pass([], recorded([]))[:2] == ([], True)


@needs_reader
@pytest.mark.parametrize("kind", ["transposed", "grad-transposed", "subclass-grad",
                                  "subclass-param"])
def test_gradients_not_ready_for_c_are_still_returned(kind):
    """A parameter or gradient C may not read as one block (not contiguous, a subclass):
    the gradients as before, but nothing read for the boundary (it reads them itself)."""
    ps = params_with_grads()
    if kind == "transposed":
        ps[3] = torch.randn(3, 5).t()
        ps[3].grad = torch.randn(5, 3)
    elif kind == "grad-transposed":
        ps[3].grad = torch.randn(3, 5).t()
    elif kind == "subclass-grad":
        ps[3].grad = torch.randn(5, 3).as_subclass(Tagged)
    else:
        ps[3] = ps[3].as_subclass(Tagged)
        ps[3].grad = torch.randn(5, 3)
    grads, ready, _, _ = gradient_pass(ps, recorded(ps))
    assert ready is False and all(g is p.grad for g, p in zip(grads, ps, strict=True))


@needs_reader
def test_a_short_or_foreign_record_declines():
    ps = params_with_grads()
    assert gradient_pass(ps, recorded(ps[:4])) is None
    assert gradient_pass(ps, recorded(ps)[:-1]) is None
    assert gradient_pass(ps[:4], recorded(ps[1:])) is None


@needs_reader
@pytest.mark.parametrize("bad", ["missing", "sparse", "dtype", "shape", "param-dtype",
                                 "param-shape"])
def test_gradients_decline_what_the_plan_must_not_take(bad):
    ps = params_with_grads()
    record = recorded(ps)
    p = ps[2]
    if bad == "missing":
        p.grad = None
    elif bad == "sparse":
        p.grad = p.grad.to_sparse()
    elif bad == "dtype":  # torch refuses such a .grad; the parameter can change under it
        p.data = p.data.double()
    elif bad == "shape":
        p.data = p.data.reshape(-1)
    else:  # the parameter and its gradient both changed since the plan was built
        p.data = p.data.double() if bad == "param-dtype" else torch.zeros(7)
        p.grad = torch.zeros_like(p)
    assert gradient_pass(ps, record) is None


@needs_reader
def test_pointers_and_sizes_equal_the_python_reads():
    ps = params_with_grads()
    slots = [torch.zeros_like(p) for p in ps]
    lists = [ps, [p.grad for p in ps], slots]
    out = np.zeros(15, dtype=np.uint64)
    assert reader.pointers(lists, out.ctypes.data) is True
    assert out.tolist() == [t.data_ptr() for tensors in lists for t in tensors]
    counts = np.zeros(5, dtype=np.int64)
    reader.sizes(ps, counts.ctypes.data)
    assert counts.tolist() == [p.numel() for p in ps]


@needs_reader
def test_pointers_decline_a_non_contiguous_tensor():
    ps = params_with_grads()
    out = np.zeros(5, dtype=np.uint64)
    assert reader.pointers([[*ps[:4], ps[4].t()]], out.ctypes.data) is False
    assert _binding.pointers([ps[:4] + [ps[4].t()]]) is None


@needs_reader
@pytest.mark.parametrize("call", [lambda: reader.gradients((torch.zeros(1),), 0, 0, (), 0),
                                  lambda: reader.gradients([2.0], 0, 0, (), 0),
                                  lambda: reader.gradients([torch.zeros(1)], 0, 0, None, 0),
                                  lambda: reader.record((torch.zeros(1),)),
                                  lambda: reader.record(["x"]),
                                  lambda: reader.rows((torch.zeros(1),), torch.zeros(1),
                                                      None, ()),
                                  lambda: reader.first_outside(torch.zeros(1), 3, None),
                                  lambda: reader.pointers([(torch.zeros(1),)], 0),
                                  lambda: reader.sizes(["x"], 0),
                                  lambda: reader.shared((torch.zeros(1),), ()),
                                  lambda: reader.shared([torch.zeros(1)], None),
                                  lambda: reader.extents(["x"], (), 0)])
def test_wrong_arguments_raise_type_errors(call):
    with pytest.raises(TypeError, match="expected|must be tuple"):
        call()


@needs_reader
def test_shared_finds_the_gradients_that_may_share_memory():
    """The filter before a step compares its gradients with the memory it writes
    (``contract/read_first.py``): a tensor with a storage of its own that does not require grad
    (what autograd makes) may not share; a view, a detached parameter or a parameter may. The
    gradient pass gives the same answer as its third value; subclasses and sparse tensors are
    not looked at."""
    p = torch.nn.Parameter(torch.randn(3))
    own = [torch.randn(3), torch.randn(2, 2)]
    assert reader.shared(own, boundary.PLAIN_TYPES) is False
    assert reader.shared([], boundary.PLAIN_TYPES) is False
    for other in (p.detach(), p, torch.randn(6)[:3], p.detach().as_subclass(Tagged)):
        found = reader.shared([*own, other], boundary.PLAIN_TYPES)
        assert found is (type(other) is not Tagged)
    assert reader.shared([torch.randn(3).to_sparse()], boundary.PLAIN_TYPES) is False
    ps = params_with_grads()
    ps[2].grad = ps[4].detach()[:4]  # a view into another parameter
    assert gradient_pass(ps, recorded(ps))[2] is True


@needs_reader
def test_extents_are_each_tensors_bytes_first_to_last():
    base = torch.arange(24.0).reshape(2, 3, 4)
    at = base.data_ptr()
    tensors = [base, base.transpose(0, 2), base[:, 1], base[1, :, 1:3], base.flip(0),
               torch.zeros(0), torch.zeros(3).to_sparse(), torch.zeros(2, device="meta"),
               base.as_subclass(Tagged), torch.zeros(3, dtype=torch.float64)]
    out = np.full(2 * len(tensors), -1, dtype=np.int64)
    reader.extents(tensors, boundary.PLAIN_TYPES, out.ctypes.data)
    found = [(s - at, e - at) for s, e in zip(out[0::2].tolist(), out[1::2].tolist(),
                                               strict=True)][:5]
    # whole, transposed (the same 96 bytes), row 1 of each block (elements 4..19), block 1's
    # column 1-2 of each row (elements 13..22), and a copy (elsewhere)
    assert found[:4] == [(0, 96), (0, 96), (16, 80), (52, 92)]
    assert found[4][0] != 0
    assert out[10:18].tolist() == [0] * 8  # empty, sparse, meta, subclass: nothing
    double = tensors[-1]
    assert out[18:].tolist() == [double.data_ptr(), double.data_ptr() + 24]


@needs_reader
@pytest.mark.parametrize("name", ["AdamOptimizer", "MomentumOptimizer", "FtrlOptimizer",
                                  "GradientDescentOptimizer"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_a_step_with_the_reader_equals_one_without(name, dtype, monkeypatch):
    kwargs = {"momentum": 0.9} if name == "MomentumOptimizer" else {}
    ours, theirs = params_with_grads(40, dtype), params_with_grads(40, dtype)
    opt = getattr(trainop, name)(0.01, params=ours, **kwargs)
    ref = getattr(trainop, name)(0.01, params=theirs, **kwargs)
    for _ in range(3):
        opt.step()
    python_reads(monkeypatch)
    for _ in range(3):
        ref.step()
    for p, q in zip(ours, theirs, strict=True):
        assert torch.equal(p, q)
        for slot in opt.state[p]:
            assert torch.equal(opt.state[p][slot], ref.state[q][slot])


@needs_reader
def test_tensor_subclasses_take_the_python_reads():
    p = torch.ones(3).as_subclass(Tagged)
    p.grad = torch.ones(3)
    opt = trainop.GradientDescentOptimizer(0.25, params=[p])
    opt.step()
    opt.step()  # the first step made the state entry; this one runs the plan
    assert opt._step_plan.bulk is False
    assert torch.equal(p.as_subclass(torch.Tensor), torch.full((3,), 0.5))


@needs_reader
def test_the_plan_declines_a_bad_gradient_through_the_reader():
    ps = params_with_grads()
    opt = trainop.AdamOptimizer(0.01, params=ps)
    opt.step()
    ps[1].data = ps[1].data.double()  # the gradient and slots no longer match it
    with pytest.raises((TypeError, ValueError), match=r"dtype torch\.float64, got torch\.float32"):
        opt.step()  # the slots (or the gradient) named before anything moves


def _probe(tmp_path, **env):
    """A fresh interpreter with an empty cache: can it load the reader, and does a step run?
    Its stdout lines, and its stderr."""
    code = ("import torch, trainop; from trainop.kernels.native import metadata; "
            "p = torch.ones(3); p.grad = torch.ones(3); "
            "o = trainop.GradientDescentOptimizer(0.5, params=[p]); o.step(); o.step(); "
            "print(metadata.load() is not None); print(metadata.unavailable_reason()); "
            "print(p.tolist())")
    return run_fresh_with_stderr(code, tmp_path, **env)


# Building the reader into an empty cache, loading it from there in a fresh interpreter and
# stepping with it: test_packaging.py's non-editable install (the suite's one C++ build).


def test_switched_off_or_no_compiler_reads_in_python_and_a_failed_build_warns_once(tmp_path):
    """Without the reader the steps read in Python. A missing reader is reported once
    (stderr: the steps and a later ``load()`` in one process), with the reason and the slower
    fallback; switching native code off on purpose is not reported."""
    lines, off = _probe(tmp_path, TRAINOP_NATIVE="0")
    assert lines == ["False", "switched off by TRAINOP_NATIVE=0", "[0.0, 0.0, 0.0]"]
    assert "trainop:" not in off
    (loaded, reason, values), failed = _probe(tmp_path, CXX="false")
    assert loaded == "False" and values == "[0.0, 0.0, 0.0]"
    assert reason.startswith("the metadata reader could not be built or imported: `false` could "
                             f"not compile metadata.cpp against torch {torch.__version__}'s "
                             "headers (-std=c++20: `false` exited with 1; -std=c++17: `false` "
                             "exited with 1)")
    assert not list(tmp_path.glob("trainop_metadata-*"))
    assert failed.count("NativeFallbackWarning: trainop: the metadata reader could not be "
                        "built or imported: `false` could not compile metadata.cpp") == 1
    assert "read their tensors' metadata in Python instead" in failed


@needs_reader
def test_like_accepts_only_plain_contiguous_tensors_of_the_variables_kind():
    """The step's one-call check of a parameter's slots (optimizers whose slots all have the
    variable's shape and dtype); anything else goes to the spec-by-spec checks."""
    var = torch.zeros(3, 4)
    like = [torch.ones(3, 4), torch.zeros_like(var), torch.nn.Parameter(torch.zeros(3, 4))]
    assert reader.like(var, like, boundary.PLAIN_TYPES) is True
    assert reader.like(var, [], boundary.PLAIN_TYPES) is True
    for other in (torch.zeros(4, 3), torch.zeros(12), torch.zeros(()), torch.zeros(4, 3).t(),
                  torch.zeros(3, 4, dtype=torch.float64), torch.zeros(3, 4).to_sparse(),
                  torch.zeros(3, 4).as_subclass(Tagged), torch.zeros(1, 4).expand(3, 4),
                  torch.zeros(3, 4, device="meta"), None, 2.0):
        assert reader.like(var, [like[0], other], boundary.PLAIN_TYPES) is False, other


def test_a_subclass_with_its_own_slot_specs_is_checked_spec_by_spec():
    """``uniform_slots`` marks a ``_slot_specs`` whose slots all have the variable's kind; a
    subclass that overrides it unmarked (here: a float32 0-dim slot on a float64 variable)
    is checked against its own specs, so a variable-shaped slot is refused."""
    from trainop.contract.optimizer import SlotSpec

    class ScalarSlot(trainop.MomentumOptimizer):
        def _slot_specs(self, group):
            return (SlotSpec("momentum", dtype=torch.float32, scalar=True),)

    p = torch.nn.Parameter(torch.zeros(5, dtype=torch.float64))
    opt = ScalarSlot(0.1, 0.9, params=[p])
    opt.state[p]["momentum"] = torch.zeros(5, dtype=torch.float64)  # the variable's kind
    with pytest.raises(ValueError, match=r"the slot 'momentum' .* shape \(\)"):
        opt._check_slots(p, opt.state[p], opt.param_groups[0])
    assert getattr(trainop.MomentumOptimizer._slot_specs, "uniform_slots", False)
    assert not getattr(ScalarSlot._slot_specs, "uniform_slots", False)


@needs_reader
def test_plain_on_reads_pointers_and_counts_or_declines():
    """``plain_on`` (the Triton path's one C pass per list): every tensor's data pointer and
    element count, list after list, equal to Python's reads; ``None`` for a subclass, another
    dtype than its list's, a non-contiguous tensor or another device than the one asked."""
    a, b = torch.zeros(3), torch.nn.Parameter(torch.ones(2, 5))
    c = torch.zeros(7, dtype=torch.float64)
    found = _binding.plain_on([[a, b], [c]], (torch.float32, torch.float64),
                              torch.device("cpu"))
    assert found is not None
    at, counts = found
    assert at.tolist() == [a.data_ptr(), b.data_ptr(), c.data_ptr()]
    assert counts.tolist() == [3, 10, 7]
    cpu = torch.device("cpu")
    assert _binding.plain_on([[a, c]], (torch.float32,), cpu) is None  # dtype
    assert _binding.plain_on([[a, torch.zeros(4, 2).t()]], (torch.float32,), cpu) is None
    assert _binding.plain_on([[a, torch.zeros(2).as_subclass(Tagged)]], (torch.float32,),
                             cpu) is None
    assert _binding.plain_on([[a]], (torch.float32,), torch.device("cuda", 0)) is None
    assert _binding.plain_on([[a]], (torch.float32,), torch.device("meta")) is None
