"""Check a written mixed-precision model itself, independently of the search's emulation.

``storage_emulation`` rewrites any mixed FP16/FP32 ONNX model into an FP32
graph that keeps every FP16 tensor's values rounded to FP16: FP16 constants
become their (exact) FP32 values, every node that produced FP16 computes in
FP32 and its output goes through an explicit ``Cast(FLOAT16) -> Cast(FLOAT)``
round trip, which ONNX Runtime keeps. That is "stored in FP16, computed in
FP32", what TensorRT does for most layers. It reads only the model, so it
checks that the Casts in the file implement the plan.

``strict`` runs the file itself in ``onnx.reference`` (NumPy on float16 arrays)
against its own FP32 run of the original model: each op's output is rounded to
FP16, but NumPy sums float16 matmuls and reductions in float32
(``np.ones((1, 4096), np.float16) @ np.ones((4096, 1), np.float16)`` is 4096.0),
so it is neither FP16 accumulation nor a pessimistic bound: a second opinion,
reported, never fatal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fp16bisect.model import weights
from fp16bisect.model.graph import Graph
from fp16bisect.model.precision import PRECISIONS
from fp16bisect.model.subgraphs import subgraphs
from fp16bisect.model.runtime import first_line, run, session
from fp16bisect.tolerance import OutputMetrics, Tolerance, accepted, compare, worst_per_output

FLOAT, HALF = TensorProto.FLOAT, TensorProto.FLOAT16
LOW = {p.onnx_type: p.dtype for p in PRECISIONS.values()}  # the half-width types a file may hold
_PREFIX = "fp16bisect_storage/"


@dataclass
class Check:
    """Per (sample, output) metrics of one model against the references."""

    what: str
    metrics: list[OutputMetrics] = field(default_factory=list)
    error: str = ""  # the check could not run (strict mode only)

    @property
    def passed(self) -> bool:
        return not self.error and all(m.passed for m in self.metrics)

    def worst(self) -> dict[str, OutputMetrics]:
        return worst_per_output(self.metrics)


def storage_emulation(model: onnx.ModelProto) -> onnx.ModelProto:
    """The FP32 graph that computes what ``model`` computes with FP16 storage (see the module docstring)."""
    graph = Graph(model)
    out = graph.runnable_copy()
    _widen(out.graph, {t: kind for t, kind in graph.dtypes.items() if kind in LOW})
    return out


def _widen(g: onnx.GraphProto, half: dict) -> None:
    """FP16 tensors of ``g`` become FP32 ones holding FP16 values: FP16 constants widened (exact), each
    node writing an FP16 tensor computes in FP32 and rounds it through a Cast pair."""
    widened = []
    inputs = {v.name for v in g.input}
    for i, t in enumerate(g.initializer):
        if t.data_type in LOW and t.name in inputs:  # an overridable weight: widened as it is
            g.initializer[i].CopyFrom(numpy_helper.from_array(weights.array(t).astype(np.float32), t.name))
        elif t.data_type in LOW:  # read through a Cast, which ONNX Runtime folds: no copy in Python
            widened.append(helper.make_node("Cast", [f"{_PREFIX}{t.name}/stored"], [t.name], to=FLOAT))
            t.name = f"{_PREFIX}{t.name}/stored"
    for v in [*g.input, *g.output, *g.value_info]:
        if v.type.tensor_type.elem_type in LOW:
            v.type.tensor_type.elem_type = FLOAT
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(widened)
    for node in nodes:
        _widen_attributes(node)
        tails = []
        for pos, t in enumerate(node.output):
            if t in half:
                raw, rounded = f"{_PREFIX}{t}/raw", f"{_PREFIX}{t}/fp16"
                node.output[pos] = raw
                tails += [helper.make_node("Cast", [raw], [rounded], to=half[t]),
                          helper.make_node("Cast", [rounded], [t], to=FLOAT)]
        g.node.append(node)
        g.node.extend(tails)


def _widen_attributes(node: onnx.NodeProto) -> None:
    """FP16 in attributes (Cast's ``to``, Constant values, subgraphs) becomes FP32 holding the same values.

    Types inside subgraphs are not inferred: there only the outputs of explicit Casts to FP16 are
    rounded (a documented limit; ``apply`` writes no FP16 inside subgraphs).
    """
    for a in node.attribute:
        if a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT and a.i in LOW:
            a.i = FLOAT
        if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in LOW:
            a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
    for sub in subgraphs(node):
        cast_to_half = {n.output[0]: a.i for n in sub.node if n.op_type == "Cast"
                        for a in n.attribute if a.name == "to" and a.i in LOW}
        _widen(sub, cast_to_half)


def feed_for(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Sample inputs as the mixed model takes them: FP16 inputs get FP16-rounded values."""
    half = {v.name: LOW[v.type.tensor_type.elem_type] for v in model.graph.input
            if v.type.tensor_type.elem_type in LOW}
    return {k: (v.astype(half[k]).astype(np.float32) if k in half else v) for k, v in inputs.items()}


def verify(mixed: onnx.ModelProto, samples, tolerance: Tolerance, outputs: list[str], what: str = "") -> Check:
    """Run the mixed model with FP16 storage on every sample; compare with the references."""
    what = what or "the mixed-precision model"
    # Basic optimisations only: a static graph of Casts lets ONNX Runtime switch convolutions to NCHWc kernels,
    # which sum in another order than the search's emulation; near the tolerance that alone can flip a verdict
    # (measured: 0.0105 vs 0.0139 max abs error on PP-OCRv4 rec for the same plan). Compared this way, the
    # two differ only where the file's Casts differ from the plan.
    sess = session(storage_emulation(mixed), what, basic=True)
    check = Check(what)
    for i, sample in enumerate(samples):
        got = run(sess, outputs, feed_for(mixed, sample.inputs), what)
        for name, value in zip(outputs, got):
            check.metrics.append(compare(value, sample.reference[name], tolerance, name, i))
        verdict = accepted(tolerance, dict(zip(outputs, got)), sample.reference, i)
        check.metrics += [verdict] if verdict is not None else []
    return check


def strict(original: onnx.ModelProto, mixed: onnx.ModelProto, samples, tolerance: Tolerance,
           outputs: list[str]) -> Check:
    """onnx.reference on the file's FP16 tensors against its own FP32 run; never raises."""
    check = Check("onnx.reference, FP16 tensors (sums in FP32)")
    try:
        from onnx.reference import ReferenceEvaluator

        fp32 = ReferenceEvaluator(weights.inline(original))
        fp16 = ReferenceEvaluator(weights.inline(mixed))
        half = {v.name for v in mixed.graph.input if v.type.tensor_type.elem_type == HALF}
        for i, sample in enumerate(samples):
            ref = fp32.run(outputs, sample.inputs)
            feed = {k: (v.astype(np.float16) if k in half else v) for k, v in sample.inputs.items()}
            with np.errstate(all="ignore"):
                got = fp16.run(outputs, feed)
            for name, value, expected in zip(outputs, got, ref):
                check.metrics.append(
                    compare(np.asarray(value, dtype=np.float32), np.asarray(expected, dtype=np.float32),
                            tolerance, name, i)
                )
    except Exception as exc:  # the evaluator does not support every model: say so, do not crash
        check.metrics.clear()
        check.error = f"onnx.reference could not run this model: {type(exc).__name__}: {first_line(exc)}"
    return check
