"""Models whose one FP16 failure is a sum, known by construction: every value they store fits FP16 (their
all-FP16 plan passes under storage emulation, the default ``--accumulate fp32``), and one node's sum passes 65504
(it fails when that node adds in FP16, ``--accumulate fp16``).

``paddle_layernorm`` is the one whose ranks static shape inference does not know (as in Paddle exports).

Each builder returns an ``Accumulating`` case: the model, one sample's inputs, the culprit node's id, and its
accumulator peak (the largest partial-sum bound, computed here with NumPy in float64) and number of terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


@dataclass(frozen=True)
class Accumulating:
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    culprit: str
    peak: float  # the culprit's largest partial-sum bound on ``inputs``
    terms: int  # terms per output element of the culprit's sum


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "accumulation",
                              [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def layernorm(channels: int = 4096) -> Accumulating:
    """relu -> LayerNormalization over ``channels`` of +-5: each (x - mean)^2 is 25 and the variance 25, but
    their sum is 25 * channels (102400 for 4096), past 65504."""
    rng = np.random.default_rng(0)
    x = np.where(rng.random((1, 4, channels)) < 0.5, 5.0, -5.0).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x_in"], ["x"], name="relu"),  # x_in is x + 5 + 5: relu keeps it
             helper.make_node("Sub", ["x", "five"], ["centred"], name="centre"),
             helper.make_node("LayerNormalization", ["centred", "scale", "bias"], ["y"], name="layernorm",
                              axis=-1, epsilon=1e-5)]
    inits = {"five": np.float32(5.0), "scale": np.ones(channels, np.float32), "bias": np.zeros(channels, np.float32)}
    model = _model(nodes, [("x_in", [1, 4, channels])], [("y", [1, 4, channels])], inits)
    centred = x.astype(np.float64)
    peak = float(((centred - centred.mean(-1, keepdims=True)) ** 2).sum(-1).max())
    return Accumulating(model, {"x_in": x + 5.0}, "layernorm", peak, channels)


def global_pool(side: int = 128) -> Accumulating:
    """relu -> GlobalAveragePool over side x side values of 4 to 6: the mean fits, the sum (about 81920 for 128)
    passes 65504."""
    rng = np.random.default_rng(1)
    x = rng.uniform(4.0, 6.0, (1, 2, side, side)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    model = _model(nodes, [("x", [1, 2, side, side])], [("y", [1, 2, 1, 1])])
    peak = float(np.abs(x.astype(np.float64)).sum(axis=(2, 3)).max())
    return Accumulating(model, {"x": x}, "pool", peak, side * side)


def softmax(positions: int = 70000) -> Accumulating:
    """Softmax over ``positions`` near-equal logits, times 32768: each probability (about 1/70000) and the output
    (about 0.47) fit, but the normaliser sum(exp(x - max)) is about ``positions``, past 65504."""
    rng = np.random.default_rng(2)
    x = rng.uniform(-0.01, 0.01, (1, positions)).astype(np.float32)
    nodes = [helper.make_node("Softmax", ["x"], ["p"], name="softmax", axis=-1),
             helper.make_node("Mul", ["p", "count"], ["y"], name="scale")]
    model = _model(nodes, [("x", [1, positions])], [("y", [1, positions])], {"count": np.float32(32768.0)})
    x64 = x.astype(np.float64)
    peak = float(np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1).max())
    return Accumulating(model, {"x": x}, "softmax", peak, positions)


def matmul_cancelling(depth: int = 4096) -> Accumulating:
    """relu -> MatMul whose products cancel: integers 1 to 4 times +20 (first half of the depth) and -20
    (second half); the output (a few thousand at most, an integer: exact in FP16) fits, but the first half's sum
    alone (about 102400 for 4096) and the bound sum |a b| (about 204800) pass 65504."""
    rng = np.random.default_rng(3)
    a = rng.integers(1, 5, (1, 8, depth)).astype(np.float32)
    w = np.where(np.arange(depth)[:, None] < depth // 2, 20.0, -20.0) * np.ones((1, 8))
    nodes = [helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="matmul")]
    model = _model(nodes, [("a", [1, 8, depth])], [("y", [1, 8, 8])], {"w": w.astype(np.float32)})
    peak = float((np.abs(a.astype(np.float64)) @ np.abs(w)).max())
    return Accumulating(model, {"a": a}, "matmul", peak, depth)


def paddle_layernorm(channels: int = 64, amplitude: float = 40.0) -> Accumulating:
    """A decomposed LayerNorm over ``channels`` of +-``amplitude`` as Paddle exports write it (ReduceMean, Sub, Mul,
    ReduceMean, Add, Sqrt, Div; opset 12, axes attributes) behind a Reshape whose shape is computed (Shape, Greater,
    NonZero, Gather), so that ONNX shape inference knows the rank of none of its tensors. Every stored value fits
    (the squares are 1600, the variance 1600), but the variance's sum is 1600 * channels (102400 for 64), past
    65504: the culprit is the variance's ReduceMean (the mean's sum of |x| is 2560, 25x headroom)."""
    rng = np.random.default_rng(4)
    x = np.where(rng.random((1, 4, channels)) < 0.5, amplitude, -amplitude).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x_in"], ["x"], name="relu"),  # x_in is x + amplitude: relu keeps it
             helper.make_node("Sub", ["x", "shift"], ["centred"], name="centre"),
             helper.make_node("Shape", ["centred"], ["shape"], name="shape"),
             helper.make_node("Greater", ["shape", "zero"], ["positive"], name="positive"),
             helper.make_node("NonZero", ["positive"], ["where"], name="nonzero"),
             helper.make_node("Reshape", ["where", "minus1"], ["kept"], name="kept"),
             helper.make_node("Gather", ["shape", "kept"], ["dims"], name="dims", axis=0),
             helper.make_node("Reshape", ["centred", "dims"], ["h"], name="reshape"),
             helper.make_node("ReduceMean", ["h"], ["mean"], name="mean", axes=[-1], keepdims=1),
             helper.make_node("Sub", ["h", "mean"], ["deviation"], name="deviation"),
             helper.make_node("Mul", ["deviation", "deviation"], ["square"], name="square"),
             helper.make_node("ReduceMean", ["square"], ["var"], name="variance", axes=[-1], keepdims=1),
             helper.make_node("Add", ["var", "eps"], ["var_eps"], name="add_eps"),
             helper.make_node("Sqrt", ["var_eps"], ["std"], name="std"),
             helper.make_node("Div", ["deviation", "std"], ["y"], name="normalise")]
    inits = {"shift": np.float32(amplitude), "zero": np.array(0, np.int64), "minus1": np.array([-1], np.int64),
             "eps": np.float32(1e-5)}
    model = _model(nodes, [("x_in", [1, 4, channels])], [("y", [1, 4, channels])], inits, opset=12)
    centred = x.astype(np.float64)
    peak = float(((centred - centred.mean(-1, keepdims=True)) ** 2).sum(-1).max())
    return Accumulating(model, {"x_in": x + amplitude}, "variance", peak, channels)


CASES = {"layernorm": layernorm, "global_pool": global_pool, "softmax": softmax, "matmul": matmul_cancelling,
         "paddle_layernorm": paddle_layernorm}
