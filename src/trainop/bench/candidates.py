"""What gets timed: trainop implementations and their peers, each buildable over a workload.

A candidate's ``id`` is unique within a workload and shared between the optimizer groups that
compare against it (``torch:Adam[fused]`` is measured once and shown under Adam, LazyAdam and
NovoGrad). Ids: ``trainop:<Class>[<implementation>]``, ``torch:<Class>[<for-loop|foreach|fused>]``,
``tf1:<Class>`` (contrib's ``tf1:MomentumWOptimizer`` and ``tf1:AdamWOptimizer``: the base
class's kernel behind contrib's decay op).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainop.bench.specs import spec_for
from trainop.bench.tf1_peer import Tf1Run
from trainop.bench.torch_peers import PEERS, make_torch_optimizer, torch_implementations
from trainop.bench.workloads import Workload, WorkloadData
from trainop.contract.flat import flatten
from trainop.registry import OPTIMIZER_CLASSES

__all__ = ["AUTO", "FLAT", "Candidate", "Group", "Runnable", "implementations_of", "plan_groups"]

AUTO = "auto"  # implementation=None: the optimizer's own choice
FLAT = "flat"  # the automatic choice after trainop.flatten (one update per flat buffer)


def implementations_of(cls: type) -> tuple[str, ...]:
    """The implementations a trainop class offers (``("reference",)`` before they existed)."""
    return tuple(getattr(cls, "IMPLEMENTATIONS", ("reference",)))


@dataclass(frozen=True)
class Candidate:
    """One thing to time over a workload."""

    id: str
    kind: str  # "trainop", "torch" or "tf1"
    name: str  # trainop, torch.optim or TF1 (tf.compat.v1.train, or contrib's) class name
    implementation: str
    arrays: int  # traffic floor, full-size arrays per step
    note: str = ""
    key: str = ""  # torch: key in torch_peers.PEERS; tf1: the trainop class whose spec it mirrors

    @property
    def short(self) -> str:
        """Label used in ratio cells."""
        if self.kind == "tf1":
            return "TF1"
        if self.kind == "torch":
            return f"torch.{self.name}[{self.implementation}]"
        return f"{self.name.removesuffix('Optimizer')}[{self.implementation}]"

    @property
    def label(self) -> str:
        """Label used in the run column."""
        if self.kind == "tf1":
            return f"TF1 {self.name} ({self.implementation})"
        if self.kind == "torch":
            return f"torch.optim.{self.name} {self.implementation}"
        return f"trainop {self.name} {self.implementation}"


@dataclass(frozen=True)
class Group:
    """An optimizer's own implementations (subjects) and what they are compared with (peers)."""

    optimizer: str
    subjects: tuple[str, ...]
    peers: tuple[str, ...]


class Runnable:
    """A built candidate: ``step()`` once per optimizer step, ``close()`` to free it."""

    def __init__(self, step: Callable[[], object], close: Callable[[], None],
                 measures_memory: bool) -> None:
        self.step = step
        self.close = close
        self.measures_memory = measures_memory


def trainop_candidate(class_name: str, implementation: str) -> Candidate:
    return Candidate(f"trainop:{class_name}[{implementation}]", "trainop", class_name,
                     implementation, spec_for(class_name).arrays)


def tf1_candidate(class_name: str) -> Candidate:
    """TF1's peer of a trainop class: its ``tf.compat.v1.train`` kernel, or for a ``tf1_decay``
    spec contrib's class of the same name, rebuilt as the decay op plus the base kernel."""
    spec = spec_for(class_name)
    if spec.tf1 is None:
        raise ValueError(f"{class_name} has no TF1 peer")
    if spec.tf1_decay:
        return Candidate(f"tf1:{class_name}", "tf1", class_name,
                         f"contrib's decay op + {spec.tf1}", spec.arrays, key=class_name)
    return Candidate(f"tf1:{spec.tf1}", "tf1", spec.tf1, "graph kernel", spec.arrays,
                     key=class_name)


