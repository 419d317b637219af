"""What keeping a node in FP32 costs at run time, estimated (``search --objective cost``).

An estimate, not a measurement: never run on a GPU. Per candidate, the extra microseconds of its FP32 kernel over
its FP16 one on a nominal GPU (``Nominal``: 1 TB/s, 20 TFLOP/s in FP32, FP16 8x faster on MatMul, Gemm and Conv
(tensor cores) and 2x elsewhere), from

* the bytes it moves: every float input and output (weights included) twice as wide;
* its arithmetic: 2 x output elements x the reduction length for MatMul, Gemm and Conv, one per output element
  otherwise, at the FP32 rate instead of the FP16 one;
* the Casts its pin adds at precision boundaries: one per float activation it reads or writes (a read of 4 bytes
  and a write of 2 per element), as if its neighbours stayed in FP16. Two adjacent pinned nodes need no Cast
  between them: ``shared_casts`` gives, per adjacent pair, what the two costs both count there, and a set's cost
  is its members' less that for each adjacent pair in it (the hitting-set solver weighs sets exactly so).

Element counts come from the FP32 profile (what the samples' runs produced; a graph input's from its declared
shape), the reduction length from the weights' and the inferred shapes. Real engines fuse, pick other kernels, and pay launch overheads: the estimate
ranks sets (a 4096x4096 MatMul against two elementwise nodes), it does not predict latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from fp16bisect.model.graph import Graph, Node

__all__ = ["Nominal", "measured", "node_costs", "shared_casts"]

HEAVY = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger", "Einsum"})


@dataclass(frozen=True)
class Nominal:
    """The nominal GPU the estimate is in microseconds of."""

    bytes_per_us: float = 1e6  # 1 TB/s
    fp32_flops_per_us: float = 2e7  # 20 TFLOP/s
    fp16_speedup_heavy: float = 8.0  # tensor cores on MatMul, Gemm, Conv
    fp16_speedup_other: float = 2.0  # paired FP16 arithmetic


def measured(fp16_ms: Mapping[str, float], fp32_ms: Mapping[str, float]) -> dict[str, float]:
    """Per node timed in both engines (the all-FP16 one and the all-FP32 one), the extra microseconds of its FP32
    layers (none below 0: a node that ran faster in FP32 costs nothing)."""
    return {n: max(0.0, (float(fp32_ms[n]) - float(fp16_ms[n])) * 1000.0) for n in fp16_ms if n in fp32_ms}


def node_costs(graph: Graph, prof, nominal: Nominal = Nominal(), timed: Mapping[str, float] | None = None
               ) -> dict[str, float]:
    """Per candidate id, the estimated extra microseconds of running it in FP32 rather than FP16; ``timed``
    (``measured``: per node, from engine profiles) replaces the estimate of its kernel, its Casts still estimated."""
    initializers = {t.name: t for t in graph.model.graph.initializer}
    elements = _elements(graph, prof, initializers)
    timed = timed or {}
    return {n.id: _cost(graph, n, elements, initializers, nominal, timed.get(n.id)) for n in graph.candidates}


def shared_casts(graph: Graph, prof, nominal: Nominal = Nominal()) -> dict[frozenset, float]:
    """Per pair of candidates one of which reads a float activation the other writes, the microseconds
    ``node_costs`` counts for Casts at that tensor which two FP32 neighbours do not need: the reader's Cast, and
    the writer's share of its own (all of it when the reader is the tensor's only reader: with several, its Cast
    goes only when every reader is in FP32, which no pair can say, so each pair takes an equal share). A set of
    pins costs the sum of its members' costs less this for each adjacent pair in it
    (``algorithm.hitting.Weights``)."""
    initializers = {t.name: t for t in graph.model.graph.initializer}
    elements = _elements(graph, prof, initializers)
    writer = {t: n.id for n in graph.candidates for t in n.outputs if t}
    readers: dict = {}
    for n in graph.nodes:
        for t in dict.fromkeys(n.inputs):
            readers[t] = readers.get(t, 0) + 1
    shared: dict = {}
    for node in graph.candidates:
        for t in dict.fromkeys(node.inputs):
            if t in writer and writer[t] != node.id and t not in initializers and graph.is_float(t):
                pair = frozenset({writer[t], node.id})
                cast = 6.0 * elements(t) / nominal.bytes_per_us
                shared[pair] = shared.get(pair, 0.0) + cast * (1.0 + 1.0 / max(1, readers.get(t, 1)))
    return shared


def _elements(graph: Graph, prof, initializers: dict):
    """A tensor's elements per sample: from the weights, the FP32 profile, or a graph input's declared shape."""
    samples = max(1, len(getattr(prof, "sample_order", ())) or 1)

    def elements(tensor: str) -> float:
        if tensor in initializers:
            return float(math.prod(initializers[tensor].dims))
        stats = prof.tensors.get(tensor)
        if stats is not None and stats.size:
            return stats.size / samples
        shape = graph.shapes.get(tensor)  # a graph input (the profile records what nodes write): its declared shape
        return float(math.prod(shape)) if shape and all(isinstance(d, int) and d > 0 for d in shape) else 0.0

    return elements


def _cost(graph: Graph, node: Node, elements, initializers: dict, nominal: Nominal, timed: float | None) -> float:
    floats = [t for t in (*node.inputs, *node.outputs) if t and graph.is_float(t)]
    moved = 2.0 * sum(elements(t) for t in floats)  # bytes: 4 instead of 2 per element
    casts = 6.0 * sum(elements(t) for t in floats if t not in initializers)
    out = sum(elements(t) for t in node.outputs if t and graph.is_float(t))
    flops = out * (2.0 * _reduction(graph, node, initializers) if node.op_type in HEAVY else 1.0)
    speedup = nominal.fp16_speedup_heavy if node.op_type in HEAVY else nominal.fp16_speedup_other
    compute = flops / nominal.fp32_flops_per_us * (1.0 - 1.0 / speedup)
    if timed is not None:
        return casts / nominal.bytes_per_us + timed
    return (moved + casts) / nominal.bytes_per_us + compute


def _reduction(graph: Graph, node: Node, initializers: dict) -> float:
    """The length each output element sums over (1 when unknown)."""
    if node.op_type in ("Conv", "ConvTranspose") and len(node.inputs) > 1 and node.inputs[1] in initializers:
        dims = list(initializers[node.inputs[1]].dims)
        return float(math.prod(dims[1:])) if dims else 1.0
    if node.op_type in ("MatMul", "Gemm", "MatMulInteger") and node.inputs:
        shape = graph.shapes.get(node.inputs[0]) if isinstance(graph.shapes, dict) else None
        last = shape[-1] if shape else None
        if isinstance(last, int) and last > 0:
            return float(last)
        if len(node.inputs) > 1 and node.inputs[1] in initializers:
            dims = list(initializers[node.inputs[1]].dims)
            return float(dims[0] if len(dims) == 2 else dims[-2] if len(dims) > 2 else 1)
    return 1.0
