"""``scan``: where a model is at risk in FP16 (the FP32 profile's risky tensors and suspicion order), no search."""

from __future__ import annotations

from fp16bisect.model.graph import Graph
from fp16bisect.model.profile import profile, scan_json
from fp16bisect.model.samples import load_samples


def scan_model(model: str, inputs: list[str], listener) -> tuple[Graph, dict]:
    """The model and ``scan``'s JSON (risky tensors, the candidates in suspicion order)."""
    with listener.timed(f"loading {model}"):
        graph = Graph.load(model)
    samples = load_samples(graph, inputs)
    with listener.timed(f"profiling FP32 activations of {len(graph.candidates)} candidate node(s)"):
        prof = profile(graph, samples)
    return graph, scan_json(graph, prof)
