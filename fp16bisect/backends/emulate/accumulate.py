"""FP16 accumulation in the emulation (``--accumulate fp16``): an accumulating candidate in FP16 sums in FP16.

The model of an FP16 accumulator, one for every op: the terms of each output's sum are taken in order along the
summed axis, in blocks of ``BLOCK`` = 16 (a tensor-core m16n8k16 step: 16 products summed into one accumulator);
a block's sum is computed in FP32 and rounded to FP16; the block partials are then summed by a pairwise tree
whose every level rounds to FP16 (neighbouring partials added and rounded, until one is left; an odd one out
is carried to the next level). No Loop is needed: ``ceil(log2(K / 16))`` levels, fixed when the emulation is
built; a sum whose length is known only when the model runs pads in the graph and runs ``LEVELS`` levels, an
odd length padded with a zero at each (the same tree). ``sums.py`` builds the tree; a long GEMM's or
convolution's partials are made a group at a time (``sums.grouped``: the same values, less memory).

Why this model: blocked FP32 partials are what tensor-core GEMM kernels compute before they add into an FP16
accumulator; a pairwise tree is the optimistic end of the orders an engine may use (a sequential running sum
loses more precision, and would need a Loop: ``K / 16`` steps per run); but for non-negative terms every order
overflows once the total passes 65504, because the tree's last addition is the total, rounded: the failures this
mode exists for (a normaliser, a variance, a pooled sum, a long dot product) are found by either order. A tree of
the partials is an approximation of precision loss (the error grows as log K, a running sum's as K), not a bound.

Per op (the node's inputs are its FP16-rounded inputs, as in storage emulation; what is not a sum stays FP32):

* MatMul, Gemm: the block partials of a group of blocks by one MatMul of operands sliced and reshaped to
  ``[.., blocks, M, 16] @ [.., blocks, 16, N]`` (K padded with zeros to a multiple of 16), then the tree over the
  blocks; Gemm's alpha, beta and C after. A K known only when the model runs: one group, the tree in the graph.
* Conv: the terms in the order of an implicit-GEMM kernel, tap by tap with the channels innermost, a block 16
  channels of one tap (``convolution.py``); the bias after.
* ConvTranspose: the input channels in chunks of ``c`` (the largest divisor of the channels per group with ``c``
  times the taps that reach one output <= 16), a group of chunks' partials by one grouped ConvTranspose (weights
  rearranged in the graph), then the tree over the chunks; the bias after.
  A Conv or ConvTranspose with <= 16 terms per output needs nothing.
* ReduceSum, ReduceMean, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, GlobalAveragePool:
  the terms (x, x*x, |x|, exp(x - max)) summed, then divided, rooted or logged as the op says. AveragePool: a
  window of <= 16 terms is one block (nothing changes).
* Softmax, LogSoftmax: the normaliser sum(exp(x - max)).
* LayerNormalization, InstanceNormalization, GroupNormalization: the mean's sum and the sum of squares
  (x - mean)^2 (LayerNormalization's other outputs, Mean and InvStdDev, stay as the node computes them).

The ranks come from shape inference or, where it does not know them (exports whose Reshapes take computed shapes,
as Paddle's), from the run of the model the backend makes first (``seen.py``); any dim may be known only when the
model runs. Not modelled (their FP16 state stays storage only, and a run says so once, with the reason):
Einsum, AveragePool over more than 16 terms, attention and the com.microsoft ops, opsets below 11, a
GroupNormalization whose channels, or a convolution whose weight shape, are known only when the model runs.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from fp16bisect.backends.emulate.convolution import Convolutions
from fp16bisect.backends.emulate.sums import BLOCK, group_size

REDUCTIONS = {"ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
              "ReduceLogSumExp", "GlobalAveragePool"}
NORMALISATIONS = {"LayerNormalization", "InstanceNormalization", "GroupNormalization"}
MODELLED = REDUCTIONS | NORMALISATIONS | {"MatMul", "Gemm", "Conv", "ConvTranspose", "AveragePool", "Softmax",
                                         "LogSoftmax"}
NOT_MODELLED = "its FP16 accumulation is not modelled"


class Unmodelled(Exception):
    """This node's FP16 accumulation is not modelled (the message says why)."""


