"""The low precision a plan runs in (FP16 or BF16): one definition of each, everything else reads it from here.

FP16 (IEEE binary16): 11 significant bits, largest finite 65504, smallest subnormal 2^-24: its failures are
mostly range (overflow past 65504, underflow below 6e-8). BF16 (bfloat16): FP32's 8-bit exponent, so FP32's
range (largest finite about 3.39e38, smallest subnormal 2^-133), but only 8 significant bits: its failures are
relative rounding (about 0.4 % per value), not overflow.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from onnx import TensorProto

from fp16bisect.errors import UsageError


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
                 "HALF", "--fp16", "fp16", 1, "65504", "2^-24")
BF16 = Precision("bf16", "BF16", TensorProto.BFLOAT16, np.dtype(ml_dtypes.bfloat16),
                 float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**-126, 2.0**-133, 8, "BF16", "--bf16", "bf16",
                 13, "3.39e38", "2^-133")
PRECISIONS = {p.name: p for p in (FP16, BF16)}
NAMES = tuple(PRECISIONS)


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
