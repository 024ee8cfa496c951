"""Probes of hostile recipe inputs, each in a forked child under a timeout and a memory cap.

One server process imports trainop once (``python -c``, its working directory the caller's);
every probe is a fork of it with ``RLIMIT_AS`` set to the address space in use plus the cap and
``SIGALRM`` after the timeout, so a probe that hangs or allocates without bound is killed
instead of the test run. A probe is Python source run with ``trainop`` imported; it reports
through ``result(...)``. The answer is ``{"status": "done" | "killed", "result": ..., "error":
"Type: message" | None, "seconds": ...}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SERVER = r'''
import json, os, resource, signal, sys, time, traceback
import trainop

def vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0

for line in sys.stdin:
    request = json.loads(line)
    read, write = os.pipe()
    start = time.time()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        cap = vm_size() + int(request["memory"])
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        signal.alarm(int(request["timeout"]))
        answer = {"result": None, "error": None}
        def result(value):
            answer["result"] = value
        try:
            exec(request["code"], {"trainop": trainop, "result": result, "os": os})
        except BaseException as exc:
            answer["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            answer["traceback"] = traceback.format_exc()[-3000:]
        data = json.dumps(answer, default=repr).encode()
        os.write(write, data)
        os._exit(0)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    out = {"status": "done", "seconds": time.time() - start}
    if chunks and os.WIFEXITED(status):
        out.update(json.loads(b"".join(chunks)))
    else:
        out["status"] = "killed"
        out["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    print(json.dumps(out), flush=True)
'''


class ProbeServer:
    """A server process in ``cwd``; ``probe(code)`` answers one probe."""

    def __init__(self, cwd: str) -> None:
        src = os.path.join(os.path.dirname(__file__), os.pardir, "src")
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def probe(self, code: str, timeout: int = 30, memory_gb: float = 2.0) -> dict:
        self.proc.stdin.write(json.dumps({"code": code, "timeout": timeout,
                                          "memory": int(memory_gb * (1 << 30))}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the probe server died"
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