class FP16Sums(Convolutions):
    """Builds, for one accumulating node, the nodes computing its first output with FP16 accumulation."""

    def __init__(self, model: onnx.ModelProto, fresh, shapes: dict, opset: int, low: int,
                 sizes: dict[str, int] | None = None, shared: dict | None = None):
        """``model``: the emulation being built (its initializers and the nodes so far give constant axes);
        ``fresh(what)``: a model-unique name; ``shapes``: each tensor's shape, None for a dim known only when the
        model runs; ``low``: the low precision's ONNX type; ``sizes``: element counts seen in a run (how many
        partials a group makes, ``sums.group_size``); ``shared``: the model's small constants (``sums.Nodes``)."""
        super().__init__(model, fresh, opset, low, shared)
        self.shapes, self.sizes = shapes, sizes or {}

    # ------------------------------------------------------------------ what a node becomes

    def build(self, proto: onnx.NodeProto, node) -> str | None:
        """The output of ``self.nodes`` computing ``proto``'s first output with FP16 accumulation, in that
        output's shape; None when its sums have at most ``BLOCK`` terms (nothing changes). ``node``: the graph's
        node (its original inputs and outputs). Raises ``Unmodelled``."""
        op_type = node.op_type
        if node.domain not in ("", "ai.onnx") or op_type not in MODELLED:
            raise Unmodelled(NOT_MODELLED)
        if self.opset < 11:
            raise Unmodelled(f"opset {self.opset} is below 11: upgrade the model's opset "
                             "(onnx.version_converter) to model it")
        self.nodes = []
        self.inputs, self.original, self.output = list(proto.input), list(node.inputs), node.outputs[0]
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        if op_type in REDUCTIONS:
            return self._reduction(op_type)
        if op_type in ("MatMul", "Gemm"):
            return self._gemm(op_type)
        if op_type in ("Conv", "ConvTranspose"):
            return self._convolution(op_type == "ConvTranspose")
        if op_type == "AveragePool":
            if int(np.prod(self.attrs.get("kernel_shape", [1]))) <= BLOCK:
                return None  # one block: its sum rounded once, as its output is
            raise Unmodelled(f"{NOT_MODELLED} over a window of more than {BLOCK} terms")
        if op_type in ("Softmax", "LogSoftmax"):
            return self._softmax(op_type)
        return self._normalised(op_type)

    def _outputs(self) -> int | None:
        """The node's output elements: by shape inference, else as a run saw them (None: not known)."""
        return _length(self.shapes.get(self.output) or [None]) or self.sizes.get(self.output)

    def _shape(self, pos: int) -> tuple:
        shape = self.shapes.get(self.original[pos]) if pos < len(self.original) else None
        if shape is None:
            raise Unmodelled("its input's rank is unknown: it did not run on the first sample")
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
                    raise Unmodelled("its axes are computed in the graph")
                axes = [int(a) for a in np.asarray(given).ravel()]
            if not axes and self.attrs.get("noop_with_empty_axes", 0):
                return None  # no axes: nothing is summed
            axes = sorted({a % rank for a in (axes or range(rank))})
        count = _length([shape[a] for a in axes])
        if count is not None and count <= BLOCK:
            return None
        kept = [a for a in range(rank) if a not in axes]
        x = self.inputs[0]
        if axes != list(range(rank - len(axes), rank)):
            x = self.op("Transpose", [x], perm=kept + axes)
        x = self.op("Reshape", [x, self.ints([0] * len(kept) + [-1])])
        top = None
        if op_type in ("ReduceSumSquare", "ReduceL2"):
            x = self.op("Mul", [x, x])
        elif op_type == "ReduceL1":
            x = self.op("Abs", [x])
        elif op_type == "ReduceLogSumExp":
            top = self.reduce("ReduceMax", x, [-1])
            x = self.op("Exp", [self.op("Sub", [x, top])])
        total = self.sum_last(x, len(kept) + 1, count)
        if op_type in ("ReduceMean", "GlobalAveragePool"):
            total = self.op("Div", [total, self.count(x, count)])
        elif op_type == "ReduceL2":
            total = self.op("Sqrt", [total])
        elif op_type in ("ReduceLogSum", "ReduceLogSumExp"):
            total = self.op("Log", [total])
            if top is not None:
                total = self.op("Add", [total, top])
        keep = op_type == "GlobalAveragePool" or self.attrs.get("keepdims", 1)
        shape_of = self.op("Shape", [self.inputs[0]])
        if keep:  # the input's shape with 1 at the reduced axes (index ``rank``: the 1 appended)
            shape_of = self.op("Concat", [shape_of, self.ints([1])], axis=0)
        picked = [rank if a in axes else a for a in range(rank)] if keep else kept
        return self.op("Reshape", [total, self.op("Gather", [shape_of, self.ints(picked)], axis=0)])

    def _softmax(self, op_type: str) -> str:
        shape = self._shape(0)
        rank = len(shape)
        axis = self.attrs.get("axis", -1 if self.opset >= 13 else 1) % rank
        x, perm = self.inputs[0], None
        if self.opset < 13:  # the input coerced to 2D at axis
            count = _length(shape[axis:])
            x, rank = self.op("Flatten", [x], axis=axis), 2
        else:
            count = _length([shape[axis]])
            if axis != rank - 1:
                perm = list(range(rank))
                perm[axis], perm[-1] = perm[-1], perm[axis]
                x = self.op("Transpose", [x], perm=perm)
        shifted = self.op("Sub", [x, self.reduce("ReduceMax", x, [-1])])
        e = self.op("Exp", [shifted])
        total = self.sum_last(e, rank, count)
        if op_type == "Softmax":
            y = self.op("Div", [e, total])
        else:
            y = self.op("Sub", [shifted, self.op("Log", [total])])
        if self.opset < 13:
            return self.op("Reshape", [y, self.op("Shape", [self.inputs[0]])])
        return y if perm is None else self.op("Transpose", [y], perm=perm)

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
            channels = _length([shape[1]])
            if channels is None:
                raise Unmodelled("its channel count is known only when the model runs")
            lead, count = [0, groups], _length([channels // groups, *shape[2:]])
        x = self.op("Reshape", [self.inputs[0], self.ints(lead + [-1])])
        n = self.count(x, count)
        mean = self.op("Div", [self.sum_last(x, len(lead) + 1, count), n])
        centred = self.op("Sub", [x, mean])
        variance = self.op("Div", [self.sum_last(self.op("Mul", [centred, centred]), len(lead) + 1, count), n])
        std = self.op("Sqrt", [self.op("Add", [variance, self.float(self.attrs.get("epsilon", 1e-5))])])
        y = self.op("Div", [centred, std])
        if op_type == "LayerNormalization":
            y = self.op("Reshape", [y, self.op("Shape", [self.inputs[0]])])
            scale, bias = self.inputs[1], self.inputs[2] if len(self.inputs) > 2 and self.inputs[2] else None
        else:
            if op_type == "GroupNormalization" and self.opset >= 21:  # scale and bias per channel
                y = self.op("Reshape", [y, self.ints([0, channels, -1])])
            scale, bias = (self.op("Reshape", [t, self.ints([-1, 1])]) for t in self.inputs[1:3])
        y = self.op("Mul", [y, scale])
        y = y if bias is None else self.op("Add", [y, bias])
        return y if op_type == "LayerNormalization" else self.op("Reshape", [y, self.op("Shape", [self.inputs[0]])])

    def _gemm(self, op_type: str) -> str | None:
        a, b = self.inputs[0], self.inputs[1]
        sa, sb = self._shape(0), self._shape(1)
        if len(sa) < 2 or len(sb) < 2:
            raise Unmodelled("a MatMul operand of rank 1 is not modelled")
        if op_type == "Gemm":
            if self.attrs.get("transA", 0):
                a, sa = self.op("Transpose", [a], perm=[1, 0]), sa[::-1]
            if self.attrs.get("transB", 0):
                b, sb = self.op("Transpose", [b], perm=[1, 0]), sb[::-1]
        depth = _length([sa[-1]]) or _length([sb[-2]])
        if depth is not None and depth <= BLOCK:
            return None
        y = self._products(a, b, len(sa), len(sb), depth)
        if op_type == "Gemm":
            y = self.op("Mul", [y, self.float(self.attrs.get("alpha", 1.0))])
            if len(self.inputs) > 2 and self.inputs[2]:
                y = self.op("Add", [y, self.op("Mul", [self.inputs[2], self.float(self.attrs.get("beta", 1.0))])])
        return y

    def _products(self, a: str, b: str, ra: int, rb: int, depth: int | None) -> str:
        """The tree of the block partials of ``a @ b`` (ranks ``ra``, ``rb``; ``depth`` terms, None: known only
        when the model runs), ``[.., M, N]``."""
        batch = max(ra, rb) - 2

        def partials(pa: str, pb: str, count: int) -> str:  # [.., count, M, N], rounded (count -1: as many)
            pa = self.op("Reshape", [pa, self.ints([0] * (ra - 1) + [count, BLOCK])])  # [.., M, count, 16]
            pa = self.op("Transpose", [pa], perm=list(range(ra - 2)) + [ra - 1, ra - 2, ra])
            blocked = [0] * (rb - 2) + [count, BLOCK]  # [.., count, 16, N]
            shape = self.ints(blocked + [-1]) if count > 0 else \
                self.op("Concat", [self.ints(blocked), self.dims(pb, rb - 1)], axis=0)
            return self.round(self.op("MatMul", [pa, self.op("Reshape", [pb, shape])]))

        if depth is None:  # one group, its length and the tree's levels in the graph
            pa = self.op("Pad", [a, self.end_pad(a, ra, BLOCK)])
            pb = self.op("Pad", [b, self.end_pad(b, rb, BLOCK, axis=rb - 2)])
            blocked = self.op("Transpose", [partials(pa, pb, -1)], perm=[*range(batch), batch + 1, batch + 2, batch])
            total = self.sum_last_unknown(blocked, batch + 3)  # [.., M, N, 1]
            return self.op("Reshape", [total, self.dims(total, 0, -1)])
        blocks = -(-depth // BLOCK)
        size = group_size(blocks, self._outputs())
        if size == 1:  # each block's partial a tensor of its own: one Split per operand, a MatMul per block
            extra = blocks * BLOCK - depth
            pieces = zip(self.split(self.pad_axis(a, ra, ra - 1, extra), ra - 1, blocks),
                         self.split(self.pad_axis(b, rb, rb - 2, extra), rb - 2, blocks))
            return self.pairwise([self.round(self.op("MatMul", [pa, pb])) for pa, pb in pieces])

        def make(start: int, count: int) -> str:
            low, high = start * BLOCK, min((start + count) * BLOCK, depth)
            whole = (low, high) == (0, depth)
            pa = a if whole else self.slice(a, ra - 1, low, high)
            pb = b if whole else self.slice(b, rb - 2, low, high)
            extra = count * BLOCK - (high - low)
            return partials(self.pad_axis(pa, ra, ra - 1, extra), self.pad_axis(pb, rb, rb - 2, extra), count)

        y = self.grouped(blocks, size, make, batch, batch + 3)  # [.., 1, M, N]
        return self.op("Reshape", [y, self.op("Concat", [self.dims(y, 0, batch), self.dims(y, batch + 1)], axis=0)])

    def _convolution(self, transposed: bool) -> str | None:
        """Conv: blocks of 16 channels of one tap (``convolution.py``). ConvTranspose: the input channels in
        chunks, a group of chunks' partials by one ConvTranspose of ``group`` x chunks groups, the tree over the
        chunks, then the bias."""
        w = self._shape(1)
        if len(w) < 3 or _length(w) is None:
            raise Unmodelled("its weight's shape is known only when the model runs")
        if not transposed:
            return self.taps_conv(w)
        group, kernel = int(self.attrs.get("group", 1)), list(w[2:])
        per_group, cout_g = w[0] // group, w[1]
        reach = _taps(kernel, self.attrs)  # terms one channel gives
        if per_group * reach <= BLOCK:
            return None
        chunk = max([c for c in range(1, per_group + 1) if per_group % c == 0 and c * reach <= BLOCK] or [1])
        chunks = per_group // chunk
        attrs = {k: v for k, v in self.attrs.items() if k != "group"}
        x = self.inputs[0]
        size = group_size(chunks, self._outputs())
        if size == 1:
            return self.biased(self._chunk_by_chunk(chunks, chunk, per_group, group, attrs), len(kernel))
        weights = self.op("Reshape", [self.inputs[1], self.ints([group, chunks, chunk, cout_g, *kernel])])

        def make(start: int, count: int) -> str:
            if count == chunks:
                xs = x
            elif group == 1:
                xs = self.slice(x, 1, start * chunk, (start + count) * chunk)
            else:
                picked = [g * per_group + c for g in range(group) for c in range(start * chunk, (start + count) * chunk)]
                xs = self.op("Gather", [x, self.ints(picked)], axis=1)
            ws = weights if count == chunks else self.slice(weights, 1, start, start + count)
            ws = self.op("Reshape", [ws, self.ints([group * count * chunk, cout_g, *kernel])])
            partial = self.round(self.op("ConvTranspose", [xs, ws], group=group * count, **attrs))
            shaped = self.op("Concat", [self.ints([0, group, count, cout_g]), self.dims(partial, 2)], axis=0)
            return self.op("Reshape", [partial, shaped])  # [N, group, count, cout_g, spatial..]

        return self.biased(self.ungrouped(self.grouped(chunks, size, make, 2, 4 + len(kernel)), group * cout_g),
                           len(kernel))

    def _chunk_by_chunk(self, chunks: int, chunk: int, per_group: int, group: int, attrs: dict) -> str:
        """The ConvTranspose's tree with each chunk's partial a tensor of its own (a large output): the input and
        the weights cut into the chunks by one Split each (a Gather per chunk with groups), a ConvTranspose of
        ``group`` groups per chunk, already in the output's layout, the tree by Adds."""
        x, w = self.inputs[0], self.inputs[1]
        if group == 1:
            xs, ws = self.split(x, 1, chunks), self.split(w, 0, chunks)
        else:
            picked = [[g * per_group + c for g in range(group) for c in range(j * chunk, (j + 1) * chunk)]
                      for j in range(chunks)]
            xs = [self.op("Gather", [x, self.ints(p)], axis=1) for p in picked]
            ws = [self.op("Gather", [w, self.ints(p)], axis=0) for p in picked]
        return self.pairwise([self.round(self.op("ConvTranspose", [xj, wj], group=group, **attrs))
                              for xj, wj in zip(xs, ws)])

    def _constant_value(self, tensor: str) -> np.ndarray | None:
        """An initializer's or a Constant node's value (axes), None when computed."""
        from onnx import numpy_helper

        for init in self.model.graph.initializer:
            if init.name == tensor:
                return numpy_helper.to_array(init)
        for node in self.model.graph.node:
            if node.op_type == "Constant" and tensor in node.output and node.attribute[0].name == "value":
                return numpy_helper.to_array(node.attribute[0].t)
        return None


def _taps(kernel: list[int], attrs: dict) -> int:
    """The most kernel taps of a ConvTranspose that reach one output element: ceil(k / stride) per axis (all k
    with a dilation other than 1)."""
    strides = attrs.get("strides") or [1] * len(kernel)
    dilations = attrs.get("dilations") or [1] * len(kernel)
    return int(np.prod([-(-k // s) if d == 1 else k for k, s, d in zip(kernel, strides, dilations)]))


def _length(dims) -> int | None:
    """The product of ``dims``, None when one is known only when the model runs."""
    if not all(isinstance(d, int) and d > 0 for d in dims):
        return None
    return int(np.prod(dims, dtype=np.int64))
