"""The table the Triton kernel tests share (interpreter on the CPU, and CUDA): every optimizer
with its variants, the shapes (odd sizes around the block), the bound in float32 ulps of the
Triton path against ``implementation="reference"``, and the ulp distance itself.

Bounds (docs/design.md, "The Triton path"): bit-equal where the kernel's order of operations
is the reference's; else the native kernels' bound (the kernels run the C kernels' order, and
under the interpreter give the C kernels' bits); CUDA may add FMA contraction: ``CUDA_RTOL``.
"""

from __future__ import annotations

import contextlib

import torch
from contract_table import INFOS

from trainop.kernels.triton.launch import BLOCK

#: One bucket of mixed sizes: 1, block-1, block+1, empty, a 2-D tensor.
SHAPES = [(1,), (BLOCK - 1,), (BLOCK + 1,), (0,), (3, 5)]
#: Fewer, smaller tensors (one block each; an empty one) where the sizes are not the point.
SMALL = [(1,), (7,), (0,), (2, 3)]
#: Classes whose reference runs the kernel's order of operations: bit-equal to it.
EQUAL = {"GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer",
         "ProximalGradientDescentOptimizer", "ProximalAdagradOptimizer", "MomentumWOptimizer"}
#: The others: within the native kernels' documented bound of the reference (the same order
#: as the C kernels, which group a few products differently from the torch ops): relative
#: 1e-6, absolute 1e-6 times the tensor's largest magnitude (at least 1).
RTOL = 1e-6
#: A GPU's fused multiply-adds (Triton contracts a*b + c) may add this much (documented bound).
CUDA_RTOL = 1e-5
#: Ulps from the native C kernels (the same rule, the same order): 0, but FTRL with a power
#: other than -0.5, which Triton evaluates through float64 logarithms (C: powf).
NATIVE_ULPS = {"FtrlOptimizer": 4}
STEPS = 3
CASES = [(info, kwargs) for info in INFOS for kwargs in ({}, *info.variants)]
IDS = [f"{info.name}-{i}" for info in INFOS for i in range(1 + len(info.variants))]


def ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest distance in float32 ulps between ``a`` and ``b`` (NaN must match NaN)."""
    a, b = a.detach().float().cpu().reshape(-1), b.detach().float().cpu().reshape(-1)
    assert torch.equal(a.isnan(), b.isnan()), "NaN in different places"
    keep = ~a.isnan()
    a, b = a[keep], b[keep]
    if not a.numel():
        return 0

    def ordered(x):
        i = x.view(torch.int32).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)

    return int((ordered(a) - ordered(b)).abs().max())


def run(info, kwargs, implementation, device, *, grads=None, steps=STEPS, shapes=SHAPES,
        step_kwargs=None):
    """Params and the optimizer after ``steps`` steps on seeded data; ``grads(step, p)`` may
    override a gradient, ``step_kwargs(step)`` adds ``step()`` arguments."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(device)) for s in shapes]
    opt = info.make(params, implementation=implementation, **kwargs)
    for step in range(steps):
        for p in params:
            g = torch.randn(p.shape, generator=gen)
            p.grad = (g if grads is None else grads(step, g)).to(device)
        opt.step(**({} if step_kwargs is None else step_kwargs(step)))
    return params, opt


def _pairs(left, right):
    """(ours, theirs) for the params and every slot of two ``run`` results."""
    (pl, ol), (pr, orr) = left, right
    for a, b in zip(pl, pr, strict=True):
        yield a, b
        for name, slot in ol.state[a].items():
            yield slot, orr.state[b][name]


def distance(left, right) -> int:
    """The largest ulp distance over the params and every slot of two ``run`` results."""
    return max(ulps(a, b) for a, b in _pairs(left, right))


