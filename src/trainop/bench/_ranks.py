"""Run a function on N local gloo ranks (``torch.multiprocessing`` spawn, 127.0.0.1, a free
port), bounded in time; and count ``torch.distributed.all_reduce`` calls. Used by the
distributed benchmarks and tests."""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from collections.abc import Callable, Iterator

__all__ = ["counted_all_reduces", "init_rank", "rank_group", "spawn_ranks"]


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


def _rank_main(target: Callable[..., None], rank: int, port: int, *args) -> None:
    """One spawned rank: ``target``, then exit at once with its outcome (0, or 1 after the
    traceback), skipping the interpreter's and C++'s teardown: at exit, a thread gloo or
    torch.distributed still holds can abort a process that did all its work ("terminate
    called without an active exception", seen about once in a few hundred runs)."""
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
    """``target(rank, port, *args)`` on ``world`` spawned processes; their exit codes (1 if
    ``target`` raised; a process still alive after ``timeout_s`` is killed: exit code not
    0). A rank exits as soon as ``target`` returns (see ``_rank_main``)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(target, r, port, *args))
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
