"""A model whose all-FP16 failure is rounding alone, known by construction: a chain of small MatMuls by random
orthogonal matrices. Every value stays near 1 (no tensor comes near 65504, none flushes to 0), so no node is a
suspect; each MatMul rounds its output in FP16 (a relative 2^-11 at most), and the chain adds those errors up, so
a tight atol fails the all-FP16 plan while no single node explains it: the answer is many nodes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

WIDTH = 16


def matmul_chain(folder: Path, layers: int = 40, seed: int = 0, near: bool = False) -> tuple[Path, Path]:
    """``chain.onnx`` (x [1, WIDTH] through ``layers`` MatMuls ``mm0`` ... into y) and ``chain.npz`` (one sample
    of x), written to ``folder``. ``near``: x first goes through ``up`` (x times 40000/max|x|: a peak of 40000,
    within 2x of 65504, flagged by the FP32 profile though FP16 rounds it no worse than any value) and ``down``
    (back to x), two suspects that do not explain the failure."""
    rng = np.random.default_rng(seed)
    weights = {f"w{i}": np.linalg.qr(rng.standard_normal((WIDTH, WIDTH)))[0].astype(np.float32)
               for i in range(layers)}
    x = rng.standard_normal((1, WIDTH)).astype(np.float32)
    names = ["x" if not near else "back", *(f"h{i}" for i in range(layers - 1)), "y"]
    nodes = [helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]], name=f"mm{i}") for i in range(layers)]
    if near:
        scale = np.float32(40000 / np.abs(x).max())
        weights.update(scale=scale, inverse=np.float32(1 / scale))
        nodes[:0] = [helper.make_node("Mul", ["x", "scale"], ["big"], name="up"),
                     helper.make_node("Mul", ["big", "inverse"], ["back"], name="down")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
                              [numpy_helper.from_array(w, k) for k, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, data = folder / "chain.onnx", folder / "chain.npz"
    path.write_bytes(model.SerializeToString())
    np.savez(data, x=x)
    return path, data
