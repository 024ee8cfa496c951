"""trainop's own Triton kernels: the ``triton`` implementation (CUDA; CPU tensors only under
Triton's interpreter, ``TRITON_INTERPRET=1``).

One file per rule family, each the rule of ``kernels/native/csrc/rules.h`` (and so of the
reference in ``trainop.algorithms``) in the same order of operations in float32, one pass that
reads the variable, the gradient and the slots once and writes the variable and slots once.
Every kernel reads its hyperparameters, the gate's gradient multiplier and its skip flag from
device tensors (``tables.Scalars``, ``_common``): nothing is read on the host, so a step on
this path needs no synchronisation. A bucket of one tensor per list (a flat buffer of
``trainop.flatten``) is one launch over its elements; a bucket of any other number of tensors
one launch over the blocks of all of them, through its device table (``tables.Layout``: made
once per layout, the gradients' addresses refreshed on the device when they move,
capturable).

Host work per step does not grow with a Python loop over the tensors: the boundary checks
(``checked``) run once per layout, keyed by the data pointers of every list but the gradients
and the variables' sizes; a step then checks the gradients with a few C-level passes (type,
dtype, device, shape, contiguity; their addresses against the written memory only where they
moved) and sends their addresses where they changed.

Triton is imported lazily: importing trainop never imports it, and without it ``available()``
is False and every bucket takes the caller's safe path (``foreach``). The kernels are decorated
when their family is first used (under a lock: the first use from several threads imports
each module once); under ``TRITON_INTERPRET=1`` they run on the CPU with numpy (how the tests
reach them without a GPU), one kernel at a time (the interpreter patches ``triton.language``
while it runs one). Every call goes through ``checked`` (the boundary
checks shared with the native kernels, ``kernels.boundary``).

Covered: the dense rules of every optimizer (float32), and ``sparse_rows``: the sparse update
of every optimizer over a sparse gradient's distinct rows, by the kind of its rule
(``SPARSE_RULES``): the rule on the touched rows (``ROW_RULES``: the dense rule of GD, Momentum,
Adagrad, AdagradDA, Adadelta, FTRL, the proximal optimizers, MomentumW's decay of the touched
rows first; the forms of TF's sparse kernels ``lazy_adam``, ``rmsprop_sparse`` and
``rmsprop_centered_sparse``), TF's every-row sparse Adam and Nadam in one launch over the
whole table (``EVERY_ROW_RULES``, AdamW's decay of the touched rows first), or the dense rule
on the densified gradient (``DENSIFIED_RULES``: NovoGrad); other dtypes and tensor
subclasses take the caller's other paths. ``run(..., half=...)`` also
writes the float16/bfloat16 model copies of float32 master variables in the same pass (the
mixed-precision wrapper's saturating cast), and takes their float16/bfloat16 model gradients
as they are (widened to float32 in registers, so a master's update reads 2 bytes of gradient).
``l2_norms``: per-tensor norms (float64 sums) of a whole list in one read pass, the gradient
pipeline's norms and non-finite flag when the optimizer asked for ``triton``
(``kernels.norms.read_pass_norms``; float16/bfloat16 gradients read as they are).
``sparse_rows`` takes the gate's skip flag on the device into every launch, as ``run`` does
(the caller scales the gradient by the multiplier before its rows are summed). Sharded tensors
(FSDP2): the dispatch hands the local shards to ``run``; NovoGrad's whole-tensor norms come from
each rank's ``square_sums`` added over the ranks and reach its kernel as ``run(..., squares=)``
(``kernels.dispatch``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np
import torch

from trainop.kernels.boundary import check_overlap, full_check, is_plain

__all__ = ["DENSE_RULES", "DENSIFIED_RULES", "DTYPES", "EVERY_ROW_RULES", "HALF_DTYPES",
           "ROW_RULES", "SPARSE_RULES", "WHOLE_NORM_RULES", "available", "checked",
           "interpreted", "l2_norms", "run", "sparse_rows", "square_sums", "supports"]

#: The dtypes the Triton kernels update (computing in float32, as the reference).
DTYPES = (torch.float32,)
#: The model copies' dtypes a mixed-precision update writes in its pass.
HALF_DTYPES = (torch.float16, torch.bfloat16)
#: rule -> the family module that defines it.
_FAMILIES = {"gradient_descent": "gradient_descent", "momentum": "momentum", "adagrad": "adagrad",
             "adadelta": "adadelta", "adagrad_da": "adagrad_da", "rmsprop": "rmsprop",
             "rmsprop_centered": "rmsprop", "ftrl": "ftrl", "proximal_gd": "proximal",
             "proximal_adagrad": "proximal", "adam": "adam", "novograd": "novograd",
             "lazy_adam": "adam", "rmsprop_sparse": "rmsprop",
             "rmsprop_centered_sparse": "rmsprop", "adam_sparse": "adam",
             "nadam_sparse": "adam"}
#: Sparse rules over every row of the table (``sparse_rows``): TF's sparse Adam (every row of
#: the moments decays, every row of the variable moves) and contrib's sparse Nadam (every row
#: of the moments decays, the touched rows of the variable move). Not dense rules.
EVERY_ROW_RULES = frozenset({"adam_sparse", "nadam_sparse"})
#: Sparse rules run over the densified gradient (``sparse_rows``): a rule that is not
#: elementwise (NovoGrad's per-tensor norm), as the reference densifies.
DENSIFIED_RULES = frozenset({"novograd"})
#: The rules ``run`` takes (dense updates).
DENSE_RULES = frozenset(_FAMILIES) - EVERY_ROW_RULES
#: The rules that also run over a sparse gradient's distinct rows only (the elementwise ones;
#: ``lazy_adam``, ``rmsprop_sparse`` and ``rmsprop_centered_sparse`` are the forms of TF's
#: sparse kernels, which only the sparse updates use).
ROW_RULES = DENSE_RULES - DENSIFIED_RULES
#: Every rule ``sparse_rows`` takes. (``momentum`` and the Adam family's rules take a ``wd``
#: that decays the variable first, in a sparse rule the touched rows only: MomentumW, AdamW.)
SPARSE_RULES = ROW_RULES | EVERY_ROW_RULES | DENSIFIED_RULES
#: The rules that read each gradient's squared norm, which ``run(..., squares=)`` can give
#: them for the whole tensors of sharded local parts (NovoGrad's layer norms).
WHOLE_NORM_RULES = frozenset({"novograd"})
#: Lists a rule reads as one float32 per tensor (NovoGrad's 0-dim second moments).
_SCALAR_F32 = {"novograd": frozenset({3})}
_available: bool | None = None
_PTR, _NUMEL, _CONTIGUOUS = (methodcaller(m) for m in ("data_ptr", "numel", "is_contiguous"))
_DTYPE, _DEVICE, _LAYOUT = (attrgetter(a) for a in ("dtype", "device", "layout"))


def available() -> bool:
    """Whether Triton can be imported (checked once, on first use)."""
    global _available
    if _available is None:
        try:
            importlib.import_module("triton")
            importlib.import_module("triton.language")
            _available = True
        except Exception:  # ImportError, or a broken install: no Triton path
            _available = False
    return _available


def interpreted() -> bool:
    """Whether Triton's interpreter is on (``TRITON_INTERPRET`` set to a true value)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def supports(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the Triton kernels run tensors of ``dtype`` on ``device``: float32 on CUDA, or
    on the CPU under the interpreter; and Triton importable."""
    if dtype not in DTYPES:
        return False
    if device.type != "cuda" and not (device.type == "cpu" and interpreted()):
        return False
    return available()


def _fresh(name: str) -> Any:
    """Module ``name`` of this package, decorated in the current mode (re-imported where it
    was decorated with the interpreter on and it is off now, or the other way round)."""
    full = f"trainop.kernels.triton.{name}"
    module = sys.modules.get(full) or importlib.import_module(full)
    if interpreted() != module.INTERPRETED:
        module = importlib.reload(module)
    return module


#: Held while a family module is imported (or re-imported for the other mode): another
#: thread would otherwise find it half-initialised in ``sys.modules``; and, under Triton's
#: interpreter, while a kernel runs (the interpreter patches ``triton.language`` meanwhile).
_LOCK = threading.RLock()


@contextlib.contextmanager
def _family(name: str) -> Iterator[Any]:
    """The family module ``name``, its kernels and theirs decorated in the current mode;
    the first use from several threads at once imports it once (``_LOCK``)."""
    with _LOCK:
        for dependency in ("_common", "norms"):
            _fresh(dependency)
        module = _fresh(name)
    with _LOCK if interpreted() else contextlib.nullcontext():
        yield module


def checked(lists: Sequence[Sequence[torch.Tensor]], *, dtype: torch.dtype,
            list_dtypes: dict[int, torch.dtype] | None = None,
            scalar_lists: frozenset[int] = frozenset(), read_only: frozenset[int] = frozenset({1}),
            rule: str = "kernel") -> bool:
    """The boundary of a Triton call (as ``native.boundary.checked``, on the variables'
    device): False where the caller takes its safe path (a tensor subclass, a non-contiguous
    tensor, a gradient sharing written memory); ``ValueError`` for a tensor no path can run
    (wrong dtype, element count, layout or device, or written tensors sharing memory)."""
    if not all(map(is_plain, lists)):
        return False
    full_check(lists, dtype, list_dtypes or {}, scalar_lists, rule,
               device=lists[0][0].device, kernel="triton")
    if not all(x.is_contiguous() for tensors in lists for x in tensors):
        return False
    return _apart(lists, read_only, rule)


def _apart(lists: Sequence[Sequence[torch.Tensor]], read_only: frozenset[int], rule: str) -> bool:
    """``check_overlap`` over the tensors' address ranges (contiguous tensors)."""
    addresses = np.array([x.data_ptr() for tensors in lists for x in tensors], dtype=np.uint64)
    counts = np.array([x.numel() for tensors in lists for x in tensors], dtype=np.int64)
    return check_overlap(lists, addresses, counts, read_only, rule, kernel="triton")


