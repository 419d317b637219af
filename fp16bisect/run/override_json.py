"""The override JSON of a search (what pipelines read), built from its ``Outcome``: small on any model."""

from __future__ import annotations

from fp16bisect import __version__
from fp16bisect.model.graph import Graph, notes
from fp16bisect.evaluation.oracle import EXIT_CODE, Oracle
from fp16bisect.strategy.prior import Prior
from fp16bisect.algorithm.search import SearchResult
from fp16bisect.artifacts.exports import autocast_export, strongly_typed_export, trtexec_export
from fp16bisect.artifacts.overrides import SCHEMA, node_entry
from fp16bisect.run.paths import journal_path

# The override file stays small whatever the search met (pipelines read it, CI stores it): lists of plans are
# capped to their first EXAMPLES entries ("<key>_total" says how many there were), a plan is listed in full up to
# PLAN_IDS ids, the trace to TRACE_LIMIT steps. The journal keeps everything.
EXAMPLES, PLAN_IDS, TRACE_LIMIT = 10, 64, 1000


def plan_json(plan) -> list | dict:
    """A plan's ids, or for a large plan how many it holds."""
    return sorted(plan) if len(plan) <= PLAN_IDS else {"ids": len(plan), "listed_in": "the journal"}


def capped(key: str, items: list, limit: int = EXAMPLES) -> dict:
    """``key``: the first ``limit`` items; ``<key>_total``: how many there were, when some were left out."""
    return {key: items} if len(items) <= limit else {key: items[:limit], f"{key}_total": len(items)}


def contradictions_json(found: list) -> dict:
    """How often the judge contradicted monotonicity, and the first examples as node-id differences: a plan that
    passed and what its failing superset added (nothing: the same plan failed when evaluated again)."""
    return {"count": len(found), "examples": [
        {"passed_ids": len(small), "failed_adding": sorted(big - small), "same_plan_failed_again": small == big}
        for small, big in found[:EXAMPLES]]}


def prior_json(o) -> dict | None:
    p, r = o.prior, o.result
    if p is None:
        return None
    return {"backend": "emulate", "status": p.status, "fp32": list(p.fp32), "evaluations": p.evaluations,
            "seconds": round(p.seconds, 3), "minimal": p.minimal, "agreed": bool(r.agreed),
            "added": list(r.added), "dropped": list(r.dropped), "journal": p.journal, "replayed": p.replayed,
            "alternatives": alternatives_json(p, r)}


def alternatives_json(p: Prior, r: SearchResult) -> dict | None:
    """When the prior's set failed on the judge: the emulator's alternatives (made, from how many emulator
    evaluations) and how many were evaluated on the judge; ``used``: the answer came from one of them."""
    tried = [s for s in r.trace if s.phase == "alternative"]
    if not p.alternatives and not tried:
        return None
    return {**p.alternatives, "evaluated": len(tried), "used": any(s.passed for s in tried)}


def ignored_pins(oracle: Oracle) -> list[dict]:
    """Weakly typed TensorRT builds whose FP32 pins TensorRT ignored: node, the engine layer it was fused
    into, and the plan (not counted as evidence). Read from the evaluations' reasons, so a resumed search
    lists those of the replayed evaluations too."""
    return [{"node": node, "layer": layer, "fp32": plan_json(e.plan)}
            for e in oracle.build_failures for node, layer in e.reason.pins]


def conversions_json(graph: Graph, fp32) -> dict:
    """What the all-FP16 plan's file and the answer's file convert beyond rounding, and by which rule."""
    from fp16bisect.artifacts.mixed import conversions
    from fp16bisect.model.fp16 import RULE

    return {"rule": RULE, "all_fp16": [c.to_json() for c in conversions(graph, ())],
            "with_overrides": [c.to_json() for c in conversions(graph, fp32)]}


