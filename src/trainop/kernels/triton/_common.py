"""What every Triton update kernel shares (imported only once Triton is importable).

Only Triton's builtins are used (no function of ``triton.language.standard``, such as
``tl.zeros`` or ``tl.sum``): those are decorated when Triton is imported, so under the
interpreter they would need ``TRITON_INTERPRET=1`` before that import; these kernels only
need it before their own family is first used.

Each elementwise kernel runs one block of ``BLOCK`` elements per program and reads:

- ``h``: the rule's hyperparameters as one float32 device tensor (``tables.Scalars``),
  so values that change per step (learning rate, beta powers, step counters) are read on the
  device and no step reads a value on the host;
- ``mult``: the gate's gradient multiplier (loss-scale inverse times the clip coefficient), a
  0-dim device tensor, when ``HAS_MULT``; the gradient is ``float32(g * mult)`` as in the C
  kernels (multiplying by 1 is exact, so no multiplier is the same as 1);
- ``inf``: the gate's skip flag (``found_inf``), when ``HAS_INF``: nonzero masks every store,
  so a skipped step writes nothing.

A kernel covers one tensor of each list (its pointer arguments, ``n`` elements: a single
tensor, a flat buffer) or, with ``TABLE``, any number of tensors of any sizes in one launch
(``tables.Layout``): then ``n`` is the tensor count ``T``, ``idx`` the table's addresses (list
``k``'s tensor ``t`` at ``idx[k * T + t]``) and ``width`` the block records this launch takes
(tensor, first element, end element, partial index), and the pointer arguments only give each
list's dtype. ``ALIGNED`` (a launch over blocks whose addresses the host found 16-byte aligned
and whose ends are multiples of 16 elements) tells the compiler so: 128-bit accesses.

Every list of a launch is accessed ``VECTOR`` (4) elements per thread, the float32 lists'
128-bit width (a ``tl.max_contiguous`` hint on the block's offsets, set where they are
computed: on a helper's argument it would be lost). The compiler gives each memory access the
layout of its widest vector, so without it a 2-byte list (a float16/bfloat16 gradient or model
copy, 8 elements in 128 bits) put the loads in a layout of 8 per thread while the float32
stores stayed at 4, and every stored value went through shared memory to change layout (4 KB
per block). At 4 per thread the 2-byte values are converted in registers and read and written
64 bits at a time, in the layout of the float32 lists: no shuffle.
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted

__all__ = ["VECTOR", "gathered", "gradient", "hyper", "live", "place", "prologue",
           "put", "rows", "sign", "tensor", "total"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()
#: Elements per thread of every access (float32's 128 bits; see the module doc).
VECTOR = tl.constexpr(4)


@triton.jit
def live(n, inf, HAS_INF: tl.constexpr, BLOCK: tl.constexpr):
    """This program's element offsets and the mask of those it updates (inside the tensor,
    and the step not skipped)."""
    offs = tl.max_contiguous(tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK),
                            VECTOR)  # (on the op itself: see the module doc)
    mask = offs < n
    if HAS_INF:
        flag = tl.full((BLOCK,), 0.0, tl.float32) + tl.load(inf).to(tl.float32)  # as a block
        mask = mask & (flag == 0.0)
    return offs, mask


@triton.jit
def place(n, inf, width, HAS_INF: tl.constexpr, BLOCK: tl.constexpr, TABLE: tl.constexpr,
          ALIGNED: tl.constexpr):
    """This program's element offsets in its tensor, the mask of those it updates, and the
    tensor's index (0 without ``TABLE``: the one tensor of the pointer arguments)."""
    if TABLE:
        b = tl.program_id(0).to(tl.int64) * 4
        t = tl.load(width + b)
        start = tl.load(width + b + 1)
        stop = tl.load(width + b + 2)
        if ALIGNED:
            start = tl.multiple_of(start, 16)
            stop = tl.multiple_of(stop, 16)
        offs = tl.max_contiguous(start + tl.arange(0, BLOCK), VECTOR)
        mask = offs < stop
        if HAS_INF:
            flag = tl.full((BLOCK,), 0.0, tl.float32) + tl.load(inf).to(tl.float32)
            mask = mask & (flag == 0.0)
    else:
        t = tl.program_id(0).to(tl.int64) * 0
        offs, mask = live(n, inf, HAS_INF, BLOCK)
    return offs, mask, t


