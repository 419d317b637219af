#!/usr/bin/env python3
"""Plant a known FP16 overflow in an exported transformer, so that a search has work whose answer is known.

    python scripts/plant_layernorm_overflow.py build/hf/bert_tiny.onnx build/hf/bert_tiny_planted.onnx

Before the first LayerNormalization, its input x becomes x * 1024 * 1024 (two Muls by 1024: a constant of
2^20 would itself be saturated to 65504 when stored in FP16). LayerNorm is scale invariant, so the FP32
outputs barely change, while in FP16 the second Mul's output passes 65504: the known culprits are
``planted_mul2`` and that LayerNormalization. The inputs of the original model serve unchanged.
"""

import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def main(src: str, dst: str) -> None:
    model = onnx.load(src)
    g = model.graph
    i, ln = next((i, n) for i, n in enumerate(g.node) if n.op_type == "LayerNormalization")
    g.initializer.append(numpy_helper.from_array(np.array(1024.0, np.float32), "planted_scale"))
    g.node.insert(i, helper.make_node("Mul", ["planted_scaled1", "planted_scale"], ["planted_scaled2"],
                                      name="planted_mul2"))
    g.node.insert(i, helper.make_node("Mul", [ln.input[0], "planted_scale"], ["planted_scaled1"], name="planted_mul1"))
    ln.input[0] = "planted_scaled2"
    onnx.save(model, dst)
    print(f"{dst}: planted x*1024*1024 before {ln.name}; known culprits: planted_mul2, {ln.name}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
