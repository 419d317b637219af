"""What the HTML report holds, packed into plain data from a command's result and the runs behind it.

Packs only: the caller runs what must run (``diagnose/report_runs.py``: the layer-wise comparisons, the
FP32 profile, the all-FP16 contrast) and passes the results in. The per-node errors are the layer-wise
comparison's (emulated, whatever backend judged the plans); the magnitudes are the FP32 profile's, the
same one the search ranks suspects by.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Sequence

from fp16bisect.artifacts.overrides import Node, Pinned
from fp16bisect.diagnose.layerwise import Layerwise, LayerwiseRunner
from fp16bisect.diagnose.report_runs import ReportRuns
from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import accumulating, states
from fp16bisect.diagnose.scan import tensor_rows


def metrics(m) -> dict | None:
    if m is None:
        return None
    return {"max_abs": m.max_abs, "max_rel": m.max_rel, "cosine": m.cosine, "nonfinite": m.nonfinite,
            "passed": m.passed}


def command_line() -> str:
    return shlex.join(["fp16bisect", *sys.argv[1:]])


def heading(title: str, graph: Graph, backend: str, tolerance, summary: str, notes=()) -> dict:
    """The page's header: what ran, on which model and backend, under which tolerance, and what came of it."""
    return {
        "title": title,
        "command": command_line(),
        "model": {"path": graph.shown, "sha256": graph.sha256},
        "precision": graph.precision.label,  # FP16 or BF16: what "all FP16" says
        "backend": backend,
        "tolerance": str(tolerance),
        "summary": summary,
        "notes": list(notes),
    }


def pack(head: dict, graph: Graph, runs: ReportRuns, overrides: Sequence[Pinned] = (), trace=(),
         accumulating: Sequence[Pinned] = ()) -> dict:
    """The report's data: ``head`` (``heading``), the outputs, the per-node errors, the FP32 magnitudes,
    the search's trace (none outside a search), the nodes kept in FP32 (``overrides``) and those in FP32
    accumulation (``accumulating``: stored in FP16, adding in FP32)."""
    return {
        **head,
        **_comparisons(graph, runs),
        "trace": [{"index": i + 1, "fp32": len(s.plan), "passed": s.passed, "phase": s.phase}
                  for i, s in enumerate(trace)],
        "overrides": [
            {"name": p.node.name, "op_type": p.node.op_type, "outputs": list(p.node.outputs),
             "fp32_profile": p.fp32_profile}
            for p in overrides
        ],
        "fp32_accumulate_nodes": [
            {"name": p.node.name, "op_type": p.node.op_type, "outputs": list(p.node.outputs),
             "fp32_profile": p.fp32_profile} for p in accumulating
        ],
    }


def _comparisons(graph: Graph, runs: ReportRuns) -> dict:
    """Per output and per node, all-FP16 and with the plan; every tensor's FP32 magnitudes."""
    worst16 = runs.fp16.worst()
    with_overrides, layer_plan = runs.with_overrides, runs.layer_plan
    worst_plan = with_overrides.worst() if with_overrides is not None else {}
    by_node = {n.node: n for n in layer_plan.nodes} if layer_plan else {}
    return {
        "outputs": [
            {"output": name, "fp16": metrics(worst16.get(name)),
             "with_overrides": metrics(worst_plan.get(name)) if with_overrides is not None else None}
            for name in (worst16 or worst_plan)
        ],
        "nodes": [
            {"id": n.node, "op_type": n.op_type, "pinned": n.node in runs.plan,
             "fp32_accumulation": accumulating(n.node) in runs.plan and n.node not in runs.plan, "fp16": layer_metrics(n),
             "with_overrides": layer_metrics(by_node.get(n.node)) if layer_plan else None}
            for n in runs.layer_fp16.nodes
        ],
        "node_rule": str(runs.thresholds),
        "node_samples": [len(runs.node_samples), runs.samples],  # the per-node errors ran on this many of them
        "node_error_bound": runs.thresholds.max_error,
        "first_failing": {
            "fp16": runs.layer_fp16.first_failing.node if runs.layer_fp16.first_failing else None,
            "with_overrides": layer_plan.first_failing.node if layer_plan and layer_plan.first_failing else None,
        },
        "tensors": [
            {k: row[k] for k in ("name", "kind", "max_abs", "min_nonzero_abs", "tier", "reason")}
            for row in tensor_rows(graph, runs.profile)
        ],
    }


