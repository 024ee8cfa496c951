"""The verdict of a ``trainop bench`` run over the optimizer workloads, and its exit status.

Every acceptance check (``checks``) states its threshold for the issue's sizes, ``--scale 1``,
judged on a median of at least 10 timed steps (``--repeats >= 10``). A run made that way is
*binding*: its checks pass or fail, and the exit status is 1 when any of them failed. At any
other scale or with fewer timed steps the same checks are *informational*: their values are
shown (fixed per-step costs weigh more on smaller tensors, and small buffers fit in the cache,
so a threshold stated for 32M parameters says little about 8M), and the exit status is 0.
A check is ``n/a`` where what it needs was not measured (a peer left out with ``--no-torch`` /
``--no-tf``, an optimizer or workload not selected, a candidate that errored); it neither passes
nor fails.

Example::

    verdict = judge(result)          # result: a run_benchmark() output with its "checks"
    verdict["exit_status"]           # 1 only if binding and something failed
    print("\\n".join(render_verdict(verdict)))
"""

from __future__ import annotations

from typing import Any

__all__ = ["BINDING_MIN_REPEATS", "BINDING_SCALE", "is_binding", "judge", "render_verdict"]

#: The size multiplier the checks' thresholds are stated for (the issue's workload sizes).
BINDING_SCALE = 1.0
#: The fewest timed steps per candidate the checks are stated for.
BINDING_MIN_REPEATS = 10


def is_binding(config: dict[str, Any]) -> bool:
    """Whether a run with this ``config`` (``result["config"]``) is the one the checks' thresholds
    are stated for: ``scale == 1`` and ``repeats >= 10``."""
    return config["scale"] == BINDING_SCALE and config["repeats"] >= BINDING_MIN_REPEATS


def _label(check: dict[str, Any]) -> str:
    """``fast path vs reference (b): GradientDescent auto 2.49 (target >= 3; ceiling 3.2 ...)``."""
    name = check["optimizer"].replace("Optimizer", "")
    value = "not measured" if check["value"] is None else f"{check['value']:.2f}"
    extra = f"target {check['op']} {check['threshold']:g}"
    if check.get("note"):
        extra += f"; {check['note']}"
    return f"{check['check']} ({check['workload']}): {name} {value} ({extra})"


def judge(result: dict[str, Any]) -> dict[str, Any]:
    """The verdict on ``result`` (a ``run_benchmark`` output): JSON-ready, with ``binding``,
    ``reason`` (why binding or not), ``passed`` / ``failed`` / ``not_measured`` (counts),
    ``failing`` and ``unmeasured`` (one label per check), ``outcome`` (``"PASS"``, ``"FAIL"``,
    ``"INFORMATIONAL"``, or ``"NO CHECKS"`` where no check could be judged) and ``exit_status``
    (1 only for a binding run with a failed check)."""
    cfg = result["config"]
    checks = result.get("checks", [])
    binding = is_binding(cfg)
    by = {s: [c for c in checks if c["status"] == s] for s in ("PASS", "FAIL", "n/a")}
    stated = f"--scale {BINDING_SCALE:g} with --repeats >= {BINDING_MIN_REPEATS}"
    run = f"--scale {cfg['scale']:g}, --repeats {cfg['repeats']}"
    if binding:
        reason = f"this run ({run}) is the one the thresholds are stated for ({stated})"
    else:
        reason = (f"the thresholds are stated for {stated}; this run used {run}, so no check "
                  "binds")
    if not by["PASS"] and not by["FAIL"]:
        outcome = "NO CHECKS"
    elif not binding:
        outcome = "INFORMATIONAL"
    else:
        outcome = "FAIL" if by["FAIL"] else "PASS"
    return {
        "binding": binding,
        "reason": reason,
        "passed": len(by["PASS"]),
        "failed": len(by["FAIL"]),
        "not_measured": len(by["n/a"]),
        "failing": [_label(c) for c in by["FAIL"]],
        "unmeasured": [_label(c) for c in by["n/a"]],
        "outcome": outcome,
        "exit_status": 1 if outcome == "FAIL" else 0,
    }


def render_verdict(verdict: dict[str, Any]) -> list[str]:
    """The verdict as markdown lines; the last line alone says the outcome and the exit
    status."""
    total = verdict["passed"] + verdict["failed"] + verdict["not_measured"]
    binding = verdict["binding"]
    lines = ["### Verdict", "", f"{'Binding' if binding else 'Informational'}: "
             f"{verdict['reason']}.", ""]
    met, missed = ("Passed", "Failed") if binding else ("Met the target at this scale",
                                                         "Missed the target at this scale")
    lines.append(f"- {met}: {verdict['passed']} of {total} checks.")
    lines.append(f"- {missed}: {verdict['failed']}" + (":" if verdict["failing"] else "."))
    lines += [f"  - {label}" for label in verdict["failing"]]
    lines.append(f"- Not measured (n/a, neither pass nor fail): {verdict['not_measured']}"
                 + (":" if verdict["unmeasured"] else "."))
    lines += [f"  - {label}" for label in verdict["unmeasured"]]
    lines.append("")
    status = verdict["exit_status"]
    if verdict["outcome"] == "NO CHECKS":
        last = "no acceptance check could be judged on what was measured"
    elif verdict["outcome"] == "INFORMATIONAL":
        last = ("nothing binding at this scale (for a binding verdict: trainop bench --scale 1, "
                "about 15 minutes on 2 cores)")
    elif verdict["outcome"] == "FAIL":
        last = f"{verdict['failed']} binding check(s) failed"
    else:
        last = f"every binding check that was measured passed ({verdict['passed']})"
    lines.append(f"**Verdict: {verdict['outcome']}** — {last}; exit status {status}.")
    return lines