def assert_matches_reference(name, ours, reference, rtol=RTOL) -> None:
    """``ours`` against the reference: bit-equal for ``EQUAL`` classes, else within ``rtol``
    (absolute: ``rtol`` times the largest magnitude, at least 1); NaN where it has NaN."""
    if name in EQUAL and rtol == RTOL:
        assert distance(ours, reference) == 0
        return
    for a, b in _pairs(ours, reference):
        a, b = a.detach().float().cpu(), b.detach().float().cpu()
        scale = max(1.0, float(b.nan_to_num(0.0, 0.0, 0.0).abs().max())) if b.numel() else 1.0
        torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * scale, equal_nan=True)


#: The Triton sparse rule of each class (``_triton_sparse_rule``): the dense rule on the
#: touched rows, or the class's own sparse form (TF's sparse kernels; Adam's and Nadam's
#: every-row rules; NovoGrad's densified gradient). MomentumW and AdamW: the base's rule,
#: whose kernel decays the touched rows first.
SPARSE_RULE = {"GradientDescentOptimizer": "gradient_descent", "MomentumOptimizer": "momentum",
               "AdagradOptimizer": "adagrad", "AdagradDAOptimizer": "adagrad_da",
               "AdadeltaOptimizer": "adadelta", "RMSPropOptimizer": "rmsprop_sparse",
               "AdamOptimizer": "adam_sparse", "FtrlOptimizer": "ftrl",
               "ProximalGradientDescentOptimizer": "proximal_gd",
               "ProximalAdagradOptimizer": "proximal_adagrad", "LazyAdamOptimizer": "lazy_adam",
               "AdamWOptimizer": "adam_sparse", "MomentumWOptimizer": "momentum",
               "NadamOptimizer": "nadam_sparse", "NovoGrad": "novograd"}
#: Every class, and the variants that change its sparse rule or its decay (centered RMSProp,
#: Nesterov momentum, MomentumW with Nesterov, AdamW's decay not scaled by lr).
SPARSE_CASES = [(info, kwargs) for info, kwargs in CASES
                if not kwargs or kwargs.get("centered") or kwargs.get("use_nesterov")
                or "decay_scaled_by_lr" in kwargs]
SPARSE_IDS = [f"{info.name}-{'-'.join(kwargs) or 'base'}" for info, kwargs in SPARSE_CASES]


def sparse_rule(name, kwargs) -> str:
    """The Triton sparse rule ``name`` with ``kwargs`` runs."""
    return "rmsprop_centered_sparse" if kwargs.get("centered") else SPARSE_RULE[name]


def train_sparse(info, implementation, device, kwargs=None):
    """Three steps of a 7x3 table with a sparse gradient that repeats a row."""
    gen = torch.Generator().manual_seed(0)
    table = torch.nn.Parameter(torch.randn(7, 3, generator=gen).to(device))
    opt = info.make([table], implementation=implementation, **(kwargs or {}))
    for _ in range(3):
        table.grad = torch.sparse_coo_tensor([[1, 5, 1, 0]], torch.randn(4, 3, generator=gen),
                                             (7, 3)).to(device)
        opt.step()
    return [table], opt


