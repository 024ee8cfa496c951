"""Every python block of the site, run: the pages' blocks as one program per page, in order (a
continuation runs after the block it continues), each block's printed output checked against
the ``text title="Output"`` block that follows it on the page.

A block that cannot run as it stands on a CPU machine carries a marker on the line before its
fence, read here, naming why and how it runs instead::

    <!-- example: ranks=2 -->        inside each of 2 ranks: run in 2 gloo processes (which
                                     keep the page's earlier ranks blocks' names)
    <!-- example: gpu -->            needs CUDA: run where torch.cuda.is_available(), else counted
                                     as not run (the reason printed)
    <!-- example: tensorflow -->     a TF1 graph: run with TensorFlow in a process of its own
                                     (which keeps the page's earlier TF blocks' names)
    <!-- example: extra=NAME -->     needs ``pip install 'trainop[NAME]'`` (the page says so)
    <!-- example: tested=TEST -->     needs files only an upstream run writes (an OpenSeq2Seq or
                                     RETURNN checkpoint): the named test (tests/FILE::NAME)
                                     makes them and runs these calls; not run here

``python examples.py RESULT.json ROOT PAGE...`` runs the pages (from the current directory, on the
installed trainop) and writes one record per block; ``tests/test_readme_snippets.py`` drives it.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                    re.S | re.M)
_MARKER = re.compile(r"<!--\s*example:\s*(?P<spec>[^>]*?)\s*-->\s*$")
KINDS = ("ranks", "gpu", "tensorflow", "extra", "tested")
#: module imported by a block -> the extra that installs it
EXTRA_OF = {"lightning": "frameworks", "transformers": "frameworks", "accelerate": "frameworks",
            "matplotlib": "plot", "tensorboard": "tensorboard", "tensorflow": "tensorflow",
            "triton": "triton"}


@dataclass
class Block:
    page: str
    index: int
    line: int
    code: str
    marks: dict = field(default_factory=dict)
    output: str | None = None   # the page's "Output" block after it, if any


def _marks(spec: str) -> dict:
    marks = {}
    for item in spec.replace(",", " ").split():
        key, _, value = item.partition("=")
        if key not in KINDS:
            raise ValueError(f"unknown example marker {key!r} (known: {', '.join(KINDS)})")
        marks[key] = value or True
    return marks


def blocks(page: str, text: str) -> list[Block]:
    """The page's python blocks with their markers and shown output."""
    found: list[Block] = []
    last_end = 0
    for m in _FENCE.finditer(text):
        info = m.group("info").strip()
        body = re.sub(rf"^{m.group('indent')}", "", m.group("body"), flags=re.M)
        line = text.count("\n", 0, m.start()) + 1
        if info.split(" ")[0] in ("python", "py"):
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = _MARKER.search(before)
            found.append(Block(page, len(found), line, body,
                               _marks(marker.group("spec")) if marker else {}))
        elif (info.startswith("text") and 'title="Output"' in info and found
              and not text[last_end:m.start()].strip()):
            found[-1].output = body
        last_end = m.end()
    return found


def extras_needed(code: str) -> set[str]:
    """The extras a block's imports need (its import statements, not text in its strings)."""
    import ast

    modules = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module.split(".")[0])
    return {EXTRA_OF[m] for m in modules if m in EXTRA_OF}


def output_matches(shown: str, printed: str) -> bool:
    """doctest's comparison: ``...`` stands for anything, runs of whitespace are equal."""
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    return doctest.OutputChecker().check_output(shown, printed, flags)


# ------------------------------------------------------------------------------------------
# running


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_WORKER = """
import contextlib, io, json, os, sys, traceback
ranks = int(os.environ.get("WORLD_SIZE", "0"))
if ranks:
    import torch.distributed as dist
    dist.init_process_group("gloo")
reply, namespace = sys.stdout, {"__name__": "__main__"}
sys.stdout = sys.stderr
for line in sys.stdin:
    request, printed, error = json.loads(line), io.StringIO(), None
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(request["code"], request["name"], "exec"), namespace)
    except BaseException:
        error = traceback.format_exc()[-4000:]
    reply.write(MARK + json.dumps({"printed": printed.getvalue(), "error": error}) + "\\n")
    reply.flush()
if ranks:
    dist.destroy_process_group()
"""
_MARK = "@@trainop-example@@"


