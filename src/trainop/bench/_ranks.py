"""Run a function on N local gloo ranks (127.0.0.1, a free port), bounded in time; and count
``torch.distributed.all_reduce`` calls. Used by the distributed benchmarks and tests.

The ranks are forked from ``multiprocessing``'s fork server (``spawn`` where there is none),
which imports torch, its distributed packages and trainop once (``PRELOAD``): a freshly spawned
interpreter spends about 3 s of CPU importing them, for every rank of every run. Each rank still
starts clean of the caller's state: the fork server is a fresh interpreter that only imported
``PRELOAD`` (no process group, no thread pool), and a rank takes the caller's environment,
working directory, ``sys.path`` and standard output and error as they are when it starts."""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from collections.abc import Callable, Iterator

__all__ = ["PRELOAD", "counted_all_reduces", "init_rank", "rank_group", "spawn_ranks"]

#: What the fork server imports once, before it forks the ranks.
PRELOAD = ("torch", "torch.distributed", "torch.distributed.checkpoint",
           "torch.distributed.fsdp", "torch.distributed.optim", "trainop")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_rank(rank: int, world: int, port: int, *, threads: int = 1,
              timeout_s: float = 60) -> None:
    """Join the gloo process group of ``spawn_ranks`` as ``rank``."""
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


@contextlib.contextmanager
def rank_group(rank: int, world: int, port: int, *, threads: int = 1,
               timeout_s: float = 60) -> Iterator[None]:
    """Within the block, this process is ``rank`` of the gloo group (``init_rank``). On a
    normal exit every rank waits for the others (a barrier) before the group is destroyed, so
    no rank tears gloo down while another still talks to it (that race can abort a process
    with "terminate called without an active exception")."""
    import torch.distributed as dist

    init_rank(rank, world, port, threads=threads, timeout_s=timeout_s)
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()


class _Caller:
    """The caller's environment, standard output and error, handed to a rank when it starts
    (a rank forked from the fork server would otherwise have the server's, from when it was
    started: a test's captured output would miss a rank's traceback)."""

    def __reduce__(self):
        from multiprocessing.reduction import DupFd

        return _take_over, (dict(os.environ), DupFd(1), DupFd(2))


def _take_over(environ: dict, stdout, stderr) -> None:
    import sys

    os.environ.clear()
    os.environ.update(environ)
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, dup in ((1, stdout), (2, stderr)):
        handed = dup.detach()
        if handed != fd:  # (``spawn`` hands the descriptor itself)
            os.dup2(handed, fd)
            os.close(handed)


def _rank_main(caller: None, target: Callable[..., None], rank: int, port: int,
               *args) -> None:
    """One rank (``caller``: what ``_Caller`` handed over, already in place once this runs):
    ``target``, then exit at once with its outcome (0, or 1 after the traceback), skipping the
    interpreter's and C++'s teardown: at exit, a thread gloo or torch.distributed still holds
    can abort a process that did all its work ("terminate called without an active
    exception", seen about once in a few hundred runs)."""
    import sys
    import traceback

    code = 0
    try:
        target(rank, port, *args)
    except BaseException:  # noqa: BLE001 - reported as the exit code, as a crash would be
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def spawn_ranks(target: Callable[..., None], args: tuple = (), *, world: int = 2,
                timeout_s: float = 300) -> list[int | None]:
    """``target(rank, port, *args)`` on ``world`` processes; their exit codes (1 if ``target``
    raised; a process still alive after ``timeout_s`` is killed: exit code not 0). A rank
    exits as soon as ``target`` returns (see ``_rank_main``)."""
    ctx = _context()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(_Caller(), target, r, port, *args))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout_s)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    return [p.exitcode for p in procs]


def _context():
    """The fork server's context, told to import ``PRELOAD`` (once a process: a server already
    running keeps what it imported), or ``spawn``'s where there is no fork server."""
    import torch.multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


@contextlib.contextmanager
def counted_all_reduces() -> Iterator[list[int]]:
    """Within the block, ``torch.distributed.all_reduce`` calls append to the yielded list."""
    import torch.distributed as dist

    calls: list[int] = []
    original = dist.all_reduce

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    dist.all_reduce = counting
    try:
        yield calls
    finally:
        dist.all_reduce = original
