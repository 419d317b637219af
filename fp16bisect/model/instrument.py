"""The FP32 model instrumented to measure its own tensors: row statistics computed in the run.

Every float tensor x the profile computes is measured inside one FP32 ONNX
Runtime run per sample, on the rows of |x| (its last axis), by eight elementwise
passes and six row reductions, giving six numbers per row (the run returns
O(rows) numbers per tensor, never the tensor):

    row max |x|
    row sum of |x| - |x|                    NaN exactly when the row has NaN or inf
    row count of |x| < 65520                the others become inf in FP16
    row min |x| over |x| >= 2^-126          float32 denormals count as zeros (inf
                                            if the row has no such value)
    row count of 2^-126 <= |x| < 2^-14      subnormal in FP16
    row count of 2^-126 <= |x| <= 2^-25     flushed to 0 in FP16 (round to nearest
                                            even sends 2^-25 to 0, above it to 2^-24)

The minimum and the counts are taken on |x| with the values below 2^-126 lifted
to inf, as max(ThresholdedRelu(c / |x|, FLOAT32_MAX), |x|): c / |x| (c = 4 -
2^-22) is finite exactly when |x| >= 2^-126. A count of the values below t is a
row sum of HardSigmoid(v) = clip(s (t - v), 0, 1), 1 / s the spacing of the
float32 just below t: 1 for v < t, 0 otherwise; float32 sums of 0 and 1 are
exact for rows of up to 2^24 elements (a tensor with longer rows is fetched
whole). Arithmetic rather than comparisons: ONNX Runtime's Where is slow, and
its Cast slower than arithmetic. Large tensors get these nodes right after their
producer, and the model runs in producer order, so ONNX Runtime frees each
activation soon after it is measured (the measuring takes a few temporaries of
its size at a time), and no tensor is copied out or widened to float64. Tensors
of at most 2^18 elements (by ONNX shape inference with the first sample's
shapes, ``tensor_sizes``) are measured in groups, one Loop per group, so the
instrumented model has a few nodes per group rather than a dozen per tensor
(session creation grows with the node count); each member is one row (its
counts are exact), its statistics a scan output of the Loop. Tensors of at
least ``SKIP_COUNTS`` elements run each count inside an If, only when a row's
max (for 65520) or min (for the small bounds) shows it can count anything: on
PP-OCRv4 det two of the three counts, four passes over each large tensor, are
then skipped. ``add_rows`` turns one run's statistics of a tensor into what
``TensorStats.add`` gives on the whole tensor.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from fp16bisect.model.graph import Graph
from fp16bisect.model.precision import Precision
from fp16bisect.model.statistics import FLOAT32_MAX, FP32_MIN_NORMAL, TensorStats

# c / |x| is finite (at most FLOAT32_MAX) for |x| >= 2^-126 and inf below, 0 and FP32 denormals (c = 4 - 2^-22:
# c / 2^-126 = FLOAT32_MAX exactly, c / (2^-126 - 2^-149) rounds past it)
OVERFLOWS_BELOW_NORMAL = float(np.nextafter(np.float32(4), np.float32(0)))


def below(low: Precision) -> dict[str, tuple[float, float]]:
    """The bounds t the counts are taken below, each with its scale s, for the precision ``low``.

    HardSigmoid(v) = clip(-s v + s t, 0, 1) = clip(s (t - v), 0, 1) is 1 for v < t (t - v is at least the
    spacing 1 / s of the float32 just below t, and s a power of 2: exact) and 0 for v >= t: a row sum of it
    counts v < t. For FP16: subnormal below 2^-14 (s = 2^38), flushed at most 2^-25 (as below the float32
    after it, s = 2^48), finite below 65520 (s = 2^8; s (t - v) is -inf for v near 3e38: 0). A bound at or
    below 2^-126 (BF16's normal range and flush bound: FP32's) counts nothing on values lifted to 2^-126 or
    above: its scale only has to be finite."""
    flushed = float(np.nextafter(np.float32(low.flushed_at), np.float32(1)))  # |x| <= bound as |x| < this
    return {"subnormal": (low.smallest_normal, _scale(low.smallest_normal)), "flushed": (flushed, _scale(flushed)),
            "finite16": (low.overflow_at, _scale(low.overflow_at))}


def _scale(bound: float) -> float:
    """1 / the spacing of the float32 just below ``bound`` (a power of 2), or 1 where the bound is at most
    2^-126 (nothing counted is below it; the spacing's inverse would overflow float32)."""
    if bound <= FP32_MIN_NORMAL:
        return 1.0
    below_bound = np.float32(bound)
    return float(1.0 / (float(below_bound) - float(np.nextafter(below_bound, np.float32(0)))))
EXACT_COUNT = 1 << 24  # float32 sums of 0 and 1 are exact up to here: the longest row counted in the run
STATISTICS = ("row_max", "row_sum", "row_min", "row_subnormal", "row_flushed", "row_finite16", "shape")  # see with_statistics
GROUP_TENSOR = 1 << 18  # elements: tensors up to this size are measured in groups (one Loop for many tensors)
GROUP_TOTAL = 1 << 22  # elements per group at most: the members stay alive until their group is measured
SKIP_COUNTS = 1 << 21  # elements: from here a count runs only where its bound can count anything (an If per count:
                       # about a millisecond of session creation each, against two passes over the tensor)
PREFIX = "__fp16bisect_stat"


def with_statistics(graph: Graph, names: list[str],
                    sizes: dict[str, tuple] | None = None) -> tuple[onnx.ModelProto, list] | None:
    """The model with six statistics per tensor x of ``names``, computed on the rows of |x| (its last axis),
    each a 1-D float tensor of one number per row: each row's max |x|; its sum of |x| - |x| (NaN exactly when
    the row has NaN or inf); its min |x| over |x| >= 2^-126 (FP32's normal range; inf if none); its count of
    2^-126 <= |x| < 2^-14 (subnormal in FP16); its count of 2^-126 <= |x| <= 2^-25 (flushed to 0 in FP16);
    and its count of |x| < 65520 (the others overflow in FP16). The counts are float32 sums of 0 and 1, exact
    for rows of up to 2^24 elements. A seventh output, int64, is the shape of the rows, [rows, row length].
    Nothing is of the tensor's size. Large tensors get their own nodes, placed right after the tensor's
    producer so that the tensor is freed early; tensors of at most ``GROUP_TENSOR`` elements (by ``sizes``, see
    ``tensor_sizes``) are measured in groups, each group by one Loop over a sequence of its members (fewer
    nodes: ONNX Runtime's session creation grows with the node count), placed after the last member's
    producer. Returns the model and its units, (tensors, output names): a unit of one tensor has one output per
    statistic, a group has its members' statistics concatenated, in the order of its tensors, and their shapes
    one after the other (see ``split_units``); None if the model's opset is below 11."""
    opsets = [o.version for o in graph.model.opset_import if o.domain in ("", "ai.onnx")]
    if not opsets or opsets[0] < 11:  # ThresholdedRelu (10), Flatten with a negative axis, Loop on sequences (11)
        return None
    model = graph.runnable_copy()
    nodes = list(model.graph.node)
    producer = {o: p for p, node in enumerate(nodes) for o in node.output}
    first, after, units = _placed(_StatisticsNodes(model, opsets[0], below(graph.precision)), graph, names,
                                  sizes or {}, producer)
    ordered = list(first)
    for p, node in enumerate(nodes):
        ordered.append(node)
        ordered.extend(after.pop(p, []))
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    model.graph.output.extend(onnx.ValueInfoProto(name=o) for _, outs in units for o in outs)  # after the model's
    return model, units


def _placed(build: "_StatisticsNodes", graph: Graph, names: list[str], sizes: dict[str, tuple],
            producer: dict[str, int]) -> tuple[list, dict[int, list], list]:
    """Where each tensor's statistics nodes go: (nodes to run first, for tensors no node produces (the model's
    inputs); producer position -> the nodes to run right after it; the units, (tensors, output names))."""
    after: dict[int, list] = {}
    first: list = []
    units: list[tuple[list[str], list[str]]] = []
    group: list[str] = []

    def close_group() -> None:
        if not group:
            return
        v = f"{PREFIX}_group{len(units)}"
        outs = [f"{v}_{s}" for s in STATISTICS]
        after.setdefault(max(producer[t] for t in group), []).extend(build.loop(list(group), v, outs))
        units.append((list(group), outs))
        group.clear()

    for t in sorted(names, key=lambda t: producer.get(t, -1)):
        size = sizes.get(t, (None, None))[0]
        if t in producer and size is not None and size <= GROUP_TENSOR:
            if sum(sizes[m][0] for m in group) + size > GROUP_TOTAL:
                close_group()
            group.append(t)
            continue
        v = f"{PREFIX}{len(units)}"
        outs = [f"{v}_{s}" for s in STATISTICS]
        made = build.rows(t, v, outs, ranked=bool(graph.ranks.get(t) or sizes.get(t, (None, None))[1]),
                          skip=(size or 0) >= SKIP_COUNTS)
        (after.setdefault(producer[t], []) if t in producer else first).extend(made)
        units.append(([t], outs))
    close_group()
    return first, after, units


class _StatisticsNodes:
    """Makes the nodes that measure a tensor (``rows``) or a group of tensors (``loop``) for ``model`` at
    ``opset``, adding the constants they read to its initializers."""

    def __init__(self, model: onnx.ModelProto, opset: int, bounds: dict[str, tuple[float, float]]):
        self.model = model
        self.opset = opset
        self.bounds = bounds  # ``below``
        self.k = {c: f"{PREFIX}_{c}" for c in ("overflow", "first", "axis", "two", "row", "flat", "no_max", "no_min",
                                                 *bounds)}
        model.graph.initializer.extend([
            helper.make_tensor(self.k["overflow"], TensorProto.FLOAT, [], [OVERFLOWS_BELOW_NORMAL]),
            helper.make_tensor(self.k["first"], TensorProto.INT64, [1], [0]),
            helper.make_tensor(self.k["axis"], TensorProto.INT64, [1], [1]),
            helper.make_tensor(self.k["two"], TensorProto.INT64, [1], [2]),
            helper.make_tensor(self.k["row"], TensorProto.INT64, [2], [1, -1]),
            helper.make_tensor(self.k["flat"], TensorProto.INT64, [1], [-1]),
            helper.make_tensor(self.k["no_max"], TensorProto.FLOAT, [1], [0.0]),  # no row: nothing reaches 65520
            helper.make_tensor(self.k["no_min"], TensorProto.FLOAT, [1], [float("inf")]),  # nor the small bounds
            *[helper.make_tensor(self.k[b], TensorProto.FLOAT, [], [t]) for b, (t, _) in bounds.items()],
        ])

    def reduce(self, op: str, x: str, out: str) -> onnx.NodeProto:
        """``op`` over axis 1 of a 2-D tensor."""
        if self.opset >= 18 or (op == "ReduceSum" and self.opset >= 13):
            return helper.make_node(op, [x, self.k["axis"]], [out], keepdims=0)
        return helper.make_node(op, [x], [out], axes=[1], keepdims=0)

    def count(self, lifted: str, v: str, below: str, out: str) -> list[onnx.NodeProto]:
        """Per row: how many of ``lifted`` are below the bound ``self.bounds[below]``."""
        bound, scale = self.bounds[below]
        return [helper.make_node("HardSigmoid", [lifted], [f"{v}_{below}"], alpha=-scale, beta=scale * bound),
                self.reduce("ReduceSum", f"{v}_{below}", out)]

    def rows(self, x: str, v: str, outs: list[str], ranked: bool, skip: bool = False) -> list[onnx.NodeProto]:
        """The nodes computing tensor ``x``'s row statistics as ``outs`` (in the order of ``STATISTICS``), their
        temporaries named after ``v``. Each elementwise node's first input is, where it can be, a temporary read
        for the last time, which ONNX Runtime may then overwrite in place. ``skip``: each count only where its
        bound can count anything (``counted``): two passes over the tensor fewer per count skipped."""
        a, lifted = f"{v}_a", f"{v}_lifted"
        rows = [helper.make_node("Flatten", [f"{v}_abs"], [a], axis=-1)]  # [rows, last axis]
        if not ranked:  # perhaps a scalar: one more axis first ([1] for a scalar, [1, ...] otherwise)
            rows = [helper.make_node("Unsqueeze", [f"{v}_abs", self.k["first"]], [f"{v}_abs1"]) if self.opset >= 13
                    else helper.make_node("Unsqueeze", [f"{v}_abs"], [f"{v}_abs1"], axes=[0]),
                    helper.make_node("Flatten", [f"{v}_abs1"], [a], axis=-1)]
        def counted(values: str, below: str, out: str, extreme: str) -> list[onnx.NodeProto]:
            if skip:
                return self.counted(values, v, below, out, extreme, outs[6])
            return self.count(values, v, below, out)

        return [
            helper.make_node("Abs", [x], [f"{v}_abs"]),
            *rows,
            helper.make_node("Shape", [a], [outs[6]]),
            self.reduce("ReduceMax", a, outs[0]),
            *counted(a, "finite16", outs[5], outs[0]),  # |x| < 65520: the others overflow in FP16
            helper.make_node("Div", [self.k["overflow"], a], [f"{v}_inv"]),  # inf exactly where |x| < 2^-126
            helper.make_node("ThresholdedRelu", [f"{v}_inv"], [f"{v}_excluded"], alpha=FLOAT32_MAX),  # 0, or inf
            helper.make_node("Max", [f"{v}_excluded", a], [lifted]),  # |x| if |x| >= 2^-126, otherwise inf
            self.reduce("ReduceMin", lifted, outs[2]),
            *counted(lifted, "subnormal", outs[3], outs[2]),  # 2^-126 <= |x| < 2^-14
            *counted(lifted, "flushed", outs[4], outs[2]),  # 2^-126 <= |x| <= 2^-25
            helper.make_node("Sub", [a, a], [f"{v}_nan"]),  # 0, NaN where |x| is NaN or inf (huge values: 0)
            self.reduce("ReduceSum", f"{v}_nan", outs[1]),
        ]

    def counted(self, values: str, v: str, below: str, out: str, extreme: str, shape: str) -> list[onnx.NodeProto]:
        """``count`` inside an If that runs it only when some row's ``extreme`` (its row max for the values below
        65520, its row min for the small ones) is on the counted side of the bound; otherwise every value of a
        row is below 65520 (the row's length, from ``shape``) or none is below the small bound (0), known from the
        few numbers per row already computed. A NaN row max counts (the NaN check then fetches the tensor
        whole)."""
        w, top = f"{v}_{below}_if", below == "finite16"
        edge = helper.make_node("Concat", [extreme, self.k["no_max" if top else "no_min"]], [f"{w}_rows"], axis=0)
        whole = helper.make_node("ReduceMax" if top else "ReduceMin", [f"{w}_rows"], [f"{w}_extreme"], keepdims=0)
        reached = helper.make_node("Less", [f"{w}_extreme", self.k[below]], [f"{w}_cond"])
        counting = helper.make_graph(self.count(values, w, below, f"{w}_count"), f"{w}_count", [],
                                     [helper.make_tensor_value_info(f"{w}_count", TensorProto.FLOAT, [None])])
        known = [helper.make_node("Shape", [extreme], [f"{w}_rows_shape"]),
                 helper.make_node("ConstantOfShape", [f"{w}_rows_shape"], [f"{w}_zeros"])]
        if top:  # every value of every row below 65520: the row's length
            known += [helper.make_node("Slice", [shape, self.k["axis"], self.k["two"]], [f"{w}_width"]),
                      helper.make_node("Cast", [f"{w}_width"], [f"{w}_width_f"], to=TensorProto.FLOAT),
                      helper.make_node("Add", [f"{w}_zeros", f"{w}_width_f"], [f"{w}_known"])]
        else:
            known.append(helper.make_node("Identity", [f"{w}_zeros"], [f"{w}_known"]))
        filled = helper.make_graph(known, f"{w}_known", [], [helper.make_tensor_value_info(f"{w}_known",
                                                                                        TensorProto.FLOAT, [None])])
        return [edge, whole, reached, helper.make_node("If", [f"{w}_cond"], [out], then_branch=filled if top else
                                                       counting, else_branch=counting if top else filled)]

    def loop(self, members: list[str], v: str, outs: list[str]) -> list[onnx.NodeProto]:
        """One Loop over the members, each measured whole as one row (a member has at most ``GROUP_TENSOR``
        elements: its float32 counts are exact): each iteration's six statistics and its shape [1, size] are the
        Loop's scan outputs, stacked along a new first axis and flattened after it. Nothing is carried from one
        iteration to the next (concatenating into carried tensors copied them again at every iteration)."""
        seq, trip, i, cond = f"{v}_seq", f"{v}_count", f"{v}_i", f"{v}_cond"
        self.model.graph.initializer.append(helper.make_tensor(trip, TensorProto.INT64, [], [len(members)]))
        stat = [f"{v}_stat{j}" for j in range(7)]
        body_nodes = [helper.make_node("SequenceAt", [seq, i], [f"{v}_x"]),
                      helper.make_node("Reshape", [f"{v}_x", self.k["row"]], [f"{v}_row"])]
        body_nodes += self.rows(f"{v}_row", f"{v}_b", stat, ranked=True)
        body_nodes.append(helper.make_node("Identity", [cond], [f"{v}_cond_out"]))
        types = [TensorProto.FLOAT] * 6 + [TensorProto.INT64]
        body = helper.make_graph(
            body_nodes, f"{v}_body",
            [helper.make_tensor_value_info(i, TensorProto.INT64, []),
             helper.make_tensor_value_info(cond, TensorProto.BOOL, [])],
            [helper.make_tensor_value_info(f"{v}_cond_out", TensorProto.BOOL, []),
             *[helper.make_tensor_value_info(stat[j], types[j], [None]) for j in range(7)]])
        stacked = [f"{v}_stacked{j}" for j in range(7)]
        return [helper.make_node("SequenceConstruct", members, [seq]),
                helper.make_node("Loop", [trip, ""], stacked, body=body),
                *[helper.make_node("Reshape", [stacked[j], self.k["flat"]], [outs[j]]) for j in range(7)]]


def split_units(row_max, row_sum, row_min, row_subnormal, row_flushed, row_finite16, shapes):
    """A unit's row statistics (see ``with_statistics``), member by member, each with its shape [rows, row
    length]: a group's outputs are its members' rows one after the other, ``shapes`` their shapes."""
    start = 0
    for shape in shapes.reshape(-1, 2):
        end = start + int(shape[0])
        yield (row_max[start:end], row_sum[start:end], row_min[start:end], row_subnormal[start:end],
               row_flushed[start:end], row_finite16[start:end], shape)
        start = end


def add_rows(stats: TensorStats, row_max, row_sum, row_min, row_subnormal, row_flushed, row_finite16,
             shape) -> bool:
    """Add one run's row statistics of a tensor (see ``with_statistics``) to ``stats``, as ``add`` would on
    the whole tensor; False (nothing added) if the tensor holds NaN/inf, or has rows too long for exact float32
    counts. Finite values past the FP16 range are counted in the run (``row_finite16``)."""
    rows, width = (int(n) for n in shape)
    if not np.isfinite(row_sum).all() or width > EXACT_COUNT:
        return False
    if not rows * width:
        stats.add_counts(0, 0.0, float("inf"), 0, 0)
        return True
    overflow = rows * width - int(row_finite16.astype(np.int64).sum())
    stats.add_counts(rows * width, float(row_max.max()), float(row_min.min()),
                     int(row_subnormal.astype(np.int64).sum()), int(row_flushed.astype(np.int64).sum()), overflow)
    return True


def tensor_sizes(graph: Graph, feed: dict) -> dict[str, tuple]:
    """(element count, rank) of the tensors as ONNX shape inference finds them with the inputs' shapes of
    ``feed``, the count guessed from the node's inputs when not inferred, the rank None when unknown. Only used to
    decide which tensors to measure in groups: a wrong count costs time or memory, never correctness."""
    sizes: dict[str, tuple[int | None, int | None]] = {
        name: (int(np.prod(a.shape, dtype=np.int64)), a.ndim) for name, a in feed.items() if hasattr(a, "shape")}
    declared = {v.name: v.shape for v in graph.inputs}
    if all(declared.get(name) == tuple(int(n) for n in a.shape) for name, a in feed.items() if hasattr(a, "shape")):
        # the inputs' shapes are the declared ones: the graph's own shape inference holds (no second one)
        for name, shape in graph.shapes.items():
            if name not in graph.initializers:
                known = all(isinstance(d, int) for d in shape)
                sizes.setdefault(name, (int(np.prod(shape, dtype=np.int64)) if known else None, len(shape)))
        return _guess_sizes(graph, sizes)
    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    for value in model.graph.input:
        shape = getattr(feed.get(value.name), "shape", None)
        dims = value.type.tensor_type.shape.dim
        if shape is not None and len(dims) == len(shape):
            for dim, n in zip(dims, shape):
                dim.Clear()
                dim.dim_value = int(n)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        return {}
    for value in inferred.graph.value_info:
        t = value.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            sizes[value.name] = (int(np.prod([d.dim_value for d in t.shape.dim], dtype=np.int64)), len(t.shape.dim))
        elif t.HasField("shape"):
            sizes[value.name] = (None, len(t.shape.dim))
    return _guess_sizes(graph, sizes)


def _guess_sizes(graph: Graph, sizes: dict[str, tuple]) -> dict[str, tuple]:
    for node in graph.nodes:  # sizes not inferred (shapes computed at run time): guess the largest input's
        known = [sizes[t][0] for t in node.inputs if sizes.get(t, (None,))[0] is not None]
        for t in node.outputs:
            if sizes.get(t, (None,))[0] is None and known:
                sizes[t] = (max(known), sizes.get(t, (None, None))[1])
    return sizes
