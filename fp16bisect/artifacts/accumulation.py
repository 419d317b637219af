"""The third state in the mixed-precision file: a node in FP32 accumulation (``model/plan_states.py``).

Such a node reads and writes the low precision like an FP16 node (its neighbours see an FP16 node, its weights are
stored in FP16 by the one constant rule), and computes in FP32 between Casts: a ``Cast(to=FLOAT)`` on each float
input it reads in FP16 (weights included: never an FP32 copy of a weight), the node in FP32, a
``Cast(to=FLOAT16)`` (BFLOAT16 for a BF16 file) on each float output. That is the form Torch-TensorRT's
``use_fp32_acc`` writes and TensorRT fuses into one kernel with FP16 inputs and outputs that adds in FP32
(pytorch/TensorRT#3110; tests/test_tensorrt_rtx.py shows the fusion in a TensorRT-RTX build log).
"""

from __future__ import annotations

from typing import Callable

import onnx
from onnx import TensorProto, helper

from fp16bisect.errors import UsageError, shown
from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import accumulates, states

CAST_PREFIX = "fp16bisect/accumulate/"  # the Casts around a node in FP32 accumulation: <prefix><node id>/...


def checked_states(graph: Graph, plan) -> tuple[frozenset[str], frozenset[str]]:
    """(ids kept in FP32, ids in FP32 accumulation) of ``plan``, or a UsageError (one line) for a mark on a node
    the model lacks or on a node that does not sum (``plan_states.accumulates``). A node both in FP32 and marked
    is in FP32 (``plan_states.states``)."""
    fp32, accumulate = states(plan)
    for node_id in sorted(accumulate):
        node = graph.by_id.get(node_id)
        if node is None:
            raise UsageError(
                f"node {shown(node_id)} (fp32_accumulate_nodes) is not in the model: the override file was made for "
                "another version of it; rerun 'fp16bisect search'")
        if not accumulates(node.op_type, node.domain):
            raise UsageError(
                f"node {shown(node_id)} ({node.op_type}) does not accumulate, so FP32 accumulation means nothing "
                "there: keep it in fp32_nodes or remove it from fp32_accumulate_nodes")
    return fp32, accumulate


def cast_around(out: onnx.GraphProto, proto: onnx.NodeProto, node_id: str, half: int, inputs: list[int],
                outputs: list[int], fresh_tensor: Callable[[str], str], fresh_node: Callable[[str], str]) -> None:
    """Append ``proto`` to ``out`` computing in FP32 between Casts: its ``inputs`` slots (tensors already in the
    low precision ``half``) cast up, its ``outputs`` slots computed in FP32 and cast down into their own names.
    ``fresh_tensor`` and ``fresh_node`` give unused tensor and node names."""
    up: dict[str, str] = {}
    for i in inputs:
        tensor = proto.input[i]
        if tensor not in up:
            up[tensor] = fresh_tensor(f"{tensor}_fp32acc")
            out.node.append(helper.make_node("Cast", [tensor], [up[tensor]], to=TensorProto.FLOAT,
                                             name=fresh_node(f"{CAST_PREFIX}{node_id}/in/{tensor}")))
        proto.input[i] = up[tensor]
    downs = []
    for i in outputs:
        tensor = proto.output[i]
        proto.output[i] = fresh_tensor(f"{tensor}_fp32acc")
        downs.append(helper.make_node("Cast", [proto.output[i]], [tensor], to=half,
                                      name=fresh_node(f"{CAST_PREFIX}{node_id}/out/{tensor}")))
    out.node.append(proto)
    out.node.extend(downs)
