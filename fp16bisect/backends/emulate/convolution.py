"""A Conv's FP16 accumulator in the emulation, in the order of an implicit-GEMM kernel.

The sum of one output element runs over K = kernel taps x input channels (of its group), taken tap by tap with
the channels innermost (a KRSC filter, channels-last activations: the layout of the FP16 implicit-GEMM
convolutions of cuDNN and TensorRT). A block of ``BLOCK`` terms is therefore 16 channels of one tap (the last
block of a tap shorter when the channels are not a multiple of 16); a group with fewer than 16 channels puts
as many whole taps into a block as fit. Each block's sum is computed in FP32 and rounded, then the blocks go
through the pairwise rounding tree in that order (``sums.py``). A 3x3 convolution over 96 channels makes 9 x 6
= 54 partials per output, not the 96 of one channel by 9 taps.

A block is computed by 1x1 convolutions: the input padded as the node pads it (``pads``, or ``auto_pad``'s
SAME padding computed from the input's size when the model runs), then for each tap the window shifted to it
(a Slice from tap x dilation, the stride taken by the 1x1 convolution), the block's channels of the input and
of the tap's weights; several taps of one block are added in FP32 before the rounding.
"""

from __future__ import annotations

import numpy as np

from fp16bisect.backends.emulate.sums import BLOCK, Nodes, group_size

LAST = np.iinfo(np.int64).max


