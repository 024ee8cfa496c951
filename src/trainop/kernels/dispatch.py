"""The dispatch: which implementation runs an update, in which buckets, and how sparse rows are
routed; the layer between the optimizer's contract (``trainop.contract.optimizer``) and the kernels.

Data flows one way: the ``Optimizer`` validates the call and keeps the bookkeeping (groups,
slots, counters), the step plan (``trainop.contract.step_plan``) groups the tensors, and this module
hands each bucket to one implementation:

- ``reference``: the algorithm's per-tensor rule (``opt._apply_dense``), one tensor at a time;
- ``foreach``: the same rule over lists (``opt._apply_foreach``);
- ``fused``: torch's fused kernel where the class maps TF's math onto it (``opt._apply_fused``);
- ``native``: trainop's C kernels (``kernels.native.run``), which check every tensor at the one
  C boundary (``kernels.native.boundary``) and send what they cannot run to ``foreach``;
- ``triton``: trainop's Triton kernels (``kernels.triton.run``, CUDA), the same rules with the
  gate's multiplier and skip flag read on the device, sending what they cannot run to
  ``foreach`` as the native kernels do.

DTensor buckets (FSDP2) sharded alike run on their local shards (``kernels.shards``); NovoGrad's
on the Triton path with its whole-tensor norms summed by one ``all_reduce`` per bucket. The
Triton path has one entrance per optimizer (``triton.entry_of(opt)``: its layouts, device
guard, stream order and lock), which takes a whole bucket and returns.
With ``gate.widen`` (``apply_gradients(widen_gradients=True)``: a mixed-precision master's
float16/bfloat16 gradient stands for its float32 widening) the Triton kernels read such a
gradient as it is (widened in registers; a bucket of several gradient dtypes is one entry
call); every other path, and a Triton bucket that falls back, gets the float32 widening first
(``widened``: exact, so the numbers are those of a float32 gradient on every path).

``opt`` is the optimizer, used only through its algorithm hooks (``_choose_implementation``,
``_native_rule``, ``_triton_rule``, ``_native_sparse_rule``, ``_apply_dense``, ``_apply_sparse``,
``_apply_foreach``, ``_apply_fused``, ``state``) and its explicit choice ``_implementation``;
this module imports nothing above the kernels.

Example (what ``Optimizer.step`` does for one bucket)::

    dispatch.update_bucket(opt, params, grads, slot_lists, hp, non_slot, gate)
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.kernels import native, triton
from trainop.kernels.row_slices import RowSlices, row_slices
from trainop.kernels.shards import is_sharded, local_shards, shard_group, summed_over_shards

__all__ = ["begin_step", "choose", "row_slices_for", "sparse_rows_natively", "sparse_rows_triton",
           "update_bucket", "update_one", "update_pairs", "widened"]


def choose(explicit: str | None, offered: tuple[str, ...], native_ok: bool,
           fused_ok: bool) -> str:
    """The implementation to run: ``explicit`` (the constructor's choice) first, then
    ``native`` where it runs these tensors, then ``fused``, then ``foreach`` (or the reference
    for a class that offers no list path). An explicit ``native``/``fused`` that cannot run
    this bucket runs ``foreach``."""
    if explicit == "reference":
        return "reference"
    if explicit in (None, "native") and native_ok:
        return "native"
    if explicit in (None, "fused") and "fused" in offered and fused_ok:
        return "fused"
    return "foreach" if "foreach" in offered else "reference"


def slots_of(opt: Any, var, group) -> dict:
    """``var``'s slots: the entries of its state under the group's slot names. A wrapper's
    keys in the same state (timm Lookahead's ``lookahead_slow_buff``) are not the rule's: they
    are left out (the state itself is returned where it holds no other key)."""
    entry = opt.state[var]
    names = {spec.name for spec in opt._slot_specs(group)}
    return entry if names.issuperset(entry) else {n: t for n, t in entry.items() if n in names}


def update_pairs(opt: Any, pairs, index: dict[int, int], prepared: dict[int, Any],
                 param_groups, gate) -> None:
    """Run the update rule over ``pairs``: dense pairs in buckets of one group, dtype and
    device through the chosen implementation, sparse pairs one by one."""
    begin_step(opt)
    if len({id(v) for _, v in pairs}) != len(pairs):
        # The same variable twice (TF: two independent updates, in order): one by one.
        for g, v in pairs:
            update_one(opt, g, v, prepared[index[id(v)]], param_groups[index[id(v)]], gate)
        return
    buckets: dict[tuple, tuple[list, list]] = {}
    for g, v in pairs:
        gi = index[id(v)]
        if g.is_sparse:
            update_one(opt, g, v, prepared[gi], param_groups[gi], gate)
        else:
            vs, gs = buckets.setdefault((gi, v.dtype, v.device), ([], []))
            vs.append(v)
            gs.append(g)
    for (gi, _, _), (vs, gs) in buckets.items():
        names = list(slots_of(opt, vs[0], param_groups[gi]))
        slot_lists = {n: [opt.state[v][n] for v in vs] for n in names}
        update_bucket(opt, vs, gs, slot_lists, prepared[gi].for_tensor(vs[0]),
                      param_groups[gi]["non_slot"], gate)


def begin_step(opt: Any) -> None:
    """A step of ``opt`` begins: its Triton entry (if it has one) keeps the layouts of its
    last steps, whatever their number (``triton.Entry``)."""
    entry = getattr(opt, "_triton_entry", None)
    if entry is not None:
        entry.next_step()


def update_bucket(opt: Any, vs, gs, slot_lists, hp, non_slot, gate, *,
                  bucket: Any = None, read: Any = None) -> None:
    """Dense update of one bucket (same group, dtype, device) by the chosen implementation.

    One way through: the local shards of sharded tensors where they exist, the choice, then
    one call of that implementation (the Triton entry takes the whole bucket, checks it whole,
    and returns), then, where it cannot run the bucket, the list path once.
    ``bucket``: the step plan's bucket, where the choice and the C boundary's check are
    remembered; ``read``: what the plan's gradient pass read of ``vs`` and ``gs`` for the C
    boundary this step (``StepPlan.read_for``), or ``None``."""
    whole = None  # a rule reading whole-tensor norms over shards: their process group
    if is_sharded(vs[0]):
        whole = None if opt._elementwise else shard_group(gs)
        local = (local_shards(vs, gs, slot_lists, scalars=whole is not None)
                 if opt._elementwise or whole is not None else None)
        if local is not None:
            sharded, (vs, gs, slot_lists), read = (vs, gs, slot_lists), local, None
        else:
            whole = None
    # Only step() passes a plan bucket; there the choice depends on dtype, device and hp
    # alone (a decay_var_list, which also steers it, exists only inside apply_gradients).
    if is_sharded(vs[0]):
        implementation = "reference"  # not elementwise: torch's DTensor ops, per tensor
    elif bucket is not None and bucket.chosen_for is hp:
        implementation = bucket.implementation  # the same hyperparameters as last step
    else:
        implementation = opt._choose_implementation(vs[0].dtype, vs[0].device, hp)
        if bucket is not None:
            bucket.chosen_for, bucket.implementation = hp, implementation
    if whole is not None:  # only the Triton entry runs these shards; else the DTensor path
        if implementation == "triton" and _on_triton(opt, vs, gs, slot_lists, hp, non_slot,
                                                     gate, whole):
            return
        (vs, gs, slot_lists), implementation = sharded, "reference"
    elif implementation == "triton":
        if _on_triton(opt, vs, gs, slot_lists, hp, non_slot, gate, None):
            return
        implementation = "foreach"  # not a kernel's dtype/device, a subclass, non-contiguous
    if gate.widen:
        gs = widened(gs, vs)
    if implementation == "native":
        rule, slots, hyper = opt._native_rule(vs, slot_lists, hp, non_slot)
        if native.run(rule, [vs, gs, *slots], hyper, multiplier=gate.multiplier,
                      found_inf=gate.found_inf, cache=bucket, read=read):
            return
        implementation = "foreach"  # a subclass or a non-contiguous tensor: the list path
    if implementation == "fused" and _dense(vs, gs, *slot_lists.values()):
        opt._apply_fused(vs, gs, slot_lists, hp, non_slot, gate)
        return
    if implementation == "fused":
        implementation = "foreach"  # torch's fused CPU kernels skip a gapped tensor's tail
    if gate.skipped():
        return
    gs = gate.scale(gs)
    if implementation == "foreach":
        opt._apply_foreach(vs, gs, slot_lists, hp, non_slot)
    else:
        for i, (g, v) in enumerate(zip(gs, vs, strict=True)):
            opt._apply_dense(v, g, {n: s[i] for n, s in slot_lists.items()}, hp, non_slot)


def _dense(*lists) -> bool:
    """Whether every tensor of ``lists`` is contiguous: torch's fused kernels read and write a
    tensor as its first ``numel`` elements from its start, so a view with gaps
    (``x[::2]``) would be updated at the wrong places."""
    return all(t.is_contiguous() for ts in lists for t in ts)


def _on_triton(opt: Any, vs, gs, slot_lists, hp, non_slot, gate, whole: Any) -> bool:
    """The bucket through ``opt``'s Triton entry (``triton.entry_of``), in one call: its
    gradients of every dtype (a mixed-precision master's), its half copies, and, with
    ``whole`` (the process group of sharded tensors whose rule reads whole-tensor norms:
    NovoGrad), the ranks' squared norms summed by ONE ``all_reduce`` after the entry's checks.
    False (nothing updated) where the entry cannot run it (every rank decides alike)."""
    rule, slots, hyper = opt._triton_rule(vs, slot_lists, hp, non_slot)
    half = _half_copies(opt, vs) if whole is None else None
    reduce = None if whole is None else (lambda squares: summed_over_shards(squares, whole))
    if not triton.entry_of(opt).update(rule, [vs, gs, *slots], hyper,
                                       multiplier=gate.multiplier, found_inf=gate.found_inf,
                                       half=half, reduce=reduce, mixed=gate.widen):
        return False
    if half is not None:
        opt._copied_to_half.update(map(id, vs))
    return True


def widened(gs, vs) -> list:
    """The gradients ``gs`` in their variables' dtypes: a float16/bfloat16 gradient of a float32
    variable (``gate.widen``) widened to float32 (exact), the others as they are."""
    return [g if g.dtype == v.dtype else g.to(v.dtype) for g, v in zip(gs, vs, strict=True)]


def _half_copies(opt: Any, vs) -> list | None:
    """The float16/bfloat16 model copies of the float32 masters ``vs``, where a
    mixed-precision wrapper registered every one (``_half_copies``: master id -> model
    variable; the Triton kernel writes them in its pass and the ids go to
    ``_copied_to_half``, so the wrapper does not copy them again), else None."""
    copies = getattr(opt, "_half_copies", None)
    if not copies:
        return None
    found = [copies.get(id(v)) for v in vs]
    if any(c is None for c in found) or len({c.dtype for c in found}) != 1:
        return None
    return found


def update_one(opt: Any, g, v, prepared, group, gate) -> None:
    """One variable's update (a sparse gradient, or a variable named twice in one apply).

    On the Triton path a sparse gradient's update (every class's sparse rule) takes the gate's
    skip flag into its kernels (read on the device, as the dense kernels read it); every other
    path reads it here."""
    hp = prepared.for_tensor(v)
    slots, non_slot = slots_of(opt, v, group), group["non_slot"]
    if gate.widen:
        (g,) = widened([g], [v])
    if g.is_sparse and g.sparse_dim() == 1 and sparse_rows_triton(opt, g, v, slots, hp,
                                                                  non_slot, gate):
        return
    if gate.skipped():
        return
    g = gate.scale([g])[0]
    if g.is_sparse:
        if not (g.sparse_dim() == 1 and sparse_rows_natively(
                opt, v, g._indices()[0], g._values(), slots, hp, non_slot)):
            opt._apply_sparse(v, row_slices_for(opt, g, v, hp), slots, hp, non_slot)
    else:
        opt._apply_dense(v, g, slots, hp, non_slot)


def sparse_rows_natively(opt: Any, var, indices, values, slots, hp, non_slot) -> bool:
    """The rows ``indices`` (repeats allowed) updated by the native row kernel; False
    (nothing done) where the native path is not chosen or cannot run them."""
    if opt._choose_implementation(var.dtype, var.device, hp) != "native":
        return False
    found = opt._native_sparse_rule(var, slots, hp, non_slot)
    return found is not None and native.sparse_rows(found[0], var, found[1], indices, values,
                                                    found[2])


def sparse_rows_triton(opt: Any, grad, var, slots, hp, non_slot, gate) -> bool:
    """The distinct rows of ``gate.scale(grad)`` (scaled, then summed, ``row_slices``, as
    the reference path) updated by the class's Triton sparse rule (``_triton_sparse_rule``:
    rows, every row, or densified, ``kernels.triton.sparse_rows``), which reads the gate's
    skip flag on the device; False (nothing done) where the Triton path is not chosen or
    cannot run them."""
    # (Triton runs only where asked for: no choice to make on the other paths' every step)
    if opt._implementation != "triton" or opt._choose_implementation(
            var.dtype, var.device, hp) != "triton":
        return False
    found = opt._triton_sparse_rule(var, slots, hp, non_slot)
    if found is None:
        return False
    rows = row_slices(gate.scale([grad])[0])
    return triton.entry_of(opt).sparse_rows(found[0], var, found[1], rows.indices,
                                            rows.values, found[2], found_inf=gate.found_inf)


def row_slices_for(opt: Any, grad: torch.Tensor, var: torch.Tensor, hp: Any) -> RowSlices:
    """The distinct rows of a sparse gradient and their summed values (TF's
    ``_apply_sparse_duplicate_indices``): on the native path found by a hash over the
    indices (first-occurrence order, values uncopied when no row repeats), else by
    ``coalesce`` (sorted). Every sparse rule updates each row on its own, so the order of
    the rows does not change a result."""
    if opt._choose_implementation(var.dtype, var.device, hp) == "native":
        rows = native.unique_rows(grad)
        if rows is not None:
            return rows
    return row_slices(grad)
