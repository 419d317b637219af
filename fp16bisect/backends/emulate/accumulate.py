"""FP16 accumulation in the emulation (``--accumulate fp16``): an accumulating candidate in FP16 sums in FP16.

The model of an FP16 accumulator, one for every op: the terms of each output's sum are taken in order along the
summed axis, in blocks of ``BLOCK`` = 16 (a tensor-core m16n8k16 step: 16 products summed into one accumulator);
a block's sum is computed in FP32 and rounded to FP16; the block partials are then summed by a pairwise tree
whose every level rounds to FP16 (neighbouring partials added and rounded, until one is left; an odd one out
is carried to the next level). No Loop is needed: ``ceil(log2(K / 16))`` levels of Slice,
Add and a Cast round trip, fixed when the emulation is built; a reduction, softmax or normalisation whose summed
length is known only when the model runs (a dynamic width) pads in the graph and runs ``LEVELS`` levels, an odd
length padded with a zero at each (the same tree).

Why this model: blocked FP32 partials are what tensor-core GEMM kernels compute before they add into an FP16
accumulator; a pairwise tree is the optimistic end of the orders an engine may use (a sequential running sum
loses more precision, and would need a Loop: ``K / 16`` steps per run); but for non-negative terms every order
overflows once the total passes 65504, because the tree's last addition is the total, rounded: the failures this
mode exists for (a normaliser, a variance, a pooled sum, a long dot product) are found by either order. A tree of
the partials is an approximation of precision loss (the error grows as log K, a running sum's as K), not a bound.

Per op (the node's inputs are its FP16-rounded inputs, as in storage emulation; what is not a sum stays FP32):

* MatMul, Gemm: the block partials by one MatMul of operands reshaped to ``[.., K/16, M, 16] @ [.., K/16, 16, N]``
  (K padded with zeros to a multiple of 16), then the tree over the K/16 axis; Gemm's alpha, beta and C after.
* Conv: the input channels in chunks of ``c`` (the largest divisor of the channels per group with ``c`` times the
  kernel volume <= 16), each chunk's partial by one grouped convolution (weights rearranged in the graph), then the
  tree over the chunks; the bias after. A convolution with <= 16 terms per output needs nothing.
* ReduceSum, ReduceMean, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, GlobalAveragePool:
  the terms (x, x*x, |x|, exp(x - max)) summed, then divided, rooted or logged as the op says.
* Softmax, LogSoftmax: the normaliser sum(exp(x - max)).
* LayerNormalization, InstanceNormalization, GroupNormalization: the mean's sum and the sum of squares
  (x - mean)^2 (LayerNormalization's other outputs, Mean and InvStdDev, stay as the node computes them).

Not modelled (their FP16 state stays storage only, and a run says so once): ConvTranspose,
Einsum, AveragePool, attention and the com.microsoft ops; and any modelled op whose
rank is not known when the emulation is built, or (MatMul, Gemm, Conv) whose summed length or weight shape is not.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BLOCK = 16  # terms summed in FP32 before the FP16 accumulator (a tensor-core m16n8k16 step)
LEVELS = 20  # tree levels for a summed length known only when the model runs: up to 16 * 2^20 terms
REDUCTIONS = {"ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
              "ReduceLogSumExp", "GlobalAveragePool"}
NORMALISATIONS = {"LayerNormalization", "InstanceNormalization", "GroupNormalization"}
MODELLED = REDUCTIONS | NORMALISATIONS | {"MatMul", "Gemm", "Conv", "Softmax", "LogSoftmax"}


class Unmodelled(Exception):
    """This node's FP16 accumulation is not modelled (the message says why)."""


