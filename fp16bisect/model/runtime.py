"""ONNX Runtime CPU sessions and runs, with errors a user can act on.

Every session of the project (FP32 references, the FP32 profile, the emulated
FP16 plans) is made here, with the same options, so that what the self-test
proves about the emulation session holds for the others too.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..errors import UsageError

PROTOBUF_LIMIT = 2**31 - 1


def session(model: onnx.ModelProto, what: str = "the model", *, basic: bool = False, producer_order: bool = False,
            fold_constants: bool = True):
    """A CPU session; ``basic`` keeps to ONNX Runtime's basic optimisations (no layout changes such as NCHWc
    convolutions, whose other summation order moves FP32 results by an ulp, which FP16 rounding can amplify);
    ``producer_order`` runs the nodes in the model's order (ONNX Runtime's priority-based order) rather than its
    default depth-first one, so that a node placed right after a tensor's producer runs then, and the tensor
    can be freed early. ``fold_constants=False`` skips ONNX Runtime's constant folding (a quarter of a second
    on a graph of thousands of nodes), for a model where it has nothing to fold (see ``nothing_to_fold``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_BASIC if basic else level.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if producer_order:
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    extra = {} if fold_constants else {"disabled_optimizers": ["ConstantFolding"]}
    try:
        if too_big(model):  # protobuf cannot serialize 2 GB: hand ONNX Runtime a file with external weights
            files = external_copy(model)
            sess = ort.InferenceSession(str(files.model), options, providers=["CPUExecutionProvider"], **extra)
            sess._fp16bisect_files = files  # the files live as long as the session
            return sess
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"], **extra)
    except Exception as exc:
        raise UsageError(
            f"ONNX Runtime cannot load {what}: {first_line(exc)}; check that the model runs in ONNX Runtime"
        ) from None


def nothing_to_fold(model: onnx.ModelProto) -> bool:
    """True when no node but Constant has only constant inputs (initializers, Constant outputs, or none): then
    constant folding changes nothing (ONNX Runtime turns Constant nodes into initializers when it loads a model),
    so no kernel choice that depends on constant weights (NCHWc convolutions) changes either."""
    graph = model.graph
    constant = {t.name for t in graph.initializer} | {n.output[0] for n in graph.node if n.op_type == "Constant"}
    for node in graph.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return False  # subgraphs: not looked into
        if node.op_type != "Constant" and all(t in constant for t in node.input if t):
            return False
    return True


def too_big(model: onnx.ModelProto) -> bool:
    """Over what one protobuf message can hold (2 GB): such a model exists only with external weights."""
    from google.protobuf.message import EncodeError

    try:
        return model.ByteSize() >= PROTOBUF_LIMIT
    except EncodeError:  # protobuf refuses even to size a message past 2 GB
        return True


class external_copy:  # noqa: N801  (used like a function returning the files)
    """The model written to a temporary folder with its weights in one external file (kept until dropped)."""

    def __init__(self, model: onnx.ModelProto, filename: str = "model.onnx"):
        import tempfile
        from pathlib import Path

        self._dir = tempfile.TemporaryDirectory(prefix="fp16bisect-")
        self.model = Path(self._dir.name) / filename
        self.data = Path(self._dir.name) / f"{filename}.data"
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # save_model rewrites the initializers it moves out: never the caller's model
        save_large(copy, self.model)


def save_large(model: onnx.ModelProto, path) -> None:
    """Save with every weight above 1 KB in ``<name>.data`` beside it (the model is changed in place)."""
    from pathlib import Path

    path = Path(path)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=f"{path.name}.data", size_threshold=1024)


def run(sess, names: list[str], feed: dict[str, np.ndarray], what: str) -> list:
    try:
        return sess.run(names, feed)
    except Exception as exc:
        raise UsageError(f"ONNX Runtime failed to run {what}: {first_line(exc)}; check the inputs") from None


def first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
