"""RETURNN's torch engine's updater, made of ``trainop.Updater``.

RETURNN's torch engine (``returnn.torch.engine.Engine``) builds its updater as
``Updater(config=, network=, device=, initial_learning_rate=)`` and then calls, per epoch,
``set_learning_rate(lr)`` and ``set_current_train_step(global_train_step=, epoch=,
epoch_continuous=)``; per micro-step ``zero_grad()`` at the start of its accumulation window,
the backward, ``step(grad_scaler=)`` at the end of the window (then it reads
``log_grad_norm_p``/``last_grad_norm``), and ``set_current_train_step`` again; at the epoch's end
``save_optimizer(filename)``; ``load_optimizer(filename)`` when it resumes.

``EngineUpdater`` answers all of them with one ``trainop.Updater`` and hands it every
micro-step exactly once: on ``step`` (the engine's update steps) or, for the other micro-steps,
on the ``set_current_train_step`` that follows them (the engine's ``global_train_step`` moved on
by one without a ``step``). Each micro-step's gradients leave ``.grad`` for the Updater's
accumulators, so the engine's backward always writes fresh ones.

- ``semantics="torch"``: the Updater with ``backend="torch"``; the engine's decision to update
  is the Updater's (RETURNN's torch updater, bit for bit: windows restart every epoch, a partial
  window is dropped, the lr function gets host numbers and the epoch).
- ``semantics="tf"``: the Updater with ``backend="tf"`` decides by itself (RETURNN's TF rule:
  an update when ``global_train_step mod N == N - 1``, windows across epochs, G of the raw
  micro-step, epsilon 1e-16, the NaN filter, every TF-updater option).

The ``.opt.pt`` file has RETURNN's keys (``optimizer``, ``optimizer_class_name``,
``optimizer_opts``, ``param_names``, ``epoch``, ``step``, ``effective_learning_rate``,
``returnn_version``) plus ``trainop`` (the Updater's ``state_dict``: accumulators and counters)
and ``trainop_semantics``; a file RETURNN's own updater wrote loads too (its ``optimizer``).
The gradients of a partial accumulation window are saved under TF semantics only (its windows
run across epochs, so a resume continues them); under torch semantics the resume's new epoch
drops them, as RETURNN's engine does, so the file does not carry them.
"""

from __future__ import annotations

import os
from types import BuiltinFunctionType, FunctionType
from typing import Any

import torch

from trainop.configs.reading import open_regular
from trainop.contract.checkpoint import validate_loadable
from trainop.contract.validation import describe
from trainop.training.returnn.options import DEFAULTS
from trainop.training.returnn.updater import Updater

__all__ = ["EngineUpdater", "TFSemanticsUpdater", "TorchSemanticsUpdater"]


