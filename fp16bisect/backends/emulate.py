"""FP16 emulated on ONNX Runtime CPU.

Semantics (ARCHITECTURE.md): with ``r(x) = float32(float16(x))``, a candidate in
FP16 computes ``r`` of its float outputs from ``r`` of its float inputs
(initializers included); a candidate in FP32 computes on its inputs as they
arrive; graph inputs arrive in FP32; transparent ops never round.

One session serves every plan: each rounding site is
``If(fp32[i]) then x else Cast(Cast(x, FLOAT16), FLOAT)`` where ``fp32`` is a
bool graph input with one entry per candidate, so evaluating a plan is one
run. ``If`` rather than ``Where``: only the branch taken runs, and on ONNX
Runtime CPU it measured 3-4x faster on real OCR models (``Where`` with a
scalar condition broadcasts slowly and computes both sides). ONNX Runtime
keeps explicit Cast pairs in an FP32 graph (bit-exact with NumPy); the
start-up self-test proves it on this machine (70000 -> inf).

Not emulated: FP16 accumulation inside GEMMs, convolutions and reductions,
and TensorRT's fused kernels.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..graph import Graph
from ..runtime import run, session

MASK = "fp16bisect_fp32_mask"
_PREFIX = "fp16bisect/"


def emulation_model(graph: Graph) -> onnx.ModelProto:
    """The model with a rounding site at every float input and output of every candidate."""
    model = graph.runnable_copy()
    g = model.graph
    originals = list(g.node)
    del g.node[:]
    index = {n.id: i for i, n in enumerate(graph.candidates)}

    def site(keep: str, tensor: str, out: str) -> None:
        """out = tensor if keep else r(tensor); the rounding runs only when it is needed."""
        kept, half, back = (f"{_PREFIX}{out}/{part}" for part in ("fp32", "h", "fp16"))
        as_is = helper.make_graph(
            [helper.make_node("Identity", [tensor], [kept])], "fp32", [], [_float_info(kept)]
        )
        rounded = helper.make_graph(
            [
                helper.make_node("Cast", [tensor], [half], to=TensorProto.FLOAT16),
                helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT),
            ],
            "fp16", [], [_float_info(back)],
        )
        g.node.append(
            helper.make_node("If", [keep], [out], name=f"{_PREFIX}site/{out}", then_branch=as_is, else_branch=rounded)
        )

    for node in graph.nodes:
        proto = onnx.NodeProto()
        proto.CopyFrom(originals[node.index])
        i = index.get(node.id)
        if i is None:
            g.node.append(proto)
            continue
        keep = f"{_PREFIX}m{i}"
        g.initializer.append(helper.make_tensor(f"{_PREFIX}i{i}", TensorProto.INT64, [], [i]))
        g.node.append(helper.make_node("Gather", [MASK, f"{_PREFIX}i{i}"], [keep], name=keep, axis=0))
        selected: dict[str, str] = {}
        for pos, tensor in graph.rounded_inputs(node):
            if tensor not in selected:
                sel = f"{_PREFIX}in{i}/{tensor}"
                site(keep, tensor, sel)
                selected[tensor] = sel
            proto.input[pos] = selected[tensor]
        outs = []
        for pos, tensor in enumerate(node.outputs):
            if graph.is_float(tensor):
                raw = f"{_PREFIX}raw/{tensor}"
                proto.output[pos] = raw
                outs.append((raw, tensor))
        g.node.append(proto)
        for raw, tensor in outs:
            site(keep, raw, tensor)
    g.input.append(helper.make_tensor_value_info(MASK, TensorProto.BOOL, [len(graph.candidates)]))
    return model


def _float_info(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


class EmulateBackend:
    """Runs plans on one ONNX Runtime session; a plan is a set of candidate ids kept in FP32."""

    name = "emulate"

    def __init__(self, graph: Graph, extra_outputs=()):
        """``extra_outputs``: inner tensors to return too (the layer-wise comparison reads every candidate's)."""
        self_test()
        self.graph = graph
        self.index = {n.id: i for i, n in enumerate(graph.candidates)}
        model = emulation_model(graph)
        self.output_names = [o.name for o in graph.outputs]
        extra = [t for t in dict.fromkeys(extra_outputs) if t not in self.output_names]
        model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in extra)
        self.output_names += extra
        self.session = session(model, "the FP16 emulation of the model")

    @staticmethod
    def versions() -> dict:
        import onnxruntime as ort

        return {"onnxruntime": ort.__version__, "onnx": onnx.__version__}

    def mask(self, plan) -> np.ndarray:
        mask = np.zeros(len(self.index), dtype=bool)
        for node_id in plan:
            mask[self.index[node_id]] = True
        return mask

    deterministic = True  # one session, the same arithmetic every time: a repeat gives the same result

    def run(self, plan, inputs: dict[str, np.ndarray], repeat: int = 0) -> dict[str, np.ndarray]:
        feed = dict(inputs)
        feed[MASK] = self.mask(plan)
        values = run(self.session, self.output_names, feed, "the FP16 emulation of the model")
        return dict(zip(self.output_names, values))


