"""Layer-wise comparison: every candidate's output in an FP16 run against the FP32 run.

Both runs go through one emulation session (every candidate's float outputs
exposed), the FP32 run being the plan with every candidate in FP32, so the two
differ only by FP16 rounding. In topological order, the first node whose
output fails is where the error is born; later ones mostly inherit it.

A node fails when any of its float outputs, on any sample, has NaN/inf where
FP32 is finite, or breaks a threshold: cosine below ``cosine_low`` (0.9), or
cosine below ``cosine`` (0.99) with max abs error above ``abs_floor`` (1e-3),
or max abs error above ``max_abs`` (1).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from ..backends.emulate import EmulateBackend
from ..model.graph import Graph
from ..artifacts.overrides import write_atomic
from ..tolerance import OutputMetrics, Tolerance, compare


@dataclass(frozen=True)
class Thresholds:
    cosine: float = 0.99
    abs_floor: float = 1e-3
    cosine_low: float = 0.9
    max_abs: float = 1.0

    def fails(self, m: OutputMetrics) -> bool:
        return bool(
            m.nonfinite
            or m.cosine < self.cosine_low
            or (m.cosine < self.cosine and m.max_abs > self.abs_floor)
            or m.max_abs > self.max_abs
        )

    def __str__(self) -> str:
        return (f"fail: inf/NaN, cosine < {self.cosine_low:g}, cosine < {self.cosine:g} with max abs > "
                f"{self.abs_floor:g}, or max abs > {self.max_abs:g}")


@dataclass
class NodeError:
    node: str
    op_type: str
    pinned: bool
    metrics: OutputMetrics  # the worst output and sample of this node
    failed: bool

    def row(self) -> dict:
        m = self.metrics
        return {"node": self.node, "op_type": self.op_type, "fp32": self.pinned, "tensor": m.output,
                "max_abs": m.max_abs, "max_rel": m.max_rel, "cosine": m.cosine, "nonfinite": m.nonfinite,
                "passed": not self.failed}


@dataclass
class Layerwise:
    plan: frozenset
    thresholds: Thresholds
    nodes: list[NodeError] = field(default_factory=list)  # candidates, topological order

    @property
    def first_failing(self) -> NodeError | None:
        return next((n for n in self.nodes if n.failed), None)

    @property
    def failing(self) -> list[NodeError]:
        return [n for n in self.nodes if n.failed]


class LayerwiseRunner:
    """One emulation session exposing every candidate's outputs; compares any number of plans."""

    def __init__(self, graph: Graph, samples):
        self.graph = graph
        self.samples = samples
        self.tensors = {n.id: graph.float_outputs(n) for n in graph.candidates}
        self.backend = EmulateBackend(graph, [t for ts in self.tensors.values() for t in ts])
        everything = frozenset(self.tensors)
        self.fp32 = [self.backend.run(everything, s.inputs) for s in samples]

    def run(self, plan=frozenset(), thresholds: Thresholds = Thresholds()) -> Layerwise:
        plan = frozenset(plan)
        got = [self.backend.run(plan, s.inputs) for s in self.samples]
        loose = Tolerance(atol=float("inf"), rtol=0.0)  # the metrics only; the thresholds judge
        result = Layerwise(plan, thresholds)
        for node in self.graph.candidates:
            worst = None
            for i, (fp16, fp32) in enumerate(zip(got, self.fp32)):
                for t in self.tensors[node.id]:
                    m = compare(fp16[t], fp32[t], loose, t, i)
                    if worst is None or _worse(m, worst, thresholds):
                        worst = m
            if worst is not None:
                result.nodes.append(NodeError(node.id, node.op_type, node.id in plan, worst, thresholds.fails(worst)))
        return result


def _worse(a: OutputMetrics, b: OutputMetrics, t: Thresholds) -> bool:
    return (t.fails(a), a.nonfinite, a.max_abs) > (t.fails(b), b.nonfinite, b.max_abs)


def write_csv(path: str | Path, result: Layerwise) -> None:
    rows = [n.row() for n in result.nodes]
    fields = ["node", "op_type", "fp32", "tensor", "max_abs", "max_rel", "cosine", "nonfinite", "passed"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue().encode("utf-8"))