def unverified(o) -> list[dict]:
    """The members of the answer whose removal could not be evaluated, each with the reason."""
    found = []
    for member in o.result.unverified:
        evaluation = o.oracle.memo.get(frozenset(o.result.fp32) - {member})
        reason = evaluation.reason if evaluation is not None and evaluation.reason is not None else None
        found.append({"node": member, "reason": reason.to_json() if reason else {"kind": "unknown", "message": ""}})
    return found


def overrides_json(o) -> dict:
    """The whole file for ``o`` (an ``outcome.Outcome``)."""
    output = o.output
    graph, result = o.graph, o.result
    reasons = {r.node: r.reason for r in o.profile.risks}
    nodes = [graph.by_id[i] for i in result.fp32]
    everything = frozenset(n.id for n in graph.candidates)

    def worst(plan) -> dict | None:
        """Per output, the worst sample; {} when the plan was not evaluated, None when its verdict was a
        command's exit code (no outputs to measure). The all-FP16 plan may come from the prior (o.fp16)."""
        evaluation = o.fp16 if not plan else o.oracle.memo.get(frozenset(plan))
        if evaluation is not None and evaluation.verdict_from == EXIT_CODE:
            return None
        return {k: m.to_json() for k, m in evaluation.worst().items()} if evaluation else {}

    return {
        "schema": SCHEMA,
        "model": {"path": str(graph.path), "sha256": graph.sha256},
        "backend": {"name": o.backend, **o.backend_info,
                    "versions": {"fp16bisect": __version__, **o.backend_info.get("versions", {})}},
        "tolerance": o.tolerance.to_json(),
        "fp32_nodes": [node_entry(n, reasons.get(n.id, "")) for n in nodes],
        "search": {
            "status": result.status,
            "candidates": len(graph.candidates),
            "evaluations": result.evaluations,
            "evaluations_run": o.oracle.runs,
            "rounds": result.rounds,  # batches that waited on each other (== evaluations with --jobs 1)
            "jobs": o.oracle.width,  # plans evaluated at once
            "repeats": o.oracle.repeats,
            **capped("flaky", [plan_json(e.plan) for e in o.oracle.flaky]),
            "minimal": result.minimal,
            "minimality": result.minimality,
            # members kept because their removal could not be evaluated: why, from that evaluation
            "unverified": unverified(o),
            "unevaluable": len(o.oracle.build_failures),
            "verified": result.passed,
            "contradictions": contradictions_json(result.contradictions),
            "seconds": round(o.seconds, 3),
            **capped("trace", [{"fp32": len(s.plan), "passed": s.passed, "phase": s.phase, "round": s.round}
                               for s in result.trace], TRACE_LIMIT),
            **capped("build_failures", [{"fp32": plan_json(e.plan), "error": e.error}
                                        for e in o.oracle.build_failures]),
            **capped("ignored_pins", ignored_pins(o.oracle)),
            # every evaluation in full (plans, verdicts, errors, metrics): the journal, when -o was given
            "journal": journal_path(output) if output else None,
        },
        "prior": prior_json(o),
        # fp32 is null when the search never needed the all-FP32 plan (a passing plan implies it); fp16 comes
        # from the emulator (fp16_backend says so) when a prior's witness made the all-FP16 build unnecessary
        "metrics": {"fp32": worst(everything) or None, "fp16": worst(()), "fp16_backend": o.fp16_backend,
                    "with_overrides": worst(result.fp32)},
        "skipped_nodes": graph.skipped,
        "notes": notes(graph),
        # constants read in FP16 that FP16 cannot hold (the writer stores them by the rule; so does the emulator)
        "conversions": conversions_json(graph, result.fp32),
        "exports": {  # the strongly typed route first: it is the one TensorRT must honour (10.x included)
            "strongly_typed": strongly_typed_export(graph, output),
            "trtexec": trtexec_export(graph, nodes),
            "modelopt_autocast": autocast_export(graph, nodes),
        },
    }