def _opts_for_checkpoint(obj: Any) -> Any:
    """The optimizer options with only what ``torch.load(weights_only=True)`` reads: classes
    and functions become their dotted names, other objects ``"object:<repr>"``."""
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, dict):
        return {_opts_for_checkpoint(k): _opts_for_checkpoint(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_opts_for_checkpoint(v) for v in obj)
    if isinstance(obj, (type, FunctionType, BuiltinFunctionType)):
        return f"{obj.__module__}.{obj.__qualname__}"
    return f"object:{obj!r}"


_UNSET = object()


def _scaler_enabled(scaler: Any) -> bool:
    is_enabled = getattr(scaler, "is_enabled", None)
    return bool(is_enabled()) if callable(is_enabled) else True


def _check_grad_scaler_config(config: Any) -> None:
    """Under ``semantics="tf"``, refuse before any micro-step the GradScaler RETURNN's engine
    would make enabled from ``torch_amp``/``grad_scaler`` (its rule: ``grad_scaler`` at the
    top level or in a ``torch_amp`` dict; unspecified means ``{}`` when ``torch_amp`` is set;
    ``None`` means no scaler; the options go to ``torch.cuda.amp.GradScaler``, which is
    disabled without CUDA unless told otherwise): RETURNN's TF updater has no loss scaling to
    reproduce. Under torch semantics every scaler is honoured (``EngineUpdater.step``)."""
    amp = config.typed_value("torch_amp", None)
    opts = config.typed_value("grad_scaler", None) if config.has("grad_scaler") else _UNSET
    dtype = amp
    if isinstance(amp, dict):
        dtype = amp.get("dtype")
        opts = amp.get("grad_scaler", opts)
    if opts is _UNSET:
        opts = {} if amp is not None else None
    if not isinstance(opts, dict):
        return  # None: no scaler; anything else RETURNN's engine refuses itself
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available. Disabling"; deprecation
        try:
            enabled = torch.cuda.amp.GradScaler(**opts).is_enabled()
        except (TypeError, ValueError, RuntimeError):
            return  # RETURNN's engine raises for these options itself
    if not enabled:
        return
    name = str(dtype).replace("torch.", "")
    if name == "bfloat16":
        advice = ("bfloat16 has float32's exponent range and needs no loss scaling: set "
                  "`grad_scaler = None` in the config (or `torch_amp = {'dtype': 'bfloat16', "
                  "'grad_scaler': None}`)")
    elif name == "float16":
        advice = ("float16 needs loss scaling: use `use_in_engine(semantics='torch')`, which "
                  "honours the engine's GradScaler as RETURNN's torch updater does")
    else:
        advice = "set `grad_scaler = None` in the config, or use semantics='torch'"
    raise ValueError(
        f"Expected no enabled grad scaler with trainop's engine updater under "
        f"semantics='tf' (RETURNN's TF updater has no loss scaling), got torch_amp={amp!r} "
        f"and grad_scaler options {opts!r}, which RETURNN's engine makes an enabled "
        f"GradScaler on this machine: {advice}")


class EngineUpdater:
    """The updater RETURNN's torch engine calls (see the module doc); ``semantics`` is set by
    the subclasses ``TorchSemanticsUpdater`` and ``TFSemanticsUpdater``."""

    semantics = "torch"

    def __init__(self, *, config: Any, network: torch.nn.Module, device: Any,
                 initial_learning_rate: float = 1.0) -> None:
        for key, why in (("torch_optimizer_step", "a compiled, captured optimizer step"),
                         ("torch_cuda_graph", "a captured train step")):
            if config.typed_value(key, None) is not None:
                raise ValueError(f"Expected no `{key}` with trainop's engine updater ({why} "
                                 f"bypasses it), got {config.typed_value(key)!r}")
        if self.semantics == "tf":
            _check_grad_scaler_config(config)
        self.config = config
        self.network = network
        self._device = device
        options = {key: config.typed_value(key) for key in DEFAULTS if config.has(key)}
        options["backend"] = self.semantics
        accum = options.get("accum_grad_multiple_step")
        many = callable(accum) or (isinstance(accum, int | float) and accum > 1)
        if self.semantics == "tf" and many and \
                torch.distributed.is_available() and torch.distributed.is_initialized():
            raise ValueError(f"Expected no `accum_grad_multiple_step` in distributed training "
                             f"with semantics='tf' (RETURNN's engine reduces the gradients at "
                             f"the end of its own windows only), got {accum!r}")
        self.updater = Updater(options, network, initial_learning_rate=float(
            initial_learning_rate))
        self.learning_rate = float(initial_learning_rate)
        self.log_grad_norm_p = self.updater.log_grad_norm_p
        self.last_grad_norm: torch.Tensor | None = None
        self._engine_step: int | None = None  # global_train_step of the last call
        self._stepped = False  # step() ran for the current micro-step

    # ------------------------------------------------------------------ the optimizer
    def create_optimizer(self) -> None:
        """Build the Updater's optimizer (RETURNN: ``create_optimizer``)."""
        self.updater.get_optim_op()

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.updater.optimizer

    def get_optimizer(self) -> torch.optim.Optimizer:
        return self.updater.optimizer

    # ------------------------------------------------------------------ learning rate
    def set_learning_rate(self, value: float) -> None:
        self.learning_rate = float(value)
        self.updater.set_learning_rate(value)

    def get_effective_learning_rate(self) -> float:
        return float(self.updater.get_current_step_learning_rate())

    def set_current_train_step(self, *, global_train_step: int, epoch: int,
                               epoch_continuous: float | None = None) -> None:
        """After a micro-step without ``step``, hand it to the Updater first; then tell the
        Updater where the training stands."""
        if (self._engine_step is not None and global_train_step == self._engine_step + 1
                and not self._stepped):
            self.updater.step(update=False if self.semantics == "torch" else None)
        self._stepped = False
        self._engine_step = int(global_train_step)
        self.updater.set_current_train_step(global_train_step=int(global_train_step),
                                            epoch=epoch, epoch_continuous=epoch_continuous)

    def use_device_lr_tensors(self, device: Any) -> None:
        raise ValueError(f"Expected no device learning-rate tensors with trainop's engine "
                         f"updater (RETURNN's captured optimizer step bypasses it), got a call "
                         f"for {device!r}")

    # ------------------------------------------------------------------ the step
    def zero_grad(self) -> None:
        """The engine starts an accumulation window: no gradient is left in ``.grad`` (the
        Updater took every micro-step's; a new epoch dropped a partial window, backend
        torch)."""
        for p in self.network.parameters():
            p.grad = None

    def step(self, *, grad_scaler: Any = None) -> None:
        """The engine's update step: this micro-step goes to the Updater (an update under
        torch semantics; under tf semantics the Updater's own rule decides). An enabled
        ``grad_scaler`` (``torch_amp`` with RETURNN's GradScaler) scaled every backward of the
        window: under torch semantics the Updater unscales the accumulated gradients, steps
        through the scaler and updates it, as RETURNN's torch updater does."""
        enabled = grad_scaler is not None and _scaler_enabled(grad_scaler)
        if enabled and self.semantics == "tf":
            raise ValueError(f"Expected no enabled grad scaler with trainop's engine updater "
                             f"under semantics='tf' (RETURNN's TF updater has no loss "
                             f"scaling; set `grad_scaler = None` in the config or use "
                             f"semantics='torch'), got {describe(grad_scaler)}")
        # A disabled GradScaler (RETURNN's default one where CUDA is absent, or
        # ``grad_scaler = {"enabled": False}``) scales, unscales and steps as the identity:
        # RETURNN's own updater then makes the plain update, which this is.
        self.updater.step(update=True if self.semantics == "torch" else None,
                          grad_scaler=grad_scaler if enabled else None)
        self._stepped = True
        self.last_grad_norm = self.updater.last_grad_norm

    # ------------------------------------------------------------------ checkpoints
    def _param_names(self) -> list[str]:
        names = {id(p): n for n, p in self.network.named_parameters()}
        return [names[id(p)] for g in self.optimizer.param_groups for p in g["params"]]

    def save_optimizer(self, filename: str) -> None:
        """RETURNN's ``.opt.pt`` (written to a temporary file, then renamed) plus the
        Updater's ``state_dict``."""
        directory = os.path.dirname(filename)
        if directory:
            os.makedirs(directory, exist_ok=True)
        import returnn

        tmp = filename + ".tmp_write"
        torch.save({
            "optimizer": self.optimizer.state_dict(),
            "optimizer_class_name": type(self.optimizer).__name__,
            "optimizer_opts": _opts_for_checkpoint(self.config.typed_value("optimizer", None)),
            "param_names": self._param_names(),
            "epoch": self.updater.epoch,
            "step": int(self.updater.global_train_step),
            "effective_learning_rate": self.get_effective_learning_rate(),
            "returnn_version": returnn.__long_version__,
            # torch semantics: a resume starts a new epoch, which drops a partial window
            "trainop": self.updater.state_dict(partial_window=self.semantics == "tf"),
            "trainop_semantics": self.semantics,
        }, tmp)
        os.replace(tmp, filename)

    def load_optimizer(self, filename: str) -> None:
        """A ``.opt.pt`` of this updater (the whole Updater state) or of RETURNN's own torch
        updater (its ``optimizer`` state; the parameters must be the same, in the same
        order)."""
        fd, _ = open_regular(  # a FIFO would block torch.load for ever
            os.fspath(filename), 1 << 62,
            lambda message: ValueError(f"The optimizer file {filename!r} {message}"),
            noun="an optimizer file",
            missing=lambda _: FileNotFoundError(f"No optimizer file {filename!r}"))
        with os.fdopen(fd, "rb") as handle:
            state = torch.load(handle, map_location=self._device)
        if not isinstance(state, dict):
            raise ValueError(f"Expected the optimizer file {filename!r} to hold a dict, got "
                             f"{describe(state)}")
        if "optimizer" not in state and {"param_groups", "state"} <= set(state):
            state = {"optimizer": state}  # RETURNN's old format
        names = state.get("param_names")
        if names is not None and names != self._param_names():
            raise ValueError(f"Expected the optimizer file {filename!r} to hold the parameters "
                             f"{describe(self._param_names())} in this order, got "
                             f"{describe(names)}: another model's")
        if "trainop" in state:
            if state.get("trainop_semantics") != self.semantics:
                raise ValueError(f"Expected the optimizer file {filename!r} to be written with "
                                 f"semantics={self.semantics!r}, got "
                                 f"{state.get('trainop_semantics')!r}")
            self.updater.load_state_dict(state["trainop"])
            return
        if len(self.updater.optimizers) != 1:
            raise ValueError("Expected one optimizer to load RETURNN's own optimizer file into, "
                             f"got {len(self.updater.optimizers)} (updater_opts groups)")
        try:  # torch's load_state_dict checks neither shapes nor finiteness
            validate_loadable(self.optimizer, state["optimizer"])
        except ValueError as error:
            raise ValueError(f"The optimizer file {filename!r}: {error}") from None
        self.optimizer.load_state_dict(state["optimizer"])


class TorchSemanticsUpdater(EngineUpdater):
    """RETURNN's torch updater's semantics (bit-identical to it)."""

    semantics = "torch"


class TFSemanticsUpdater(EngineUpdater):
    """RETURNN's TF updater's semantics in the torch engine."""

    semantics = "tf"
