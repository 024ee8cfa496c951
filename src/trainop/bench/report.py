"""Render a benchmark result: markdown tables (stdout, BENCHMARKS.md) and JSON.

Columns of a workload table:

- ``median ms``: median wall time of one ``step()`` over the timed steps;
- ``GB/s``: effective bandwidth, the algorithm's traffic floor (bytes per parameter from
  ``specs``, e.g. 28 for float32 Adam) times the parameters a step must touch (all of them;
  on the sparse workload only the touched rows' ones), divided by the median;
- ``% BW``: that, as a percentage of the bandwidth probe's best rate in the same run;
- ``peak extra``: memory allocated during one step beyond params, grads and slots (MiB, and %
  of the parameter bytes); ``n/a`` where it cannot be seen (TF1);
- ``peer / ours``: for trainop's rows, each peer's median divided by this row's (above 1: we
  are faster), the reference implementation included for the fast paths.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from trainop.bench.headline import render_headline
from trainop.bench.verdict import is_binding, judge, render_verdict

__all__ = ["render_markdown", "write_json"]


def _ms(seconds: float | None) -> str:
    if not seconds:
        return "—"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def _num(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _mem(nbytes: int | None, pct: float | None) -> str:
    if nbytes is None:
        return "n/a"
    size = f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"
    return f"{size} ({pct:.1f}%)" if pct is not None else size


def _ratios(row: dict[str, Any], shorts: dict[str, str]) -> str:
    if row.get("error"):
        return f"error: {row['error'][:100]}"
    parts = [f"{shorts.get(pid, pid)} {r:.2f}x" for pid, r in row.get("ratios", {}).items()]
    return " · ".join(parts)


def _load(values: list[float] | None) -> str:
    return "n/a" if not values else "/".join(f"{v:.2f}" for v in values)


def _header(result: dict[str, Any]) -> list[str]:
    cfg, env, bw = result["config"], result["environment"], result["bandwidth"]
    tf = f", TensorFlow {env['tensorflow']}" if env.get("tensorflow") else ""
    return [
        f"{cfg['dtype']} on {cfg['device']} ({env['device_name']}, {env['torch_threads']} torch "
        f"threads), torch {env['torch']}{tf}, Python {env['python']}, {env['platform']}.",
        f"Scale {cfg['scale']:g}; median of {cfg['repeats']} timed steps after "
        f"{cfg['warmup']} warm-up steps; {env.get('cpu_count')} CPUs, load average "
        f"{_load(env.get('load_average_before'))} before, "
        f"{_load(env.get('load_average_after'))} after.",
        f"Bandwidth probe ({bw['buffer_bytes'] / 2**20:.0f} MiB buffers, best of "
        f"{bw['repeats']}): copy {bw['copy_gbps']:.1f} GB/s, triad {bw['triad_gbps']:.1f} GB/s, "
        f"in-place update {bw['update_gbps']:.1f} GB/s; 100% = {bw['best_gbps']:.1f} GB/s.",
    ]


def _workload_table(wl: dict[str, Any]) -> list[str]:
    lines = [
        f"### ({wl['key']}) {wl['title']}",
        "",
        "| optimizer | run | median ms | GB/s | % BW | peak extra | peer / ours |",
        "|---|---|--:|--:|--:|--:|---|",
    ]
    for group in wl["groups"]:
        subjects, peers = group["subjects"], group["peers"]
        shorts = {r["id"]: r.get("short", r["id"]) for r in peers}
        shorts.update({r["id"]: r["implementation"] for r in subjects})
        first = f"{group['optimizer']} ({group['bytes_per_param']} B/param)"
        for i, row in enumerate(subjects + peers):
            is_subject = i < len(subjects)
            lines.append("| " + " | ".join([
                first if i == 0 else "",
                f"trainop {row['implementation']}" if is_subject else f"↳ {row['label']}",
                _ms(row["median_s"]) if not row.get("error") else "error",
                _num(row.get("gb_per_s"), ".2f"),
                _num(row.get("bandwidth_pct"), ".0f"),
                _mem(row.get("peak_extra_bytes"), row.get("peak_extra_pct")),
                _ratios(row, shorts) if is_subject or row.get("error") else "",
            ]) + " |")
    return lines


def _item(check: dict[str, Any]) -> str:
    """``MomentumW auto 0.81``, then the check's note if any: ``(vs torch 1.05, vs TF1 0.81)``."""
    name = check["optimizer"].replace("Optimizer", "")
    text = name if check["value"] is None else f"{name} {check['value']:.2f}"
    return f"{text} ({check['note']})" if check.get("note") else text


def _checks_table(result: dict[str, Any]) -> list[str]:
    """One row per check and workload: how many passed, and which failed (with values)."""
    checks = result.get("checks", [])
    if not checks:
        return []
    cfg = result["config"]
    binding = is_binding(cfg)
    lines = [
        "### Acceptance checks" + ("" if binding else
                                   f" (informational: scale {cfg['scale']:g}, "
                                   f"{cfg['repeats']} timed steps)"),
        "",
        "| check | workload | target | pass | fail | n/a | failing (value) | passing (value) |",
        "|---|---|---|--:|--:|--:|---|---|",
    ]
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in checks:
        rows.setdefault((c["check"], c["workload"]), []).append(c)
    for (name, workload), items in rows.items():
        by = {s: [c for c in items if c["status"] == s] for s in ("PASS", "FAIL", "n/a")}
        lines.append(
            f"| {name} | ({workload}) | {items[0]['op']} {items[0]['threshold']:g} | "
            f"{len(by['PASS'])} | {len(by['FAIL'])} | {len(by['n/a'])} | "
            f"{' · '.join(_item(c) for c in by['FAIL'])} | "
            f"{' · '.join(_item(c) for c in by['PASS'])} |")
    counts = {s: sum(c["status"] == s for c in checks) for s in ("PASS", "FAIL", "n/a")}
    passed, failed = ("passed", "failed") if binding else ("met", "missed")
    lines += ["", f"{counts['PASS']} {passed}, {counts['FAIL']} {failed}, {counts['n/a']} n/a "
                  "(every check with its value: `checks` in the JSON output)."]
    return lines


def render_markdown(result: dict[str, Any]) -> str:
    """The whole report as markdown: header, the headline table (``headline``), one table per
    workload, checks, notes, and the verdict last (``verdict``)."""
    lines = _header(result) + [""]
    headline = render_headline(result)
    lines += headline + [""] if headline else []
    for wl in result["workloads"]:
        lines += _workload_table(wl) + [""]
    lines += _checks_table(result)
    if result.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in result["notes"]]
    lines += ["", *render_verdict(result.get("verdict") or judge(result))]
    return "\n".join(lines).rstrip() + "\n"


def write_json(result: dict[str, Any], path: str) -> None:
    """Write ``result`` to ``path`` (``-``: stdout)."""
    text = json.dumps(result, indent=2, allow_nan=False)
    if path == "-":
        sys.stdout.write(text + "\n")
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
