"""``trainop bench``: optimizer step speed against torch.optim and TensorFlow 1's kernels.

One idea per module: ``specs`` (the table of algorithms: constructor arguments, bytes per
parameter, peers), ``workloads`` (the issue's four workloads), ``torch_peers`` and
``tf1_peer`` (what trainop is compared with), ``candidates`` (what gets timed), ``probe``
(memory bandwidth), ``timing``, ``memory`` (peak extra memory of a step), ``runner``,
``checks`` (the issue's acceptance criteria), ``headline`` (trainop against its best peer per
workload), ``verdict`` (binding or informational, the exit status), ``report`` (markdown and
JSON), ``progress`` and ``cli``. Run it as ``trainop bench`` or ``python -m trainop bench``.
"""

from trainop.bench.runner import BenchConfig, run_benchmark

__all__ = ["BenchConfig", "run_benchmark"]
