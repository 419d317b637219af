"""A plan baked into the model, one fresh ONNX Runtime session per plan: an emulation built independently of the
emulate backend's one session with a mask input, which the tests check it against and the benchmark compares
its speed with."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fp16bisect.backends.emulate.rewrite import round_subgraphs, types_and_shapes
from fp16bisect.model.fp16 import constant_as_stored
from fp16bisect.model.graph import Graph
from fp16bisect.model.runtime import session
from fp16bisect.model.subgraphs import subgraphs


def plan_model(graph: Graph, plan) -> onnx.ModelProto:  # noqa: C901  the tests' independent construction, in one piece
    """One plan baked into the graph (no mask input): the fresh-session-per-plan way.

    Kept as the baseline the benchmark compares the one-session design with,
    and as an independent construction the tests check it against.
    """
    model = graph.runnable_copy()
    g = model.graph
    types = types_and_shapes(graph)[0] if graph.nested else {}
    originals = list(g.node)
    del g.node[:]
    fp16 = {n.id for n in graph.candidates} - set(plan)
    counter = iter(range(1 << 62))

    def fresh(what: str) -> str:
        return f"fp16bisect/p{next(counter)}/{what}"

    def cast_pair(tensor: str, nodes, out: str | None = None) -> str:
        value = graph.constant_value(tensor) if out is None else None
        if value is not None:  # a constant: what the file stores (the writer's rule)
            name = fresh("c")
            g.initializer.append(numpy_helper.from_array(constant_as_stored(value), name))
            return name
        half, back = fresh("h"), out or fresh("r")
        nodes.append(helper.make_node("Cast", [tensor], [half], to=TensorProto.FLOAT16))
        nodes.append(helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT))
        return back

    for node in graph.nodes:
        proto = onnx.NodeProto()
        proto.CopyFrom(originals[node.index])
        if node.id not in fp16:
            g.node.append(proto)
            continue
        for pos, tensor in graph.rounded_inputs(node):
            proto.input[pos] = cast_pair(tensor, g.node)
        if subgraphs(proto):
            round_subgraphs(proto, types, cast_pair, fresh)
        fold = graph.batchnorm_fold(node)
        if fold is not None:  # the file's Mul and Add in FP16 instead of the node
            scale, shift = fresh("scale"), fresh("shift")
            g.initializer.extend([numpy_helper.from_array(fold.scale.astype(np.float32), scale),
                                  numpy_helper.from_array(fold.shift.astype(np.float32), shift)])
            scaled, x, y = fresh("scaled"), proto.input[0], node.outputs[0]
            if fold.flat:  # X's rank unknown: X as (N, C, -1), the result back in X's shape
                x, y, flat, shape = fresh("flat"), fresh("shifted"), fresh("flat_shape"), fresh("shape_of_x")
                g.initializer.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), flat))
                g.node.append(helper.make_node("Reshape", [proto.input[0], flat], [x]))
                g.node.append(helper.make_node("Shape", [proto.input[0]], [shape]))
            g.node.append(helper.make_node("Mul", [x, scale], [scaled]))
            proto = helper.make_node("Add", [cast_pair(scaled, g.node), shift], [y])
            if fold.flat:
                g.node.append(proto)
                proto = helper.make_node("Reshape", [y, shape], [node.outputs[0]])
        tails = []
        for pos, tensor in enumerate(node.outputs):
            if graph.is_float(tensor):
                proto.output[pos] = fresh("o")
                cast_pair(proto.output[pos], tails, out=tensor)
        g.node.append(proto)
        g.node.extend(tails)
    return model


def run_plan_model(graph: Graph, plan, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Build a session for one plan and run it (slow on purpose: see ``plan_model``)."""
    names = [o.name for o in graph.outputs]
    return dict(zip(names, session(plan_model(graph, plan)).run(names, inputs)))
