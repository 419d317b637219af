"""What modelling FP16 accumulation needs of the summing nodes' tensors that shape inference may not know, seen in
one FP32 run of the model on the first sample the emulate backend is given.

* The rank of each input: exports whose Reshapes take computed shapes (Paddle's: PP-OCRv4's recognizer) leave
  ONNX shape inference without the rank of every tensor after them; a model runs with one rank per tensor
  whatever its input, so the rank seen on one sample is the rank (the dims stay unknown: they may change with the
  input, and the emulation takes them from the tensors when it runs).
* The element count of each output: how many partials of a long sum are made at once (``sums.group_size``); a
  count from one sample only sets memory use, never a value (``sums.grouped``).

The run is made only where the emulation needs it (``needed``), before the emulation's own session exists, and
its session is freed before that one is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import accumulates
from fp16bisect.model.runtime import run, session

PREFIX = "__fp16bisect_seen"


@dataclass(frozen=True)
class Seen:
    """Ranks of tensors (by name) and element counts, as one run showed them."""

    ranks: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)


def summed_tensors(graph: Graph) -> list[str]:
    """The float inputs and first outputs of the summing candidates, each once, in topological order."""
    found = [t for n in graph.candidates if accumulates(n.op_type, n.domain)
             for t in (*[i for i in n.inputs if i and graph.is_float(i)], *n.outputs[:1])]
    return list(dict.fromkeys(found))


def needed(graph: Graph) -> list[str]:
    """The tensors of ``summed_tensors`` whose shape (every dim) shape inference does not know."""
    return [t for t in summed_tensors(graph) if not _known(graph.shapes.get(t))]


def seen(graph: Graph, inputs: dict[str, np.ndarray]) -> Seen:
    """The ranks and element counts of ``needed``'s tensors in one FP32 run of the model on ``inputs``."""
    tensors = needed(graph)
    if not tensors:
        return Seen()
    model = graph.runnable_copy()
    del model.graph.output[:]
    names = [f"{PREFIX}{j}" for j in range(len(tensors))]
    shapes_of = {t: onnx.helper.make_node("Shape", [t], [s]) for t, s in zip(tensors, names)}
    nodes = [n for n in model.graph.node]
    del model.graph.node[:]
    for node in [*(shapes_of.pop(t) for t in list(shapes_of) if t in {i.name for i in model.graph.input}), *nodes]:
        model.graph.node.append(node)  # each Shape right after its tensor's producer: the tensor is freed early
        model.graph.node.extend(shapes_of.pop(t) for t in node.output if t in shapes_of)
    model.graph.node.extend(shapes_of.values())
    model.graph.output.extend(onnx.ValueInfoProto(name=s) for s in names)
    what = "the model in FP32 (the shapes its sums run on)"
    sess = session(model, what, producer_order=True, arena=not graph.large_activations)
    fed = {i.name: inputs[i.name] for i in sess.get_inputs() if i.name in inputs}
    shapes = run(sess, names, fed, what)
    del sess
    return Seen({t: len(s) for t, s in zip(tensors, shapes)},
                {t: int(np.prod(s, dtype=np.int64)) for t, s in zip(tensors, shapes)})


def _known(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d > 0 for d in shape)
