"""The speed issue's acceptance criteria, judged on a benchmark result.

Each check gives ``PASS``, ``FAIL`` or ``n/a`` (what it needs was not measured). They are only
binding at ``--scale 1`` with ``--repeats >= 10``; in other runs they are informational
(``verdict`` judges which, and gives the exit status).

1. AdamOptimizer <= 1.05x torch Adam(fused) on (a), (b) and <= 1.0x on (c);
2. every optimizer's fast path (its automatic choice) >= 3x faster than its reference on (b);
   the ``foreach`` path (bit-identical to the reference, the fallback where no single-pass
   kernel runs: float16/bfloat16, CUDA for the ``native`` rules) is in the tables, not judged.
   ``ceiling``: the ratio a fast path moving the traffic floor at the probe's best bandwidth
   would reach (where it is below 3, the target is out of reach on this machine);
3. optimizers without a torch fused counterpart (a torch peer of the same algorithm with
   ``fused``) <= 1.0x the fastest torch.optim implementation of their closest algorithm, or
   <= 1.0x TF1's kernel (the issue's "whichever exists"; where both exist, either passes and
   the detail gives both ratios, so the stricter reading can be read off too), on the dense
   workloads;
4. (d): LazyAdamOptimizer >= 20x faster than dense-equivalent AdamOptimizer and not slower
   than torch SparseAdam;
5. peak extra memory of each non-reference implementation <= 10% of the parameter bytes on
   (a), (b).

"The optimizer's time" is its ``auto`` implementation where measured, else its fastest
non-reference one other than ``flat`` (which needs ``trainop.flatten``), else its reference.
A check may carry a ``note``, shown after its value in the acceptance table.
"""

from __future__ import annotations

from typing import Any

from trainop.bench.specs import SPECS
from trainop.bench.torch_peers import PEERS, torch_implementations

__all__ = ["bandwidth_ceiling", "ours_row", "run_checks"]

Row = dict[str, Any]


def _ok(row: Row | None) -> bool:
    return row is not None and bool(row.get("median_s"))


def ours_row(group: dict[str, Any]) -> Row | None:
    """The row that stands for trainop in ``group`` (see the module docstring)."""
    # flat buffers need the user's trainop.flatten(): judged on their own, not as "ours".
    rows = [r for r in group["subjects"] if _ok(r) and r["implementation"] != "flat"]
    auto = [r for r in rows if r["implementation"] == "auto"]
    if auto:
        return auto[0]
    fast = [r for r in rows if r["implementation"] != "reference"]
    return min(fast or rows, key=lambda r: r["median_s"], default=None)


def _check(name: str, workload: str, optimizer: str, value: float | None, op: str,
           threshold: float, detail: str) -> dict[str, Any]:
    if value is None:
        status = "n/a"
    else:
        status = "PASS" if (value <= threshold if op == "<=" else value >= threshold) else "FAIL"
    return {"check": name, "workload": workload, "optimizer": optimizer, "value": value,
            "op": op, "threshold": threshold, "status": status, "detail": detail}


def _peer(group: dict[str, Any], peer_id: str) -> Row | None:
    return next((r for r in group["peers"] if r["id"] == peer_id and _ok(r)), None)