def plan_groups(workload: Workload, optimizers: Sequence[str], implementations: Sequence[str]
                | None, *, torch_peers: bool, tf1_peers: bool
                ) -> tuple[list[Group], dict[str, Candidate], list[str]]:
    """Groups, the unique candidates they name (in run order), and notes on what was left out.

    ``implementations`` None means every implementation each class offers.
    """
    candidates: dict[str, Candidate] = {}
    groups: list[Group] = []
    notes: list[str] = []

    def add(c: Candidate) -> str:
        candidates.setdefault(c.id, c)
        return c.id

    for name in optimizers:
        cls = OPTIMIZER_CLASSES[name]
        spec = spec_for(name)
        offered = implementations_of(cls)
        if implementations is None:
            wanted = list(offered) + [AUTO] + ([] if workload.sparse else [FLAT])
        else:
            wanted = [i for i in implementations if i in offered or i == AUTO
                      or (i == FLAT and not workload.sparse)]
            missing = [i for i in implementations if i not in wanted
                       and not (i == FLAT and workload.sparse)]  # flat: dense workloads only
            if missing:
                notes.append(f"{name} has no implementation {', '.join(missing)} "
                             f"(offers {', '.join(offered)})")
        if not wanted:
            continue
        subjects = tuple(add(trainop_candidate(name, impl)) for impl in wanted)
        peers: list[str] = []
        if workload.sparse:
            for other in spec.sparse_trainop_peers:
                c = trainop_candidate(other, AUTO)
                peers.append(add(Candidate(c.id, c.kind, c.name, c.implementation, c.arrays,
                                           "TF semantics: every row moves (dense-equivalent)"
                                           )))
        if torch_peers:
            keys = spec.sparse_peers if workload.sparse else (spec.torch_peer,)
            for key in keys:
                if key is None:
                    continue
                peer = PEERS[key]
                if peer.sparse_only and not workload.sparse:
                    continue
                for impl in torch_implementations(peer, workload.sparse):
                    peers.append(add(Candidate(f"torch:{peer.label}[{impl}]", "torch",
                                               peer.label, impl, peer.arrays,
                                               spec.torch_relation, key)))
        if tf1_peers and spec.tf1 is not None:
            peers.append(add(tf1_candidate(name)))
        groups.append(Group(name, subjects, tuple(dict.fromkeys(peers))))
    return groups, candidates, notes


def build(candidate: Candidate, data: WorkloadData, *, device: torch.device, tf: Any,
          threads: int) -> Runnable:
    """Build ``candidate`` over fresh copies of ``data`` (TF1: its own variables)."""
    if candidate.kind == "tf1":
        spec = spec_for(candidate.key)
        run = Tf1Run(tf, spec.tf1, spec.tf1_kwargs, data, device, threads,
                     decoupled_decay=spec.tf1_decay)
        return Runnable(run.step, run.close, measures_memory=False)
    params, grads = data.clone()
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    if candidate.kind == "torch":
        peer = PEERS[candidate.key]
        opt = make_torch_optimizer(peer, candidate.implementation, params)
    else:
        cls = OPTIMIZER_CLASSES[candidate.name]
        kwargs = dict(spec_for(candidate.name).kwargs)
        if hasattr(cls, "IMPLEMENTATIONS"):
            kwargs["implementation"] = (None if candidate.implementation in (AUTO, FLAT)
                                        else candidate.implementation)
        elif candidate.implementation not in (AUTO, "reference"):
            raise ValueError(f"{candidate.name} has no implementation "
                             f"{candidate.implementation!r}")
        opt = cls(params=params, **kwargs)
        if candidate.implementation == FLAT:
            flatten(opt)  # the gradients set above are copied into the gradient buffer

    def close() -> None:
        opt.state.clear()
        opt.param_groups.clear()
        params.clear()
        grads.clear()

    return Runnable(opt.step, close, measures_memory=True)

