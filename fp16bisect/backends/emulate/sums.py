"""The FP16 accumulator as nodes of the emulation: block partials, the pairwise rounding tree, and leaves built a
group at a time so that a long sum never holds all its partials at once.

The tree (``accumulate.py`` says why this model): the block partials of each output's sum, in order along the
summed axis, are added pairwise, neighbours (0 + 1, 2 + 3, ...) at every level, each sum rounded to the low
precision, an odd one out carried to the next level, until one is left. Element ``i`` of level ``l`` is then the
rounded sum of the partials ``[i 2^l, (i + 1) 2^l)`` (cut at the end): the tree of a run of ``2^g`` partials
that starts at a multiple of ``2^g`` is a subtree of the whole tree. So the partials can be made ``2^g`` at a time
(``grouped``): each group reduced to one value by its own tree, the groups' values then by the same pairwise
rule (``pairwise``); the result is the whole tree's, value for value, and only one group's partials (and one
pending value per level) are alive at once when ONNX Runtime runs the nodes depth first, as its default order
does. Pairs are added by a ReduceSum over an axis of 2 of the same tensor reshaped (no copy), not by Slices.

The partials are an axis ``k`` of a tensor: a level reshapes it to ``[d_0, .., d_{k-1}, L / 2, 2, ..]`` (the
leading dims copied with 0, the trailing ones taken from its shape when the model runs) and sums the axis of 2.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BLOCK = 16  # terms summed in FP32 before the FP16 accumulator (a tensor-core m16n8k16 step)
LEVELS = 20  # tree levels for a summed length known only when the model runs: up to 16 * 2^20 terms
GROUP_ELEMENTS = 1 << 22  # partials alive at once per sum at most (16 MiB of FP32), when they share a tensor
SHARED = 64  # constants of at most this many elements are made once per model and shared
SEPARATE = 1 << 15  # output elements from which each partial is a tensor of its own (see ``group_size``)


def group_size(blocks: int, output_elements: int | None) -> int:
    """Partials made at once for a sum of ``blocks`` partials per output element over ``output_elements``
    outputs (None: not known, then all at once). From ``SEPARATE`` outputs on, one: each partial is then its own
    tensor, and a level of the tree is an Add of two tensors (a ReduceSum over pairs costs ONNX Runtime about
    twice as much per element, and an Add's fixed cost is small next to the tensors). Below, as many as fit
    ``GROUP_ELEMENTS`` (a power of 2): one tensor, the tree a few ReduceSums, few nodes."""
    if output_elements is None:
        return blocks
    if output_elements >= SEPARATE:
        return 1
    fits = max(1, GROUP_ELEMENTS // max(output_elements, 1))
    if blocks <= fits:
        return blocks
    size = 1
    while size * 2 <= fits:
        size *= 2
    return size


class Nodes:
    """Nodes appended to ``self.nodes``, named by ``fresh``, their constants added to ``model``; the accumulator
    (``sum_last``, ``tree``, ``grouped``) built of them in the low precision ``low`` (an ONNX type)."""

    def __init__(self, model: onnx.ModelProto, fresh, opset: int, low: int, shared: dict | None = None):
        """``shared``: the small constants made so far, by value (one dict per model: ``constant``)."""
        self.model, self.fresh, self.opset, self.low = model, fresh, opset, low
        self.shared = {} if shared is None else shared
        self.nodes: list[onnx.NodeProto] = []

    # ------------------------------------------------------------------ the accumulator

    def sum_last(self, x: str, rank: int, count: int | None) -> str:
        """The sum over the last axis (``count`` terms; None: known only when the model runs) of ``x`` (of
        ``rank``), kept as an axis of 1: blocks of ``BLOCK`` in FP32, each rounded, then the rounding tree."""
        if count is None:
            return self.sum_last_unknown(x, rank)
        blocks = -(-count // BLOCK)
        x = self.pad_axis(x, rank, rank - 1, blocks * BLOCK - count)
        x = self.op("Reshape", [x, self.ints([0] * (rank - 1) + [blocks, BLOCK])])
        partials = self.round(self.reduce("ReduceSum", x, [-1], keepdims=0))
        return self.tree(partials, rank - 1, blocks, rank)

    def tree(self, x: str, k: int, length: int, rank: int) -> str:
        """The pairwise rounding tree over axis ``k`` (``length`` partials) of ``x`` (of ``rank``), that axis
        kept as 1."""
        while length > 1:
            if length % 2:  # an odd one out: a zero after it, then added to it (the same value, already rounded)
                x = self.pad_axis(x, rank, k, 1)
                length += 1
            paired = [0] * k + [length // 2, 2]
            if rank - k - 1 <= 1:
                shape = self.ints(paired + [-1] * (rank - k - 1))
            else:  # several axes after the partials: their dims, taken when the model runs
                shape = self.op("Concat", [self.ints(paired), self.dims(x, k + 1)], axis=0)
            x = self.round(self.reduce("ReduceSum", self.op("Reshape", [x, shape]), [k + 1], keepdims=0))
            length //= 2
        return x

    def pairwise(self, values: list[str]) -> str:
        """The same tree over separate tensors of one shape (each a group's value, in order)."""
        while len(values) > 1:
            paired = [self.round(self.op("Add", values[i:i + 2])) for i in range(0, len(values) - 1, 2)]
            values = paired + values[len(paired) * 2:]
        return values[0]

    def grouped(self, blocks: int, size: int, make: Callable[[int, int], str], k: int, rank: int) -> str:
        """The tree over ``blocks`` partials made ``size`` (a power of 2) at a time: ``make(start, count)`` gives
        the rounded partials ``[start, start + count)`` along axis ``k`` of a tensor of ``rank``; the result is the
        whole tree's (see the module's docstring), that axis kept as 1."""
        values = [self.tree(make(start, min(size, blocks - start)), k, min(size, blocks - start), rank)
                  for start in range(0, blocks, size)]
        return self.pairwise(values)

    def sum_last_unknown(self, x: str, rank: int) -> str:
        """``sum_last`` for a length known only when the model runs: the blocks by a padding computed in the
        graph, then ``LEVELS`` levels of the tree, each pairing neighbours after padding an odd length with a
        zero (a level on one partial adds 0: the same value)."""
        x = self.op("Pad", [x, self.end_pad(x, rank, BLOCK)])
        x = self.op("Reshape", [x, self.ints([0] * (rank - 1) + [-1, BLOCK])])
        x = self.round(self.reduce("ReduceSum", x, [-1], keepdims=0))
        for _ in range(LEVELS):
            x = self.op("Pad", [x, self.end_pad(x, rank, 2)])
            x = self.op("Reshape", [x, self.ints([0] * (rank - 1) + [-1, 2])])
            x = self.round(self.reduce("ReduceSum", x, [-1], keepdims=0))
        return x

    def end_pad(self, x: str, rank: int, multiple: int, axis: int = -1) -> str:
        """Pad's pads extending ``axis`` of ``x`` (of ``rank``) with zeros to a multiple of ``multiple``."""
        axis %= rank
        length = self.dims(x, axis, axis + 1)
        m = self.ints([multiple])
        extra = self.op("Mod", [self.op("Sub", [m, self.op("Mod", [length, m])]), m])
        parts = [self.ints([0] * (rank + axis)), extra] + ([self.ints([0] * (rank - axis - 1))] if axis < rank - 1 else [])
        return self.op("Concat", parts, axis=0)

    def count(self, x: str, count: int | None) -> str:
        """The number of terms summed over the last axis of ``x``, as a float: ``count``, else its last dim."""
        if count is not None:
            return self.float(count)
        return self.op("Cast", [self.dims(x, -1)], to=TensorProto.FLOAT)

    # ------------------------------------------------------------------ nodes

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.fresh("acc16"), **attrs))
        return out

    def round(self, x: str) -> str:
        return self.op("Cast", [self.op("Cast", [x], to=self.low)], to=TensorProto.FLOAT)

    def constant(self, value: np.ndarray) -> str:
        """An initializer holding ``value``: one per distinct small value in the model (a Slice's starts, a shape),
        shared by every node reading it."""
        value = np.asarray(value)
        key = (value.dtype.str, value.shape, value.tobytes()) if value.size <= SHARED else None
        if key is not None and key in self.shared:
            return self.shared[key]
        name = self.fresh("acc_const")
        self.model.graph.initializer.append(numpy_helper.from_array(value, name))
        if key is not None:
            self.shared[key] = name
        return name

    def ints(self, values) -> str:
        return self.constant(np.asarray(list(values), dtype=np.int64))

    def float(self, value) -> str:
        return self.constant(np.asarray(value, dtype=np.float32))

    def dims(self, x: str, start: int, end: int | None = None) -> str:
        """The dims ``start:end`` of ``x``'s shape (a 1-D int64 tensor), computed when the model runs."""
        stop = np.iinfo(np.int64).max if end is None else end
        return self.op("Slice", [self.op("Shape", [x]), self.ints([start]), self.ints([stop])])

    def split(self, x: str, axis: int, parts: int) -> list[str]:
        """``x`` cut along ``axis`` into ``parts`` equal pieces, by one node."""
        outs = [self.fresh("part") for _ in range(parts)]
        node = helper.make_node("Split", [x], outs, name=self.fresh("acc16"), axis=axis)
        if self.opset >= 18:  # equal pieces need their count said from opset 18
            node.attribute.append(helper.make_attribute("num_outputs", parts))
        self.nodes.append(node)
        return outs

    def slice(self, x: str, axis: int, start: int, end: int) -> str:
        return self.op("Slice", [x, self.ints([start]), self.ints([end]), self.ints([axis])])

    def pad_axis(self, x: str, rank: int, axis: int, extra: int) -> str:
        """``x`` (of ``rank``) with ``extra`` zeros after the end of ``axis``."""
        if not extra:
            return x
        pads = [0] * (2 * rank)
        pads[rank + axis] = extra
        return self.op("Pad", [x, self.ints(pads)])

    def reduce(self, op_type: str, x: str, axes: list[int], keepdims: int = 1) -> str:
        if self.opset >= 18 or (op_type == "ReduceSum" and self.opset >= 13):
            return self.op(op_type, [x, self.ints(axes)], keepdims=keepdims)
        return self.op(op_type, [x], axes=axes, keepdims=keepdims)
