"""Which tensors of a model cannot hold a negative value, known from the ops that make them.

The FP32 profile measures a tensor on |x|; for these tensors |x| is x but for the sign of a zero or of a NaN
(Relu and Clip keep a -0), so the pass that makes |x| over the whole tensor is not needed (the rows that hold
zeros still take |x| where the sign matters). A tensor is non-negative when it is made by

    Relu, Sigmoid, HardSigmoid, Softmax, Exp, Abs, Softplus     always
    Clip                                                      its minimum a constant >= 0
    Mul, Div                                                  both inputs non-negative (a constant: every value >= 0)
    MaxPool, Concat, Identity, Reshape, Flatten, Squeeze, Unsqueeze, Transpose    every float input non-negative

Anything else, or a constant that cannot be read, is not known to be: then |x| is computed, as for any tensor.
"""

from __future__ import annotations

import numpy as np

from fp16bisect.model.graph import Graph

ALWAYS = {"Relu", "Sigmoid", "HardSigmoid", "Softmax", "Exp", "Abs", "Softplus"}
BOTH = {"Mul", "Div"}
EVERY = {"MaxPool", "Concat", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"}


def non_negative(graph: Graph) -> set[str]:
    """The float tensors of ``graph`` that no run can make negative (see the module's docstring)."""
    found: set[str] = set()

    def holds(t: str) -> bool:
        if t in found:
            return True
        value = graph.constant_value(t) if t else None
        return value is not None and bool(np.all(value >= 0))  # NaN fails ``>= 0``

    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx") or not node.outputs:
            continue
        op, ins = node.op_type, node.inputs
        if op in ALWAYS:
            known = True
        elif op == "Clip":
            low = _clip_minimum(node, graph)
            known = low is not None and low >= 0
        elif op in BOTH:
            known = len(ins) == 2 and all(holds(t) for t in ins)
        elif op in EVERY:
            floats = [t for t in (ins if op == "Concat" else ins[:1]) if t]
            known = bool(floats) and all(holds(t) for t in floats)
        else:
            known = False
        if known:
            found.update(t for t in node.outputs[:1] if graph.is_float(t))
    return found


def _clip_minimum(node, graph: Graph) -> float | None:
    """A Clip's lower bound: its ``min`` attribute (opset < 11) or constant second input; None when it has none or
    it is not a constant."""
    if graph.opset < 11:
        found = next((a for a in graph.model.graph.node[node.index].attribute if a.name == "min"), None)
        return None if found is None else float(found.f)
    if len(node.inputs) < 2 or not node.inputs[1]:
        return None
    value = graph.constant_value(node.inputs[1])
    return None if value is None or value.size != 1 or np.isnan(value).any() else float(value.reshape(-1)[0])
