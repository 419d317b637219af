"""Layer-wise comparison: every candidate's output in an FP16 run against the FP32 run.

Both runs go through one emulation session (every candidate's float outputs
exposed), the FP32 run being the plan with every candidate in FP32, so the two
differ only by FP16 rounding. In topological order, the first node whose
output fails is where the error is born; later ones mostly inherit it.

A node fails when any of its float outputs, on any sample, has NaN/inf where
FP32 is finite, or when its error is large for its own scale: the largest
|FP16 - FP32| over the tensor, divided by the largest |FP32| value of that
tensor (at least the precision's smallest normal), exceeds ``max_error``
(default ``Precision.max_error``, 256 unit roundoffs: for FP16 1/8, 256 x
2^-11; rounding a tensor's own values costs at most 2^-11 of its scale, and
the drift inherited through a whole network stays far below 1/8: 0.034 at
worst over the 374 nodes of PP-OCRv4 rec in all-FP16, whose outputs meet
atol = rtol = 1e-2; for BF16, whose unit roundoff is 8x FP16's, 1). An
absolute bound would fail every large-valued tensor: FP16 rounds 300 to the
nearest 0.25, so a tensor in the hundreds has absolute errors near 1 without
any fault.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fp16bisect import records
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import plan_of
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.model.samples import add_fp32_references, load_samples
from fp16bisect.artifacts.files import write_atomic
from fp16bisect.diagnose.preflight import use_overrides
from fp16bisect.diagnose.tensor_errors import tensor_errors
from fp16bisect.errors import shown
from fp16bisect.tolerance import OutputMetrics, Tolerance


def scaled_error(max_abs: float, scale: float, low: Precision = FP16) -> float:
    """max |low - FP32| over a tensor as a fraction of the tensor's own scale, max |FP32| (at least ``low``'s
    smallest normal)."""
    return max_abs / max(scale, low.smallest_normal)


def max_error_of(value) -> float | None:
    """``max_error`` (``--max-error``) checked, the API's and the command line's one check: None (the precision's
    own), or a finite number >= 0 (a string of one too); anything else a ``UsageError`` naming it, one line."""
    return records.given(records.real(0, optional=True, what="a fraction of the node's max |FP32 value|"), value,
                         "max_error")


@dataclass(frozen=True)
class Thresholds:
    """The per-node pass rule of ``compare`` and of the report's per-node plot (one implementation), in the
    precision ``low``: ``given`` (``--max-error``, checked by ``max_error_of``), or None for the precision's own
    (``Precision.max_error``)."""

    given: float | None = None
    low: Precision = FP16

    def __post_init__(self) -> None:
        object.__setattr__(self, "given", max_error_of(self.given))

    @property
    def max_error(self) -> float:
        """The largest error a node may have, as a fraction of its tensor's own scale."""
        return self.low.max_error if self.given is None else self.given

    def error(self, max_abs: float, scale: float) -> float:
        """What the rule judges: max abs error as a fraction of ``scale``."""
        return scaled_error(max_abs, scale, self.low)

    def fails(self, m: OutputMetrics, scale: float) -> bool:
        """``scale``: max |FP32 value| of the tensor ``m`` measures."""
        return bool(m.nonfinite or self.error(m.max_abs, scale) > self.max_error)

    def __str__(self) -> str:
        return (f"fail: inf/NaN where FP32 is finite, or max abs error > {self.max_error:g} x the tensor's max "
                "|FP32 value|")