def train_mixed(info, dtype, implementation, device, *, entry="step", watch=None,
                regularize=None, processors=(), shapes=SHAPES):
    """``MixedPrecisionOptimizerWrapper`` around ``info``'s optimizer on half parameters
    (one saturating in float16), three steps, the second overflowing (skipped). ``entry``:
    torch style ``"step"``, TF style ``"minimize"`` (a TF-style optimizer, masters made on
    first sight), or ``"optimize_loss"`` (``dtype="mixed"``, the optimizer by class).
    ``"apply"`` (TF style ``apply_gradients`` with pairs naming the half variables) too.
    ``watch(params)`` sees the parameters first; ``regularize``: the index of a parameter
    given an L2 regularizer (``add_regularizer``); ``processors``: pipeline stages around the
    wrapper (``step`` only); ``shapes``: the parameters' (the second of at least 2 elements).
    Returns the params and the wrapper."""
    import trainop
    from trainop.processing import (
        BackoffLossScaler,
        GradientPipeline,
        MixedPrecisionOptimizerWrapper,
    )

    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype).to(device))
              for s in shapes]
    params[1].data[:2] = torch.tensor([1e9, -1e9]).to(dtype)
    if watch is not None:
        watch(params)
    inputs = [[torch.randn(p.shape, generator=gen).to(device) for p in params]
              for _ in range(3)]

    def loss(step):
        value = sum((p.float() * x).sum() for p, x in zip(params, inputs[step], strict=True))
        return value * float("inf") if step == 1 else value

    if entry == "optimize_loss":
        op = trainop.optimize_loss(loss, info.cls,
                                   {"implementation": implementation, **info.required},
                                   info.lr, var_list=params, dtype="mixed",
                                   loss_scaling="Backoff")
        for step in range(3):
            op(step)
        return params, op.optimizer
    inner = (info.cls(learning_rate=info.lr, implementation=implementation, **info.required)
             if entry in ("minimize", "apply")
             else info.make(params, implementation=implementation))
    opt = MixedPrecisionOptimizerWrapper(inner, BackoffLossScaler())
    if regularize is not None:
        opt.add_regularizer(params[regularize], lambda v: 1e-3 * (v * v).sum())
    front = GradientPipeline(opt, processors) if processors else opt
    for step in range(3):
        if entry == "minimize":
            front.minimize(lambda step=step: loss(step), var_list=params)
            continue
        if entry == "apply":  # gradients of the unscaled loss, paired with the half variables
            loss(step).backward()
            front.apply_gradients([(p.grad, p) for p in params])
            front.zero_grad()
            continue
        front.scale_loss(loss(step)).backward()
        front.step()
        front.zero_grad()
    return params, opt


def _mixed_stages():
    from trainop.processing import LARC, ClipByGlobalNorm, ClipByValue

    f32, bf16 = torch.float32, torch.bfloat16
    return [  # (train_mixed's arguments, the gradient dtypes its update kernels read)
        ({"regularize": 1}, {f32, bf16}),  # the regularized one float32: a call per dtype
        ({"processors": [LARC(0.002)]}, {f32}),  # per-tensor factors, applied in float32
        ({"processors": [ClipByValue(-0.5, 0.5)]}, {f32}),  # gradients rewritten
        ({"processors": [ClipByGlobalNorm(1.0)]}, {bf16}),  # folded into the multiplier
    ]


#: Mixed precision with what needs float32 gradients, and a global clip, which does not.
MIXED_STAGES = _mixed_stages()
MIXED_STAGE_IDS = ["regularizer", "larc", "clip_by_value", "clip_by_global_norm"]


def assert_mixed_matches(name, ours, theirs, dtype, rtol=RTOL) -> None:
    """Masters and slots against the reference; every half copy the saturating cast of its
    master."""
    (po, oo), (pt, ot) = ours, theirs
    assert_matches_reference(name, ([oo.master(p) for p in po], oo.optimizer),
                             ([ot.master(p) for p in pt], ot.optimizer), rtol)
    top = torch.finfo(dtype).max
    for p in po:
        assert torch.equal(p.detach(), oo.master(p).clamp(-top, top).to(dtype))


