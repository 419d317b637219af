"""The three states of a candidate in a plan, the ops that accumulate, and the judge's accumulation assumption.

A plan is a frozenset of ids (the search sees nothing else). A candidate's own id in it keeps the candidate in
FP32. ``accumulating(id)`` in it keeps the candidate in the third state, FP32 accumulation: its inputs, outputs
and weights stored in the low precision, its arithmetic in FP32 (the mixed-precision file writes Casts to FP32
around the node, weights stored in FP16 and cast up: the form TensorRT fuses into one kernel with FP16 inputs
and outputs, Torch-TensorRT's ``use_fp32_acc``). A candidate named by neither is in the low precision: stored
there, and, when the judge assumes ``--accumulate fp16``, accumulated there too. Its own id wins over its mark.

Only the ops that sum many terms (``ACCUMULATING_OPS``) have a third state; every other candidate computes the
same in FP16 storage and FP32 accumulation.
"""

from __future__ import annotations

from typing import Iterable, Literal

from fp16bisect.errors import UsageError

MARK = "fp32-accumulate:"  # a plan member MARK + id: that candidate in FP32 accumulation

Accumulation = Literal["fp32", "fp16"]
ACCUMULATIONS: tuple[str, ...] = ("fp32", "fp16")  # what --accumulate takes; fp32 (the default): today's meaning

ACCUMULATING_OPS = frozenset({  # default-domain ops whose kernels sum many terms (ARCHITECTURE.md, Accumulation)
    "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum",
    "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "GlobalAveragePool", "AveragePool", "Softmax", "LogSoftmax",
    "LayerNormalization", "GroupNormalization", "InstanceNormalization", "Attention",
})
MICROSOFT_ACCUMULATING_OPS = frozenset({"Attention", "MultiHeadAttention", "GroupQueryAttention",
                                        "SkipLayerNormalization", "SimplifiedLayerNormalization",
                                        "SkipSimplifiedLayerNormalization", "FusedMatMul"})


def accumulates(op_type: str, domain: str = "") -> bool:
    """Whether a node of this op type sums many terms (and so has the FP32-accumulation state)."""
    if domain in ("", "ai.onnx"):
        return op_type in ACCUMULATING_OPS
    return domain == "com.microsoft" and op_type in MICROSOFT_ACCUMULATING_OPS


def accumulating(node_id: str) -> str:
    """The plan member that puts candidate ``node_id`` in FP32 accumulation."""
    return MARK + node_id


def is_mark(member: str) -> bool:
    return member.startswith(MARK)


def states(plan: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """(the ids ``plan`` keeps in FP32, the ids it keeps in FP32 accumulation and not in FP32)."""
    members = frozenset(plan)
    fp32 = frozenset(m for m in members if not is_mark(m))
    accumulate = frozenset(m[len(MARK):] for m in members if is_mark(m)) - fp32
    return fp32, accumulate


def plan_of(fp32: Iterable[str] = (), accumulate: Iterable[str] = ()) -> frozenset[str]:
    """The plan with ``fp32`` in FP32 and ``accumulate`` (those not in ``fp32``) in FP32 accumulation."""
    kept = frozenset(fp32)
    return kept | frozenset(accumulating(n) for n in accumulate if n not in kept)


def accumulation(value) -> Accumulation:
    """``--accumulate`` checked, as the command line, the Python API (``accumulate=``), batch manifests and an
    override file give it: ``fp32`` or ``fp16``; anything else is a ``UsageError``, the same line everywhere."""
    if value in ACCUMULATIONS:
        return value
    raise UsageError(f"accumulate {value!r}: use fp32 (sums in FP32, the default) or fp16 (the judge assumes "
                     "FP16 nodes also add in FP16, as fused attention and some GEMM tactics do)")
