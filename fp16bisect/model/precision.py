"""The low precision a plan runs in (FP16 or BF16): one definition of each, everything else reads it from here.

FP16 (IEEE binary16): 11 significant bits, largest finite 65504, smallest subnormal 2^-24: its failures are
mostly range (overflow past 65504, underflow below 6e-8). BF16 (bfloat16): FP32's 8-bit exponent, so FP32's
range (largest finite about 3.39e38, smallest subnormal 2^-133), but only 8 significant bits: its failures are
relative rounding (about 0.4 % per value), not overflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import ml_dtypes
import numpy as np
from onnx import TensorProto

from fp16bisect.errors import UsageError

TIERS = {3: "overflow", 2: "near limit", 1: "subnormal", 0: "fine"}  # a tensor's risk tier (``Precision.tier``)
NEAR = 2.0  # tier 2: a peak within this factor of the largest finite value
ERROR_ROUNDOFFS = 256  # compare's default: a node fails past this many unit roundoffs of its tensor's scale


class Measured(Protocol):
    """What a precision judges a tensor by: its FP32 measures, its elements counted against that precision
    (``model/statistics.TensorStats``)."""

    max_abs: float
    min_nonzero: float
    overflow: int
    flushed: int
    subnormal: int
    size: int

    @property
    def sentinel(self) -> bool: ...


@dataclass(frozen=True)
class Precision:
    """One low precision: how ONNX, NumPy, TensorRT, trtexec and ModelOpt AutoCast spell it, and its limits."""

    name: str  # what --precision takes, the override JSON records and AutoCast's --low_precision_type takes
    label: str  # what messages say: FP16, BF16
    onnx_type: int  # TensorProto element type
    dtype: np.dtype  # NumPy dtype of a stored value
    max: float  # largest finite value
    smallest_normal: float
    smallest_subnormal: float
    significant_bits: int  # mantissa bits plus the implicit one
    tensorrt_type: str  # trt.DataType member
    trtexec_flag: str  # trtexec's weak-typing flag
    layer_precision: str  # trtexec's --layerPrecisions spelling
    min_opset: int  # first default-domain opset whose Cast takes this type
    max_text: str = ""  # the largest finite value as messages write it: 65504, 3.39e38
    tiny_text: str = ""  # the smallest subnormal as messages write it: 2^-24, 2^-133
    normal_text: str = ""  # the smallest normal as messages write it: 6.1e-05, 1.18e-38
    # what the suspicion order ranks (model/profile.py): "range" (overflow, underflow: FP16) or "rounding"
    # (relative rounding amplified: BF16, which has FP32's range)
    ranked_by: Literal["range", "rounding"] = "range"

    @property
    def overflow_at(self) -> float:
        """The smallest float32 that rounds to inf here: the largest finite value plus half its spacing
        (65520 for FP16; the tie rounds to even, which is inf)."""
        return self.max + 2.0 ** (int(np.floor(np.log2(self.max))) - self.significant_bits)

    @property
    def flushed_at(self) -> float:
        """The largest float32 that rounds to 0 here: half the smallest subnormal (a tie, to even: 0)."""
        return self.smallest_subnormal / 2

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of rounding a normal value: 2^-significant_bits."""
        return 2.0 ** -self.significant_bits

    @property
    def max_error(self) -> float:
        """``compare``'s default per-node threshold: ``ERROR_ROUNDOFFS`` unit roundoffs of a tensor's own scale
        (FP16: 1/8; BF16, 8x coarser: 1). Rounding a tensor's own values costs one unit roundoff of its scale;
        the drift a node inherits through a whole network stays far below 256 of them (FP16 on the 374 nodes
        of PP-OCRv4 rec: 70 at worst), so a node past it is where an error is born."""
        return ERROR_ROUNDOFFS * self.unit_roundoff

    @property
    def limits_text(self) -> str:
        """One line of what this precision does to a value's magnitude (``scan``'s header)."""
        return (f"{self.label} keeps |x| <= {self.max_text}; nonzero |x| < {self.normal_text} lose precision "
                f"(subnormal), < {_short(self.smallest_subnormal)} flush to 0")

    def tier(self, s: Measured) -> int:
        """A tensor's risk here: 3 overflows (some |x| rounds to inf), 2 near the limit (a peak within ``NEAR``x
        of the largest finite value, or nonzero values that flush to 0), 1 subnormal values, 0 fine (``TIERS``).
        ``s`` counts its elements against this precision (``TensorStats.low``)."""
        if s.overflow:
            return 3
        if s.max_abs >= self.max / NEAR or s.flushed:
            return 2
        return 1 if s.subnormal else 0

    def severity(self, s: Measured) -> float:
        """Orders tensors within a tier: how far past the limit, or how much is lost."""
        if self.tier(s) >= 2 and s.max_abs >= self.max / NEAR:
            return s.max_abs / self.max
        if s.size:
            return (s.flushed or s.subnormal) / s.size
        return 0.0

    def describe(self, s: Measured) -> str:
        """What this precision does to the tensor ``s`` measures, in words."""
        if s.sentinel:
            return (f"holds +-3.4e38 (float32's max: a mask value, -inf in {self.label}; {s.overflow} element(s)), "
                    "not a suspect")
        if s.overflow:
            return f"max |x| {s.max_abs:.4g} > {self.max_text} ({s.overflow} element(s) become inf)"
        if s.max_abs >= self.max / NEAR:
            return f"max |x| {s.max_abs:.4g} within {NEAR:g}x of {self.max_text}"
        if s.flushed:
            return f"{s.flushed} nonzero element(s) flush to 0 (min |x| {s.min_nonzero:.3g})"
        if s.subnormal:
            return f"{s.subnormal} element(s) subnormal in {self.label} (min |x| {s.min_nonzero:.3g})"
        return f"max |x| {s.max_abs:.4g}"

    @property
    def onnx_type_str(self) -> str:
        """How ``onnx.defs`` type constraints spell the tensor type: ``tensor(float16)``."""
        return f"tensor({'float16' if self.onnx_type == TensorProto.FLOAT16 else 'bfloat16'})"

    @property
    def dropped_bits(self) -> int:
        """FP32 mantissa bits this precision drops: a float32 whose low ``dropped_bits`` bits are zero may be exact."""
        return 24 - self.significant_bits

    def round(self, values) -> np.ndarray:
        """IEEE round to nearest even into this precision and back to float32 (what a Cast pair computes)."""
        with np.errstate(all="ignore"):
            return np.asarray(values, dtype=np.float32).astype(self.dtype).astype(np.float32)

    def __str__(self) -> str:
        return self.label


FP16 = Precision("fp16", "FP16", TensorProto.FLOAT16, np.dtype(np.float16), 65504.0, 2.0**-14, 2.0**-24, 11,
                 "HALF", "--fp16", "fp16", 1, "65504", "2^-24", "6.1e-05")
BF16 = Precision("bf16", "BF16", TensorProto.BFLOAT16, np.dtype(ml_dtypes.bfloat16),
                 float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**-126, 2.0**-133, 8, "BF16", "--bf16", "bf16",
                 13, "3.39e38", "2^-133", "1.18e-38", "rounding")
PRECISIONS = {p.name: p for p in (FP16, BF16)}
NAMES = tuple(PRECISIONS)


def _short(value: float) -> str:
    """A tiny limit in one significant digit, as messages write it: 6e-08."""
    return f"{value:.0e}"


def precision_of(name: "str | Precision | None") -> Precision:
    """The precision called ``name`` (None: FP16); an unknown name is a usage error."""
    if isinstance(name, Precision):
        return name
    if name is None:
        return FP16
    found = PRECISIONS.get(str(name).lower())
    if found is None:
        raise UsageError(f"unknown precision {name!r}: use one of {', '.join(NAMES)} (--precision)")
    return found