def layer_metrics(node) -> dict | None:
    if node is None:
        return None
    m = metrics(node.metrics) or {}
    m["passed"] = not node.failed  # the layer-wise rule (diagnose/layerwise.py Thresholds), not the tolerance
    m["fp32_max_abs"] = node.scale
    m["error"] = node.error  # what the rule judges: max abs error / the tensor's max |FP32 value|
    return m


def _override_rows(graph: Graph, plan, state: int = 0) -> list[Pinned]:
    """The plan's nodes in FP32 (``state`` 0) or in FP32 accumulation (1), graph order."""
    ids = states(plan)[state]
    return [Pinned(Node.of(graph.by_id[n])) for n in sorted(ids, key=lambda n: graph.by_id[n].index)]


def search_summary(outcome) -> str:
    r = outcome.result
    if r.status == "fp16_passes":
        return (f"all-{outcome.graph.precision.label} meets the tolerance: nothing to keep in FP32; "
                f"{r.evaluations} evaluation(s)")
    minimal = "1-minimal" if r.minimal else "NOT minimal"
    fp32, accumulate = states(r.fp32)
    also = f", {len(accumulate)} in FP32 accumulation" if accumulate else ""
    return (f"{len(fp32)} of {len(outcome.graph.candidates)} candidate node(s) kept in FP32{also} ({minimal}); "
            f"{r.evaluations} evaluation(s) in {outcome.seconds:.1f} s on the {outcome.backend} backend")


def search_report(outcome, runs: ReportRuns, next_steps: Sequence[tuple] = ()) -> dict:
    """``runs``: ``diagnose.report_runs.search_runs(outcome)``; ``next_steps``: (what, command) pairs
    (``report/next_steps.py``), shown last."""
    graph, overrides = outcome.graph, outcome.overrides
    head = heading(f"fp16bisect search: {Path(graph.shown).name}", graph, outcome.backend, outcome.tolerance,
                   search_summary(outcome), overrides.notes)
    return {**pack(head, graph, runs, overrides.pinned, outcome.result.trace, overrides.accumulating),
            "next": [list(step) for step in next_steps],
            "headroom": (overrides.headroom or {}).get("tensors", []),
            "accumulators": overrides.section("accumulators") or [],
            "minimum": (overrides.search or {}).get("minimum")}  # search --minimum: the passing sets found


def check_report(outcome, line: str, runs: ReportRuns) -> dict:
    """``line``: the check's verdict; ``runs``: ``diagnose.report_runs.check_runs(outcome)``."""
    graph = outcome.graph
    head = heading(f"fp16bisect check: {Path(graph.shown).name}", graph, outcome.backend, outcome.tolerance, line)
    return {**pack(head, graph, runs, _override_rows(graph, runs.plan), (), _override_rows(graph, runs.plan, 1)),
            **({"headroom": outcome.headroom["tensors"]} if outcome.headroom else {}),
            "accumulators": outcome.accumulators}


def compare_report(runner: LayerwiseRunner, result: Layerwise, tolerance, runs: ReportRuns) -> dict:
    """``runs``: ``diagnose.report_runs.compare_runs(runner, result, tolerance)``."""
    graph, plan = runner.graph, result.plan
    first = result.first_failing
    summary = (f"first failing node: {first.node} ({first.op_type})" if first else "no node fails") + (
        f" with {len(plan)} node(s) in FP32" if plan else f" in all-{graph.precision.label}")
    head = heading(f"fp16bisect compare: {Path(graph.shown).name}", graph, runner.backend.name, tolerance,
                   summary)
    return pack(head, graph, runs, _override_rows(graph, plan))
