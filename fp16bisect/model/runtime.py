"""ONNX Runtime CPU sessions and runs, with errors a user can act on.

Every session of the project (FP32 references, the FP32 profile, the emulated
FP16 plans) is made here, with the same options, so that what the self-test
proves about the emulation session holds for the others too.
"""

from __future__ import annotations

import numpy as np
import onnx

from fp16bisect.errors import UsageError

from fp16bisect.model.weights import Store, externalize, external_initializers, is_external, save, too_big  # noqa: F401


def session(model: onnx.ModelProto, what: str = "the model", *, basic: bool = False, producer_order: bool = False,
            fold_constants: bool = True, arena: bool = True):
    """A CPU session; ``basic`` keeps to ONNX Runtime's basic optimisations (no layout changes such as NCHWc
    convolutions, whose other summation order moves FP32 results by an ulp, which FP16 rounding can amplify);
    ``producer_order`` runs the nodes in the model's order (ONNX Runtime's priority-based order) rather than its
    default depth-first one, so that a node placed right after a tensor's producer runs then, and the tensor
    can be freed early. ``fold_constants=False`` skips ONNX Runtime's constant folding (a quarter of a second
    on a graph of thousands of nodes), for a model where it has nothing to fold (see ``nothing_to_fold``).
    ``arena=False`` for models with large activations (``Graph.large_activations``): ONNX Runtime's arena keeps
    what it grew to; without it runs of many small tensors are slower (10,000 candidates: 63 against 53 ms)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_BASIC if basic else level.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if producer_order:
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    extra = {} if fold_constants else {"disabled_optimizers": ["ConstantFolding"]}
    # weights are handed over mapped from their files; pre-packing would keep a second, packed copy of each
    options.add_session_config_entry("session.disable_prepacking", "1")
    if not arena:  # a freed activation goes back to the system: the peak is what is alive at once, not what the
        options.enable_cpu_mem_arena = False  # arena grew to (SD VAE decoder emulation: 0.76 against 1.13 GiB)
    keep = None
    if too_big(model) and any(not is_external(t) for t in model.graph.initializer):
        # built in memory over 2 GB (protobuf cannot serialise it): its weights go to files first
        keep, model = Store(), _copy(model)
        externalize(model, None, keep)
    model, folder, (names, values) = external_initializers(model)
    if folder:  # ONNX Runtime maps these files itself: no copy of the weights
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
    if names:  # elsewhere (a user's weights and the work directory's FP16 copies): handed over, copied
        options.add_external_initializers(names, values)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"], **extra)
    except Exception as exc:
        raise UsageError(
            f"ONNX Runtime cannot load {what}: {first_line(exc)}; check that the model runs in ONNX Runtime"
        ) from None
    sess._fp16bisect_keep = (values, keep)  # they live as long as the session
    return sess


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


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


class external_copy:  # noqa: N801  (used like a function returning the files)
    """The model as a self-contained file in a temporary folder (``weights.save``: its weights in
    ``<filename>.data`` beside it over 2 GB), for readers that take a path. The folder is removed when the
    copy is dropped (its owner keeps it as long as a reader needs the file) or when the process exits."""

    def __init__(self, model: onnx.ModelProto, filename: str = "model.onnx"):
        import shutil
        import tempfile
        import weakref
        from pathlib import Path

        folder = tempfile.mkdtemp(prefix="fp16bisect-")
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)  # no ResourceWarning: dropping is the design
        self.model = Path(folder) / filename
        self.data = Path(folder) / f"{filename}.data"  # there when the model is over 2 GB
        save(model, self.model)


def run(sess, names: list[str], feed: dict[str, np.ndarray], what: str) -> list:
    try:
        return sess.run(names, feed)
    except Exception as exc:
        raise UsageError(f"ONNX Runtime failed to run {what}: {first_line(exc)}; check the inputs") from None


def first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