class FP16Sums:
    """Builds, for one accumulating node, the nodes computing its first output with FP16 accumulation."""

    def __init__(self, model: onnx.ModelProto, fresh, shapes: dict, opset: int, low: int):
        """``model``: the emulation being built (its initializers and the nodes so far give constant axes);
        ``fresh(what)``: a model-unique name; ``low``: the low precision's ONNX type."""
        self.model, self.fresh, self.shapes, self.opset, self.low = model, fresh, shapes, opset, low
        self.nodes: list[onnx.NodeProto] = []

    # ------------------------------------------------------------------ what a node becomes

    def build(self, proto: onnx.NodeProto, original_inputs, op_type: str, fp32_out: str) -> str | None:
        """The output of ``self.nodes`` computing ``proto``'s first output with FP16 accumulation (reshaped like
        ``fp32_out``, the node's own result); None when its sums have at most ``BLOCK`` terms (nothing changes).
        Raises ``Unmodelled``."""
        if self.opset < 11:
            raise Unmodelled("opset below 11")
        if op_type not in MODELLED:
            raise Unmodelled("op not modelled")
        self.nodes = []
        self.inputs = list(proto.input)
        self.original = list(original_inputs)
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        if op_type in REDUCTIONS:
            out = self._reduction(op_type)
        elif op_type in ("MatMul", "Gemm"):
            out = self._gemm(op_type)
        elif op_type == "Conv":
            out = self._conv(proto)
        elif op_type in ("Softmax", "LogSoftmax"):
            out = self._softmax(op_type)
        else:
            out = self._normalised(op_type)
        if out is None:
            return None
        return self._op("Reshape", [out, self._op("Shape", [fp32_out])])

    def _shape(self, pos: int) -> tuple:
        shape = self.shapes.get(self.original[pos]) if pos < len(self.original) else None
        if shape is None:
            raise Unmodelled("input shape unknown")
        return tuple(shape)

    def _reduction(self, op_type: str) -> str | None:  # noqa: C901, PLR0912  the reduce family's one lowering: its
        # axes, then each op type's own step before and after the one blocked sum, side by side to be compared
        shape = self._shape(0)
        rank = len(shape)
        axes: list[int] | None
        if op_type == "GlobalAveragePool":
            axes = list(range(2, rank))
        else:
            axes = self.attrs.get("axes")
            if axes is None and len(self.inputs) > 1 and self.inputs[1]:
                given = self._constant_value(self.inputs[1])
                if given is None:
                    raise Unmodelled("axes computed in the graph")
                axes = [int(a) for a in np.asarray(given).ravel()]
            if not axes and self.attrs.get("noop_with_empty_axes", 0):
                raise Unmodelled("no axes: nothing reduced")
            axes = sorted({a % rank for a in (axes or range(rank))})
        count = _length([shape[a] for a in axes])
        if count is not None and count <= BLOCK:
            return None
        kept = [a for a in range(rank) if a not in axes]
        x = self.inputs[0]
        if axes != list(range(rank - len(axes), rank)):
            x = self._op("Transpose", [x], perm=kept + axes)
        x = self._op("Reshape", [x, self._ints([0] * len(kept) + [-1])])
        top = None
        if op_type in ("ReduceSumSquare", "ReduceL2"):
            x = self._op("Mul", [x, x])
        elif op_type == "ReduceL1":
            x = self._op("Abs", [x])
        elif op_type == "ReduceLogSumExp":
            top = self._reduce("ReduceMax", x, [-1])
            x = self._op("Exp", [self._op("Sub", [x, top])])
        total = self.sum_last(x, len(kept) + 1, count)
        if op_type in ("ReduceMean", "GlobalAveragePool"):
            total = self._op("Div", [total, self._count(x, count)])
        elif op_type == "ReduceL2":
            total = self._op("Sqrt", [total])
        elif op_type in ("ReduceLogSum", "ReduceLogSumExp"):
            total = self._op("Log", [total])
            if top is not None:
                total = self._op("Add", [total, top])
        return total

    def _softmax(self, op_type: str) -> str:
        shape = self._shape(0)
        rank = len(shape)
        axis = self.attrs.get("axis", -1 if self.opset >= 13 else 1) % rank
        x, perm = self.inputs[0], None
        if self.opset < 13:  # the input coerced to 2D at axis
            count = _length(shape[axis:])
            x, rank = self._op("Flatten", [x], axis=axis), 2
        else:
            count = _length([shape[axis]])
            if axis != rank - 1:
                perm = list(range(rank))
                perm[axis], perm[-1] = perm[-1], perm[axis]
                x = self._op("Transpose", [x], perm=perm)
        shifted = self._op("Sub", [x, self._reduce("ReduceMax", x, [-1])])
        e = self._op("Exp", [shifted])
        total = self.sum_last(e, rank, count)
        if op_type == "Softmax":
            y = self._op("Div", [e, total])
        else:
            y = self._op("Sub", [shifted, self._op("Log", [total])])
        return y if perm is None else self._op("Transpose", [y], perm=perm)

    def _normalised(self, op_type: str) -> str:
        """Layer, instance and group normalisation: the input flattened to ``[.., K]`` over what one mean and one
        variance cover, both sums in FP16, then scale and bias (per channel: ``[N, C, -1]``; per group, opset
        18's GroupNormalization: ``[N, G, -1]``; LayerNormalization's: in the input's shape)."""
        shape = self._shape(0)
        if op_type == "LayerNormalization":
            axis = self.attrs.get("axis", -1) % len(shape)
            lead, count = [0] * axis, _length(shape[axis:])
        elif op_type == "InstanceNormalization":
            lead, count = [0, 0], _length(shape[2:])
        else:
            groups = int(self.attrs["num_groups"])
            channels = _static([shape[1]])
            lead, count = [0, groups], _length([channels // groups, *shape[2:]])
        x = self._op("Reshape", [self.inputs[0], self._ints(lead + [-1])])
        n = self._count(x, count)
        mean = self._op("Div", [self.sum_last(x, len(lead) + 1, count), n])
        centred = self._op("Sub", [x, mean])
        variance = self._op("Div", [self.sum_last(self._op("Mul", [centred, centred]), len(lead) + 1, count), n])
        std = self._op("Sqrt", [self._op("Add", [variance, self._float(self.attrs.get("epsilon", 1e-5))])])
        y = self._op("Div", [centred, std])
        if op_type == "LayerNormalization":
            y = self._op("Reshape", [y, self._op("Shape", [self.inputs[0]])])
            scale, bias = self.inputs[1], self.inputs[2] if len(self.inputs) > 2 and self.inputs[2] else None
        else:
            if op_type == "GroupNormalization" and self.opset >= 21:  # scale and bias per channel
                y = self._op("Reshape", [y, self._ints([0, channels, -1])])
            scale, bias = (self._op("Reshape", [t, self._ints([-1, 1])]) for t in self.inputs[1:3])
        y = self._op("Mul", [y, scale])
        return y if bias is None else self._op("Add", [y, bias])

    def _gemm(self, op_type: str) -> str | None:
        a, b = self.inputs[0], self.inputs[1]
        sa, sb = self._shape(0), self._shape(1)
        if len(sa) < 2 or len(sb) < 2:
            raise Unmodelled("a MatMul operand of rank 1")
        if op_type == "Gemm":
            if self.attrs.get("transA", 0):
                a, sa = self._op("Transpose", [a], perm=[1, 0]), sa[::-1]
            if self.attrs.get("transB", 0):
                b, sb = self._op("Transpose", [b], perm=[1, 0]), sb[::-1]
        depth = _static([sa[-1]])
        if depth <= BLOCK:
            return None
        blocks = -(-depth // BLOCK)
        a = self._pad(a, len(sa), len(sa) - 1, blocks * BLOCK - depth)
        b = self._pad(b, len(sb), len(sb) - 2, blocks * BLOCK - depth)
        a = self._op("Reshape", [a, self._ints([0] * (len(sa) - 1) + [blocks, BLOCK])])  # [.., M, K/16, 16]
        a = self._op("Transpose", [a], perm=list(range(len(sa) - 2)) + [len(sa) - 1, len(sa) - 2, len(sa)])
        b = self._op("Reshape", [b, self._ints([0] * (len(sb) - 2) + [blocks, BLOCK, -1])])  # [.., K/16, 16, N]
        partials = self._round(self._op("MatMul", [a, b]))  # [.., K/16, M, N]
        y = self.tree(partials, -3, blocks)
        if op_type == "Gemm":
            y = self._op("Mul", [y, self._float(self.attrs.get("alpha", 1.0))])
            if len(self.inputs) > 2 and self.inputs[2]:
                c = self._op("Mul", [self.inputs[2], self._float(self.attrs.get("beta", 1.0))])
                y = self._op("Add", [y, c])  # y is [1, M, N]: C broadcasts as to [M, N]
        return y

    def _conv(self, proto: onnx.NodeProto) -> str | None:
        w = self._shape(1)
        if len(w) < 3 or not all(isinstance(d, int) for d in w):
            raise Unmodelled("weight shape unknown")
        cout, per_group, kernel = w[0], w[1], w[2:]
        volume = int(np.prod(kernel))
        if per_group * volume <= BLOCK:
            return None
        chunk = max([c for c in range(1, per_group + 1) if per_group % c == 0 and c * volume <= BLOCK] or [1])
        chunks, group = per_group // chunk, int(self.attrs.get("group", 1))
        weights = self._op("Reshape", [self.inputs[1], self._ints([group, cout // group, chunks, chunk, *kernel])])
        weights = self._op("Transpose", [weights], perm=[0, 2, 1, 3, *range(4, 4 + len(kernel))])
        weights = self._op("Reshape", [weights, self._ints([group * chunks * (cout // group), chunk, *kernel])])
        attrs = {k: v for k, v in self.attrs.items() if k != "group"}
        partial = self._op("Conv", [self.inputs[0], weights], group=group * chunks, **attrs)
        partial = self._round(self._op("Reshape", [partial, self._ints([0, group, chunks, cout // group, -1])]))
        y = self.tree(partial, 2, chunks)  # [N, group, 1, cout/group, spatial]
        if len(self.inputs) > 2 and self.inputs[2]:
            bias = self._op("Reshape", [self.inputs[2], self._ints([1, group, 1, cout // group, 1])])
            y = self._op("Add", [y, bias])
        return y

    # ------------------------------------------------------------------ the accumulator

    def sum_last(self, x: str, rank: int, count: int | None) -> str:
        """The sum over the last axis (``count`` terms; None: known only when the model runs) of ``x`` (of
        ``rank``), kept as an axis of 1: blocks of ``BLOCK`` in FP32, each rounded, then the rounding tree."""
        if count is None:
            return self._sum_last_unknown(x, rank)
        blocks = -(-count // BLOCK)
        x = self._pad(x, rank, rank - 1, blocks * BLOCK - count)
        x = self._op("Reshape", [x, self._ints([0] * (rank - 1) + [blocks, BLOCK])])
        partials = self._round(self._reduce("ReduceSum", x, [-1], keepdims=0))
        return self.tree(partials, -1, blocks)

    def tree(self, x: str, axis: int, length: int) -> str:
        """Pairwise sums over ``axis`` (of ``length``), each rounded to the low precision, until one is left:
        neighbours (0 + 1, 2 + 3, ...) at every level, so that each partial is the sum of a contiguous run of terms
        (a run of terms of one sign overflows as in a running sum; pairing far terms would hide it)."""
        while length > 1:
            half = length // 2
            pairs = self._slice(x, axis, 0, 2 * half, 2), self._slice(x, axis, 1, 2 * half, 2)  # neighbours
            total = self._round(self._op("Add", list(pairs)))
            if length % 2:
                total = self._op("Concat", [total, self._slice(x, axis, 2 * half, length)], axis=axis)
            x, length = total, half + length % 2
        return x

    def _constant_value(self, tensor: str) -> np.ndarray | None:
        """An initializer's or a Constant node's value (axes), None when computed."""
        for init in self.model.graph.initializer:
            if init.name == tensor:
                return numpy_helper.to_array(init)
        for node in self.model.graph.node:
            if node.op_type == "Constant" and tensor in node.output and node.attribute[0].name == "value":
                return numpy_helper.to_array(node.attribute[0].t)
        return None

    def _sum_last_unknown(self, x: str, rank: int) -> str:
        """``sum_last`` for a length known only when the model runs: the blocks by a padding computed in the
        graph, then ``LEVELS`` levels of the tree, each pairing neighbours after padding an odd length with a
        zero (a level on one partial adds 0: the same value)."""
        x = self._op("Pad", [x, self._end_pad(x, rank, BLOCK)])
        x = self._op("Reshape", [x, self._ints([0] * (rank - 1) + [-1, BLOCK])])
        x = self._round(self._reduce("ReduceSum", x, [-1], keepdims=0))
        for _ in range(LEVELS):
            x = self._op("Pad", [x, self._end_pad(x, rank, 2)])
            x = self._op("Reshape", [x, self._ints([0] * (rank - 1) + [-1, 2])])
            x = self._round(self._reduce("ReduceSum", x, [-1], keepdims=0))
        return x

    def _end_pad(self, x: str, rank: int, multiple: int) -> str:
        """Pad's pads extending the last axis of ``x`` with zeros to a multiple of ``multiple``."""
        length = self._op("Gather", [self._op("Shape", [x]), self._ints([-1])])
        m = self._ints([multiple])
        extra = self._op("Mod", [self._op("Sub", [m, self._op("Mod", [length, m])]), m])
        return self._op("Concat", [self._ints([0] * (2 * rank - 1)), extra], axis=0)

    def _count(self, x: str, count: int | None) -> str:
        """The number of terms summed over the last axis of ``x``, as a float: ``count``, else its last dim."""
        if count is not None:
            return self._float(count)
        length = self._op("Gather", [self._op("Shape", [x]), self._ints([-1])])
        return self._op("Cast", [length], to=TensorProto.FLOAT)

    # ------------------------------------------------------------------ nodes

    def _op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.fresh("acc16"), **attrs))
        return out

    def _round(self, x: str) -> str:
        return self._op("Cast", [self._op("Cast", [x], to=self.low)], to=TensorProto.FLOAT)

    def _constant(self, value: np.ndarray) -> str:
        name = self.fresh("acc_const")
        self.model.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def _ints(self, values) -> str:
        return self._constant(np.asarray(list(values), dtype=np.int64))

    def _float(self, value) -> str:
        return self._constant(np.asarray(value, dtype=np.float32))

    def _slice(self, x: str, axis: int, start: int, end: int, step: int = 1) -> str:
        return self._op("Slice", [x, self._ints([start]), self._ints([end]), self._ints([axis]), self._ints([step])])

    def _pad(self, x: str, rank: int, axis: int, extra: int) -> str:
        if not extra:
            return x
        pads = [0] * (2 * rank)
        pads[rank + axis] = extra
        return self._op("Pad", [x, self._ints(pads)])

    def _reduce(self, op_type: str, x: str, axes: list[int], keepdims: int = 1) -> str:
        if self.opset >= 18 or (op_type == "ReduceSum" and self.opset >= 13):
            return self._op(op_type, [x, self._ints(axes)], keepdims=keepdims)
        return self._op(op_type, [x], axes=axes, keepdims=keepdims)


def _length(dims) -> int | None:
    """The product of ``dims``, None when one is known only when the model runs."""
    return _static(dims) if all(isinstance(d, int) and d > 0 for d in dims) else None


def _static(dims) -> int:
    """The product of ``dims``, known when the emulation is built, else ``Unmodelled``."""
    if not all(isinstance(d, int) and d > 0 for d in dims):
        raise Unmodelled("summed length unknown")
    return int(np.prod(dims, dtype=np.int64))
