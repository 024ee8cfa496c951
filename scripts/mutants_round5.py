# ruff: noqa: E501  (exact source snippets)
"""Round-5 mutants (issue #40, "Tests that pin the newest layers"): plausible one-spot bugs in
the layers changed since the last release, for ``scripts/mutation_audit.py``.

Written from the SOURCE ONLY of trainop at commit bdc9936592d9eef48a26112fcc3583a173695784
(``/work/main``), by a helper that read no test file (nothing under ``tests/``), not
``docs/mutation_audit.md`` and not the existing mutants' ideas (``scripts/mutants.py`` was
opened only for its tuple format). Each is

    (id, layer, file under src/trainop/, original snippet, replacement, group, description)

the shape ``scripts/mutation_audit.py``'s ``run_one`` unpacks (``mid, _layer, rel, original,
replacement, selection, _what``). ``group`` is a NEW group key per layer, to be mapped to the
test files of that layer by the lead (this helper chose no tests):

    TL  Triton launch / dispatch / boundary     (kernels/triton/launch.py, kernels/triton/__init__.py,
                                                 kernels/dispatch.py, kernels/boundary.py)
    BT  betas                                   (contract/betas.py and its users)
    HB  PyTorch habits + torch-scheduler refusal (contract/torch_style.py, contract/scheduled_lr.py,
                                                 Optimizer.__setattr__, schedules/_base.py)
    RV  recipe values and --set                 (interfaces/recipes/, configs/returnn_lookups.py,
                                                 configs/pyconfig.py's config_values)
    OR  OpenSeq2Seq NovoGrad mode + TF replay   (interfaces/recipes/openseq2seq.py,
                                                 interfaces/train/replay_plan.py, compare_tf.py)
    EG  RETURNN engine with a GradScaler        (interfaces/returnn_engine/updater.py,
                                                 training/returnn/torch_step.py, updater.py)
    CR  TF checkpoint reader: reads and limits  (interfaces/checkpoints/bundle.py, sstable.py, wire.py,
                                                 load.py, configs/reading.py)
    EB  evaluator size bounds                   (configs/bounds.py, percent.py, pure.py, pyconfig.py,
                                                 returnn_lookups.py's join)

``MUTANTS_ROUND5`` is the audit list; ``MUTANTS_ROUND5_EXTRA`` holds further candidates of the
same layers (narrower, or observable only through a message or a rare input) for a second
pass. Every original snippet occurs exactly once in its file at the commit above and every
mutated file compiles (``/work/check_mutants_round5.py <repo root>`` checks both). Mutants
in ``compare_tf.py`` are observable only where TensorFlow is installed (the replay), mutants
in the Triton launch only where Triton (or its interpreter) is.

Refreshed at main's commit 0c808488e3c8bd06649753b44d35496ee5c3ae4c by a second helper that
again read no test (nothing under ``tests/``), not ``docs/mutation_audit.md`` and not
``scripts/mutants.py`` beyond its tuple format; only ``src/trainop/`` and these two scripts.
Rewritten there, same ids, the same bug in the moved code: T02 T03 T04 (now
``kernels/triton/tables.py``) T05, B01 B02 B05, V04, V08 (``final_value`` now in
``configs/pyconfig.py``), K14, Z08 Z21, H01; rewritten as a different bug of the same
function, since the code no longer makes that decision (description prefixed "rewritten"):
B10, H02 H03 H04 H05 H10 (the torch-scheduler refusal now comes at the scheduler's first
read of ``param_groups``, before anything is written). New, for code added since bdc9936:
T15-T18 T20 T23 T24 (Triton device tables, staging, the batch's C fast path), H12-H14
(TensorFlow imported before Triton), V12-V14 V16 V17 (``--set`` validation, overrides),
K19 K20 K22 K23 (``save_tf`` switching the index last; layer "checkpoint writer", group CR),
and in ``MUTANTS_ROUND5_EXTRA`` T19 T21 T22 T25 H15 V15 K21. Files added to the groups:
TL ``kernels/triton/tables.py``, ``staging.py``, ``processing/_batch.py``; HB
``contract/llvm_order.py``, ``interfaces/tensorflow_import.py``; RV
``interfaces/recipes/overrides.py``; CR ``interfaces/checkpoints/switch.py``.

Refreshed at main's commit 175925d80a5e5d1de7e1e26a12ad9b72f7e6f1b9 by a third helper under
the same rule (no test, no ``docs/mutation_audit.md``, ``scripts/mutants.py`` for its tuple
format only). Rewritten there, same ids, the same bug in the moved code:

- T08: the written-written overlap test now reads ``sorted_ranges``' ``reach``;
- T09: ``idx > 0`` now in ``boundary.overlapping``, shared by check_overlap, read_first and
  the Triton layouts' refresh;
- T19: the refresh's overlap test is now ``overlapping(...).any()``;
- T23: the batch's C fast path now builds through ``_init_lists``.

New, for code added since 0c80848 (layer "read first" in group TL for read_first and the
plans that call it; files added to TL: ``contract/read_first.py``, ``step_plan.py``,
``flat_plan.py``, ``kernels/triton/norms.py``):

- T26: ``overlapping`` searches by a range's start, not its end (p.grad = p missed);
- T27: read_first's filter replaced by "no reader" (apply_gradients never compares);
- T28: the shared gradient's copy is ``.contiguous()`` (no copy when contiguous);
- T29: the copy is taken of ``grads[i]``, not ``own[i]`` (wrong where start > 0);
- T30: the comparison's two sides swapped (written tensors' positions copied);
- T31: the step plan's written tensors leave out the slots;
- T32: a flat plan with loose parameters passes ``shared=False``;
- T33: ``_read_gradients`` retries a cached non-uniform record (float64 marked uniform);
- T34: the Triton update key leaves out the element counts;
- T35: ``_gradients_at`` drops the counts comparison;
- T36: ``_gradients_at`` accepts a gradient of any float dtype (float64 for float32);
- T37: the read pass's layout keyed by the number of tensors, not their sizes;
- in ``MUTANTS_ROUND5_EXTRA``, T38: ``_gradients_at`` checks the gradients' own device, not
  the layout's (GPU only).
"""

TT = "kernels/triton/"
KD = "kernels/"
CT = "contract/"
RC = "interfaces/recipes/"
TR = "interfaces/train/"
EN = "interfaces/returnn_engine/"
RT = "training/returnn/"
CK = "interfaces/checkpoints/"
CF = "configs/"

