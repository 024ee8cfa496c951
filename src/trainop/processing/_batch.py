"""``Gradients``: the batch of ``(gradient, variable)`` pairs that flows between processors.

Besides the pairs, a batch carries what the processors fold instead of rewriting every gradient:

- ``multiplier``: a pending 0-dim float32 factor for every gradient (loss-scale inverse times the
  global clip coefficient); the optimizer applies it inside its update pass;
- ``factors``: pending per-tensor float32 factors (per-tensor clipping, LARC), one per present
  gradient, applied when the pairs are handed to the optimizer;
- ``found_inf`` and ``skip_reason``: the skip flag (0-dim float32, nonzero skips the whole
  update) and why (a 0-dim int64 bit mask, see ``trainop.processing.SKIP_REASONS``);
- ``keep``: per present gradient, whether its variable is updated (the all-zero filter);
- the per-tensor norms of the raw gradients, measured once (``float32_l2_norms``) and reused
  by the finite check, the global norm, LARC and the report; the *effective* norms are the raw
  ones times ``|multiplier| * |factors|``, so folding a factor never needs another read;
- gradients stored narrow (``widen_on_use``): a mixed-precision master's float16/bfloat16 model
  gradient standing for its float32 widening. Whatever reads the gradients as tensors
  (``raw_pairs``, ``present_grads``, the pairs seen as a sequence, a stage that rewrites them,
  per-tensor factors) gets the float32 widening, made once and kept; the norms on the Triton
  path (``read_norms_from``), ``max |g|`` and an update handed the pairs with
  ``widen_gradients=True`` (the pipeline's, ``pairs_for_apply``) read the half tensor itself, so
  on the Triton path no float32 gradient is ever made.

Seen as a sequence, a batch is TF's list of pairs with every pending factor applied (computed on
first access, without changing the batch), so code written for TF lists keeps working.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import torch

from trainop.contract.arguments import WIDENED_DTYPES
from trainop.contract.validation import Interval, check_int, check_real, describe
from trainop.kernels.boundary import PLAIN, PLAIN_TYPES
from trainop.kernels.native import metadata
from trainop.kernels.norms import float32_l2_norms, read_pass_norms
from trainop.processing._sharded import sharded, whole_tensor_statistic, whole_tensor_statistics

__all__ = ["Gradients"]

_F32 = torch.float32
_GRAD, _LAYOUT, _SHAPE = attrgetter("grad"), attrgetter("layout"), attrgetter("shape")
#: Parameter count -> the last record (``metadata``'s ``record``) of so many parameters and
#: whether they are all float32 on one device.
_RECORDS: dict[int, tuple[np.ndarray, bool]] = {}


def _read_gradients(reader: Any, params: list[torch.Tensor]) -> list[torch.Tensor] | None:
    """The parameters' gradients where every one is present, dense and of its parameter's
    dtype, shape and device, and the parameters all float32 on one device; else ``None``.
    One C pass (``reader.gradients``) that also checks the parameters against a record of
    what they are (dtype, device, shape): the last record made for as many parameters is
    tried first, and a new one made only where it does not hold (a record that is not theirs
    is refused by the pass itself, so reusing one can never accept a wrong gradient)."""
    reads = np.empty(3 * len(params), dtype=np.int64)
    last = _RECORDS.get(len(params))
    if last is not None and last[1]:
        found = reader.gradients(params, last[0].ctypes.data, len(last[0]), PLAIN_TYPES,
                                 reads.ctypes.data)
        if found:
            return found[0]
    record = np.asarray(reader.record(params), dtype=np.int64)
    if last is not None and np.array_equal(record, last[0]):
        return None  # the same parameters: a gradient is what differs
    uniform = (bool(params) and set(map(_DTYPE, params)) == {_F32}
               and len(set(map(_DEVICE, params))) == 1)
    if len(_RECORDS) >= 16:
        _RECORDS.clear()  # (records of parameters' kinds: nothing else holds them)
    _RECORDS[len(params)] = record, uniform
    found = uniform and reader.gradients(params, record.ctypes.data, len(record), PLAIN_TYPES,
                                         reads.ctypes.data)
    return found[0] if found else None
_DTYPE, _DEVICE = attrgetter("dtype"), attrgetter("device")


def _as_pairs(grads_and_vars: Any) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
    if isinstance(grads_and_vars, str | bytes) or not isinstance(grads_and_vars, Iterable):
        raise TypeError("Expected `grads_and_vars` to be an iterable of (gradient, variable) "
                        f"pairs, got {describe(grads_and_vars)}")
    out = []
    for i, pair in enumerate(grads_and_vars):
        try:
            if isinstance(pair, torch.Tensor):
                raise TypeError
            g, v = pair
        except (TypeError, ValueError):
            raise TypeError(f"Expected grads_and_vars[{i}] to be a (gradient, variable) pair, "
                            f"got {describe(pair)}") from None
        if not isinstance(v, torch.Tensor) or v.layout != torch.strided:
            raise TypeError(f"Expected the variable of grads_and_vars[{i}] to be a dense "
                            f"torch.Tensor, got {describe(v)}")
        if g is not None:
            if not isinstance(g, torch.Tensor) or g.layout not in (torch.strided,
                                                                    torch.sparse_coo):
                raise TypeError(f"Expected the gradient of grads_and_vars[{i}] to be None, a "
                                f"dense or a sparse COO tensor, got {describe(g)}")
            if tuple(g.shape) != tuple(v.shape):
                raise ValueError(f"Expected the gradient of grads_and_vars[{i}] to have the "
                                 f"variable's shape {tuple(v.shape)}, got {tuple(g.shape)}")
        out.append((g, v))
    return out


def values_of(g: torch.Tensor) -> torch.Tensor:
    """The values a norm is taken over: a dense tensor itself, a sparse one's stored values
    (duplicates counted separately, as TF counts an ``IndexedSlices``)."""
    return g._values() if g.is_sparse else g


def float32_norms(tensors: list[torch.Tensor], device: torch.device, *,
                  implementation: str | None = None, owner: Any = None) -> torch.Tensor:
    """L2 norms of ``tensors`` as a 1-D float32 tensor on ``device``, one read pass.

    float16/bfloat16/float32 tensors are reduced with float32 accumulation, float64 in float64;
    with ``implementation="triton"`` float32, float16 and bfloat16 ones by the Triton read pass
    where it runs them (squares summed in float64, ``read_pass_norms``; ``owner``: the
    optimizer whose Triton entry keeps the read pass's layout).
    """
    if not tensors:
        return torch.zeros(0, dtype=_F32, device=device)
    if sharded(tensors):  # DTensors: the whole tensors' norms, one all_reduce
        return whole_tensor_statistic(
            tensors, _local_squares(implementation, owner), op="sum").sqrt().to(device)
    first = tensors[0]
    if first.dtype == _F32 and all(t.dtype == _F32 and t.device == device for t in tensors):
        return float32_l2_norms(tensors, implementation=implementation, owner=owner)
    out: list[torch.Tensor | None] = [None] * len(tensors)
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.dtype, t.device), []).append(i)
    for (dtype, _), idx in groups.items():
        group = [tensors[i] for i in idx]
        found = (read_pass_norms(group, implementation, owner) if dtype != torch.float64
                 else None)
        if found is not None:
            norms = found.unbind()
        elif dtype == _F32:
            norms = float32_l2_norms(group).unbind()
        else:
            kwargs = {} if dtype == torch.float64 else {"dtype": _F32}
            norms = torch._foreach_norm(group, 2, **kwargs)
        for i, n in zip(idx, norms, strict=True):
            out[i] = n
    return torch.stack([n.to(device=device, dtype=_F32) for n in out])


def _local_squares(implementation: str | None, owner: Any = None
                   ) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    """The squared norms of a rank's local shards (``float32_norms``, by the Triton read pass
    where ``implementation`` is ``"triton"``): the additive part of whole-tensor norms."""
    return lambda local: float32_norms(local, local[0].device,
                                       implementation=implementation, owner=owner).square()


def amax_of(g: torch.Tensor) -> torch.Tensor:
    """``max |g|`` (NaN if any element is NaN), over a sparse gradient's coalesced rows."""
    values = g.coalesce().values() if g.is_sparse else g
    if values.numel() == 0:
        return torch.zeros((), dtype=_F32, device=values.device)
    low, high = torch.aminmax(values)
    return torch.maximum(low.abs(), high.abs()).to(_F32)