@dataclass
class NodeError:
    node: str
    op_type: str
    pinned: bool
    metrics: OutputMetrics  # the worst output and sample of this node
    failed: bool
    scale: float = 0.0  # max |FP32 value| of that output on that sample
    low: Precision = FP16  # the precision the node ran in

    def __repr__(self) -> str:
        """One line: ``NodeError('ln1_square' (Mul): 'ln1_sq' on sample 0, max abs error inf of max |FP32|
        1.644e+05, 4 inf/NaN; failed)``."""
        m = self.metrics
        bad = f", {m.nonfinite} inf/NaN" if m.nonfinite else ""
        return (f"NodeError({shown(self.node)} ({self.op_type}){', in FP32' if self.pinned else ''}: "
                f"{shown(m.output)} on sample {m.sample}, max abs error {m.max_abs:.4g} of max |FP32| {self.scale:.4g}"
                f"{bad}; {'failed' if self.failed else 'passed'})")

    @property
    def error(self) -> float:
        """What the rule judges: max abs error as a fraction of ``scale``."""
        return scaled_error(self.metrics.max_abs, self.scale, self.low)

    def row(self) -> dict:
        m = self.metrics
        return {"node": self.node, "op_type": self.op_type, "fp32": self.pinned, "tensor": m.output,
                "max_abs": m.max_abs, "fp32_max_abs": self.scale, "error": self.error, "max_rel": m.max_rel,
                "cosine": m.cosine, "nonfinite": m.nonfinite, "passed": not self.failed}


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
    """One emulation session exposing every candidate's outputs; compares any number of plans, a sample at a
    time (the FP32 run and the plans' runs of one sample are all it holds)."""

    def __init__(self, graph: Graph, samples, accumulate: str = "fp32", notify=None):
        """``accumulate``: what FP16 nodes add in (``--accumulate``; fp16: emulated, see ``EmulateBackend``)."""
        self.graph = graph
        self.samples = samples
        self.tensors = {n.id: graph.float_outputs(n) for n in graph.candidates}
        self.backend = EmulateBackend(graph, [t for ts in self.tensors.values() for t in ts], accumulate=accumulate,
                                      notify=notify)

    def run(self, plan=frozenset(), thresholds: Thresholds | None = None) -> Layerwise:
        """The plan's layer-wise errors, judged by ``thresholds`` (None: the precision's own)."""
        return self.runs([plan], thresholds)[0]

    def runs(self, plans, thresholds: Thresholds | None = None, only: Sequence[int] | None = None) -> list[Layerwise]:
        """Each plan's per-node errors: its worst output and sample per candidate (one pass over the samples;
        ``only``: over those sample indices)."""
        plans = [frozenset(p) for p in plans]
        thresholds = thresholds or Thresholds(low=self.graph.precision)
        worst: list[dict[str, NodeError]] = [{} for _ in plans]
        everything = frozenset(self.tensors)
        owners = [(node, t) for node in self.graph.candidates for t in self.tensors[node.id]]
        for i in range(len(self.samples)) if only is None else only:
            fp32 = self.backend.run(everything, self.samples[i].inputs)
            scales = {t: _max_abs(v) for t, v in fp32.items()}
            for plan, found in zip(plans, worst):
                fp16 = self.backend.run(plan, self.samples[i].inputs)
                for (node, t), m in zip(owners, tensor_errors([(t, fp16[t], fp32[t]) for _, t in owners], i)):
                    here = NodeError(node.id, node.op_type, node.id in plan, m, thresholds.fails(m, scales[t]),
                                     scales[t], self.graph.precision)
                    if node.id not in found or _rank(here) > _rank(found[node.id]):
                        found[node.id] = here
        return [Layerwise(plan, thresholds, [found[n.id] for n in self.graph.candidates if n.id in found])
                for plan, found in zip(plans, worst)]


def _rank(n: NodeError) -> tuple:
    return (n.failed, n.metrics.nonfinite, n.error)


def _max_abs(values) -> float:
    """max |x| over the finite values (0.0 if none)."""
    values = np.asarray(values)
    if values.size == 0 or not np.issubdtype(values.dtype, np.floating):
        return 0.0
    finite = values if np.isfinite(values).all() else values[np.isfinite(values)]
    return float(np.max(np.abs(finite))) if finite.size else 0.0


def write_csv(path: str | Path, result: Layerwise) -> None:
    rows = [n.row() for n in result.nodes]
    fields = ["node", "op_type", "fp32", "tensor", "max_abs", "fp32_max_abs", "error", "max_rel", "cosine",
              "nonfinite", "passed"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue().encode("utf-8"))


def compare_model(model: str, inputs: list[str], references, overrides: str | None, max_error: float | None,
                  listener, precision: Precision = FP16, accumulate: str = "fp32"):
    """``compare``: the layer-wise runner and its result for the plan of ``overrides`` (none: all-FP16), in
    ``precision``, FP16 nodes adding in ``accumulate``."""
    thresholds = Thresholds(max_error, precision)  # a bad max_error is refused before anything loads
    listener.stage(f"loading {model}")
    graph = Graph.load(model, precision=precision)
    samples = load_samples(graph, inputs, references)
    add_fp32_references(graph, samples)
    use = use_overrides(graph, overrides, listener.stage) if overrides else None
    if use and not use.same_model:
        listener.stage(f"note: {overrides} was made for another version of this model: comparing anyway")
    # the file's whole plan: its FP32 nodes and (once override files have them) its FP32-accumulation nodes
    plan = plan_of(use.nodes, getattr(use, "accumulating", ())) if use else frozenset()
    listener.stage(f"running {len(graph.candidates)} candidate node(s) in FP32 and in FP16 (emulated)")
    runner = LayerwiseRunner(graph, samples, accumulate, notify=listener.stage)
    return runner, runner.run(plan, thresholds)


def outputs_against(runner: LayerwiseRunner, plan: frozenset, tolerance: Tolerance):
    """The model's outputs with ``plan`` in FP32 against ``tolerance`` (``compare --atol/--rtol``), emulated in
    the comparison's own session: an ``Evaluation``."""
    from fp16bisect.evaluation.oracle import Oracle

    return Oracle(runner.backend, runner.samples, tolerance, runner.graph.float_output_names()).evaluate(plan)

