"""How FP32 values become FP16: one definition, shared by the mixed-precision writer and the emulator.

Two conversions, because a plan's file holds two kinds of FP16 value:

* **Tensors computed at run time** (activations) are cast: IEEE round to nearest even, finite values past
  65504 become +-inf, values below about 3e-8 become 0 (a Cast in the graph). Nothing else is possible there.
* **Constants stored in the file** (initializers, Constant values, folded BatchNormalization parameters read
  by FP16 nodes) are converted once, at write time, by TensorRT's own rule for FP32 weights of FP16 layers
  (``constant_to_fp16``): finite values beyond +-65504 saturate to +-65504 ("Finite FP32 values which would
  overflow in FP16 detected. Converting to closest finite FP16 value."), non-zero values below the smallest
  FP16 subnormal (2^-24, about 6e-8) become +-2^-24 ("Values less than smallest positive FP16 Subnormal value
  detected. Converting to FP16 minimum subnormalized value."); +-inf and NaN stay as they are (FP16 holds
  them, and masks built with ``float('-inf')`` rely on them); everything else rounds to nearest even.
  The quoted texts are the TensorRT builder's warnings when it converts weights (seen in build logs, e.g.
  NVIDIA/TensorRT#2118, on a Hugging Face BERT whose attention mask multiplies by ``torch.finfo(float32).min``).
  A strongly typed build (TensorRT 11, RTX) takes the file's FP16 weights as they are, so the writer applies
  that rule itself: the same numbers a weakly typed ``--fp16`` build would have used.

Hugging Face exports build attention masks from ``torch.finfo(torch.float32).min`` (-3.4e38): stored in FP16
it is -65504, still a mask (exp(-65504 - max) is 0), where the IEEE cast would make -inf and a fully padded
row NaN.

BF16 (``--precision bf16``, ``model/precision.py``) takes the same rule with its own limits: round to nearest
even into 8 significant bits; BF16 has FP32's exponent, so only the few finite FP32 values beyond BF16's largest
finite value (about 3.39e38, e.g. ``torch.finfo(float32).min``) saturate to +-3.39e38 (where the IEEE rounding
would make +-inf, and a padded attention row NaN), FP32 subnormals below BF16's smallest subnormal (2^-133) become
+-2^-133, BF16 subnormals (2^-133 up to 2^-126) round to nearest even like any value, +-inf and NaN are kept.
Every function below takes the precision (FP16 when not given).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.numpy_helper

from fp16bisect.model.precision import FP16, Precision, precision_of

RULE = ("finite values beyond +-65504 saturate to +-65504, non-zero values below 2^-24 become +-2^-24 "
        "(TensorRT's conversion of FP32 weights), +-inf and NaN are kept, the rest rounds to nearest even")
BF16_RULE = ("finite values beyond +-3.39e38 (BF16's max) saturate to it, non-zero values below 2^-133 become "
             "+-2^-133, +-inf and NaN are kept, the rest rounds to nearest even (8 significant bits)")


def rule(precision: Precision = FP16) -> str:
    """The conversion rule of constants stored in ``precision``, as the override JSON's ``conversions`` says it."""
    return {"fp16": RULE, "bf16": BF16_RULE}[precision.name]


def constant_to_fp16(values, precision: Precision = FP16) -> np.ndarray:
    """A constant stored in FP16 (or ``precision``), by the rule of the module docstring (float16 array)."""
    return convert(values, precision=precision)[0]


CHUNK = 1 << 22  # elements converted at once: the temporaries stay small, a weight of 100 MB is read once


