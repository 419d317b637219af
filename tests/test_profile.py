"""The FP32 profile gathers its statistics inside the run (statistics nodes after each tensor, Constant tensors
from the file, whole-tensor fetches for NaN/inf/overflow); the result must be exactly what ``TensorStats.add``
gives on every whole tensor, which is what the profile computed before."""

from __future__ import annotations

import numpy as np
from conftest import F, make_model
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from fp16bisect.model import profile as P
from fp16bisect.model.graph import Graph
from fp16bisect.model.samples import Sample

F32 = np.float32
EDGES = [0.0, -0.0, 1e-40, -1e-40, 2.0**-25, float(np.nextafter(F32(2.0**-25), F32(1))), 2.0**-24,
         float(np.nextafter(F32(2.0**-14), F32(0))), 2.0**-14, 1.0, -3.5, 65504.0,
         float(np.nextafter(F32(65520), F32(0))), 65520.0, -1e6]


def edge_model() -> Graph:
    """Tensors that hit every statistic: flushed, subnormal, FP32 denormals, zeros, 65520, NaN (log of a
    negative), inf (division by zero), a Constant weight with values past FP16's range."""
    nodes = [
        helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(
            np.array([1.0, 70000.0, 2.0**-20, 0.0], F32), "w")),
        helper.make_node("Mul", ["x", "w"], ["scaled"], name="scale"),
        helper.make_node("Abs", ["x"], ["ax"], name="abs"),
        helper.make_node("Log", ["x"], ["logx"], name="log"),  # NaN for negatives, -inf at 0
        helper.make_node("Div", ["one", "x"], ["inv"], name="inv"),  # inf at 0
        helper.make_node("Relu", ["x"], ["pos"], name="relu"),
        helper.make_node("Add", ["pos", "ax"], ["y"], name="add"),
    ]
    model = make_model(nodes, [("x", F, [4])], [("y", F, [4]), ("logx", F, [4]), ("inv", F, [4]),
                                                 ("scaled", F, [4])], {"one": np.float32(1.0)})
    return Graph(model)


def reference(graph: Graph, samples) -> dict:
    names = [t for n in graph.nodes for t in n.outputs if graph.is_float(t)]
    names = list(dict.fromkeys([*graph.float_output_names(), *names]))
    stats = {t: P.TensorStats(t) for t in names}
    P._fetch(graph.runnable_copy(), names, samples, stats, 256)
    return stats


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.sampled_from(EDGES) | st.floats(-1e5, 1e5, width=32), min_size=4, max_size=4),
                min_size=1, max_size=3))
def test_in_run_statistics_equal_whole_tensor_statistics(rows):
    graph = edge_model()
    samples = [Sample("s", {"x": np.array(r, F32)}) for r in rows]
    got = P.profile(graph, samples)
    want = reference(graph, samples)
    for name, stats in want.items():
        assert got.tensors[name] == stats, name


def test_constant_weights_are_measured_and_ranked():
    graph = edge_model()
    prof = P.profile(graph, [Sample("s", {"x": np.array([1.0, 2.0, 3.0, -4.0], F32)})])
    assert prof.tensors["w"].overflow == 1 and prof.tensors["w"].tier == 3
    assert prof.order[0] == "scale"  # it reads the weight FP16 cannot hold


def test_a_model_below_opset_9_falls_back_to_fetching(monkeypatch):
    graph = edge_model()
    graph.model.opset_import[0].version = 8  # no Where/Compress: the statistics nodes cannot be added
    assert P._with_statistics(graph, ["y"]) is None
    samples = [Sample("s", {"x": np.array([1.0, -2.0, 0.0, 1e-6], F32)})]
    graph.model.opset_import[0].version = 17
    want = reference(graph, samples)
    monkeypatch.setattr(P, "_with_statistics", lambda graph, names: None)
    got = P.profile(graph, samples)
    assert all(got.tensors[n] == s for n, s in want.items())