MUTANTS_ROUND5 = [
    # ====================================================== TL: Triton launch / dispatch / boundary
    ("T01", "triton", TT + "launch.py",
     "return [[t[:head] for t in unit], [t[head:] for t in unit]]",
     "return [[t[:head] for t in unit], [t[head + 1:] for t in unit]]",
     "TL", "a unit of >= SPLIT_AT (2**20) elements whose count is not a multiple of 16 is split "
           "head/tail with the tail's first element skipped: one element of a large flat buffer "
           "(and its slots) never updated"),
    ("T02", "triton", TT + "tables.py",
     "self.counts = np.fromiter(map(_NUMEL, lists[base]), dtype=np.int64,\n                                  count=self.tensors)",
     "self.counts = np.full(self.tensors, lists[base][0].numel(), dtype=np.int64)",
     "TL", "(rewritten at the current code: the one-launch span is now tables.Layout's counts) "
           "every tensor of a one-launch bucket counted as the first one's size: a bucket of "
           "tensors of different sizes (weight + bias) is updated short or past a tensor's "
           "end, its norms wrong"),
    ("T03", "triton", TT + "tables.py",
     "per = (counts + BLOCK - 1) // BLOCK",
     "per = counts // BLOCK",
     "TL", "(now in tables._blocks) the blocks per tensor rounded down: a tensor under 1024 "
           "elements gets no block and the last partial block of any other is dropped "
           "(never updated, missing from the norms)"),
    ("T04", "triton", TT + "tables.py",
     "stop = np.minimum(start + BLOCK, counts[owner])",
     "stop = start + BLOCK",
     "TL", "(now in tables._blocks) a tensor's last partial block ends a full BLOCK after its "
           "start: the update and norm passes read and write past the end of a tensor of e.g. "
           "1500 elements (into the next tensor of a flat buffer)"),
    ("T05", "triton", TT + "launch.py",
     "n = every[1][0].numel()",
     "n = every[0][0].numel()",
     "TL", "the rows launch (a sparse gradient's distinct rows, ROW_RULES) runs over the whole "
           "table's element count instead of the rows' values: out-of-range rows read/written"),
    ("T06", "triton", TT + "__init__.py",
     "if lists[1] and lists[1][0].dtype in HALF_DTYPES:",
     "if lists[1] and lists[1][0].dtype == torch.float16:",
     "TL", "a mixed-precision master's bfloat16 model gradient is not admitted as it is: "
           "full_check expects float32 gradients and raises ValueError for bf16 ones"),
    ("T07", "triton", TT + "__init__.py",
     "if not all(x.is_contiguous() for tensors in lists for x in tensors):",
     "if not all(x.is_contiguous() for x in lists[0]):",
     "TL", "only the variables are checked for contiguity: a non-contiguous gradient or slot "
           "(a transposed .grad) goes to the kernel, which reads its storage as contiguous "
           "(wrong update instead of the foreach fallback)"),
    ("T08", "triton", KD + "boundary.py",
     "if len(w_start) > 1 and bool(np.any(reach[:-1] > w_start[1:])):",
     "if len(w_start) > 1 and bool(np.any(reach[:-1] >= w_start[1:])):",
     "TL", "written tensors that merely touch (back to back in one flat buffer) are reported "
           "as sharing memory: every flattened bucket raises ValueError on the native and "
           "Triton paths"),
    ("T09", "triton", KD + "boundary.py",
     "return (end > start) & (idx >= 0) & (reach[np.maximum(idx, 0)] > start)",
     "return (end > start) & (idx > 0) & (reach[np.maximum(idx, 0)] > start)",
     "TL", "a gradient overlapping the lowest-addressed written tensor is not seen "
           "(p.grad = p, or a gradient aliasing the first variable): the kernel reads it after "
           "writing instead of the list path (and, now that ``overlapping`` is shared, "
           "read_first does not copy it, and the Triton layout's refresh keeps its fused launch)"),
    ("T10", "triton", KD + "dispatch.py",
     "if implementation == \"triton\" and gate.widen and len({g.dtype for g in gs}) > 1:",
     "if implementation == \"triton\" and gate.widen and len({g.dtype for g in gs}) > 2:",
     "TL", "a widened Triton bucket with half and float32 gradients (a regularized master) is "
           "no longer split per dtype: the kernel call gets mixed gradient dtypes "
           "(ValueError from the boundary, or a wrong read)"),
    ("T11", "triton", KD + "dispatch.py",
     "rows = row_slices(gate.scale([grad])[0])",
     "rows = row_slices(grad)",
     "TL", "the Triton sparse path forgets the gate's multiplier (loss-scale 1/S, clip factor): "
           "sparse gradients under a loss scale or clipping are applied unscaled"),
    # ====================================================================== BT: betas
    ("B01", "betas", CT + "betas.py",
     "and betas[0] is group[\"beta1\"] and betas[1] is group[\"beta2\"])",
     "and betas[0] is group[\"beta1\"])",
     "BT", "reconciled() (sync's fast path) checks beta1 only: after group['beta2'] = x the "
           "group's betas keep the old beta2 (state_dict then saves betas != (beta1, beta2), "
           "which a load takes over beta2; a scheduler reading betas sees the stale value)"),
    ("B02", "betas", CT + "betas.py",
     "validate(dict(zip(_PAIR, pair, strict=True)))",
     "dict(zip(_PAIR, pair, strict=True))",
     "BT", "betas written into a group (a scheduler, a user: group['betas'] = (1.5, 0.9)) are "
           "taken into beta1/beta2 at the next step without the constructor's range checks "
           "(and state_dict saves them without its warning)"),
    ("B03", "betas", CT + "betas.py",
     "    _record(seen, group, pair)\n    group[\"beta1\"], group[\"beta2\"] = pair",
     "    _record(seen, group, pair)\n    group[\"beta1\"] = pair[0]",
     "BT", "a replaced betas pair updates beta1 only: group['betas'] = (0.8, 0.99) leaves the "
           "rule's beta2 at its old value"),
    ("B04", "betas", CT + "betas.py",
     "betas = tuple(group[KEY]) if given else (group[\"beta1\"], group[\"beta2\"])",
     "betas = (group[\"beta1\"], group[\"beta2\"])",
     "BT", "add_param_group({'params': ..., 'betas': (0.8, 0.9)}) ignores the given betas: the "
           "group runs the defaults' beta1/beta2 and its betas key is overwritten"),
    ("B05", "betas", CT + "betas.py",
     "    validate(dict(zip(_PAIR, betas, strict=True)))\n\n\ndef reconciled",
     "\n\ndef reconciled",
     "BT", "a param group giving betas out of range (add_param_group({..., 'betas': (1.5, "
           "0.9)})) is added unchecked (check_given skips the range checks)"),
    ("B06", "betas", CT + "betas.py",
     "if name in group and group[name] is not value and group[name] != value:",
     "if name in group and group[name] is not value and group[name] == value:",
     "BT", "check_given's conflict test inverted: beta1=0.5 with betas=(0.9, ...) accepted, "
           "equal-but-not-identical spellings refused"),
    ("B07", "betas", CT + "checkpoint.py",
     "and k != \"betas\"]  # optional: made from beta1/beta2 when missing (betas.py)",
     "]  # optional: made from beta1/beta2 when missing (betas.py)",
     "BT", "betas becomes a required group key of a checkpoint: a checkpoint saved before "
           "betas existed (or by TF-style code) is refused as missing a key"),
    ("B08", "betas", CT + "optimizer.py",
     "        if self._has_betas:  # saved reconciled (contract/betas.py)",
     "        if False:  # saved reconciled (contract/betas.py)",
     "BT", "state_dict saves unreconciled groups: after group['beta1'] = 0.8 and before a step, "
           "the checkpoint holds betas=(0.9, ...) beside beta1=0.8 (and its load refuses it), "
           "or a scheduler's betas not taken into beta1"),
    ("B09", "betas", CT + "optimizer.py",
     "            defaults[betas.KEY] = (defaults[\"beta1\"], defaults[\"beta2\"])",
     "            pass",
     "BT", "optimizer.defaults has no betas: OneCycleLR/CyclicLR(cycle_momentum) do not find "
           "the Adam family's momentum, and a param group giving betas is refused as a torch "
           "spelling (check_group_keys accepts the defaults' keys)"),
    # ============================================ HB: PyTorch habits + torch-scheduler refusal
    ("H01", "habits", CT + "optimizer.py",
     "scheduled_lr.own(sys._getframe(1))",
     "scheduled_lr.own(sys._getframe(0))",
     "HB", "the param_groups property asks whether ITS OWN frame (trainop's code) is the reader "
           "instead of its caller's: every read counts as trainop's own, and a torch LR "
           "scheduler over a trainop schedule is never refused (it replaces the schedule)"),
    ("H02", "habits", CT + "scheduled_lr.py",
     "frame = _reader(sys._getframe(2))",
     "frame = sys._getframe(2)",
     "HB", "rewritten: the refusal now comes when a scheduler reads param_groups, so the "
           "CyclicLR-overwrite case is gone; instead the reader is not looked for past a "
           "forwarding param_groups property: a torch scheduler over accelerate's "
           "AcceleratedOptimizer (HF Trainer) is not refused and writes over the schedule"),
    ("H03", "habits", CT + "scheduled_lr.py",
     "policies = [i for i, group in enumerate(groups) if is_policy(group.get(\"lr\"))]",
     "policies = [0] if groups and is_policy(groups[0].get(\"lr\")) else []",
     "HB", "rewritten: nothing is written before the refusal any more (no lr to put back); "
           "instead only the first param group is looked at: a schedule in a second group "
           "(first group a float lr) is not refused and the scheduler replaces it"),
    ("H04", "habits", CT + "scheduled_lr.py",
     "return (code.co_argcount > 0 and code.co_varnames[0] == \"self\"",
     "return (code.co_argcount > 1 and code.co_varnames[0] == \"self\"",
     "HB", "rewritten: no initial_lr is written before the refusal any more; instead an off "
           "by one in recognising a method of a user's LRScheduler subclass: a method taking "
           "only self (step(), get_lr()) is not recognised, so a subclass whose own step() "
           "writes group['lr'] replaces a schedule assigned after it was attached"),
    ("H05", "habits", CT + "scheduled_lr.py",
     "and isinstance(frame.f_locals.get(\"self\"), LRScheduler))",
     "and frame.f_locals.get(\"self\") is not None)",
     "HB", "rewritten: no betas are written before the refusal any more; instead any method of "
           "any object outside torch/trainop reading param_groups (a Lightning callback, a "
           "logger, HF Trainer's own methods) counts as a torch scheduler: reading the groups "
           "of an optimizer with a trainop schedule raises TypeError"),
    ("H06", "habits", CT + "torch_style.py",
     "if torch_shaped and _SCALED_DECAY in names and _SCALED_DECAY not in kwargs:",
     "if _SCALED_DECAY in names and _SCALED_DECAY not in kwargs:",
     "HB", "TF-style AdamW/MomentumW calls get decay_scaled_by_lr=True too: contrib's "
           "var -= wd * var becomes torch's var -= lr * wd * var"),
    ("H07", "habits", CT + "torch_style.py",
     "if len(args) > 1 and first_arg != \"learning_rate\" and \"learning_rate\" in names:",
     "if len(args) > 2 and first_arg != \"learning_rate\" and \"learning_rate\" in names:",
     "HB", "AdamWOptimizer(params, 0.01) is no longer refused: 0.01 binds to weight_decay where "
           "torch reads lr"),
    ("H08", "habits", CT + "torch_style.py",
     "        isinstance(item, torch.Tensor | Mapping)\n",
     "        isinstance(item, torch.Tensor)\n",
     "HB", "param-group dicts given positionally are not recognised as parameters: "
           "AdamOptimizer([{'params': ...}], lr=...) fails"),
    ("H09", "habits", CT + "torch_style.py",
     "and all(keys.get(name, name) in g for g in groups)):",
     "and any(keys.get(name, name) in g for g in groups)):",
     "HB", "a required argument given by only some param groups is filled with torch's "
           "required marker: the constructor's TypeError becomes a group ValueError"),
    # ============================================================= RV: recipe values, --set
    ("V01", "recipe values", RC + "settings.py",
     "if not sep or not all(part.isidentifier() for part in name.split(\".\")):",
     "if not all(part.isidentifier() for part in name.split(\".\")):",
     "RV", "--set NAME without '=' is accepted (as NAME='') instead of refused naming the item"),
    ("V02", "recipe values", RC + "settings.py",
     "name, sep, value = item.partition(\"=\")",
     "name, sep, value = item.rpartition(\"=\")",
     "RV", "--set splits at the last '=': a value holding '=' (x=a=b, a dict text) is refused "
           "or mis-named"),
    ("V03", "recipe values", RC + "settings.py",
     "names = {k: v for k, v in settings.items() if \".\" not in k}",
     "names = dict(settings)",
     "RV", "dotted --set options (lr_policy_params.decay_steps=...) are passed to the config as "
           "names: load_recipe refuses them as non-identifiers"),
    ("V04", "recipe values", RC + "settings.py",
     "recipe = load_recipe(path, config_values=names or None, overrides=dotted)",
     "recipe = load_recipe(path, config_values=names or None, overrides=None)",
     "RV", "a dotted --set of a RETURNN Python config (lr_policy_params.decay_steps=1000, "
           "optimizer_params.beta1=0.8) is silently dropped: only the names reach the config "
           "(the line in recipe.settings still shows the file's value)"),
    ("V05", "recipe values", RC + "recipe.py",
     "options[head] = {**(nested if isinstance(nested, Mapping) else {}), sub: value}",
     "options[head] = {sub: value}",
     "RV", "a dotted override replaces the whole dict: optimizer_params.beta1=0.8 drops the "
           "recipe's other optimizer_params"),
    ("V06", "recipe values", RC + "recipe.py",
     "            if head not in keys:",
     "            if key not in keys:",
     "RV", "every dotted override (key.sub) is an 'Unknown option'"),
    ("V07", "recipe values", CF + "returnn_lookups.py",
     "return text.split(\",\") if text.find(\",\") > 0 else [text]",
     "return text.split(\",\") if text.find(\",\") >= 0 else [text]",
     "RV", "command-line text with a LEADING comma is split (RETURNN's Config keeps it whole): "
           "config.list/value/int of ',a' differ"),
    ("V08", "recipe values", CF + "pyconfig.py",
     "    if isinstance(assigned, str):\n        return str(text)",
     "    if isinstance(assigned, Text):\n        return str(text)",
     "RV", "(final_value moved to pyconfig.py) --set of a name the file assigned a str is "
           "read as a Python literal (setup=123 becomes int 123) where RETURNN keeps the "
           "file's type (text)"),
    ("V09", "recipe values", CF + "returnn_lookups.py",
     "return _indexed(default if value is _MISSING or text else value, index)",
     "return _indexed(default if value is _MISSING else value, index)",
     "RV", "config.typed_value sees command-line text (RETURNN's typed_value does not: "
           "it returns the default)"),
    ("V10", "recipe values", RC + "openseq2seq.py",
     "    for key in (\"max_steps\", \"num_epochs\", \"save_summaries_steps\"):",
     "    for key in (\"max_steps\", \"num_epochs\"):",
     "RV", "save_summaries_steps is not checked: 0, -5 or 2.5 accepted (summary frequency "
           "0 -> 100 silently, negative or float frequency)"),
    # ==================================================== OR: NovoGrad mode + TF replay
    ("O01", "novograd/replay", RC + "openseq2seq.py",
     "if issubclass(cls, base) for arg, choice in choices.items() if arg not in given}",
     "if issubclass(cls, base) for arg, choice in choices.items()}",
     "OR", "an OpenSeq2Seq recipe's own optimizer_params second_moment='persistent' is "
           "overridden by the upstream choice 'openseq2seq'"),
    ("O02", "novograd/replay", RC + "openseq2seq.py",
     "**{arg: value for arg, (value, _) in upstream_choices(options).items()}}",
     "}",
     "OR", "build passes only the recipe's optimizer_params: an OpenSeq2Seq NovoGrad recipe "
           "trains trainop's default second_moment='persistent' instead of OpenSeq2Seq's code"),
    ("O03", "novograd/replay", TR + "replay_plan.py",
     "if name == \"NovoGrad\" and mode != \"openseq2seq\":",
     "if name == \"NovoGrad\" and mode == \"openseq2seq\":",
     "OR", "the replay's note about trainop's NovoGrad mode is inverted: missing for "
           "'persistent', given for 'openseq2seq'"),
    ("O04", "novograd/replay", TR + "compare_tf.py",
     "tf.equal(tf.math.floormod(i - last, a[\"step_window\"]), 0))",
     "tf.equal(tf.math.floormod(i + 1 - last, a[\"step_window\"]), 0))",
     "OR", "Backoff replay: the counter read after its increment (quirk Q2 lost): the scale "
           "doubles one call early"),
    ("O05", "novograd/replay", TR + "compare_tf.py",
     "new = tf.where(overflow, self.scale / a[\"step_factor\"],",
     "new = tf.where(overflow, self.scale,",
     "OR", "Backoff replay on an overflow step does not lower the scale"),
    ("O06", "novograd/replay", TR + "compare_tf.py",
     "last.assign(tf.where(overflow, i, last))",
     "last.assign(tf.where(overflow, i + 1, last))",
     "OR", "Backoff replay records the overflow one call late: growth after an overflow is "
           "shifted by one step"),
    ("O07", "novograd/replay", TR + "compare_tf.py",
     "x = tf.where(overflow, tf.constant(2.0 ** a[\"log_max\"], tf.float32), tf.math.log(amax)",
     "x = tf.where(overflow, tf.constant(float(a[\"log_max\"]), tf.float32), tf.math.log(amax)",
     "OR", "LogMax replay samples log_max on overflow instead of OpenSeq2Seq's 2**log_max "
           "(quirk Q3): the scale after an overflow differs"),
    ("O08", "novograd/replay", TR + "compare_tf.py",
     "        mu = x_hat / (1 - c1)",
     "        mu = x_hat",
     "OR", "LogMax replay without beta1's bias correction: the scale of the first steps differs"),
    ("O09", "novograd/replay", TR + "compare_tf.py",
     "skips = plan.scaler is not None and plan.scaler[0] != \"static\" and plan.half is not None",
     "skips = plan.scaler is not None and plan.half is not None",
     "OR", "static loss scale in mixed precision: the replay skips a non-finite step "
           "(OpenSeq2Seq's static scale applies it)"),
    ("O10", "novograd/replay", TR + "compare_tf.py",
     "overflow = tf.logical_or(has_nan, tf.math.is_inf(amax))",
     "overflow = tf.math.is_inf(amax)",
     "OR", "a NaN gradient (amax masks NaNs to 0) is not an overflow in the replay: the NaN "
           "step is applied and the scaler sees no overflow"),
    ("O11", "novograd/replay", TR + "compare_tf.py",
     "                if not (skips and skipped):",
     "                if not skipped:",
     "OR", "without an automatic scaler (float32, or static) the replay skips a non-finite "
           "step, where TF applies it"),
    ("O12", "novograd/replay", TR + "compare_tf.py",
     "return k % n == n - 1 if plan.front == \"returnn\" else k % n == 0",
     "return k % n == n - 1",
     "OR", "OpenSeq2Seq's update micro-steps k % iter_size == 0 (quirk Q5) replayed as "
           "RETURNN's k % N == N - 1"),
    ("O13", "novograd/replay", TR + "compare_tf.py",
     "divisor = plan.accumulate if plan.front == \"openseq2seq\" else 1",
     "divisor = plan.accumulate",
     "OR", "the RETURNN replay averages its accumulated micro-steps (RETURNN sums them)"),
    ("O14", "novograd/replay", TR + "compare_tf.py",
     "            zero = tf.logical_or(tf.logical_not(tf.math.is_finite(raw_norm)),\n"
     "                                 raw_norm > args[\"threshold\"])",
     "            zero = raw_norm > args[\"threshold\"]",
     "OR", "RETURNN's grad_norm_to_clip_to_zero replay: a non-finite G no longer zeroes the "
           "gradients (NaN > threshold is False)"),
    ("O15", "novograd/replay", TR + "compare_tf.py",
     "args[\"clip_norm\"] * tf.cast(tf.size(g), tf.float32)",
     "args[\"clip_norm\"]",
     "OR", "gradient_clip_avg_norm replayed as clip_by_norm (the norm not scaled by the "
           "tensor's size)"),
    ("O16", "novograd/replay", TR + "compare_tf.py",
     "grads = [tf.where(tf.math.is_finite(g), g, tf.zeros_like(g)) for g in grads]",
     "grads = [tf.where(tf.math.is_nan(g), tf.zeros_like(g), g) for g in grads]",
     "OR", "the NaN/Inf filter replay lets +-Inf through"),
    ("O17", "novograd/replay", TR + "compare_tf.py",
     "grads = [tf.clip_by_norm(g, args[\"clip_norm\"]) for g in grads]",
     "grads, _ = tf.clip_by_global_norm(grads, args[\"clip_norm\"])",
     "OR", "gradient_clip_norm replayed as a global-norm clip (per-tensor clip lost)"),
    ("O18", "novograd/replay", TR + "compare_tf.py",
     "grads, _ = tf.clip_by_global_norm(grads, args[\"clip_norm\"], use_norm=raw_norm)",
     "grads, _ = tf.clip_by_global_norm(grads, args[\"clip_norm\"])",
     "OR", "gradient_clip_global_norm replayed with the processed gradients' norm instead of "
           "RETURNN's G (the raw micro-step's norm)"),
    ("O19", "novograd/replay", TR + "compare_tf.py",
     "tf.clip_by_value(g, args[\"clip_value_min\"], args[\"clip_value_max\"])",
     "tf.clip_by_value(g, -args[\"clip_value_max\"], args[\"clip_value_max\"])",
     "OR", "gradient_clip replay assumes symmetric bounds (clip_value_min ignored)"),
    ("O20", "novograd/replay", TR + "compare_tf.py",
     "/ (lr * (g_norm + larc[\"epsilon\"])), larc[\"min_update\"]),",
     "/ (g_norm + larc[\"epsilon\"]), larc[\"min_update\"]),",
     "OR", "LARC clip mode replayed without the learning rate in the denominator (scale "
           "mode's formula)"),
    # ================================================= EG: RETURNN engine with a GradScaler
    ("E01", "engine", EN + "updater.py",
     "if enabled and self.semantics == \"tf\":",
     "if grad_scaler is not None and self.semantics == \"tf\":",
     "EG", "under semantics='tf' a DISABLED GradScaler (RETURNN's default one without CUDA) is "
           "refused; it is the identity and must be accepted"),
    ("E02", "engine", EN + "updater.py",
     "                and not self._stepped):",
     "                ):",
     "EG", "set_current_train_step hands the Updater a micro-step that step() already handed: "
           "each update step counted twice (accumulation windows, counters)"),
    ("E03", "engine", EN + "updater.py",
     "        self._stepped = True\n",
     "",
     "EG", "step() does not record that it took the micro-step: the next "
           "set_current_train_step hands it to the Updater again"),
    ("E04", "engine", EN + "updater.py",
     "opts = amp.get(\"grad_scaler\", opts)",
     "opts = amp.get(\"grad_scaler\")",
     "EG", "a torch_amp dict without grad_scaler (RETURNN makes the default scaler) or with a "
           "top-level grad_scaler is read as 'no scaler': the semantics='tf' refusal is missed "
           "(observable where torch.cuda.amp.GradScaler is enabled: CUDA, or a patched one)"),
    ("E05", "engine", EN + "updater.py",
     "if state.get(\"trainop_semantics\") != self.semantics:",
     "if state.get(\"trainop_semantics\") not in (\"torch\", \"tf\"):",
     "EG", "an .opt.pt written with semantics='tf' loads into a torch-semantics updater (and "
           "the other way round)"),
    ("E06", "engine", EN + "updater.py",
     "if names is not None and names != self._param_names():",
     "if names is not None and len(names) != len(self._param_names()):",
     "EG", "an optimizer file of another model with as many parameters (or the same ones in "
           "another order) is loaded"),
    ("E07", "engine", RT + "torch_step.py",
     "invalid = _scaler_found_inf(grad_scaler, self.optimizer)",
     "invalid = False",
     "EG", "a GradScaler's skipped step (Inf/NaN found by unscale_) counts as applied: "
           "global_step advances, skipped_steps/applied wrong"),
    ("E08", "engine", RT + "torch_step.py",
     "        if grad_scaler is not None:\n            grad_scaler.update()",
     "        if grad_scaler is not None and not invalid:\n            grad_scaler.update()",
     "EG", "the GradScaler is not updated after a skipped step: its scale is never lowered "
           "after an overflow (RETURNN calls update() valid or not)"),
    ("E09", "engine", RT + "torch_step.py",
     "        if grad_scaler is not None:\n            grad_scaler.unscale_(self.optimizer)\n",
     "",
     "EG", "the accumulated gradients are not unscaled before the norm and clipping: "
           "last_grad_norm and gradient_clip_global_norm see S-times the gradients "
           "(GradScaler.step unscales only afterwards)"),
    ("E10", "engine", RT + "updater.py",
     "results.append(g.core.update(self._host_lr(), t, grad_scaler=grad_scaler))",
     "results.append(g.core.update(self._host_lr(), t))",
     "EG", "the Updater drops the engine's GradScaler: the scaled gradients are applied as they "
           "are (S times too large), the scaler never stepped or updated"),
    # ====================================== CR: TF checkpoint reader: positioned reads, limits
    ("K01", "checkpoint reader", CK + "bundle.py",
     "if offset + size > self.size:",
     "if offset + size >= self.size:",
     "CR", "off by one at the data file's end: an entry ending exactly at the end of its shard "
           "(the last variable) is refused as truncated"),
    ("K02", "checkpoint reader", CK + "bundle.py",
     "if not 0 <= shard < num_shards:",
     "if not 0 <= shard <= num_shards:",
     "CR", "off by one at the shard bound: shard_id == num_shards passes (a missing "
           "data-0000N-of-0000N file is reported instead of the bad shard id)"),
    ("K03", "checkpoint reader", CK + "bundle.py",
     "if len(fields.get(2, [])) > MAX_RANK:",
     "if len(fields.get(2, [])) >= MAX_RANK:",
     "CR", "off by one at MAX_RANK: a shape of exactly 254 dimensions (TF's maximum) refused"),
    ("K04", "checkpoint reader", CK + "bundle.py",
     "if math.prod(shape) >= 1 << 63:",
     "if math.prod(shape) > 1 << 63:",
     "CR", "off by one at 2**63 elements: a shape of exactly 2**63 elements passes the "
           "element check (then fails elsewhere with another message)"),
    ("K05", "checkpoint reader", CF + "reading.py",
     "if info.st_size > limit:",
     "if info.st_size >= limit:",
     "CR", "open_regular off by one: a file of exactly `limit` bytes (a 4 MiB recipe, a 256 MiB "
           "index) is refused (shared with the recipe reader's MAX_FILE_BYTES)"),
    ("K06", "checkpoint reader", CK + "sstable.py",
     "if offset + size + 5 > len(data):",
     "if offset + size + 4 > len(data):",
     "CR", "off by one at a table block's trailer: a block whose CRC runs one byte past the "
           "file's end is not refused as truncated (struct.error instead)"),
    ("K07", "checkpoint reader", CK + "sstable.py",
     "if shared > len(key) or pos + unshared + size > end:",
     "if shared > len(key) or pos + unshared + size >= end:",
     "CR", "off by one at a block entry's end: an entry ending exactly at the restart array "
           "(every block's last entry) is refused"),
    ("K08", "checkpoint reader", CK + "sstable.py",
     "key_bytes += len(key)",
     "key_bytes += unshared",
     "CR", "the quadratic shared-prefix guard counts only the stored key bytes: a hostile "
           "chain of shared prefixes is never refused"),
    ("K09", "checkpoint reader", CK + "sstable.py",
     "if handle[0] < end:",
     "if handle[0] <= end:",
     "CR", "off by one at the data-block order check: a data block starting right after the "
           "previous one's trailer (every multi-block index) is refused as overlapping"),
    ("K10", "checkpoint reader", CK + "wire.py",
     "            if pos + size > end:\n                raise CorruptCheckpoint(f\"{what}: field {number} runs past the end\")",
     "            if pos + size >= end:\n                raise CorruptCheckpoint(f\"{what}: field {number} runs past the end\")",
     "CR", "off by one at a fixed-size field's end: a fixed32/64 as a message's last field "
           "(the entry's masked CRC) is refused"),
    ("K11", "checkpoint reader", CK + "wire.py",
     "if shift > 63:",
     "if shift > 70:",
     "CR", "an 11-byte varint is accepted (the limit is 10 bytes)"),
    ("K12", "checkpoint reader", CK + "load.py",
     "if not 0 <= value <= STEP_LIMIT:",
     "if not 0 <= value < STEP_LIMIT:",
     "CR", "off by one at STEP_LIMIT: a global step of exactly 2**62 refused by load_tf"),
    ("K13", "checkpoint reader", CK + "bundle.py",
     "    return values[-1]",
     "    return values[0]",
     "CR", "a repeated field of an index message takes its FIRST value (protobuf: the last "
           "wins): a repeated dtype/offset/size/crc read differently from TF"),
    ("K14", "checkpoint reader", CK + "bundle.py",
     "if verify and crc32c(raw) != unmask(crc):",
     "if verify and crc and crc32c(raw) != unmask(crc):",
     "CR", "an entry without a crc32c field (read as 0) is not checked (TF compares it as 0 "
           "and refuses the data)"),
    # ====================================================== EB: evaluator size bounds
    ("Z01", "evaluator bounds", CF + "bounds.py",
     "if self.work > MAX_WORK:",
     "if self.work >= MAX_WORK:",
     "EB", "off by one at MAX_WORK: exactly 2,000,000 steps refused"),
    ("Z02", "evaluator bounds", CF + "bounds.py",
     "        if depth > MAX_DEPTH:",
     "        if depth > MAX_DEPTH + 1:",
     "EB", "one past MAX_DEPTH: a value nested 101 levels accepted"),
    ("Z03", "evaluator bounds", CF + "bounds.py",
     "return 1 + len(value), 0",
     "return 1, 0",
     "EB", "strings weigh 1 whatever their length: 'x' * 10**9 (and the join/percent checks "
           "that use weights) pass MAX_WEIGHT"),
    ("Z04", "evaluator bounds", CF + "bounds.py",
     "    if weight > MAX_WEIGHT:\n        raise BoundExceeded(",
     "    if weight >= MAX_WEIGHT:\n        raise BoundExceeded(",
     "EB", "off by one at MAX_WEIGHT: a value of exactly 1,100,000 refused"),
    ("Z05", "evaluator bounds", CF + "bounds.py",
     "if bits > MAX_INT_BITS:",
     "if bits >= MAX_INT_BITS:",
     "EB", "off by one at MAX_INT_BITS: a 4,096-bit integer (2**4095) refused"),
    ("Z06", "evaluator bounds", CF + "bounds.py",
     "if len(group) > MAX_SAME_HASH:",
     "if len(group) >= MAX_SAME_HASH:",
     "EB", "off by one at MAX_SAME_HASH: exactly 16 distinct keys of one hash refused"),
    ("Z07", "evaluator bounds", CF + "bounds.py",
     "size = 2 + value.bit_length() * 302 // 1000 + 1",
     "size = 2 + value.bit_length() // 1000 + 1",
     "EB", "printed_size of an int ~300x too small: str()/'%s' %/config.value of "
           "[2**4000] * 10**3.. pass their size checks and build the text"),
    ("Z08", "evaluator bounds", CF + "percent.py",
     "int(digits or 0) > MAX_FIELD:",
     "int(digits or 0) >= MAX_FIELD:",
     "EB", "off by one at MAX_FIELD: a width or precision of exactly 1000 refused"),
    ("Z09", "evaluator bounds", CF + "percent.py",
     "depth += (text[j] == \"(\") - (text[j] == \")\")",
     "depth -= text[j] == \")\"",
     "EB", "a %(key) ends at its first ')' (unbalanced): '%((x)s)0999999999d' hides its width "
           "from the check"),
    ("Z10", "evaluator bounds", CF + "percent.py",
     "size = conversions * (per + largest)",
     "size = conversions * per + largest",
     "EB", "keyed conversions count the dict's largest value once: '%(a)s%(a)s' % {'a': 600k "
           "chars} builds 1.2M characters"),
    ("Z11", "evaluator bounds", CF + "pure.py",
     "check_weight(value + 1, f\"{what}={value}\")",
     "check_weight(value, f\"{what}={value}\")",
     "EB", "off by one at numpy.linspace/geomspace/logspace's num: num = MAX_WEIGHT accepted"),
    ("Z12", "evaluator bounds", CF + "pure.py",
     "check_weight(count + 1, f\"range{tuple(args)}\")",
     "check_weight(count, f\"range{tuple(args)}\")",
     "EB", "off by one at range's count: range(1_100_000) accepted"),
    ("Z13", "evaluator bounds", CF + "pyconfig.py",
     "check_weight(1 + n * (self.meter.weight(seq) - 1), \"the repeated sequence\")",
     "check_weight(n * (self.meter.weight(seq) - 1), \"the repeated sequence\")",
     "EB", "off by one at a repeated sequence's weight: [0] * 1_100_000 accepted"),
    ("Z14", "evaluator bounds", CF + "pyconfig.py",
     "        if depth > MAX_SYNTAX_DEPTH:",
     "        if depth >= MAX_SYNTAX_DEPTH:",
     "EB", "off by one at MAX_SYNTAX_DEPTH: a syntax tree exactly 200 deep refused"),
    # ============== new at 0c80848 (code added since bdc9936; written from the source only)
    # TL: Triton device tables (kernels/triton/tables.py, staging.py), batch fast path
    ("T15", "triton", TT + "tables.py",
     "for old in [k for k, v in _LAYOUTS.items() if not v.pinned][:len(_LAYOUTS) - LIMIT]:",
     "for old in list(_LAYOUTS)[:len(_LAYOUTS) - LIMIT]:",
     "TL", "the layout cache evicts pinned layouts too: past LIMIT (64) layouts, one a "
           "captured CUDA graph reads (its staging replayed) is dropped and its device table "
           "freed while the graph still reads it"),
    ("T16", "triton", TT + "tables.py",
     "        _LAYOUTS.move_to_end(key)\n        return found",
     "        return found",
     "TL", "a cache hit does not mark the layout recently used: the cache is first-in "
           "first-out, and the layout of the bucket used every step is evicted (and rebuilt "
           "next step) once 64 others were made after it"),
    ("T17", "triton", TT + "tables.py",
     "runs = (per + BLOCK - 1) // BLOCK",
     "runs = per // BLOCK",
     "TL", "the runs of the two-level norm reduction rounded down: a tensor of fewer than "
           "1024 blocks (under ~1M elements) has no run, so its sum of squares is 0 (Triton "
           "norms, clip by global norm, NovoGrad's layer norms wrong); a larger one loses its "
           "last partial run"),
    ("T18", "triton", TT + "tables.py",
     "self.rest_table = table[starts[1] + self.aligned_blocks * _RECORD:starts[2]]",
     "self.rest_table = table[starts[1] + self.aligned_blocks:starts[2]]",
     "TL", "the table of the non-vectorized blocks starts aligned_blocks int64 into the block "
           "records instead of aligned_blocks records (4 int64 each): where some blocks are "
           "vectorized and others not (a tensor size not a multiple of 16), the second launch "
           "reads misframed records: wrong elements updated, wrong norms"),
    ("T20", "triton", TT + "staging.py",
     "return self.replayed or key != self.last or capturing(self.device)",
     "return key != self.last or capturing(self.device)",
     "TL", "after a capture recorded a copy, a value equal to the last one sent is not copied "
           "again: a replay that wrote other addresses (a read pass's table shared by two "
           "models of the same sizes) leaves the eager step reading the replay's gradients"),
    ("T23", "batch fast path", "processing/_batch.py",
     "batch._init_lists(grads, list(params), loss_scale)\n        batch._uniform = True",
     "batch._init_lists(grads, list(params), None)\n        batch._uniform = True",
     "TL", "the C fast path of Gradients.from_grads forgets the pending loss scale: float32 "
           "parameters on one device under a loss scaler (TrainStep/pipeline) have their "
           "scaled gradients applied as they are (S times too large, no overflow skip)"),
    ("T24", "batch fast path", "processing/_batch.py",
     "uniform = (bool(params) and set(map(_DTYPE, params)) == {_F32}",
     "uniform = (bool(params) and _F32 in set(map(_DTYPE, params))",
     "TL", "the native fast path takes parameters of mixed dtypes (float32 and float64) as "
           "uniform float32: the batch is marked _uniform and its norms go through the "
           "float32-only uniform pass (wrong norms or a kernel error for the float64 ones; "
           "needs the native metadata reader)"),
    # ============== new at 175925d (code added since 0c80848; written from the source only)
    # TL, layer "read first": a gradient sharing memory with a variable or slot is copied
    # before any write (contract/read_first.py, step_plan.py, flat_plan.py, kernels/boundary.py)
    ("T26", "read first", KD + "boundary.py",
     "idx = np.searchsorted(starts, end, side=\"left\") - 1",
     "idx = np.searchsorted(starts, start, side=\"left\") - 1",
     "TL", "overlapping searches by the range's start instead of its end: a gradient that "
           "starts exactly where a written tensor starts (p.grad = p, p0.grad = p1.detach()) "
           "finds the range before it and is not seen: read_first does not copy it (the "
           "variable is read after it moved), check_overlap sends it to the fused kernel"),
    ("T27", "read first", CT + "read_first.py",
     "shared = reader is None or (bool(own) and reader.shared(own, PLAIN_TYPES))",
     "shared = reader is None",
     "TL", "where the metadata reader is built, the general path (apply_gradients, no step "
           "plan: shared=None) takes the reader's existence as the filter's answer and never "
           "compares: apply_gradients([(v1, v0), (v0, v1)]) updates v1 with v0's new value"),
    ("T28", "read first", CT + "read_first.py",
     "out[start + i] = own[i].clone(memory_format=torch.contiguous_format)",
     "out[start + i] = own[i].contiguous()",
     "TL", "the 'copy' of a shared gradient is .contiguous(), which returns the tensor itself "
           "when it is contiguous already: a gradient that is another parameter's memory "
           "(p0.grad = p1.detach()) is not copied, and is read after p1 was written"),
    ("T29", "read first", CT + "read_first.py",
     "out[start + i] = own[i].clone(memory_format=torch.contiguous_format)",
     "out[start + i] = grads[i].clone(memory_format=torch.contiguous_format)",
     "TL", "the copy is taken of grads[i] instead of own[i] (the index counted from start): "
           "in a flat plan (start = the number of flat buffers) a loose gradient sharing memory "
           "is replaced by a copy of a flat buffer's gradient (wrong values or a shape error); "
           "only where start > 0"),
    ("T30", "read first", CT + "read_first.py",
     "hit = overlapping(*byte_extents(own), sorted_ranges(*byte_extents(targets)))",
     "hit = overlapping(*byte_extents(targets), sorted_ranges(*byte_extents(own)))",
     "TL", "the two sides of the comparison swapped: hit is indexed by the written tensors, "
           "so the gradient at a written tensor's position is copied, not the one that shares "
           "memory (the shared one read after the write; an IndexError where a hit variable's "
           "position is past the gradients, e.g. with slots)"),
    ("T31", "read first", CT + "step_plan.py",
     "return [*self.params, *(t for b in self.buckets for slot in b.slots.values()\n                                for t in slot)]",
     "return list(self.params)",
     "TL", "the step plan's written tensors leave out the slots: a gradient that is memory of "
           "a slot (a view of an accumulator or of Adam's m) is not copied, and the kernel reads "
           "it after that slot was updated"),
    ("T32", "read first", CT + "flat_plan.py",
     "self._shared = self._loose_plan._shared if self.loose else False",
     "self._shared = False",
     "TL", "a flat plan with loose parameters tells read_first that nothing is shared: a loose "
           "gradient that is memory of a flat buffer's parameter or slot (or of another loose "
           "parameter) is not copied and is read after that memory moved"),
    # TL: the batch's cached parameter record per count (processing/_batch.py)
    ("T33", "batch fast path", "processing/_batch.py",
     "if last is not None and last[1]:",
     "if last is not None:",
     "TL", "_read_gradients tries the last record of as many parameters even where those were "
           "not all float32 on one device: the second from_grads of the same float64 (or mixed) "
           "parameters passes the C pass and is marked _uniform (the float32-only uniform "
           "norms on float64 tensors: wrong norms or a kernel error); needs the native reader"),
    # TL: the Triton path's one-pass checks (kernels/triton/__init__.py, norms.py)
    ("T34", "triton", TT + "__init__.py",
     "return (\"update\", rule, device, half, dtypes, at.tobytes(), counts.tobytes())",
     "return (\"update\", rule, device, half, dtypes, at.tobytes())",
     "TL", "the layout key leaves out the element counts: variables of other sizes at the "
           "same addresses (views buf[:10] then buf[:20], or freed memory the caching "
           "allocator reuses) get the old layout, whose tables span the old sizes (elements "
           "not updated, or written past a tensor)"),
    ("T35", "triton", TT + "__init__.py",
     "return at if np.array_equal(counts, layout.counts) else None",
     "return at",
     "TL", "_gradients_at drops the counts comparison: on a cached layout a gradient with "
           "another element count (same dtype and device) goes to the kernel, which reads the "
           "layout's counts past or short of it, instead of the full boundary's ValueError "
           "(through kernels.triton.run: the optimizer refuses a wrong shape before)"),
    ("T36", "triton", TT + "__init__.py",
     "if not (first == dtype or (first in HALF_DTYPES and dtype == torch.float32)):\n        return None\n    binding",
     "if not (first == dtype or first.is_floating_point()):\n        return None\n    binding",
     "TL", "_gradients_at's dtype test generalized to any float: on a cached layout, float64 "
           "gradients of float32 variables (the only Triton variable dtype, so a half gradient "
           "for float64 variables cannot arise) are accepted and read by the kernel, instead "
           "of the full boundary's ValueError naming the dtype (through kernels.triton.run: "
           "the optimizer refuses such a gradient before)"),
    ("T37", "triton", TT + "norms.py",
     "key = (\"reads\", first.device, first.dtype, counts.tobytes())",
     "key = (\"reads\", first.device, first.dtype, len(counts))",
     "TL", "the read pass's layout is keyed by the number of tensors, not their sizes: a "
           "second list of as many tensors of other sizes reuses the first's tables (l2_norms, "
           "square_sums, clip by global norm: norms over the wrong element counts)"),
    # HB: TensorFlow imported before trainop / Triton (contract/llvm_order.py,
    # interfaces/tensorflow_import.py)
    ("H12", "habits", CT + "llvm_order.py",
     "\"tensorflow\" not in sys.modules or \"triton\" in sys.modules",
     "\"tensorflow\" not in sys.modules",
     "HB", "the check ignores a Triton already loaded: trainop imported first (its hook loaded "
           "Triton at `import tensorflow`), then TensorFlow, then an optimizer built -> "
           "RuntimeError although the order was right (where Triton is installed)"),
    ("H13", "habits", CT + "llvm_order.py",
     "importlib.util.find_spec(\"triton\") is None):",
     "importlib.util.find_spec(\"triton\") is not None):",
     "HB", "the installed-Triton test inverted: where Triton is installed the check never "
           "refuses (LLVM aborts the process), where it is not every optimizer built after "
           "`import tensorflow` is refused"),
    ("H14", "habits", "interfaces/tensorflow_import.py",
     "sys.meta_path.insert(0, _TritonFirst())",
     "sys.meta_path.append(_TritonFirst())",
     "HB", "the import hook goes last on sys.meta_path: the path finder finds tensorflow "
           "first, the hook never runs, and a script importing trainop then tensorflow gets "
           "the TensorFlow-first RuntimeError (or LLVM's abort) at its first optimizer"),
    # RV: --set validation (interfaces/recipes/settings.py, overrides.py)
    ("V12", "recipe values", RC + "settings.py",
     "not all(part.isidentifier() for part in name.split(\".\"))",
     "not name.replace(\".\", \"_\").isidentifier()",
     "RV", "--set names with an empty dotted part are accepted: 'optimizer_params.=1', "
           "'a..b=1' and 'x.=1' pass (an empty key set in the option's dict) instead of the "
           "ValueError naming the item"),
    ("V13", "recipe values", RC + "settings.py",
     "out[name] = Text(value)",
     "out.setdefault(name, Text(value))",
     "RV", "a repeated --set name keeps its FIRST value (documented: the last wins): "
           "--set lr=1 --set lr=2 trains with 1"),
    ("V14", "recipe values", RC + "overrides.py",
     "if not isinstance(nested, Mapping | None):",
     "if not isinstance(nested, Mapping):",
     "RV", "a dotted override of an option the recipe does not give (or gives as None) is "
           "refused with TypeError instead of starting a dict: --set "
           "lr_policy_params.decay_steps=1000 fails where the file has no lr_policy_params"),
    ("V16", "recipe values", RC + "overrides.py",
     "value = {**(nested or {}), sub: value}",
     "value = {sub: value, **(nested or {})}",
     "RV", "a dotted override loses to the file's own entry: --set optimizer_params.beta1=0.8 "
           "is silently ignored where the recipe gives beta1 (only new keys take effect)"),
    ("V17", "recipe values", RC + "settings.py",
     "without.options.get(k, _NONE))]",
     "recipe.options.get(k, _NONE))]",
     "RV", "the load without a --set NAME is compared with the recipe itself: no training "
           "option ever 'changes', so a RETURNN --set of a name the file uses to compute an "
           "option (learning_rate_base=...) is refused as changing none"),
    # CR: save_tf switching the index last (interfaces/checkpoints/switch.py, bundle.py)
    ("K19", "checkpoint writer", CK + "switch.py",
     "num_shards = 2 if current_shards == 1 else 1",
     "num_shards = 1",
     "CR", "the new data always goes under the one-shard name: saving over a one-shard "
           "checkpoint overwrites the data file its index names before the index is "
           "replaced, so a failure (or a reader) in between meets new data beside the old "
           "index (CRC failure), and the old checkpoint is lost"),
    ("K20", "checkpoint writer", CK + "switch.py",
     "        for partial, shard in zip(partials, shards, strict=False):\n            os.replace(partial, shard)  # names the current index does not use\n        os.replace(partials[-1], index)  # the switch",
     "        os.replace(partials[-1], index)  # the switch\n        for partial, shard in zip(partials, shards, strict=False):\n            os.replace(partial, shard)  # names the current index does not use",
     "CR", "the index is replaced FIRST: when a data file's rename fails, the new index names "
           "data files that are missing (then removed), and neither checkpoint is readable"),
    ("K22", "checkpoint writer", CK + "switch.py",
     "_unlink([shard_name(prefix, i, current_shards) for i in range(current_shards)])",
     "_unlink([shard_name(prefix, i, num_shards) for i in range(current_shards)])",
     "CR", "after the switch the NEW layout's data files are removed instead of the old "
           "one's: a second save_tf at the same prefix leaves an index without its data "
           "(and the old data files stay)"),
    ("K23", "checkpoint writer", CK + "bundle.py",
     "encode([(1, num_shards), (3, encode([(1, _PRODUCER)]))])",
     "encode([(1, 1), (3, encode([(1, _PRODUCER)]))])",
     "CR", "the index header always says one shard: the second save at a prefix writes "
           "'-of-00002' data that its index does not name (read_tf/load_tf then look for "
           "'-of-00001', removed)"),
]