def _on(value: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """A 0-dim (or one-element) gate value as a kernel reads it: on ``device``, no view made
    where none is needed (each view is one more operation per launch)."""
    if value is None:
        return None
    if value.device != device:
        value = value.to(device=device)
    if value.requires_grad:
        value = value.detach()
    return value if value.dim() <= 1 and value.is_contiguous() else value.reshape(1)


def _tables() -> Any:
    return importlib.import_module("trainop.kernels.triton.tables")


def _pointers(lists: Sequence[Sequence[torch.Tensor]]) -> Any:
    """The data pointers of every tensor (uint64, list after list; read in C where the native
    metadata reader is built), or ``None`` where one is not contiguous."""
    return importlib.import_module("trainop.kernels.native._binding").pointers(lists)


def _binding() -> Any:
    return importlib.import_module("trainop.kernels.native._binding")


def _plain_gradients(layout: Any, grads: Sequence[torch.Tensor], dtype: torch.dtype) -> bool:
    """Whether this step's gradients pass the boundary as those of the layout's first step
    did: exact tensors, one dtype (the variables', or one half dtype for float32 variables),
    strided, on the device, each of its variable's element count (a few C-level passes;
    contiguity is checked with their addresses; a gradient of the right count in another
    shape is the optimizer's to refuse, as the step plan does). Python's checks, where the
    native metadata reader is not built."""
    dtypes = set(map(_DTYPE, grads))
    if len(dtypes) != 1:
        return False
    (found,) = dtypes
    return ((found == dtype or (found in HALF_DTYPES and dtype == torch.float32))
            and is_plain(grads) and set(map(_DEVICE, grads)) == {layout.device}
            and set(map(_LAYOUT, grads)) == {torch.strided}
            and bool((_binding().sizes(grads) == layout.counts).all()))


def _gradients_at(layout: Any, grads: Sequence[torch.Tensor], dtype: torch.dtype) -> Any:
    """The gradients' data pointers (uint64) where they pass the boundary as those of the
    layout's first step did (``_plain_gradients``), else ``None``: one C pass where the
    native metadata reader is built."""
    first = grads[0].dtype
    if not (first == dtype or (first in HALF_DTYPES and dtype == torch.float32)):
        return None
    binding = _binding()
    grads = grads if type(grads) is list else list(grads)
    found = binding.plain_on([grads], (first,), layout.device)
    if found is not None:
        at, counts = found
        return at if np.array_equal(counts, layout.counts) else None
    if binding.reads_in_c():
        return None  # (the reader refused one: the full boundary names it, or the safe path)
    return _pointers([grads]) if _plain_gradients(layout, grads, dtype) else None


def _update_key(rule: str, fixed: list[Sequence[torch.Tensor]], device: torch.device,
                half: bool) -> tuple | None:
    """The layout key of a dense call's lists but the gradients (``fixed``: variables, slots,
    half copies): the rule, device, dtypes, every data pointer and element count; ``None``
    where one is not a plain contiguous tensor of its list's first dtype on ``device`` (one
    C pass where the metadata reader is built)."""
    fixed = [t if type(t) is list else list(t) for t in fixed]
    dtypes = tuple(t[0].dtype for t in fixed)
    binding = _binding()
    found = binding.plain_on(fixed, dtypes, device)
    if found is not None:
        at, counts = found
    elif binding.reads_in_c() or not all(map(is_plain, fixed)):
        return None
    else:
        at = _pointers(fixed)
        if at is None:
            return None
        counts = np.fromiter((x.numel() for tensors in fixed for x in tensors), np.int64)
    return ("update", rule, device, half, dtypes, at.tobytes(), counts.tobytes())


def _layout(rule: str, lists: Sequence[Sequence[torch.Tensor]],
            every: list[Sequence[torch.Tensor]], scalar: frozenset[int],
            list_dtypes: dict[int, torch.dtype]) -> Any:
    """The layout of a dense call (variables, gradients, slots, half copies), its gradients'
    addresses on the device this step; ``None`` where the caller takes its safe path. The
    boundary (``checked``) runs in full for a new layout or tensors that are not as the
    layout's were; otherwise only the gradients are checked (one C pass each for the
    gradients and for the rest, where the metadata reader is built)."""
    tables = _tables()
    variables, grads = every[0], every[1]
    device = variables[0].device
    fixed = [variables, *every[2:]]
    half = len(every) > len(lists)
    # the table lists what the kernels take: the half copies last, the variables standing in
    listed = every if half else [*every, variables]
    key = _update_key(rule, fixed, device, half)
    layout = grads_at = None
    if key is not None:
        layout = tables.layouts().get(key)
        if layout is not None:
            grads_at = _gradients_at(layout, grads, variables[0].dtype)
    if grads_at is None:
        if not checked(every, dtype=variables[0].dtype, list_dtypes=list_dtypes,
                       scalar_lists=scalar, rule=rule):
            return None
        key = key or _update_key(rule, fixed, device, half)
        grads_at = _pointers([grads])
    layout = tables.cached(key, lambda: tables.Layout(
        listed, device, moving=1, scalar_lists=scalar,
        written=[k for k in range(len(every)) if k != 1]))
    return layout if layout.refresh(grads, grads_at) else None


@torch._disable_dynamo  # under torch.compile: a graph break, the launches run eagerly
def run(rule: str, lists: Sequence[Sequence[torch.Tensor]], hyper: Sequence[Any], *,
        multiplier: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
        half: Sequence[torch.Tensor] | None = None,
        squares: torch.Tensor | None = None) -> bool:
    """Run ``rule`` over the tensor lists (variables, gradients, slots..., as the native rule
    lists them); ``hyper``: its hyperparameters (Python numbers or 0-dim tensors, see the
    optimizer's ``_triton_rule``). Returns False (nothing done) where the caller must take its
    safe path: dtype or device not supported, no Triton, a subclass or non-contiguous tensor.

    ``multiplier`` scales every gradient inside the update (the gradients are not written); a
    nonzero ``found_inf`` leaves everything as it is. Both are 0-dim tensors or ``None``, read
    on the device. ``half``: float16/bfloat16 copies of the (float32 master) variables, one
    per variable, written in the same pass (clamped to the half type's range, rounded to
    nearest even), or ``None``. The gradients are the variables' dtype, or all float16 or all
    bfloat16 for float32 variables (a mixed-precision master's model gradient, read as it is
    and widened to float32 exactly in registers: no float32 copy is made). ``squares``: for a
    rule of ``WHOLE_NORM_RULES`` over the local shards of sharded tensors, per tensor the
    float64 sum of the squares of the whole gradient (times ``multiplier``), read instead of
    the local gradient's (``square_sums``, summed over the ranks), or ``None``."""
    variables = lists[0]
    if not variables:
        return True
    family = _FAMILIES.get(rule) if rule in DENSE_RULES else None
    dtype, device = variables[0].dtype, variables[0].device
    if squares is not None and (
            rule not in WHOLE_NORM_RULES or squares.dtype != torch.float64
            or squares.shape != (len(variables),) or squares.device != device):
        raise ValueError(f"trainop's triton {rule} call: squares must be a float64 tensor of "
                         f"shape ({len(variables)},) on {device} for a rule of "
                         f"{sorted(WHOLE_NORM_RULES)}, got {squares.dtype} "
                         f"{tuple(squares.shape)} on {squares.device}")
    if family is None or not supports(dtype, device):
        return False
    scalar = _SCALAR_F32.get(rule, frozenset())
    list_dtypes = dict.fromkeys(scalar, torch.float32)
    if lists[1] and lists[1][0].dtype in HALF_DTYPES:  # a master's model gradient, as it is
        list_dtypes[1] = lists[1][0].dtype
    every = list(lists)
    if half is not None:
        half = list(half)
        if half[0].dtype not in HALF_DTYPES:
            return False
        list_dtypes[len(every)] = half[0].dtype
        every.append(half)
    layout = _layout(rule, lists, every, scalar, list_dtypes)
    if layout is None:
        return False
    extra = {} if squares is None else {"squares": squares}
    with _family(family) as module:
        module.RULES[rule](lists, list(hyper), _on(multiplier, device),
                           _on(found_inf, device), layout, half=half, **extra)
    return True


@torch._disable_dynamo
def sparse_rows(rule: str, var: torch.Tensor, slots: Sequence[torch.Tensor],
                indices: torch.Tensor, values: torch.Tensor, hyper: Sequence[Any], *,
                found_inf: torch.Tensor | None = None) -> bool:
    """A sparse gradient's update: ``indices`` its distinct rows (int64, in range) of
    ``var``, ``values`` (``[len(indices), *var.shape[1:]]``) their gradient, ``slots`` the
    rule's slot tensors; a nonzero ``found_inf`` (0-dim, read on the device) leaves
    everything as it is. By the kind of ``rule``:

    - ``ROW_RULES``: the rule on those rows of ``var`` and its slots only, one launch over
      the rows' elements;
    - ``EVERY_ROW_RULES``: TF's sparse Adam/Nadam, one launch over every element of the
      table, each row's gradient found through a row map (int64 per row, its place in
      ``indices`` or -1, written on the device by a launch over ``indices``);
    - ``DENSIFIED_RULES``: the gradient densified on the device
      (``zeros_like(var).index_add_``), then the dense rule (``run``).

    False (nothing done) where the caller must take its reference path (another rule, dtype
    or device not supported, a subclass, a non-contiguous tensor, indices or values of
    another dtype or shape, a table sharing read memory)."""
    if rule not in SPARSE_RULES or not supports(var.dtype, var.device) or var.dim() == 0:
        return False
    tables = [var, *slots]
    device = var.device
    if not (is_plain([*tables, indices, values]) and all(
            t.layout == torch.strided and t.device == device and t.is_contiguous()
            for t in (*tables, indices, values))):
        return False
    if (indices.dtype != torch.int64 or indices.dim() != 1 or values.dtype != var.dtype
            or values.shape != (indices.numel(), *var.shape[1:])):
        return False
    if rule in DENSIFIED_RULES:
        dense = torch.zeros_like(var).index_add_(0, indices, values)
        return run(rule, [[var], [dense], *[[s] for s in slots]], hyper, found_inf=found_inf)
    if any(t.dtype != var.dtype or t.shape != var.shape for t in slots):
        return False
    lists = [[var], [values], *[[s] for s in slots]]
    if not _apart(lists, frozenset({1}), rule):
        return False
    tables = _tables()
    key = ("rows", rule, device, tuple(map(_PTR, [var, *slots])))
    holder = tables.cached(key, lambda: _RowsLayout(tables.Scalars(device)))
    with _family(_FAMILIES[rule]) as module:
        module.RULES[rule](lists, list(hyper), None, _on(found_inf, device), holder,
                           rows=indices)
    return True


class _RowsLayout:
    """What a sparse update keeps per table: its hyperparameters' device tensor."""

    __slots__ = ("scalars",)

    def __init__(self, scalars: Any) -> None:
        self.scalars = scalars

    @property
    def pinned(self) -> bool:
        return self.scalars.pinned


def l2_norms(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """Per tensor (float32, or a float16/bfloat16 gradient read as it is) its L2 norm, squares
    summed in float64, as a 1-D float32 tensor on their device, from one read pass over the
    whole list (``norms.l2_norms``); ``None`` where the Triton kernels cannot read them (mixed
    dtypes or devices, a subclass, a device Triton does not run)."""
    if not tensors:
        return None
    first = tensors[0]
    if not (first.dtype in (*DTYPES, *HALF_DTYPES) and supports(torch.float32, first.device)):
        return None
    found = _plain_list(tensors)
    if found is None:
        if not _alike(tensors):
            return None
        if not all(map(_CONTIGUOUS, tensors)):
            tensors = [t.contiguous() for t in tensors]
    with _family("norms") as module:
        return module.l2_norms(tensors, found)


def _plain_list(tensors: Sequence[torch.Tensor]) -> tuple | None:
    """The data pointers and element counts of ``tensors`` where each is an exact, strided,
    contiguous tensor of the first's dtype and device (one C pass), else ``None``."""
    first = tensors[0]
    return _binding().plain_on([tensors if type(tensors) is list else list(tensors)],
                               (first.dtype,), first.device)


def _alike(tensors: Sequence[torch.Tensor]) -> bool:
    """Exact tensors, strided, of the first's dtype and device (C-level passes)."""
    first = tensors[0]
    return (is_plain(tensors) and set(map(_DTYPE, tensors)) == {first.dtype}
            and set(map(_DEVICE, tensors)) == {first.device}
            and set(map(_LAYOUT, tensors)) == {torch.strided})


def square_sums(tensors: Sequence[torch.Tensor],
                multiplier: torch.Tensor | None = None) -> torch.Tensor | None:
    """Per tensor the float64 sum of the squares of ``float32(t * multiplier)``, as the
    rules of ``WHOLE_NORM_RULES`` sum them (``norms.square_sums``: the blocks' partial sums,
    then their sums added on the device), a 1-D float64 tensor on their device; ``None`` where
    the Triton kernels cannot read them (another dtype or device, a subclass, a non-contiguous
    tensor).
    The local part of a sharded tensor's squared norm, before the ranks add theirs."""
    if not tensors:
        return None
    first = tensors[0]
    if not supports(first.dtype, first.device):
        return None
    found = _plain_list(tensors)
    if found is None and not (_alike(tensors) and all(map(_CONTIGUOUS, tensors))):
        return None
    with _family("norms") as module:
        return module.square_sums(tensors, _on(multiplier, first.device), found)