@triton.jit
def tensor(ptr, k: tl.constexpr, t, idx, n, TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    """List ``k``'s tensor ``t``: with ``TABLE`` its address from the table (typed as
    ``ptr``), else ``ptr`` itself."""
    if TABLE:
        found = tl.load(idx + k * n + t).to(tl.pointer_type(ptr.dtype.element_ty))
        if ALIGNED:  # (on the pointer: a hint on the integer does not survive the cast)
            found = tl.multiple_of(found, 16)
        return found
    else:
        return ptr


@triton.jit
def rows(offs, mask, idx, width, ROWS: tl.constexpr):
    """Where element ``offs`` of the update lies in the variable and slots: the same offset
    for a dense update; with ``ROWS`` (a sparse gradient's distinct rows, ``idx`` their int64
    indices, ``width`` the elements per row) element ``offs % width`` of row
    ``idx[offs // width]`` (the gradient is the rows' values, read at ``offs``)."""
    if ROWS:
        row = tl.load(idx + offs // width, mask=mask, other=0)
        return row * width + offs % width
    return offs


@triton.jit
def prologue(grad, mult, n, inf, idx, width, HAS_MULT: tl.constexpr, HAS_INF: tl.constexpr,
             BLOCK: tl.constexpr, ROWS: tl.constexpr, TABLE: tl.constexpr,
             ALIGNED: tl.constexpr):
    """What an elementwise update kernel starts with: the mask of the elements this program
    updates (``place``), where they lie in the variable and slots (``rows``), their gradient
    (list 1) times the multiplier in float32 (``gradient``) and the tensor's index (for
    ``tensor``), as ``(mask, at, g, t)``."""
    offs, mask, t = place(n, inf, width, HAS_INF, BLOCK, TABLE, ALIGNED)
    grad = tensor(grad, 1, t, idx, n, TABLE, ALIGNED)
    return (mask, rows(offs, mask, idx, width, ROWS), gradient(grad, offs, mask, mult, HAS_MULT),
            t)


@triton.jit
def gathered(grad, offs, mask, where, width):
    """An every-row kernel's gradient (TF's sparse Adam: one launch over the whole table):
    element ``offs`` lies in row ``offs // width``, whose place among the gradient's rows is
    ``where[row]`` (int64, -1 for a row the gradient does not touch). Returns the gradient
    (0 where untouched) and the mask of the touched elements."""
    row = offs // width
    place = tl.load(where + row, mask=mask, other=-1)
    touched = mask & (place >= 0)
    g = tl.load(grad + place * width + offs % width, mask=touched, other=0.0).to(tl.float32)
    return g, touched


@triton.jit
def _saturate(x, top):
    """clamp(x, -top, top), NaN kept (as torch's clamp)."""
    return tl.where(x > top, top, tl.where(x < -top, -top, x))


@triton.jit
def put(var, half, at, x, mask, HALF: tl.constexpr):
    """Store the new variable ``x``; with ``HALF`` also its float16/bfloat16 model copy, the
    mixed-precision wrapper's saturating cast (clamp to the half type's largest finite value,
    round to nearest even), in the same pass."""
    tl.store(var + at, x, mask=mask)
    if HALF:
        if half.dtype.element_ty == tl.bfloat16:
            c = _saturate(x, 3.3895313892515355e38)
            # round to nearest even by hand (the interpreter's cast truncates); the cast of
            # the rounded value is then exact on every backend
            bits = c.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            c = tl.where(c != c, c, bits.to(tl.float32, bitcast=True))
        else:
            c = _saturate(x, 65504.0)
        tl.store(half + at, c.to(half.dtype.element_ty), mask=mask)


@triton.jit
def gradient(grad, offs, mask, mult, HAS_MULT: tl.constexpr):
    """The gradient of the masked elements, times the multiplier, in float32."""
    g = tl.load(grad + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_MULT:
        g = g * tl.load(mult).to(tl.float32)
    return g


@triton.jit
def hyper(h, k: tl.constexpr):
    """Hyperparameter ``k`` of the rule (float32, read on the device)."""
    return tl.load(h + k)


@triton.jit
def sign(x):
    """torch.sign: 0 for zero and NaN."""
    one = tl.full(x.shape, 1.0, tl.float32)
    zero = tl.full(x.shape, 0.0, tl.float32)
    return tl.where(x > 0, one, zero) - tl.where(x < 0, one, zero)


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def total(x):
    """The sum of a block (``tl.reduce`` with our own combine function)."""
    return tl.reduce(x, 0, _add)
