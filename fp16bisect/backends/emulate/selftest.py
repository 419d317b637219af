"""The emulation's start-up self-test: this machine's ONNX Runtime keeps its Cast round trips (70000 becomes inf)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from fp16bisect.backends.emulate.rewrite import MASK, WHERE_MAX_ELEMENTS, Emulation
from fp16bisect.model.graph import Graph
from fp16bisect.model.runtime import session

_SELF_TEST_DONE = False


def self_test() -> None:
    """Prove on this machine that rounding sites of both forms survive ONNX Runtime's optimisations."""
    global _SELF_TEST_DONE
    if _SELF_TEST_DONE:
        return
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    model = helper.make_model(  # two candidates: input, fused edge and output sites
        helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                           helper.make_node("Relu", ["a"], ["y"], name="relu2")], "self_test", [x], [y]),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 7
    graph = Graph(model)
    probe = np.array([70000.0, 1e-8, 2049.0, 65519.0], dtype=np.float32)
    expected = np.array([np.inf, 0.0, 2048.0, 65504.0], dtype=np.float32)
    for form, where_max in (("Where", WHERE_MAX_ELEMENTS), ("If", 0)):
        emulation = Emulation(graph, where_max=where_max)
        sess = session(emulation.model, "the self-test model")
        results = [sess.run(None, {"x": probe, MASK: emulation.mask(np.array(plan))})[0]
                   for plan in ([False, False], [True, False], [False, True], [True, True])]
        if not (all(np.array_equal(r, expected) for r in results[:3]) and np.array_equal(results[3], probe)):
            raise RuntimeError(
                f"FP16 emulation self-test failed ({form} sites): ONNX Runtime turned {probe.tolist()} into "
                f"{results[0].tolist()} in FP16 (expected {expected.tolist()}) and {results[3].tolist()} in FP32; "
                "this onnxruntime folds Cast pairs, so the emulate backend cannot be trusted: install another "
                "onnxruntime version"
            )
    _SELF_TEST_DONE = True