class Gradients(Sequence):
    """A TF list of ``(gradient or None, variable)`` pairs plus the pending values of a step.

    Args:
        grads_and_vars: iterable of pairs; a gradient is ``None``, a dense tensor or a sparse COO
            tensor with the variable's shape.
        loss_scale: ``None``, or the loss scale the gradients still carry (a 0-dim tensor);
            ``fold_loss_scale`` turns it into the pending multiplier ``1/loss_scale``.

    Example:
        >>> import torch
        >>> from trainop.processing import Gradients
        >>> w = torch.zeros(2)
        >>> batch = Gradients([(torch.tensor([3.0, 4.0]), w)])
        >>> batch.scale(torch.tensor(0.5))
        >>> batch.global_norm()
        tensor(2.5000)
        >>> batch[0][0]
        tensor([1.5000, 2.0000])
    """

    def __init__(self, grads_and_vars: Any, *, loss_scale: torch.Tensor | None = None) -> None:
        self._init(_as_pairs(grads_and_vars), loss_scale)

    def _init(self, pairs: list[tuple[torch.Tensor | None, torch.Tensor]],
              loss_scale: torch.Tensor | None) -> None:
        grads = [g for g, _ in pairs]
        self._init_lists(grads, [v for _, v in pairs], loss_scale,
                         present=[i for i, g in enumerate(grads) if g is not None])

    def _init_lists(self, grads: list[torch.Tensor | None], variables: list[torch.Tensor],
                    loss_scale: torch.Tensor | None, *, present: list[int] | None = None
                    ) -> None:
        """The batch of ``grads`` paired with ``variables`` (``present``: the positions of
        the gradients that are not ``None``; default: every one)."""
        self._grads: list[torch.Tensor | None] = grads
        self._vars: list[torch.Tensor] = variables
        self._present = list(range(len(grads))) if present is None else present
        if self._present:
            self.device = self._grads[self._present[0]].device
        else:
            self.device = self._vars[0].device if self._vars else torch.device("cpu")
        self.multiplier: torch.Tensor | None = None
        self.factors: torch.Tensor | None = None
        self.found_inf: torch.Tensor | None = None
        self.skip_reason: torch.Tensor | None = None
        self.keep: torch.Tensor | None = None
        self.pending_loss_scale = loss_scale
        self.stats: dict[str, torch.Tensor] = {}
        #: The optimizer the batch is applied with (LARC reads its learning rate), if any.
        self.optimizer: Any = None
        #: Whether the present gradients are still the tensors the batch was built from.
        self.original = True
        self._l2: torch.Tensor | None = None
        self._norm_sources: list[torch.Tensor] | None = None
        self._amax: torch.Tensor | None = None
        self._var_l2: tuple[list[int], torch.Tensor] | None = None
        self._view: list[tuple[torch.Tensor | None, torch.Tensor]] | None = None
        self._derived: dict[str, torch.Tensor] = {}
        #: Known: every pair has a dense float32 gradient on ``device`` (the fast norm path).
        self._uniform = False
        #: Pairs whose gradient is stored narrow (``widen_on_use``), not widened yet.
        self._narrow: set[int] = set()

    @classmethod
    def from_grads(cls, params: list[torch.Tensor], *,
                   loss_scale: torch.Tensor | None = None) -> Gradients:
        """The ``(p.grad, p)`` pairs of ``params`` (already-validated parameters), checking
        each gradient's layout, shape, dtype and device: where every gradient is a dense
        float32 tensor of its parameter's shape on one device, a few C-level passes (no Python
        loop body per tensor), else one cheap loop."""
        # (under torch.compile the C passes never see fake tensors: the plain loop below)
        batch = None if torch.compiler.is_compiling() else cls._uniform_grads(params, loss_scale)
        if batch is not None:
            return batch
        strided, sparse = torch.strided, torch.sparse_coo
        grads = []
        uniform = True  # every gradient present, dense float32, on one device
        device = None
        for i, p in enumerate(params):
            g = p.grad
            grads.append(g)
            if g is None:
                uniform = False
                continue
            layout = g.layout
            if ((layout is not strided and layout is not sparse) or g.shape != p.shape
                    or g.dtype != p.dtype or g.device != p.device):
                raise TypeError(f"Expected params[{i}].grad to be a dense or sparse COO tensor "
                                f"of the parameter's shape {tuple(p.shape)}, dtype {p.dtype} "
                                f"and device {p.device}, got {describe(g)}")
            if device is None:
                device = g.device
            if uniform and (layout is not strided or g.dtype != _F32 or g.device != device):
                uniform = False
        batch = cls.__new__(cls)
        batch._init(list(zip(grads, params, strict=True)), loss_scale)
        batch._uniform = uniform and bool(grads)
        return batch

    @classmethod
    def _uniform_grads(cls, params: list[torch.Tensor],
                       loss_scale: torch.Tensor | None) -> Gradients | None:
        """``from_grads`` where every gradient is present, dense, of its parameter's dtype,
        shape and device, and the parameters all float32 on one device; else ``None``. With
        the native metadata reader, one C pass over the parameters and gradients and a lookup
        of the parameters' record (what they are: dtype, device, shape); else C-level
        ``map`` passes."""
        reader = metadata.load()
        if reader is not None and PLAIN.issuperset(map(type, params)):
            grads = _read_gradients(reader, params)
            if grads is None:
                return None
        else:
            try:
                grads = list(map(_GRAD, params))
                layouts = set(map(_LAYOUT, grads))
            except AttributeError:  # a missing gradient
                return None
            if not grads or layouts != {torch.strided} or set(map(_DTYPE, grads)) != {_F32}:
                return None
            devices = set(map(_DEVICE, grads))
            if (len(devices) != 1 or set(map(_DEVICE, params)) != devices
                    or set(map(_DTYPE, params)) != {_F32}
                    or list(map(_SHAPE, grads)) != list(map(_SHAPE, params))):
                return None
        batch = cls.__new__(cls)
        batch._init_lists(grads, list(params), loss_scale)
        batch._uniform = True
        return batch

    @classmethod
    def of(cls, grads_and_vars: Any) -> Gradients:
        """``grads_and_vars`` itself if it is a batch, else a new batch of its pairs."""
        return grads_and_vars if isinstance(grads_and_vars, Gradients) else cls(grads_and_vars)

    # ------------------------------------------------------------------ the pairs
    def __len__(self) -> int:
        return len(self._vars)

    def __getitem__(self, index):
        if self._view is None:
            self._view = self._effective_pairs()
        return self._view[index]

    def __repr__(self) -> str:
        pending = []
        if self.multiplier is not None:
            pending.append("multiplier")
        if self.factors is not None:
            pending.append("factors")
        if self.found_inf is not None:
            pending.append("skip flag")
        return (f"Gradients({len(self._present)} of {len(self)} pairs with a gradient"
                + (f"; pending: {', '.join(pending)})" if pending else ")"))

    def raw_pairs(self) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        """The pairs as stored, pending factors NOT applied (gradients stored narrow widened
        to float32, ``widen_on_use``)."""
        self._widen()
        return self.stored_pairs()

    def stored_pairs(self) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        """The pairs exactly as stored: a gradient stored narrow is its float16/bfloat16
        tensor (validate them with ``widen=narrowed``)."""
        return list(zip(self._grads, self._vars, strict=True))

    @property
    def present(self) -> list[int]:
        """Indices of the pairs that have a gradient."""
        return list(self._present)

    @property
    def narrowed(self) -> bool:
        """Whether some gradient is still stored narrow (``widen_on_use``)."""
        return bool(self._narrow)

    def present_grads(self) -> list[torch.Tensor]:
        """The present gradients (one stored narrow widened to float32, once)."""
        self._widen()
        return [self._grads[i] for i in self._present]

    def widen_on_use(self, indices: Iterable[int]) -> None:
        """Pairs ``indices`` hold a dense float16/bfloat16 gradient of a float32 variable that
        stands for its float32 widening (exact): it is made on first use and kept (see the
        module doc), never on the Triton update path.

        Args:
            indices: pair indices in ``[0, len(batch) - 1]``; each pair must have a dense
                float16/bfloat16 gradient and a float32 variable (all are checked before any
                is marked).

        Example:
            >>> import torch
            >>> from trainop.processing import Gradients
            >>> g16 = torch.tensor([0.5, -1.5], dtype=torch.float16)
            >>> batch = Gradients([(g16, torch.zeros(2))])
            >>> batch.widen_on_use([0])
            >>> batch.narrowed, batch.stored_pairs()[0][0].dtype
            (True, torch.float16)
            >>> batch.present_grads()[0], batch.narrowed
            (tensor([ 0.5000, -1.5000]), False)
        """
        indices = [check_int(f"indices[{k}]", i, Interval(0, len(self._grads) - 1))
                   for k, i in enumerate(indices)]
        for k, i in enumerate(indices):  # all checked before any is marked
            g, v = self._grads[i], self._vars[i]
            if (g is None or g.layout != torch.strided or g.dtype not in WIDENED_DTYPES
                    or v.dtype != _F32):
                got = "no gradient" if g is None else \
                    f"a {'dense' if g.layout == torch.strided else 'sparse'} {g.dtype} gradient"
                raise ValueError(f"Expected `indices[{k}]` ({i}) to name a pair with a dense "
                                 f"float16/bfloat16 gradient of a float32 variable, got {got} "
                                 f"of a {v.dtype} variable")
        self._narrow.update(indices)

    def _widen(self) -> None:
        """Widen every gradient still stored narrow to float32 (same numbers: the caches
        stay)."""
        for i in self._narrow:
            self._grads[i] = self._grads[i].to(_F32)
        self._narrow.clear()

    def present_vars(self) -> list[torch.Tensor]:
        return [self._vars[i] for i in self._present]

    def _effective_pairs(self) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        self._widen()
        scales = self._scales()
        if scales is None:
            return self.raw_pairs()
        grads = list(self._grads)
        for k, i in enumerate(self._present):
            grads[i] = _times(grads[i], scales[k])
        return list(zip(grads, self._vars, strict=True))

    def _scales(self) -> torch.Tensor | None:
        """Per present gradient, the pending factor (``None`` if nothing is pending)."""
        if self.multiplier is None and self.factors is None:
            return None
        scales = torch.ones(len(self._present), dtype=_F32, device=self.device)
        if self.multiplier is not None:
            scales = scales * self.multiplier
        if self.factors is not None:
            scales = scales * self.factors
        return scales

    def _changed(self) -> None:
        """Forget what was derived from the gradients and the pending factors."""
        self._view = None
        self._derived = {}

    # ------------------------------------------------------------------ norms
    def _norm_implementation(self) -> str | None:
        """``"triton"`` where the optimizer was asked for the Triton kernels (then the read
        pass is theirs too, ``float32_l2_norms``), else ``None`` (the default norm paths)."""
        chosen = getattr(self.optimizer, "_implementation", None)
        return chosen if chosen == "triton" else None

    def read_norms_from(self, sources: list[torch.Tensor]) -> None:
        """Tensors holding the same numbers as the present gradients, one each, in another
        dtype (the float16/bfloat16 model gradients of float32 master gradients): the Triton
        read pass measures them instead (fewer bytes, the same norms: each element widens to
        float32 exactly). Ignored on the other paths and once the gradients change (a batch
        whose gradients are stored narrow, ``widen_on_use``, is measured as stored then).

        Args:
            sources: a list of tensors, one per present gradient, in the order of ``present``.

        Example (what ``MixedPrecisionOptimizerWrapper`` does for a master's gradient)::

            batch = Gradients([(g16.float(), master)])
            batch.read_norms_from([g16])  # the Triton read pass measures g16
        """
        if not isinstance(sources, list | tuple) or not all(
                isinstance(t, torch.Tensor) for t in sources):
            raise TypeError(f"Expected `sources` to be a list of tensors, got "
                            f"{describe(sources)}")
        if len(sources) != len(self._present):
            raise ValueError(f"Expected `sources` to hold one tensor per present gradient "
                             f"({len(self._present)}), got {len(sources)}")
        self._norm_sources = list(sources)

    def _raw_l2(self) -> torch.Tensor:
        if self._l2 is None:
            implementation = self._norm_implementation()
            sources = self._norm_sources if self.original else None
            if sources is None and self._narrow:  # as stored: a narrow one widens exactly
                sources = [self._grads[i] for i in self._present]
            if implementation is not None and sources is not None and not sharded(sources):
                self._l2 = float32_norms([values_of(g) for g in sources], self.device,
                                         implementation=implementation, owner=self.optimizer)
            elif self._uniform and self.original and not sharded(self._grads):
                self._l2 = float32_l2_norms(self._grads, implementation=implementation,
                                            owner=self.optimizer)
            else:
                self._l2 = float32_norms([values_of(g) for g in self.present_grads()],
                                         self.device, implementation=implementation,
                                         owner=self.optimizer)
        return self._l2

    def _raw_amax(self) -> torch.Tensor:
        if self._amax is None:
            # (a gradient stored narrow as it is: its max |g| widens exactly)
            grads = [self._grads[i] for i in self._present]
            if sharded(grads):  # DTensors: the whole tensors' max |g|, one all_reduce
                self._amax = whole_tensor_statistic(
                    grads, lambda local: torch.stack([amax_of(g) for g in local]),
                    op="max").to(self.device)
            else:
                self._amax = (torch.stack([amax_of(g).to(self.device) for g in grads]) if grads
                              else torch.zeros(0, dtype=_F32, device=self.device))
        return self._amax

    def is_sharded(self) -> bool:
        """Whether the gradients are DTensors (FSDP2)."""
        return bool(self._present) and sharded([self._grads[self._present[0]]])

    def variable_norms(self) -> torch.Tensor:
        """Per present gradient, the float32 L2 norm of its variable (LARC), whole tensors
        under FSDP2; measured once per batch."""
        if self._var_l2 is None or self._var_l2[0] != self._present:
            self._var_l2 = (list(self._present),
                            float32_norms(self.present_vars(), self.device))
        return self._var_l2[1]

    def prefetch_sharded(self, *, amax: bool = False, variable_norms: bool = False) -> None:
        """With DTensor gradients (FSDP2): measure the raw gradient norms, and ``max |g|`` and
        the variables' norms where asked, together, in ONE ``all_reduce`` (``GradientPipeline``
        calls it with what its stages need). Nothing happens for plain tensors, or when only the
        gradient norms are missing (they take one ``all_reduce`` on their own)."""
        grads = self.present_grads()
        if not grads or not sharded(grads):
            return
        want_amax = amax and self._amax is None
        want_vars = variable_norms and (self._var_l2 is None
                                        or self._var_l2[0] != self._present)
        variables = self.present_vars()
        want_vars = (want_vars and sharded(variables)  # (else measured on their own)
                     and variables[0].device_mesh == grads[0].device_mesh)
        if not (want_amax or want_vars):
            return
        requests = []
        if self._l2 is None:
            requests.append(("l2", grads, _local_squares(self._norm_implementation(),
                                                         self.optimizer),
                             "sum"))
        if want_amax:
            requests.append(("amax", grads,
                             lambda local: torch.stack([amax_of(g) for g in local]), "max"))
        if want_vars:
            requests.append(("vars", variables, _local_squares(None), "sum"))
        values = whole_tensor_statistics([(t, fn, op) for _, t, fn, op in requests])
        for (key, *_), value in zip(requests, values, strict=True):
            value = value.to(self.device)
            if key == "l2":
                self._l2 = value.sqrt()
            elif key == "amax":
                self._amax = value
            else:
                self._var_l2 = (list(self._present), value.sqrt())
        self._derived = {}

    def _effective(self, raw: torch.Tensor) -> torch.Tensor:
        if self.multiplier is not None:
            raw = raw * self.multiplier.abs()
        if self.factors is not None:
            raw = raw * self.factors.abs()
        return raw

    def _cached(self, key: str, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        value = self._derived.get(key)
        if value is None:
            value = self._derived[key] = compute()
        return value

    def norms(self) -> torch.Tensor:
        """Per present gradient, the float32 L2 norm with every pending factor applied."""
        return self._cached("norms", lambda: self._effective(self._raw_l2()))

    def amax(self) -> torch.Tensor:
        """Per present gradient, ``max |g|`` (float32) with every pending factor applied."""
        return self._cached("amax", lambda: self._effective(self._raw_amax()))

    def global_norm(self) -> torch.Tensor:
        """``sqrt(sum of squared norms)`` of the effective gradients (0-dim float32)."""
        return self._cached("global_norm", lambda: self.norms().square().sum().sqrt())

    def nonfinite(self) -> torch.Tensor:
        """0-dim bool: some effective gradient has a non-finite L2 norm.

        A non-finite element gives a non-finite norm; so does a finite gradient whose float32
        squared norm overflows (elements around 1.8e19 and above), as in TF's clipping.
        """
        return self._cached("nonfinite", lambda: ~torch.isfinite(self.norms()).all())

    # ------------------------------------------------------------------ folding
    def _as_scalar(self, factor: Any) -> torch.Tensor:
        if (isinstance(factor, torch.Tensor) and factor.dtype == _F32
                and factor.device == self.device):
            return factor
        return torch.as_tensor(factor, dtype=_F32).to(self.device)

    def scale(self, factor: Any) -> None:
        """Fold a scalar factor into the pending multiplier (no pass over the gradients)."""
        if not isinstance(factor, torch.Tensor):
            check_real("factor", factor)
        elif factor.dim() != 0 or not factor.is_floating_point():
            raise TypeError(f"Expected `factor` to be a real number or a 0-dim floating-point "
                            f"tensor, got a tensor of shape {tuple(factor.shape)} and dtype "
                            f"{factor.dtype}")
        factor = self._as_scalar(factor)
        self.multiplier = factor if self.multiplier is None else self.multiplier * factor
        self._changed()

    def scale_each(self, factors: torch.Tensor) -> None:
        """Fold one factor per present gradient (1-D float32) into the pending factors."""
        if (not isinstance(factors, torch.Tensor) or factors.dim() != 1
                or len(factors) != len(self._present) or not factors.is_floating_point()):
            raise TypeError(f"Expected `factors` to be a 1-D floating-point tensor with one entry "
                            f"per present gradient ({len(self._present)}), got "
                            f"{describe(factors)}")
        factors = factors.to(device=self.device, dtype=_F32)
        self.factors = factors if self.factors is None else self.factors * factors
        self._changed()

    def skip_if(self, flag: torch.Tensor, reason: int) -> None:
        """Skip the update where the 0-dim bool ``flag`` is true, for ``reason`` (a bit)."""
        if (not isinstance(flag, torch.Tensor) or flag.dim() != 0
                or flag.dtype != torch.bool):
            raise TypeError(f"Expected `flag` to be a 0-dim bool tensor, got {describe(flag)}")
        check_int("reason", reason, Interval(1, float("inf"), high_closed=False))
        flag = flag.to(self.device)
        as_float = flag.to(_F32)
        self.found_inf = as_float if self.found_inf is None else torch.maximum(self.found_inf,
                                                                               as_float)
        bits = torch.where(flag, reason, 0).to(torch.int64)
        self.skip_reason = bits if self.skip_reason is None else self.skip_reason | bits

    def fold_loss_scale(self) -> None:
        """Turn the loss scale the gradients carry into the pending multiplier ``1/S``."""
        scale = self.pending_loss_scale
        if scale is None:
            return
        scale = scale.to(device=self.device, dtype=_F32)
        self.stats.setdefault("loss_scale", scale.clone())
        self.scale(torch.reciprocal(scale))
        self.pending_loss_scale = None

    # ------------------------------------------------------------------ rewriting
    def materialize(self) -> None:
        """Apply every pending factor to the gradients (new tensors; the caller's gradients are
        never modified). The norm caches are carried over, scaled, without another read."""
        scales = self._scales()
        if scales is None:
            return
        self._widen()
        for k, i in enumerate(self._present):
            self._grads[i] = _times(self._grads[i], scales[k])
        if self._l2 is not None:
            self._l2 = self.norms()
        if self._amax is not None:
            self._amax = self.amax()
        self.multiplier = None
        self.factors = None
        self.original = False
        self._changed()

    def map_present(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        """Materialize, then replace each present gradient ``g`` of variable ``v`` by
        ``fn(g, v)`` (which must not modify ``g``); the norm caches are dropped."""
        if not callable(fn):
            raise TypeError(f"Expected `fn` to be callable, got {describe(fn)}")
        self._widen()
        self.materialize()
        for i in self._present:
            self._grads[i] = fn(self._grads[i], self._vars[i])
        self._l2 = None
        self._amax = None
        self.original = False
        self._changed()

    def replace_pair(self, index: int, grad: torch.Tensor | None, var: torch.Tensor,
                     *, same_values: bool) -> None:
        """Replace pair ``index`` (e.g. a model variable by its master copy); with
        ``same_values`` the gradient holds the same numbers, so the norm caches stay valid."""
        was_present = self._grads[index] is not None
        if was_present != (grad is not None):
            raise ValueError("replace_pair must keep whether the pair has a gradient")
        self._grads[index] = grad
        self._vars[index] = var
        self._narrow.discard(index)
        if not same_values:
            self._l2 = None
            self._amax = None
        self.original = False
        self._changed()

    def pairs_for_apply(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The present pairs with the per-tensor factors applied; the scalar multiplier stays
        pending (the optimizer takes it as ``grad_multiplier``). A gradient stored narrow stays
        narrow where no factor is pending: apply them with ``widen_gradients=narrowed``."""
        if self.factors is not None:
            grads = [_times(g, f) for g, f in zip(self.present_grads(), self.factors,
                                                   strict=True)]
        else:
            grads = [self._grads[i] for i in self._present]
        return list(zip(grads, self.present_vars(), strict=True))


def _times(g: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    s = s.to(device=g.device, dtype=g.dtype)
    if g.is_sparse:
        return torch.sparse_coo_tensor(g._indices(), g._values() * s, g.shape,
                                       is_coalesced=g.is_coalesced())
    return g * s