class Worker:
    """The page's blocks of one kind, run in processes of their own that keep their namespace
    from block to block (a continuation sees what the earlier blocks of its kind defined): one
    process for TensorFlow's graph (TF and torch's LLVM-based parts cannot share a process),
    ``ranks`` gloo processes for a distributed block. They run in the page's directory."""

    def __init__(self, ranks: int) -> None:
        env = dict(os.environ)
        if ranks:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                       WORLD_SIZE=str(ranks))
        self.logs = [tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by close()
                     for _ in range(max(ranks, 1))]
        code = f"MARK = {_MARK!r}\n" + _WORKER
        self.procs = [subprocess.Popen([sys.executable, "-c", code],
                                       env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=log, text=True)
                      for r, log in enumerate(self.logs)]

    def run(self, block: Block) -> tuple[str, str | None]:
        request = json.dumps({"code": block.code, "name": f"{block.page}:{block.line}"})
        for proc in self.procs:
            proc.stdin.write(request + "\n")
            proc.stdin.flush()
        replies = [self._reply(k) for k in range(len(self.procs))]
        failed = [f"process {k}: {error}" for k, (_, error) in enumerate(replies) if error]
        return replies[0][0], ("\n".join(failed) or None)

    def _reply(self, k: int) -> tuple[str, str | None]:
        for line in self.procs[k].stdout:
            if line.startswith(_MARK):
                found = json.loads(line[len(_MARK):])
                return found["printed"], found["error"]
        self.logs[k].seek(0)
        return "", f"the process ended: {self.logs[k].read()[-3000:]}"

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in self.logs:
            log.close()


def run_page(page: str, text: str) -> list[dict]:
    """Run the page's blocks in one namespace, in order; stop at the first failure."""
    records, namespace, workers = [], {"__name__": "__main__"}, {}
    try:
        _run_blocks(page, text, records, namespace, workers)
    finally:
        for worker in workers.values():
            worker.close()
    return records


def _run_blocks(page, text, records, namespace, workers) -> None:
    for block in blocks(page, text):
        record = {**asdict(block), "status": "run", "printed": "", "error": None}
        records.append(record)
        if "tested" in block.marks:
            record["status"] = f"not run: run by {block.marks['tested']}"
            continue
        if block.marks.get("gpu"):
            import torch

            if not torch.cuda.is_available():
                record["status"] = "not run: needs CUDA (none here)"
                continue
        kind = next((k for k in ("ranks", "tensorflow") if k in block.marks), None)
        if kind:
            ranks = int(block.marks["ranks"]) if kind == "ranks" else 0
            if (kind, ranks) not in workers:
                workers[kind, ranks] = Worker(ranks)
            record["printed"], record["error"] = workers[kind, ranks].run(block)
        else:
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    code = compile(block.code, f"{page}:{block.line}", "exec")
                    exec(code, namespace)
            except BaseException:  # noqa: BLE001 - reported to the test, which fails
                record["error"] = traceback.format_exc()[-4000:]
            record["printed"] = printed.getvalue()
        if record["error"]:
            record["status"] = "failed"
            break


def main(argv: list[str]) -> int:
    """``examples.py RESULT.json ROOT PAGE...``: run the pages (paths relative to ROOT)."""
    result, root, pages = Path(argv[0]), Path(argv[1]), argv[2:]
    records, home = [], os.getcwd()
    for page in pages:
        os.chdir(tempfile.mkdtemp(prefix="trainop-example-"))  # an empty directory, a user's
        try:
            records += run_page(page, (root / page).read_text(encoding="utf-8"))
        finally:
            os.chdir(home)
        result.write_text(json.dumps(records))  # so far: a crash still leaves the record
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
