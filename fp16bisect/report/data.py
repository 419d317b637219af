"""What the HTML report shows, gathered from a run (``search``, ``check`` or ``compare``) into plain data.

The per-node errors come from the layer-wise comparison (emulated, whatever
backend judged the plans: TensorRT's fused layers hide intermediate tensors);
the magnitudes from the FP32 profile, the same one the search ranks suspects by.
"""

from __future__ import annotations

import shlex
import sys

from fp16bisect.model.graph import Graph
from fp16bisect.diagnose.layerwise import Layerwise, LayerwiseRunner, Thresholds
from fp16bisect.evaluation.oracle import Evaluation
from fp16bisect.diagnose.scan import tensor_rows
from fp16bisect.model.profile import Profile, profile


def metrics(m) -> dict | None:
    if m is None:
        return None
    return {"max_abs": m.max_abs, "max_rel": m.max_rel, "cosine": m.cosine, "nonfinite": m.nonfinite,
            "passed": m.passed}


def command_line() -> str:
    return shlex.join(["fp16bisect", *sys.argv[1:]])


def gather(
    *,
    title: str,
    graph: Graph,
    samples,
    backend: str,
    tolerance,
    summary: str,
    fp16: Evaluation,
    with_overrides: Evaluation | None = None,
    plan=frozenset(),
    overrides: list[dict] | None = None,
    trace=(),
    notes=(),
    prof: Profile | None = None,
    thresholds: Thresholds = Thresholds(),
    runner: LayerwiseRunner | None = None,
) -> dict:
    runner = runner or LayerwiseRunner(graph, samples)
    prof = prof or profile(graph, samples)
    layer_fp16 = runner.run(frozenset(), thresholds)
    layer_plan: Layerwise | None = runner.run(plan, thresholds) if with_overrides is not None else None
    worst16 = fp16.worst()
    worst_plan = with_overrides.worst() if with_overrides is not None else {}
    plan = frozenset(plan)
    by_node = {n.node: n for n in layer_plan.nodes} if layer_plan else {}
    return {
        "title": title,
        "command": command_line(),
        "model": {"path": str(graph.path), "sha256": graph.sha256},
        "backend": backend,
        "tolerance": str(tolerance),
        "summary": summary,
        "notes": list(notes),
        "outputs": [
            {"output": name, "fp16": metrics(worst16.get(name)),
             "with_overrides": metrics(worst_plan.get(name)) if with_overrides is not None else None}
            for name in (worst16 or worst_plan)
        ],
        "nodes": [
            {"id": n.node, "op_type": n.op_type, "pinned": n.node in plan, "fp16": layer_metrics(n),
             "with_overrides": layer_metrics(by_node.get(n.node)) if layer_plan else None}
            for n in layer_fp16.nodes
        ],
        "node_rule": str(thresholds),
        "node_error_bound": thresholds.max_error,
        "first_failing": {
            "fp16": layer_fp16.first_failing.node if layer_fp16.first_failing else None,
            "with_overrides": layer_plan.first_failing.node if layer_plan and layer_plan.first_failing else None,
        },
        "tensors": [
            {k: row[k] for k in ("name", "kind", "max_abs", "min_nonzero_abs", "tier", "reason")}
            for row in tensor_rows(graph, prof)
        ],
        "trace": [{"index": i + 1, "fp32": len(s.plan), "passed": s.passed, "phase": s.phase}
                  for i, s in enumerate(trace)],
        "overrides": [
            {"name": o["name"], "op_type": o.get("op_type", ""), "outputs": list(o.get("outputs", [])),
             "fp32_profile": o.get("fp32_profile", "")}
            for o in (overrides or [])
        ],
    }


def layer_metrics(node) -> dict | None:
    if node is None:
        return None
    m = metrics(node.metrics)
    m["passed"] = not node.failed  # the layer-wise rule (diagnose/layerwise.py Thresholds), not the tolerance
    m["fp32_max_abs"] = node.scale
    m["error"] = node.error  # what the rule judges: max abs error / the tensor's max |FP32 value|
    return m


def _override_rows(graph: Graph, plan) -> list[dict]:
    return [{"name": n, "op_type": graph.by_id[n].op_type, "outputs": list(graph.by_id[n].outputs)}
            for n in sorted(plan, key=lambda n: graph.by_id[n].index)]


def search_summary(outcome) -> str:
    r = outcome.result
    if r.status == "fp16_passes":
        return f"all-FP16 meets the tolerance: nothing to keep in FP32; {r.evaluations} evaluation(s)"
    minimal = "1-minimal" if r.minimal else "NOT minimal"
    return (f"{len(r.fp32)} of {len(outcome.graph.candidates)} candidate node(s) kept in FP32 ({minimal}); "
            f"{r.evaluations} evaluation(s) in {outcome.seconds:.1f} s on the {outcome.backend} backend")


def search_report(outcome) -> dict:
    result = outcome.result
    return gather(
        title=f"fp16bisect search: {outcome.graph.path.name}", graph=outcome.graph, samples=outcome.oracle.samples,
        backend=outcome.backend, tolerance=outcome.tolerance, summary=search_summary(outcome), fp16=outcome.fp16,
        with_overrides=outcome.final, plan=frozenset(result.fp32), overrides=outcome.data["fp32_nodes"],
        trace=result.trace, notes=outcome.data["notes"], prof=outcome.profile,
    )


def check_report(outcome, line: str) -> dict:
    from fp16bisect.evaluation.oracle import Oracle

    use = outcome.overrides
    plan = frozenset(use.nodes) if use else frozenset()
    graph = outcome.graph
    runner = LayerwiseRunner(graph, outcome.samples)  # one emulation session: the per-node errors and the contrast
    fp16 = outcome.evaluation
    if use:  # the all-FP16 contrast, emulated
        oracle = Oracle(runner.backend, outcome.samples, outcome.tolerance, graph.float_output_names())
        fp16 = oracle.evaluate(frozenset())
    return gather(
        title=f"fp16bisect check: {graph.path.name}", graph=graph, samples=outcome.samples,
        backend=outcome.backend, tolerance=outcome.tolerance, summary=line, fp16=fp16,
        with_overrides=outcome.evaluation if use else None, plan=plan, overrides=_override_rows(graph, plan),
        runner=runner,
    )


def compare_report(runner: LayerwiseRunner, result: Layerwise, tolerance) -> dict:
    from fp16bisect.evaluation.oracle import Oracle

    graph, plan = runner.graph, result.plan
    oracle = Oracle(runner.backend, runner.samples, tolerance, graph.float_output_names())
    first = result.first_failing
    summary = (f"first failing node: {first.node} ({first.op_type})" if first else "no node fails") + (
        f" with {len(plan)} node(s) in FP32" if plan else " in all-FP16")
    return gather(
        title=f"fp16bisect compare: {graph.path.name}", graph=graph, samples=runner.samples, backend="emulate",
        tolerance=tolerance, summary=summary, fp16=oracle.evaluate(frozenset()),
        with_overrides=oracle.evaluate(plan) if plan else None, plan=plan, thresholds=result.thresholds,
        runner=runner, overrides=_override_rows(graph, plan),
    )
