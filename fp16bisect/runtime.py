"""ONNX Runtime CPU sessions and runs, with errors a user can act on.

Every session of the project (FP32 references, the FP32 profile, the emulated
FP16 plans) is made here, with the same options, so that what the self-test
proves about the emulation session holds for the others too.
"""

from __future__ import annotations

import numpy as np
import onnx

from .errors import UsageError

PROTOBUF_LIMIT = 2**31 - 1


def session(model: onnx.ModelProto, what: str = "the model", *, basic: bool = False):
    """A CPU session; ``basic`` keeps to ONNX Runtime's basic optimisations (no layout changes such as NCHWc
    convolutions, whose other summation order moves FP32 results by an ulp, which FP16 rounding can amplify)."""
    import onnxruntime as ort

    if model.ByteSize() >= PROTOBUF_LIMIT:
        raise UsageError(
            f"{what} is over 2 GB in memory, which this version cannot run in ONNX Runtime: "
            "search a smaller model (large models are planned)"
        )
    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_BASIC if basic else level.ORT_ENABLE_ALL
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise UsageError(
            f"ONNX Runtime cannot load {what}: {first_line(exc)}; check that the model runs in ONNX Runtime"
        ) from None


def run(sess, names: list[str], feed: dict[str, np.ndarray], what: str) -> list:
    try:
        return sess.run(names, feed)
    except Exception as exc:
        raise UsageError(f"ONNX Runtime failed to run {what}: {first_line(exc)}; check the inputs") from None


def first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