_SELF_TEST_DONE = False


def self_test() -> None:
    """Prove on this machine that rounding sites survive ONNX Runtime's optimisations."""
    global _SELF_TEST_DONE
    if _SELF_TEST_DONE:
        return
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "self_test", [x], [y]),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 7
    graph = Graph(model)
    emulation = session(emulation_model(graph), "the self-test model")
    probe = np.array([70000.0, 1e-8, 2049.0, 65519.0], dtype=np.float32)
    half = emulation.run(None, {"x": probe, MASK: np.array([False])})[0]
    full = emulation.run(None, {"x": probe, MASK: np.array([True])})[0]
    expected = np.array([np.inf, 0.0, 2048.0, 65504.0], dtype=np.float32)
    if not (np.array_equal(half, expected) and np.array_equal(full, probe)):
        raise RuntimeError(
            f"FP16 emulation self-test failed: ONNX Runtime turned {probe.tolist()} into {half.tolist()} "
            f"in FP16 (expected {expected.tolist()}) and {full.tolist()} in FP32; this onnxruntime "
            "folds Cast pairs, so the emulate backend cannot be trusted: install another onnxruntime version"
        )
    _SELF_TEST_DONE = True


def plan_model(graph: Graph, plan) -> onnx.ModelProto:
    """One plan baked into the graph (no mask input): the fresh-session-per-plan way.

    Kept as the baseline the benchmark compares the one-session design with,
    and as an independent construction the tests check it against.
    """
    model = graph.runnable_copy()
    g = model.graph
    originals = list(g.node)
    del g.node[:]
    fp16 = {n.id for n in graph.candidates} - set(plan)
    for node in graph.nodes:
        proto = onnx.NodeProto()
        proto.CopyFrom(originals[node.index])
        if node.id not in fp16:
            g.node.append(proto)
            continue
        for pos, tensor in graph.rounded_inputs(node):
            half, back = f"{_PREFIX}{node.index}/h{pos}", f"{_PREFIX}{node.index}/r{pos}"
            g.node.append(helper.make_node("Cast", [tensor], [half], to=TensorProto.FLOAT16))
            g.node.append(helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT))
            proto.input[pos] = back
        tails = []
        for pos, tensor in enumerate(node.outputs):
            if graph.is_float(tensor):
                raw, half = f"{_PREFIX}{node.index}/o{pos}", f"{_PREFIX}{node.index}/oh{pos}"
                proto.output[pos] = raw
                tails.append(helper.make_node("Cast", [raw], [half], to=TensorProto.FLOAT16))
                tails.append(helper.make_node("Cast", [half], [tensor], to=TensorProto.FLOAT))
        g.node.append(proto)
        g.node.extend(tails)
    return model


def run_plan_model(graph: Graph, plan, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Build a session for one plan and run it (slow on purpose: see ``plan_model``)."""
    names = [o.name for o in graph.outputs]
    return dict(zip(names, session(plan_model(graph, plan)).run(names, inputs)))