class Convolutions(Nodes):
    """The Conv part of ``accumulate.FP16Sums``: ``self.inputs``, ``self.attrs`` and ``_outputs`` are its."""

    inputs: list[str]
    attrs: dict

    def _outputs(self) -> int | None:
        raise NotImplementedError

    def taps_conv(self, w: tuple) -> str | None:
        """The Conv node (weights of shape ``w``) with FP16 sums, blocked as the module's docstring says; None when
        each output sums at most ``BLOCK`` terms (one block: nothing changes)."""
        group, kernel = int(self.attrs.get("group", 1)), [int(k) for k in w[2:]]
        channels, taps = int(w[1]), int(np.prod(kernel))
        if channels * taps <= BLOCK:
            return None
        cout_g, per = int(w[0]) // group, BLOCK // channels
        if per < 2:  # each tap's channels in blocks of 16 (fewer than 16: a tap a block)
            blocks = [[(t, c, min(c + BLOCK, channels))] for t in range(taps) for c in range(0, channels, BLOCK)]
            x = self._padded(self.inputs[0], kernel)
            weights = self._weights()

            def block(pieces: list[tuple[int, int, int]]) -> str:  # [N, Cout, spatial..], in FP32
                parts = [self._piece(x, weights, kernel, group, channels, *piece) for piece in pieces]
                total = parts[0]
                for part in parts[1:]:
                    total = self.op("Add", [total, part])
                return total

            def stacked(start: int, count: int) -> str:  # [N, group, count, cout_g, spatial..], in FP32
                made = []
                for b in blocks[start:start + count]:
                    one = block(b)
                    shape = self.op("Concat", [self.ints([0, group, 1, cout_g]), self.dims(one, 2)], axis=0)
                    made.append(self.op("Reshape", [one, shape]))
                return made[0] if len(made) == 1 else self.op("Concat", made, axis=2)
        else:  # whole taps, as many as fit: each block by the node's own convolution of the block's taps
            starts = list(range(0, taps, per))
            blocks = [[(t, 0, channels) for t in range(s, min(s + per, taps))] for s in starts]

            def block(pieces: list[tuple[int, int, int]]) -> str:
                return self._masked(w, [starts.index(pieces[0][0])], per)

            def stacked(start: int, count: int) -> str:
                y = self._masked(w, list(range(start, start + count)), per)
                shape = self.op("Concat", [self.ints([0, group, count, cout_g]), self.dims(y, 2)], axis=0)
                return self.op("Reshape", [y, shape])

        size = group_size(len(blocks), self._outputs())
        if size == 1:  # each partial a tensor of its own, the tree by Adds
            y = self.pairwise([self.round(block(b)) for b in blocks])
        else:
            y = self.ungrouped(self.grouped(len(blocks), size, lambda start, count: self.round(stacked(start, count)),
                                            2, 4 + len(kernel)), group * cout_g)
        return self.biased(y, len(kernel))

    def ungrouped(self, y: str, channels: int) -> str:
        """A convolution's tree over ``[N, group, 1, Cout/group, spatial..]`` as ``[N, channels, spatial..]``."""
        return self.op("Reshape", [y, self.op("Concat", [self.dims(y, 0, 1), self.ints([channels]), self.dims(y, 4)],
                                              axis=0)])

    def biased(self, y: str, spatial: int) -> str:
        """``y`` plus the node's bias (its third input, one value per output channel), when it has one: added after
        the sum, in FP32."""
        if len(self.inputs) > 2 and self.inputs[2]:
            return self.op("Add", [y, self.op("Reshape", [self.inputs[2], self.ints([-1] + [1] * spatial)])])
        return y

    def _masked(self, w: tuple, chosen: list[int], per: int) -> str:
        """The sums of blocks ``chosen`` (each ``per`` whole taps, in tap order) by one convolution with the node's
        own attributes: the weights of each block's taps, zeros at the others, the blocks' filters side by side
        in each group ([N, group x blocks x Cout/group, spatial..], in FP32; a block's 16 or fewer products
        summed in FP32 by that convolution)."""
        group = int(self.attrs.get("group", 1))
        cout_g, channels, taps = int(w[0]) // group, int(w[1]), int(np.prod(w[2:]))
        mask = np.zeros((1, len(chosen), 1, 1, taps), dtype=bool)
        for j, b in enumerate(chosen):
            mask[0, j, 0, 0, b * per:(b + 1) * per] = True
        shape = (group * len(chosen) * cout_g, channels, *w[2:])
        weights = self._weights()
        if weights is not None:
            values = np.asarray(weights, dtype=np.float32).reshape(group, 1, cout_g, channels, taps)
            ws = self.constant(np.ascontiguousarray(np.where(mask, values, np.float32(0)).reshape(shape)))
        else:
            split = self.op("Reshape", [self.inputs[1], self.ints([group, 1, cout_g, channels, taps])])
            ws = self.op("Reshape", [self.op("Where", [self.constant(mask), split, self.float(0.0)]),
                                     self.ints(list(shape))])
        return self.op("Conv", [self.inputs[0], ws], **self.attrs)

    def _weights(self):
        """The weights' values when they are an initializer or a Constant (each tap's slices are then constants
        too), else None (sliced in the graph)."""
        return self._constant_value(self.inputs[1])

    def _constant_value(self, tensor: str):
        raise NotImplementedError

    def _piece(self, x: str, weights, kernel: list[int], group: int, channels: int, tap: int, first: int,
               end: int) -> str:
        """Channels ``first:end`` (of each group) of tap ``tap``: a 1x1 convolution of the padded input ``x``
        shifted to the tap with the tap's weights of those channels (``weights``: their values, None: sliced in
        the graph). The input is cut by one Slice (channels and window) without groups."""
        n = len(kernel)
        at = [int(i) for i in np.unravel_index(tap, kernel)]
        dilations = self.attrs.get("dilations") or [1] * n
        starts = [a * d for a, d in zip(at, dilations)]
        ends = [-(d * (k - 1 - a)) or LAST for a, k, d in zip(at, kernel, dilations)]
        spatial = list(range(2, 2 + n))
        if group == 1:
            xs = self.op("Slice", [x, self.ints([first, *starts]), self.ints([end, *ends]), self.ints([1, *spatial])])
        else:
            xs = self.op("Slice", [x, self.ints(starts), self.ints(ends), self.ints(spatial)])
            if (first, end) != (0, channels):
                picked = [g * channels + c for g in range(group) for c in range(first, end)]
                xs = self.op("Gather", [xs, self.ints(picked)], axis=1)
        if weights is not None:
            window = tuple([slice(None), slice(first, end), *(slice(a, a + 1) for a in at)])
            ws = self.constant(np.ascontiguousarray(weights[window]))
        else:
            ws = self.op("Slice", [self.inputs[1], self.ints([first, *at]), self.ints([end, *(a + 1 for a in at)]),
                                   self.ints(list(range(1, 2 + n)))])
        return self.op("Conv", [xs, ws], group=group, kernel_shape=[1] * n,
                       strides=self.attrs.get("strides") or [1] * n)

    def _padded(self, x: str, kernel: list[int]) -> str:
        """``x`` with the node's zero padding: ``pads``, or ``auto_pad``'s SAME padding from the input's spatial
        size (the total ``max((ceil(size / stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)``, the odd one
        at the end for SAME_UPPER, at the start for SAME_LOWER)."""
        n = len(kernel)
        auto = self.attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else str(auto)
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            strides = self.ints(self.attrs.get("strides") or [1] * n)
            one, zero, two = self.ints([1]), self.ints([0]), self.ints([2])
            reach = self.ints([(k - 1) * d + 1 for k, d in zip(kernel, self.attrs.get("dilations") or [1] * n)])
            size = self.dims(x, 2)
            count = self.op("Div", [self.op("Sub", [self.op("Add", [size, strides]), one]), strides])
            total = self.op("Sub", [self.op("Add", [self.op("Mul", [self.op("Sub", [count, one]), strides]), reach]),
                                    size])
            total = self.op("Where", [self.op("Less", [total, zero]), zero, total])
            half = self.op("Div", [total, two])
            start = half if auto == "SAME_UPPER" else self.op("Sub", [total, half])
            pads = self.op("Concat", [self.ints([0, 0]), start, self.ints([0, 0]), self.op("Sub", [total, start])],
                           axis=0)
            return self.op("Pad", [x, pads])
        given = [0] * (2 * n) if auto == "VALID" else list(self.attrs.get("pads") or [0] * (2 * n))
        if not any(given):
            return x
        return self.op("Pad", [x, self.ints([0, 0, *given[:n], 0, 0, *given[n:]])])