class HalfGradients:
    """Spies (installed with ``monkeypatch``) on a mixed-precision update: ``kernel``, the
    gradient dtypes of every kernel call the Triton entry prepared (one per gradient dtype of
    a bucket, ``Entry._layout``); ``widened``, the shape of every float32 copy
    (``Tensor.to``) made of a ``.grad`` of the parameters given to ``watch``."""

    def __init__(self, monkeypatch) -> None:
        from trainop.kernels import triton as tk

        self.kernel: list[set[torch.dtype]] = []
        self.widened: list[tuple[int, ...]] = []
        self._params: list[torch.Tensor] = []
        run, to = tk.Entry._layout, torch.Tensor.to

        def spy_run(entry, rule, lists, *args, **kwargs):
            done = run(entry, rule, lists, *args, **kwargs)
            if done is not None:
                self.kernel.append({g.dtype for g in lists[1]})
            return done

        def spy_to(t, *args, **kwargs):
            out = to(t, *args, **kwargs)
            if (out.dtype == torch.float32 and t.dtype != torch.float32
                    and any(t is p.grad for p in self._params)):
                self.widened.append(tuple(t.shape))
            return out

        monkeypatch.setattr(tk.Entry, "_layout", spy_run)
        monkeypatch.setattr(torch.Tensor, "to", spy_to)

    def watch(self, params) -> None:
        self._params = list(params)


def eager_widening(monkeypatch) -> None:
    """From now on a mixed-precision master's half gradient is widened to float32 as soon as
    it is paired with its master (what the wrapper did before widening on use), so the update
    kernels read float32 gradients."""
    from trainop.processing import Gradients

    mark = Gradients.widen_on_use

    def eager(self, indices):
        mark(self, indices)
        self._widen()

    monkeypatch.setattr(Gradients, "widen_on_use", eager)


def assert_same_training(ours, theirs) -> None:
    """Two ``train_mixed`` results bit for bit: half params, masters and every slot."""
    (po, oo), (pt, ot) = ours, theirs
    for a, b in zip(po, pt, strict=True):
        assert torch.equal(a.detach(), b.detach())
        ma, mb = oo.master(a), ot.master(b)
        assert torch.equal(ma, mb)
        for name, slot in oo.optimizer.state[ma].items():
            assert torch.equal(slot, ot.optimizer.state[mb][name]), name
@contextlib.contextmanager
def correctly_rounded_sqrt():
    """Within: ``Tensor.sqrt``/``sqrt_`` of float32 tensors round the float64 root once, i.e.
    correctly (as the kernels' ``sqrt_rn`` and C's ``sqrtf``). torch's CPU float32 square root
    is not correctly rounded (about one value in five in [0.5, 1.5) is 1 ulp off), the one
    difference between the reference's sparse rules and the Triton kernels' (the same order
    of operations otherwise)."""
    sqrt, sqrt_ = torch.Tensor.sqrt, torch.Tensor.sqrt_

    def rounded(x):
        return sqrt(x.double()).float() if x.dtype == torch.float32 else sqrt(x)

    torch.Tensor.sqrt = rounded
    torch.Tensor.sqrt_ = lambda x: x.copy_(rounded(x))
    try:
        yield
    finally:
        torch.Tensor.sqrt, torch.Tensor.sqrt_ = sqrt, sqrt_


def spy_sparse(monkeypatch) -> list[tuple[str, bool]]:
    """Each sparse call of the Triton path from now on (``Entry.sparse_rows``, the one way in
    of ``kernels.triton.sparse_rows`` and of the dispatch): (rule, whether it ran)."""
    from trainop.kernels import triton as tk

    ran: list[tuple[str, bool]] = []
    real = tk.Entry.sparse_rows

    def spy(self, rule, *args, **kwargs):
        ran.append((rule, real(self, rule, *args, **kwargs)))
        return ran[-1][1]

    monkeypatch.setattr(tk.Entry, "sparse_rows", spy)
    return ran


def spy_runs(monkeypatch) -> list[str]:
    """The rules the Triton path runs from now on (each dense call of its one way in,
    ``Entry.update``, behind ``kernels.triton.run`` and the dispatch, that returned True),
    recorded by a spy ``monkeypatch`` installs."""
    from trainop.kernels import triton as tk

    ran: list[str] = []
    real = tk.Entry.update

    def spy(self, rule, *args, **kwargs):
        done = real(self, rule, *args, **kwargs)
        if done:
            ran.append(rule)
        return done

    monkeypatch.setattr(tk.Entry, "update", spy)
    return ran

