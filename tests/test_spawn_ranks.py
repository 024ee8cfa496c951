"""``spawn_ranks`` forks its ranks from one fork server (torch and trainop imported there once),
and each rank still starts with the caller's environment and standard error as they are at the
call, not as they were when the server started."""

from __future__ import annotations

import os

from trainop.bench._ranks import spawn_ranks


def _probe(rank: int, port: int, out: str) -> None:
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write(f"{os.getppid()} {os.environ.get('TRAINOP_RANK_PROBE')}")


def _fail(rank: int, port: int) -> None:
    raise RuntimeError(f"rank {rank} failed on purpose")


def test_ranks_come_from_one_fork_server_with_the_callers_environment(tmp_path, monkeypatch,
                                                                      capfd):
    seen = []
    for value in ("first", "second"):
        monkeypatch.setenv("TRAINOP_RANK_PROBE", value)
        out = tmp_path / value
        out.mkdir()
        assert spawn_ranks(_probe, (str(out),), world=2, timeout_s=120) == [0, 0]
        seen += [(out / f"rank{r}.txt").read_text().split() for r in (0, 1)]
    servers = {parent for parent, _ in seen}
    assert len(servers) == 1 and str(os.getpid()) not in servers, seen  # one server, reused
    assert [value for _, value in seen] == ["first"] * 2 + ["second"] * 2
    capfd.readouterr()
    assert spawn_ranks(_fail, world=2, timeout_s=120) == [1, 1]
    err = capfd.readouterr().err
    assert "RuntimeError: rank 0 failed on purpose" in err, err
    assert "RuntimeError: rank 1 failed on purpose" in err, err
