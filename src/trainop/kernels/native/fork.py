"""Fork safety of the multi-threaded kernels.

The kernels run their loops on OpenMP threads, and they share the OpenMP runtime torch itself
uses (torch's wheels load GNU OpenMP as ``libgomp.so.1``; the kernel library links the same
soname, so the process holds one runtime and one thread pool). GNU OpenMP's pool does not
survive ``fork``: the child inherits a pool whose threads do not exist, and its next parallel
region (a torch op on a large tensor, or a trainop step) waits for them forever. That is why
torch's ``DataLoader`` sets one thread in its workers.

``threads()`` is the thread count every kernel call passes (torch's, ``torch.get_num_threads()``)
and records whether a pass could have started the pool (more than one thread). Where it did, a
handler registered with ``os.register_at_fork`` sets one thread in the child
(``torch.set_num_threads(1)``, which also sets OpenMP's): torch's ops and trainop's steps then
run on the child's single thread instead of hanging. A process whose kernels never ran with
more than one thread is left alone. Raising the thread count again in such a child would wait
on the dead pool (GNU OpenMP's limit); a child that needs threads should be started with the
``spawn`` or ``forkserver`` method.
"""

from __future__ import annotations

import os

import torch

__all__ = ["pool_started", "threads"]

_started = False


def threads() -> int:
    """The number of threads a kernel call may use (torch's), noting a multi-threaded one."""
    global _started
    n = torch.get_num_threads()
    if n > 1:
        _started = True
    return n


def pool_started() -> bool:
    """Whether a kernel call of this process may have started OpenMP's thread pool."""
    return _started


def _after_fork_in_child() -> None:
    global _started
    if _started:
        torch.set_num_threads(1)
        _started = False


os.register_at_fork(after_in_child=_after_fork_in_child)
