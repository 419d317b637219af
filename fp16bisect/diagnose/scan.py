"""``scan``: where a model is at risk in the low precision (the FP32 profile's risky tensors and suspicion order,
the headroom of its tensors and of its summing nodes' accumulators), no search.

Its rows of tensors (``tensor_rows``) are also what the HTML report shows."""

from __future__ import annotations

from fp16bisect.model.graph import Graph
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.model.headroom import LIMIT, accumulators_json, fp16_accumulators, fp16_tensors
from fp16bisect.model.profile import Profile, profile
from fp16bisect.model.samples import load_samples
from fp16bisect.model.statistics import TIERS

SCAN_SCHEMA = "fp16bisect.scan/1"


def scan_model(model: str, inputs: list[str], listener, precision: Precision = FP16) -> tuple[Graph, dict]:
    """The model and ``scan``'s JSON (risky tensors, the candidates in suspicion order), for ``precision``."""
    with listener.timed(f"loading {model}"):
        graph = Graph.load(model, precision=precision)
    samples = load_samples(graph, inputs)
    with listener.timed(f"profiling FP32 activations of {len(graph.candidates)} candidate node(s)"):
        prof = profile(graph, samples)
    data = scan_json(graph, prof)
    data["headroom"] = headroom_rows(graph, prof, [s.source for s in samples])
    data["accumulators"] = accumulators_json(fp16_accumulators(prof, ()), [s.source for s in samples],
                                             graph.precision)
    if prof.accumulators_note:
        data["accumulators_note"] = prof.accumulators_note
    return graph, data


def headroom_rows(graph: Graph, prof: Profile, sources) -> list[dict]:
    """The activations written by candidates, least headroom first (FP32 peak over every sample against the
    precision's largest finite value, with the sample that reached it), up to ``model.headroom.LIMIT``: what
    ``scan`` ranks by headroom."""
    found = fp16_tensors(graph, prof, ())
    return [h.to_json(sources) for h in found[:LIMIT]]


def tensor_rows(graph: Graph, prof: Profile, min_tier: int = 0) -> list[dict]:
    """Every recorded tensor at ``min_tier`` or above, riskiest first: what ``scan`` and the report show."""
    readers: dict[str, list[str]] = {}
    writer: dict[str, str] = {}
    for node in graph.nodes:
        for t in node.inputs:
            readers.setdefault(t, []).append(node.id)
        for t in node.outputs:
            writer[t] = node.id
    rows: list[dict] = []
    for s in prof.tensors.values():
        if s.tier < min_tier:
            continue
        rows.append({
            "name": s.name,
            "kind": "weight" if s.initializer else "activation",
            "tier": s.tier,
            "risk": TIERS[s.tier],
            "max_abs": s.max_abs,
            "min_nonzero_abs": s.min_nonzero if s.min_nonzero != float("inf") else 0.0,
            "overflow": s.overflow,
            "flushed": s.flushed,
            "subnormal": s.subnormal,
            "reason": s.describe(),
            "written_by": writer.get(s.name, ""),
            "read_by": readers.get(s.name, []),
            "_severity": s.severity,
        })
    rows.sort(key=lambda r: (-r["tier"], -r["_severity"], r["name"]))
    for r in rows:
        del r["_severity"]
    return rows


def scan_json(graph: Graph, prof: Profile) -> dict:
    """``scan``'s JSON: risky tensors (weights and activations) and the suspicion order of candidates; its
    ``limits`` are the precision's, named after it (``fp16_max``, ``bf16_max``...)."""
    low = graph.precision
    return {
        "schema": SCAN_SCHEMA,
        "model": {"path": str(graph.path), "sha256": graph.sha256},
        "limits": {f"{low.name}_max": low.max, f"{low.name}_min_normal": low.smallest_normal,
                   f"{low.name}_min_subnormal": low.smallest_subnormal},
        "tensors": tensor_rows(graph, prof, min_tier=1),
        "nodes": [{"name": r.node, "op_type": r.op_type, "tier": r.tier, "risk": TIERS[r.tier], "reason": r.reason}
                  for r in prof.risks],
        "suspects": prof.suspects,
    }