def convert(values, name: str = "", readers=(), precision: Precision = FP16) -> tuple[np.ndarray, "Conversion | None"]:
    """The constant stored in FP16 (or ``precision``) by the rule (float16 array), and what the rule changed
    beyond rounding (``conversion``), in one reading of the values, piece by piece."""
    top, bottom = precision.max, precision.smallest_subnormal
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    half = np.empty(flat.shape, precision.dtype)
    saturated = lifted = 0
    largest, smallest = 0.0, float("inf")
    for start in range(0, flat.size, CHUNK):
        x, h = flat[start:start + CHUNK], half[start:start + CHUNK]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h[...] = x  # round to nearest even: right except where it made inf (past 65520) or 0 (up to 2^-25)
        magnitude = np.abs(h.astype(np.float32))
        edge = np.flatnonzero(magnitude >= top)  # finite values beyond the max (some round to it)
        if edge.size:
            edge = edge[np.isfinite(x[edge]) & (np.abs(x[edge]) > top)]
            if edge.size:
                h[edge] = np.copysign(np.float32(top), x[edge])
                saturated += edge.size
                high = x[edge][np.argmax(np.abs(x[edge]))]
                largest = float(high) if abs(high) > abs(largest) else largest
        edge = np.flatnonzero(magnitude <= bottom)  # zeros, and non-zero values below the smallest subnormal
        if edge.size:
            edge = edge[(x[edge] != 0) & (np.abs(x[edge]) < bottom)]
            if edge.size:
                h[edge] = np.copysign(np.float32(bottom), x[edge])
                lifted += edge.size
                low = x[edge][np.argmin(np.abs(x[edge]))]
                smallest = float(low) if abs(low) < abs(smallest) else smallest
    half = half.reshape(np.shape(values))
    if not saturated and not lifted:
        return half, None
    return half, Conversion(name, saturated, lifted, largest if saturated else smallest, tuple(readers),
                            precision.name)


def constant_as_stored(values, precision: Precision = FP16) -> np.ndarray:
    """The FP32 values of a constant stored in FP16 or ``precision`` (what the emulator reads for it)."""
    return constant_to_fp16(values, precision).astype(np.float32)


@dataclass(frozen=True)
class Conversion:
    """What the rule did to one constant beyond rounding: counts of saturated and lifted values."""

    constant: str
    saturated: int  # finite values beyond +-65504, stored as +-65504
    lifted: int  # non-zero values below 2^-24, stored as +-2^-24
    extreme: float  # the value of largest magnitude among the saturated ones (else the smallest lifted one)
    readers: tuple = ()  # FP16 nodes that read it (node ids)
    precision: str = "fp16"  # the precision it is stored in (model/precision.py)

    def to_json(self) -> dict:
        return {"constant": self.constant, "saturated": self.saturated, "lifted": self.lifted,
                "extreme": self.extreme, "readers": list(self.readers)}

    def __str__(self) -> str:
        said = []
        stored = precision_of(self.precision)
        top, bottom = stored.max_text, stored.tiny_text
        if self.saturated:
            said.append(f"{self.saturated} value(s) beyond +-{top} (e.g. {self.extreme:.3g}) saturated to +-{top}")
        if self.lifted:
            said.append(f"{self.lifted} non-zero value(s) below {bottom} raised to +-{bottom}")
        who = f" (read by {', '.join(self.readers[:3])}{', ...' if len(self.readers) > 3 else ''})" \
            if self.readers else ""
        return f"{self.constant}{who}: {'; '.join(said)}"


def conversion(name: str, values, readers=(), precision: Precision = FP16) -> Conversion | None:
    """What storing ``values`` in FP16 (or ``precision``) changes beyond IEEE rounding, or None when nothing."""
    return convert(values, name, readers, precision)[1]


# -- BatchNormalization ------------------------------------------------------------------------------------
# Before opset 15 BatchNormalization types its statistics like X, so an FP16 BatchNormalization stores them in
# FP16. Where FP16 cannot hold them (a running variance of 9.79e7 in PP-OCRv4's detector), it is written as its
# folded form, as TensorRT's ONNX parser builds it (onnx-tensorrt ``onnxOpImporters.cpp``): scale =
# gamma / sqrt(var + epsilon), shift = beta - mean * scale, computed in FP32 at write time, stored in FP16 by
# the constant rule, and applied by an FP16 Mul and Add. From opset 15 the statistics have type parameters of
# their own (T1, T2) and stay in FP32.

BN_STATISTICS = ("scale", "bias", "mean", "running variance")


@functools.lru_cache(maxsize=None)
def half_statistics(opset: int) -> tuple[int, ...]:
    """Input positions of the statistics an FP16 BatchNormalization stores in FP16 at this opset: those the
    schema types like X (all four before 14, scale and bias at 14, none from 15)."""
    try:
        schema = onnx.defs.get_schema("BatchNormalization", opset, "")
    except onnx.defs.SchemaError:
        return ()
    x = schema.inputs[0].type_str
    return tuple(i for i in range(1, min(5, len(schema.inputs))) if schema.inputs[i].type_str == x)


def constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The float value of a Constant node (``value``, ``value_float`` or ``value_floats``), else None."""
    for a in node.attribute:
        if a.name == "value":
            return onnx.numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
    return None


@dataclass(frozen=True)
class BatchNormFold:
    """An FP16 BatchNormalization written as ``Mul(x, scale)`` then ``Add(., shift)``, both in FP16."""

    scale: np.ndarray  # float16, shaped to broadcast over X (C, 1, 1, ...), or over X viewed as (N, C, -1)
    shift: np.ndarray
    reason: str  # why its statistics could not be stored in FP16
    conversions: tuple = ()  # what the constant rule changed in scale and shift (Conversion)
    flat: bool = False  # X's rank is unknown when the file is written: X is viewed as (N, C, -1) (``FLAT``)


# A BatchNormalization's X is (N, C, D1, ..., Dk) whatever k is (its statistics are 1-D of C), so its fold needs
# no rank: X reshaped to (N, C, -1) takes scale and shift shaped (C, 1), and the result is reshaped back to
# Shape(X). The writer and the emulator do that where shape inference leaves X's rank unknown (Paddle exports:
# PP-OCRv4's recognizer); a Reshape moves no value, so both forms compute the same numbers.
FLAT = np.array([0, 0, -1], dtype=np.int64)


def batchnorm_fold(graph, node, precision: Precision = FP16) -> BatchNormFold | None:
    """The fold of an FP16 BatchNormalization whose statistics stored in FP16 (``half_statistics``) would be
    changed beyond rounding by the constant rule, when it can be folded (inference mode, constant per-channel
    statistics); None otherwise: it is written as it is, its statistics by the constant rule. X's rank shapes
    scale and shift; where shape inference does not know it the fold is ``flat``."""
    half = half_statistics(graph.opset)
    stats = list(node.inputs[1:5])
    if not half or len(stats) < 4:
        return None
    values = [graph.constant_value(t) for t in stats]
    if any(v is None for v in values):
        return None
    values = [np.asarray(v, dtype=np.float32) for v in values]
    reason = unstorable([(BN_STATISTICS[i - 1], values[i - 1]) for i in half], precision)
    if reason is None:
        return None
    proto = graph.model.graph.node[node.index]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
    rank = graph.ranks.get(node.inputs[0])
    if (attrs.get("training_mode", 0) or attrs.get("spatial", 1) != 1 or any(node.outputs[1:])
            or graph.opset < 7 or (rank is not None and rank < 2) or any(v.ndim != 1 for v in values)
            or len({v.size for v in values}) != 1):
        return None
    scale, shift = fold_batchnorm(values, attrs.get("epsilon", 1e-5))
    shape = [scale.size] + [1] * (1 if rank is None else rank - 2)
    (half_scale, on_scale), (half_shift, on_shift) = (convert(v, f"{node.id}/folded_{what}", (node.id,), precision)
                                                      for what, v in (("scale", scale), ("shift", shift)))
    found = tuple(c for c in (on_scale, on_shift) if c is not None)
    return BatchNormFold(half_scale.reshape(shape), half_shift.reshape(shape), reason, found, flat=rank is None)


def unstorable(stats, precision: Precision = FP16) -> str | None:
    """Why FP16 (or ``precision``) storage would change these (name, values) statistics beyond rounding, or None."""
    for what, value in stats:
        found = conversion(what, value, precision=precision)
        if found is not None and found.saturated:
            return f"its {what} {found.extreme:.3g} does not fit {precision.label}"
        if found is not None:
            return f"its {what} {found.extreme:.3g} is below {precision.label}'s smallest subnormal"
    return None


def fold_batchnorm(values, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """The folded per-channel (scale, shift) of a BatchNormalization's (gamma, beta, mean, var), in FP32."""
    gamma, beta, mean, var = (np.asarray(v, dtype=np.float32) for v in values)
    with np.errstate(all="ignore"):
        scale = gamma / np.sqrt(var + np.float32(epsilon))
        shift = beta - mean * scale
    return scale.astype(np.float32), shift.astype(np.float32)