def run_checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every applicable check of ``result`` (a ``run_benchmark`` output)."""
    checks: list[dict[str, Any]] = []
    for wl in result["workloads"]:
        key = wl["key"]
        for group in wl["groups"]:
            name = group["optimizer"]
            ours = ours_row(group)
            tag = f"{name} {ours['implementation']}" if ours else name
            if name == "AdamOptimizer" and key in ("a", "b", "c"):
                peer = _peer(group, "torch:Adam[fused]")
                limit = 1.0 if key == "c" else 1.05
                value = ours["median_s"] / peer["median_s"] if ours and peer else None
                checks.append(_check("time vs torch Adam(fused)", key, tag, value, "<=", limit,
                                     "ours / peer step time"))
            if key == "b":
                checks.extend(_fast_vs_reference(
                    group, wl.get("touched_params"), result.get("bandwidth", {}).get("best_gbps")))
            if key in ("a", "b", "c") and not _has_fused_counterpart(group):
                checks.append(_no_fused_counterpart(group, ours, key, tag))
            if key == "d" and name == "LazyAdamOptimizer":
                dense = _peer(group, "trainop:AdamOptimizer[auto]")
                value = dense["median_s"] / ours["median_s"] if ours and dense else None
                checks.append(_check("sparse: speed-up vs dense-equivalent Adam", key, tag,
                                     value, ">=", 20.0, "AdamOptimizer / ours step time"))
                sparse_adam = _peer(group, "torch:SparseAdam[for-loop]")
                value = (ours["median_s"] / sparse_adam["median_s"]
                         if ours and sparse_adam else None)
                checks.append(_check("sparse: time vs torch SparseAdam", key, tag, value, "<=",
                                     1.0, "ours / peer step time"))
            if key in ("a", "b"):
                for row in group["subjects"]:
                    if row["implementation"] == "reference" or not _ok(row):
                        continue
                    checks.append(_check("peak extra memory, % of param bytes", key,
                                         f"{name} {row['implementation']}",
                                         row.get("peak_extra_pct"), "<=", 10.0,
                                         "measured on one step after warm-up"))
    return checks


def _no_fused_counterpart(group: dict[str, Any], ours: Row | None, key: str,
                          tag: str) -> dict[str, Any]:
    """Ours / the fastest torch peer and ours / TF1's, each where measured: the better one is
    judged (``value``), the worse one kept (``strict_value``); both in ``detail`` and ``note``."""
    best: dict[str, tuple[str, float]] = {}  # kind -> (peer label, ours / peer)
    for kind in ("torch", "tf1"):
        peers = [r for r in group["peers"] if _ok(r) and r["kind"] == kind]
        fastest = min(peers, key=lambda r: r["median_s"], default=None)
        if fastest is not None and ours is not None:
            best[kind] = (fastest["label"], ours["median_s"] / fastest["median_s"])
    ratios = [ratio for _, ratio in best.values()]
    detail = ("ours / peer: " + "; ".join(f"{label} {r:.2f}" for label, r in best.values())
              if best else "no peer")
    check = _check("no fused counterpart: vs torch closest or TF1", key, tag,
                   min(ratios, default=None), "<=", 1.0, detail)
    check["strict_value"] = max(ratios, default=None)
    if len(best) == 2:
        check["note"] = f"vs torch {best['torch'][1]:.2f}, vs TF1 {best['tf1'][1]:.2f}"
    return check


def bandwidth_ceiling(reference_s: float, params: int, bytes_per_param: int,
                      best_gbps: float) -> float:
    """``reference_s`` over the time of a step that moves ``params * bytes_per_param`` bytes
    (the traffic floor) at ``best_gbps`` GB/s: the most a fast path can gain on this machine."""
    return reference_s / (params * bytes_per_param / (best_gbps * 1e9))


def _fast_vs_reference(group: dict[str, Any], params: int | None,
                       best_gbps: float | None) -> list[dict[str, Any]]:
    name = group["optimizer"]
    reference = next((r for r in group["subjects"] if r["implementation"] == "reference"), None)
    if not _ok(reference):
        reference = None
    ours = ours_row(group)
    if ours is None or ours["implementation"] == "reference":
        if reference is None:
            return []
        check = _check("fast path vs reference", "b", name, None, ">=", 3.0,
                       "no fast implementation measured")
    else:
        value = reference["median_s"] / ours["median_s"] if reference else None
        check = _check("fast path vs reference", "b", f"{name} {ours['implementation']}", value,
                       ">=", 3.0, "reference / fast step time")
    bpp = reference.get("bytes_per_param") if reference else None
    check["ceiling"] = (bandwidth_ceiling(reference["median_s"], params, bpp, best_gbps)
                        if reference and params and bpp and best_gbps else None)
    if check["ceiling"] is not None:
        check["note"] = f"ceiling {check['ceiling']:.1f} at 100% bandwidth"
    return [check]


def _has_fused_counterpart(group: dict[str, Any]) -> bool:
    """A torch peer of the same algorithm (not just the closest one) that has ``fused``."""
    spec = SPECS.get(group["optimizer"])
    if spec is None or spec.torch_peer is None or spec.torch_relation.startswith("closest"):
        return False
    return "fused" in torch_implementations(PEERS[spec.torch_peer], sparse=False)