MUTANTS_ROUND5_EXTRA = [
    # TL
    ("T12", "triton", KD + "boundary.py",
     "elif x.numel() != v.numel() or (k > 0 and x.dim() != 0 and x.shape != v.shape):",
     "elif x.numel() != v.numel():",
     "TL", "a gradient/slot with its variable's element count but another shape is accepted "
           "by the kernels' boundary (ValueError expected)"),
    ("T13", "triton", KD + "dispatch.py",
     "if any(c is None for c in found) or len({c.dtype for c in found}) != 1:",
     "if any(c is None for c in found):",
     "TL", "a bucket of masters whose model copies mix float16 and bfloat16 is handed to one "
           "Triton call with half=...: the boundary raises for the copies of the other dtype"),
    ("T14", "triton", TT + "__init__.py",
     "if device.type != \"cuda\" and not (device.type == \"cpu\" and interpreted()):",
     "if device.type not in (\"cuda\", \"cpu\"):",
     "TL", "CPU tensors are offered to Triton without its interpreter (supports() true on the "
           "CPU): a compile error where the foreach path should run"),
    # BT
    ("B10", "betas", CT + "checkpoint.py",
     "opt._validate_group_values({\"beta1\": betas[0], \"beta2\": betas[1]})",
     "opt._validate_group_values({\"beta1\": betas[0]})",
     "BT", "rewritten: a checkpoint's betas no longer has to equal (beta1, beta2) (betas wins "
           "at the load), so the bug is in its range check instead: betas' second element is "
           "not checked, and a checkpoint with betas=(0.9, 1.5) loads, its group running "
           "beta2=1.5"),
    ("B11", "betas", CT + "betas.py",
     "        _record(seen, group, (group[\"beta1\"], group[\"beta2\"]))",
     "        seen[id(group)] = (group, (group[\"beta1\"], group[\"beta2\"]))",
     "BT", "after a load the groups' betas key is not rewritten: a checkpoint without betas "
           "leaves groups without it until the next step"),
    # HB
    ("H10", "habits", CT + "scheduled_lr.py",
     "_MAX_FORWARDING = 8",
     "_MAX_FORWARDING = 1",
     "HB", "rewritten: no scheduler keys are written before the refusal any more; instead "
           "only one forwarding param_groups property is looked through: a scheduler over a "
           "wrapper of a wrapper (accelerate's around another forwarding one) is not refused"),
    ("H11", "habits", "schedules/_base.py",
     "__float__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _not_a_number",
     "__mul__ = __rmul__ = __truediv__ = __rtruediv__ = _not_a_number",
     "HB", "float(policy) (ReduceLROnPlateau's first reduction) gives Python's bare TypeError "
           "without the advice (message-level)"),
    # RV
    ("V11", "recipe values", RC + "recipe.py",
     "        if sub and isinstance(value, Mapping):",
     "        if isinstance(value, Mapping):",
     "RV", "an unresolved whole option supplied as a dict by an override stays pending "
           "(value.get('') is absent)"),
    # OR
    ("O21", "novograd/replay", TR + "compare_tf.py",
     "d = d * (1.0 - kwargs[\"beta1\"])",
     "d = d * (1.0 - kwargs[\"beta2\"])",
     "OR", "NovoGrad replay's grad_averaging uses beta2 (OpenSeq2Seq: 1 - beta1)"),
    ("O22", "novograd/replay", TR + "replay_plan.py",
     "\"weight_decay\",\n                                   \"grad_averaging\")}",
     "\"weight_decay\")}",
     "OR", "the NovoGrad replay plan lacks grad_averaging: _novograd raises KeyError"),
    ("O23", "novograd/replay", TR + "compare_tf.py",
     "tf.pow(2.0, 16.0 - (mu + a[\"overflow_std_dev\"] * sigma))",
     "tf.pow(2.0, a[\"log_max\"] - (mu + a[\"overflow_std_dev\"] * sigma))",
     "OR", "LogMax replay uses log_max in the exponent (trainop's fixed rule) instead of "
           "OpenSeq2Seq's literal 16; equal at the default log_max=16, differs for any other"),
    ("O24", "novograd/replay", TR + "replay_plan.py",
     "lr_multiplier=rate / base if base else 1.0",
     "lr_multiplier=base / rate if rate else 1.0",
     "OR", "RETURNN learning_rate_multiplier inverted in the replay plan"),
    # EG
    ("E11", "engine", EN + "updater.py",
     "return bool(is_enabled()) if callable(is_enabled) else True",
     "return bool(is_enabled()) if callable(is_enabled) else False",
     "EG", "a grad scaler without is_enabled is taken as disabled: its scaled gradients are "
           "applied as they are"),
    ("E12", "engine", EN + "updater.py",
     "        opts = {} if amp is not None else None",
     "        opts = {}",
     "EG", "without torch_amp and grad_scaler the config is read as having RETURNN's default "
           "scaler: fp32 configs refused under semantics='tf' (observable on CUDA, or with a "
           "patched GradScaler)"),
    ("E13", "engine", RT + "updater.py",
     "            if not self._torch:\n                raise ValueError(f\"Expected no `grad_scaler` with backend 'tf'",
     "            if self._torch is None:\n                raise ValueError(f\"Expected no `grad_scaler` with backend 'tf'",
     "EG", "Updater.step(grad_scaler=) is not refused with backend 'tf'"),
    # CR
    ("K15", "checkpoint reader", CK + "bundle.py",
     "MAX_RANK = 254",
     "MAX_RANK = 255",
     "CR", "one past MAX_RANK: a 255-dimension shape accepted"),
    ("K16", "checkpoint reader", CK + "bundle.py",
     "if _first(version, 2, what) > _PRODUCER:",
     "if _first(version, 2, what) >= _PRODUCER:",
     "CR", "off by one at the bundle version: min_consumer == 1 refused"),
    ("K17", "checkpoint reader", CK + "bundle.py",
     "data = read_regular(index, MAX_INDEX_BYTES, lambda",
     "data = read_regular(index, MAX_INDEX_BYTES - 1, lambda",
     "CR", "off by one at MAX_INDEX_BYTES: an index of exactly 256 MiB refused"),
    ("K18", "checkpoint reader", CK + "bundle.py",
     "if size != expected:",
     "if size < expected:",
     "CR", "an entry storing more bytes than its shape needs is read (then fails to reshape "
           "with torch's RuntimeError instead of CorruptCheckpoint)"),
    # EB
    ("Z15", "evaluator bounds", CF + "bounds.py",
     "if not any(k is key or k == key for k in group):",
     "if not any(k is key for k in group):",
     "EB", "equal keys that are not the same object (1, 1.0, True; equal strings built "
           "separately) count as distinct hash collisions: a dict comprehension with many "
           "repeated equal keys is refused"),
    ("Z16", "evaluator bounds", CF + "bounds.py",
     "else 10 * len(value))",
     "else len(value))",
     "EB", "printed_size of a non-ASCII/unprintable string is its length: '%r' % of such a "
           "string can build up to 10x MAX_WEIGHT characters"),
    ("Z17", "evaluator bounds", CF + "pure.py",
     "count = max(0, math.ceil((stop - start) / step))",
     "count = max(0, int((stop - start) / step))",
     "EB", "numpy.arange's count rounded down: one element more than checked (off by one at "
           "the bound for a non-integer span)"),
    ("Z18", "evaluator bounds", CF + "pure.py",
     "if any(isinstance(v, int) and not -2**63 <= v < 2**63 for v in values):",
     "if any(isinstance(v, int) and not -2**63 <= v <= 2**63 for v in values):",
     "EB", "off by one at arange's 64-bit bound: 2**63 accepted"),
    ("Z19", "evaluator bounds", CF + "pyconfig.py",
     "if \"f\" in prefix and token.string.count(\"{\") > MAX_FSTRING_FIELDS:",
     "if \"f\" in prefix and token.string.count(\"{\") >= MAX_FSTRING_FIELDS:",
     "EB", "off by one at MAX_FSTRING_FIELDS: an f-string of exactly 10,000 fields refused "
           "(also needs > 10,000 '{' in the file to be tokenized)"),
    ("Z20", "evaluator bounds", CF + "returnn_lookups.py",
     "+ len(separator) * max(len(parts) - 1, 0), \"config.value(...) joined\")",
     "+ len(separator), \"config.value(...) joined\")",
     "EB", "config.value's join counts the list_join_str once: a long separator between many "
           "parts passes the size check"),
    ("Z21", "evaluator bounds", CF + "percent.py",
     "if len(digits) > len(str(MAX_FIELD)) or int(digits or 0) > MAX_FIELD:",
     "if int(digits or 0) > MAX_FIELD:",
     "EB", "a width of thousands of digits is parsed by int() (ValueError past Python's digit "
           "limit, not NotFormattable; slow int parsing of a huge field)"),
    # new at 0c80848, narrower (GPU/compile-only, a rare aliasing, a message or a file left)
    ("T19", "triton", TT + "tables.py",
     "                at, at + self.counts * tensors[0].element_size(), self.written).any()):",
     "                at, at + self.counts * tensors[0].element_size(), self.written).all()):",
     "TL", "refresh refuses the one-launch path only when EVERY gradient overlaps memory a "
           "kernel writes: one gradient aliasing a variable or slot (p.grad sharing p's "
           "storage) goes through the fused launch, which may write before it reads"),
    ("T21", "triton", TT + "staging.py",
     "            if frozen:\n                continue\n",
     "",
     "TL", "a host row a captured CUDA graph reads is written again by a later send: the "
           "graph's replays then copy the newer values (wrong addresses or hyperparameters "
           "in a replayed step)"),
    ("T22", "batch fast path", "processing/_batch.py",
     "batch = None if torch.compiler.is_compiling() else cls._uniform_grads(params, loss_scale)",
     "batch = cls._uniform_grads(params, loss_scale)",
     "TL", "the C fast path also runs under torch.compile: the native reader meets fake/"
           "functional tensors while tracing (an error or a graph break where the plain loop "
           "traces)"),
    ("T25", "batch fast path", "processing/_batch.py",
     "\n                    or list(map(_SHAPE, grads)) != list(map(_SHAPE, params))):",
     "):",
     "TL", "the fallback fast path (no native metadata reader, or parameter subclasses) skips "
           "the shape check: a gradient of another shape is accepted silently instead of "
           "from_grads' TypeError"),
    ("T38", "triton", TT + "__init__.py",
     "found = binding.plain_on([grads], (first,), layout.device)",
     "found = binding.plain_on([grads], (first,), grads[0].device)",
     "TL", "on a cached layout the gradients are checked against their own first one's "
           "device, not the layout's: CPU (or another GPU's) gradients of CUDA variables are "
           "accepted and their host addresses go to the kernel (GPU only)"),
    ("H15", "habits", "interfaces/tensorflow_import.py",
     "            with contextlib.suppress(ValueError):\n                sys.meta_path.remove(self)\n            load_triton_first()",
     "            load_triton_first()",
     "HB", "the one-shot import hook never removes itself: it stays on sys.meta_path, asked "
           "for every later import"),
    ("V15", "recipe values", RC + "overrides.py",
     "value = final_value(value) if isinstance(value, Text) else value",
     "value = final_value(value) if isinstance(value, str) else value",
     "RV", "a plain str override from the Python API (load_recipe(overrides={'x': '1e-3'})) "
           "is read as --set text: '1e-3' becomes a float where the API takes it as given"),
    ("K21", "checkpoint writer", CK + "switch.py",
     "        _unlink(partials)\n        _unlink(shards)\n        raise",
     "        _unlink(partials)\n        raise",
     "CR", "a failed save leaves the new data files it renamed but never switched to (the "
           "'-of-00002' files beside a one-shard checkpoint)"),
]

#: every round-5 mutant, the driver's list (``--round 5``)
MUTANTS = MUTANTS_ROUND5 + MUTANTS_ROUND5_EXTRA

#: mutants shown equivalent, with the reason (filled in by the audit, never by guess)
EQUIVALENT: dict[str, str] = {}
