"""The emulation's start-up self-test: this machine's ONNX Runtime keeps its Cast round trips (70000 becomes inf;
in BF16, 1 + 3 * 2^-8 becomes 1 + 2^-6 and 1 + 2^-8 ties to 1)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from fp16bisect.backends.emulate.rewrite import MASK, WHERE_MAX_ELEMENTS, Emulation
from fp16bisect.model.graph import Graph
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.model.runtime import session

_SELF_TEST_DONE = False  # FP16 proven on this machine
_OTHERS_DONE: set = set()  # other precisions proven (names)
PROBES = {"fp16": ([70000.0, 1e-8, 2049.0, 65519.0], [np.inf, 0.0, 2048.0, 65504.0]),
          "bf16": ([1 + 2**-8, 1 + 3 * 2**-8, 257.0, 3e38], [1.0, 1 + 2**-6, 256.0, 3.0040553e38])}


def self_test(precision: Precision = FP16) -> None:
    """Prove on this machine that rounding sites of both forms survive ONNX Runtime's optimisations."""
    global _SELF_TEST_DONE
    if (_SELF_TEST_DONE if precision is FP16 else precision.name in _OTHERS_DONE):
        return
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    model = helper.make_model(  # two candidates: input, fused edge and output sites
        helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                           helper.make_node("Relu", ["a"], ["y"], name="relu2")], "self_test", [x], [y]),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 7
    graph = Graph(model, precision=precision)
    probe, expected = (np.array(v, dtype=np.float32) for v in PROBES[precision.name])
    for form, where_max in (("Where", WHERE_MAX_ELEMENTS), ("If", 0)):
        emulation = Emulation(graph, where_max=where_max)
        sess = session(emulation.model, "the self-test model")
        results = [sess.run(None, {"x": probe, MASK: emulation.mask(np.array(plan))})[0]
                   for plan in ([False, False], [True, False], [False, True], [True, True])]
        if not (all(np.array_equal(r, expected) for r in results[:3]) and np.array_equal(results[3], probe)):
            raise RuntimeError(
                f"{precision.label} emulation self-test failed ({form} sites): ONNX Runtime turned {probe.tolist()} into "
                f"{results[0].tolist()} in FP16 (expected {expected.tolist()}) and {results[3].tolist()} in FP32; "
                "this onnxruntime folds Cast pairs, so the emulate backend cannot be trusted: install another "
                "onnxruntime version"
            )
    if precision is FP16:
        _SELF_TEST_DONE = True
    else:
        _OTHERS_DONE.add(precision.name)
