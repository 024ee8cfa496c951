"""The headline of a benchmark result: one table, trainop against its best peer per workload.

Rows, in workload order: the lead optimizer of each workload (``AdamOptimizer`` on the dense
workloads, ``LazyAdamOptimizer`` on the sparse one) with its time, its best peer's and their
ratio; then, where more than one optimizer was measured, one row per workload over all of them
(the range and median of the ratios, how many are at most 1.0, and the range and median of
trainop's percent of the memory bandwidth). This is the table ``BENCHMARKS.md`` opens with.

- trainop: the optimizer's own time as the checks take it (``checks``: ``auto`` where measured);
- best peer: the fastest ``torch.optim`` or TF1 peer measured in the same comparison (not
  trainop's own rows, such as the dense-equivalent Adam on the sparse workload);
- ratio: trainop time / best peer time (below 1: trainop is faster);
- % of memory bandwidth: the traffic floor over the step time against the run's bandwidth probe,
  trainop's and the peer's.

Example::

    lines = render_headline(result)   # result: a run_benchmark() output; [] if nothing compares
"""

from __future__ import annotations

import statistics
from typing import Any

from trainop.bench.checks import ours_row

__all__ = ["LEAD_OPTIMIZERS", "headline_rows", "render_headline"]

#: The optimizer each workload's first row shows: key ``sparse`` for the sparse workload.
LEAD_OPTIMIZERS = {"dense": "AdamOptimizer", "sparse": "LazyAdamOptimizer"}

Row = dict[str, Any]


def _best_peer(group: dict[str, Any]) -> Row | None:
    peers = [r for r in group["peers"] if r.get("median_s") and r["kind"] != "trainop"]
    return min(peers, key=lambda r: r["median_s"], default=None)


def headline_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per workload: ``{"workload", "title", "optimizer", "ours", "peer", "ratio"}`` for every
    optimizer with both a time and a peer, the lead optimizer first."""
    rows = []
    for wl in result["workloads"]:
        lead = LEAD_OPTIMIZERS["sparse" if wl.get("sparse") else "dense"]
        per = []
        for group in wl["groups"]:
            ours, peer = ours_row(group), _best_peer(group)
            if ours is None or peer is None:
                continue
            per.append({"workload": wl["key"], "title": wl["title"],
                        "optimizer": group["optimizer"], "ours": ours, "peer": peer,
                        "ratio": ours["median_s"] / peer["median_s"]})
        rows += sorted(per, key=lambda r: r["optimizer"] != lead)
    return rows


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3f} ms" if ms < 1 else f"{ms:.2f} ms"


def _pct(row: Row) -> str:
    pct = row.get("bandwidth_pct")
    return "—" if pct is None else f"{pct:.0f}%"


def _span(values: list[float], fmt: str, unit: str = "") -> str:
    """``0.16-1.39, median 1.02`` (``unit`` after each number); one number if all are alike."""
    low, high, mid = (format(v, fmt) + unit
                      for v in (min(values), max(values), statistics.median(values)))
    return low if low == high else f"{low}-{high}, median {mid}"


def render_headline(result: dict[str, Any]) -> list[str]:
    """The headline table as markdown lines (empty when no optimizer has a peer)."""
    rows = headline_rows(result)
    if not rows:
        return []
    lines = ["### Headline: trainop against its best peer", "",
             "| workload | trainop | best peer | ratio | % of memory bandwidth |",
             "|---|---|---|--:|---|"]
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_workload.setdefault(row["workload"], []).append(row)
    for key, items in by_workload.items():
        first = items[0]
        lines.append(
            f"| ({key}) {first['title']} | `{first['optimizer']}` "
            f"{first['ours']['implementation']} {_ms(first['ours']['median_s'])} | "
            f"{first['peer']['label']} {_ms(first['peer']['median_s'])} | "
            f"{first['ratio']:.2f} | {_pct(first['ours'])} / {_pct(first['peer'])} |")
    for key, items in by_workload.items():
        if len(items) < 2:
            continue
        ratios = [r["ratio"] for r in items]
        pcts = [r["ours"]["bandwidth_pct"] for r in items
                if r["ours"].get("bandwidth_pct") is not None]
        faster = sum(r <= 1.0 for r in ratios)
        lines.append(
            f"| ({key}), all {len(items)} optimizers with a peer | each one's own | each one's "
            f"fastest | {_span(ratios, '.2f')}; {faster} of {len(items)} <= 1.0 | "
            f"{_span(pcts, '.0f', '%') if pcts else '—'} |")
    lines += ["", "ratio: trainop time / best peer time (below 1: trainop is faster); "
              "% of memory bandwidth: trainop / peer, against this run's probe."]
    return lines
