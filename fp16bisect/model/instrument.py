"""The FP32 model instrumented to measure its own tensors: row statistics computed in the run.

Every float tensor x the profile computes is measured inside one FP32 ONNX Runtime run per sample, on the rows
of |x| (its last axis; x itself for a tensor no run can make negative, ``signs.py``), and the run returns
O(rows) numbers per tensor, never the tensor (see ``with_statistics``):

    row max |x|, row min |x|
    sum of |x| over the whole tensor        NaN exactly when it holds NaN (or it sums past float32's range)
    row count of |x| < 65520                the others become inf in FP16 (rows whose max reaches it only)
    row min |x| over |x| >= 2^-126          float32 denormals count as zeros (inf if the row has no such
                                            value; rows whose min is below 2^-14 only)
    row count of 2^-126 <= |x| < 2^-14      subnormal in FP16 (rows that hold such values only)
    row count of 2^-126 <= |x| <= 2^-25     flushed to 0 in FP16 (round to nearest even sends 2^-25 to 0,
                                            above it to 2^-24)

One pass makes |x| and three reductions read it; the rest runs on the few rows that can hold what it counts
(``Compress``). The minimum and the counts are taken on |x| with the values below 2^-126 lifted to inf, as
max(ThresholdedRelu(c / |x|, FLOAT32_MAX), |x|): c / |x| (c = 4 - 2^-22) is finite exactly when |x| >= 2^-126.
A count of the values below t is a row sum of HardSigmoid(v) = clip(s (t - v), 0, 1), 1 / s the spacing of
the float32 just below t: 1 for v < t, 0 otherwise; float32 sums of 0 and 1 are exact for rows of up to 2^24
elements (a tensor with longer rows is fetched whole). Arithmetic rather than comparisons: ONNX Runtime's
Where is slow, and its Cast slower than arithmetic. Large tensors get these nodes right after their producer,
and the model runs in producer order, so ONNX Runtime frees each activation soon after it is measured (the
measuring takes a few temporaries of its size at a time), and no tensor is copied out or widened to float64.
Tensors of at most 2^18 elements (by ONNX shape inference with the first sample's shapes, ``tensor_sizes``)
are measured in groups, one Loop per group, so the instrumented model has a few nodes per group rather than a
dozen per tensor (session creation grows with the node count); each member is one row (its counts are exact),
its statistics a scan output of the Loop. The constants the statistics read are the model's own where it has
one of that value (``SmallConstants``; never an initializer a run can feed). ``add_rows`` turns one run's
statistics of a tensor into what ``TensorStats.add`` gives on the whole tensor.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fp16bisect.model.graph import Graph
from fp16bisect.model.precision import Precision
from fp16bisect.model.signs import non_negative
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
STATISTICS = ("row_max", "row_sum", "row_min", "low_min", "low_subnormal", "low_flushed", "high_finite",
              "shape")  # see with_statistics
GROUP_TENSOR = 1 << 18  # elements: tensors up to this size are measured in groups (one Loop for many tensors)
GROUP_TOTAL = 1 << 22  # elements per group at most: the members stay alive until their group is measured
PREFIX = "__fp16bisect_stat"


def with_statistics(graph: Graph, names: list[str], sizes: dict[str, tuple] | None = None,
                    signs: set[str] | None = None) -> tuple[onnx.ModelProto, list] | None:
    """The model with the statistics of every tensor x of ``names``, computed on the rows of |x| (its last axis),
    each a 1-D float tensor: of one number per row, each row's max |x|, its sum of |x| (NaN or inf exactly when
    the row has NaN or inf, or when its sum passes float32's range) and its min |x|; for the rows whose min is
    below the low precision's normal range (2^-14 for FP16), each one's min |x| over |x| >= 2^-126 (FP32's normal
    range; inf if none); for those of them with values in 2^-126 <= |x| < 2^-14, each one's count of them
    (subnormal in FP16) and of 2^-126 <= |x| <= 2^-25 (flushed to 0 in FP16); for the rows whose max reaches
    65520, each one's count of |x| < 65520 (the others overflow in FP16). The counts are float32 sums of 0 and
    1, exact for rows of up to 2^24 elements. The last output, int64, is the shape of the rows, [rows, row
    length]. Nothing is of the tensor's size. Large tensors get their own nodes, placed right after the
    tensor's producer so that the tensor is freed early; tensors of at most ``GROUP_TENSOR`` elements (by
    ``sizes``, see ``tensor_sizes``) are measured in groups, each group by one Loop over a sequence of its
    members (fewer nodes: ONNX Runtime's session creation grows with the node count), placed after the last
    member's producer, every statistic of every member then taken on its one row. Returns the model and its
    units, (tensors, output names): a unit of one tensor has one output per statistic, a group has its members'
    statistics concatenated, in the order of its tensors, and their shapes one after the other (see
    ``split_units``); None if the model's opset is below 11. ``signs``: ``signs.non_negative(graph)`` when the
    caller has it already (those tensors are measured on x, with no Abs)."""
    opsets = [o.version for o in graph.model.opset_import if o.domain in ("", "ai.onnx")]
    if not opsets or opsets[0] < 11:  # ThresholdedRelu (10), Flatten with a negative axis, Loop on sequences (11)
        return None
    model = graph.runnable_copy()
    share_constants(model)  # here, on the model's own nodes: the constants added below are made not to repeat them
    nodes = list(model.graph.node)
    producer = {o: p for p, node in enumerate(nodes) for o in node.output}
    build = _StatisticsNodes(model, opsets[0], below(graph.precision),
                             non_negative(graph) if signs is None else signs, SmallConstants(model))
    first, after, units = _placed(build, graph, names, sizes or {}, producer)
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
        made = build.rows(t, v, outs, ranked=bool(graph.ranks.get(t) or sizes.get(t, (None, None))[1]))
        (after.setdefault(producer[t], []) if t in producer else first).extend(made)
        units.append(([t], outs))
    close_group()
    return first, after, units


class _StatisticsNodes:
    """Makes the nodes that measure a tensor (``rows``) or a group of tensors (``loop``) for ``model`` at
    ``opset``, adding the constants they read to its initializers (each once, when first read)."""

    def __init__(self, model: onnx.ModelProto, opset: int, bounds: dict[str, tuple[float, float]],
                 non_negative: set[str] | frozenset[str] = frozenset(), constants: "SmallConstants | None" = None):
        self.model = model
        self.constants = constants or SmallConstants(model)
        self.non_negative = non_negative  # tensors whose |x| is x (``signs.non_negative``): no Abs
        self.opset = opset
        self.bounds = bounds  # ``below``
        top = bounds["finite16"][0]
        self.values: dict[str, tuple[int, list[int], list[float] | list[int]]] = {  # name -> (type, dims, values)
            "overflow": (TensorProto.FLOAT, [], [OVERFLOWS_BELOW_NORMAL]),
            "first": (TensorProto.INT64, [1], [0]),
            "axis": (TensorProto.INT64, [1], [1]),
            "row": (TensorProto.INT64, [2], [1, -1]),
            "flat": (TensorProto.INT64, [1], [-1]),
            "subnormal": (TensorProto.FLOAT, [], [bounds["subnormal"][0]]),
            "below_top": (TensorProto.FLOAT, [], [float(np.nextafter(np.float32(top), np.float32(0)))]),
        }
        self.made: dict[str, str] = {}  # name -> the constant holding it

    def k(self, name: str) -> str:
        """The name of the constant ``name`` of ``self.values``: one of the model's of that value, or one added
        to its initializers when first read."""
        if name not in self.made:
            kind, dims, values = self.values[name]
            self.made[name] = self.constants.named(helper.make_tensor(f"{PREFIX}_{name}", kind, dims, values))
        return self.made[name]

    def reduce(self, op: str, x: str, out: str) -> onnx.NodeProto:
        """``op`` over axis 1 of a 2-D tensor."""
        if self.opset >= 18 or (op == "ReduceSum" and self.opset >= 13):
            return helper.make_node(op, [x, self.k("axis")], [out], keepdims=0)
        return helper.make_node(op, [x], [out], axes=[1], keepdims=0)

    def count(self, values: str, v: str, below: str, out: str) -> list[onnx.NodeProto]:
        """Per row of ``values``: how many are below the bound ``self.bounds[below]``."""
        bound, scale = self.bounds[below]
        return [helper.make_node("HardSigmoid", [values], [f"{v}_{below}"], alpha=-scale, beta=scale * bound),
                self.reduce("ReduceSum", f"{v}_{below}", out)]

    def rows(self, x: str, v: str, outs: list[str], ranked: bool, select: bool = True) -> list[onnx.NodeProto]:
        """The nodes computing tensor ``x``'s statistics as ``outs`` (in the order of ``STATISTICS``), their
        temporaries named after ``v``: one pass makes |x|, three reductions read it (each row's max and min, the
        sum of all), and the rest runs on the few rows that need it (``select``; without it, on every row): the
        rows whose min is below the low precision's normal range (zeros, FP32 denormals, subnormal or flushed
        values) for their minimum over |x| >= 2^-126, and of those the rows with values that are subnormal in the
        low precision for the two counts; the rows whose max reaches the overflow bound for the count below it."""
        a, lifted = f"{v}_a", f"{v}_lifted"
        absolute = x if x in self.non_negative else f"{v}_abs"
        rows = [helper.make_node("Flatten", [absolute], [a], axis=-1)]  # [rows, last axis]
        if not ranked:  # perhaps a scalar: one more axis first ([1] for a scalar, [1, ...] otherwise)
            rows = [helper.make_node("Unsqueeze", [absolute, self.k("first")], [f"{v}_abs1"]) if self.opset >= 13
                    else helper.make_node("Unsqueeze", [absolute], [f"{v}_abs1"], axes=[0]),
                    helper.make_node("Flatten", [f"{v}_abs1"], [a], axis=-1)]
        nodes = [
            *([] if absolute == x else [helper.make_node("Abs", [x], [absolute])]),
            *rows,
            helper.make_node("Shape", [a], [outs[7]]),
            self.reduce("ReduceMax", a, outs[0]),
            helper.make_node("ReduceSum", [a], [outs[1]], keepdims=0),  # NaN exactly when |x| holds a NaN
            self.reduce("ReduceMin", a, outs[2]),
        ]

        def picked(values: str, cond: list[str], what: str) -> str:
            """The rows of ``values`` where Less(*cond) holds (all of them without ``select``)."""
            if not select:
                return values
            nodes.extend([helper.make_node("Less", cond, [f"{v}_{what}_rows"]),
                          helper.make_node("Compress", [values, f"{v}_{what}_rows"], [f"{v}_{what}"], axis=0)])
            return f"{v}_{what}"

        small = picked(a, [outs[2], self.k("subnormal")], "small")  # zeros, FP32 denormals, values below 2^-14
        if absolute == x:  # x >= 0 but for the sign of a zero: -0 would make c / x -inf (and is counted as -0 < t)
            nodes.append(helper.make_node("Abs", [small], [f"{v}_small_abs"]))
            small = f"{v}_small_abs"
        nodes += [
            helper.make_node("Div", [self.k("overflow"), small], [f"{v}_inv"]),  # inf exactly where |x| < 2^-126
            helper.make_node("ThresholdedRelu", [f"{v}_inv"], [f"{v}_excluded"], alpha=FLOAT32_MAX),  # 0, or inf
            helper.make_node("Max", [f"{v}_excluded", small], [lifted]),  # |x| if |x| >= 2^-126, otherwise inf
            self.reduce("ReduceMin", lifted, outs[3]),
        ]
        counted = picked(lifted, [outs[3], self.k("subnormal")], "counted")  # 2^-126 <= |x| < 2^-14 in each row
        nodes += self.count(counted, v, "subnormal", outs[4])  # 2^-126 <= |x| < 2^-14
        nodes += self.count(counted, v, "flushed", outs[5])  # 2^-126 <= |x| <= 2^-25
        high = picked(a, [self.k("below_top"), outs[0]], "high")  # a row max of at least 65520
        return nodes + self.count(high, v, "finite16", outs[6])  # |x| < 65520

    def loop(self, members: list[str], v: str, outs: list[str]) -> list[onnx.NodeProto]:
        """One Loop over the members, each measured whole as one row (a member has at most ``GROUP_TENSOR``
        elements: its float32 counts are exact; no rows selected, so that every statistic has one number per
        member): each iteration's statistics and its shape [1, size] are the Loop's scan outputs, stacked along a
        new first axis and flattened after it. Nothing is carried from one iteration to the next (concatenating
        into carried tensors copied them again at every iteration)."""
        seq, i, cond = f"{v}_seq", f"{v}_i", f"{v}_cond"
        trip = self.constants.named(helper.make_tensor(f"{v}_count", TensorProto.INT64, [], [len(members)]))
        count = len(STATISTICS)
        stat = [f"{v}_stat{j}" for j in range(count)]
        body_nodes = [helper.make_node("SequenceAt", [seq, i], [f"{v}_x"]),
                      helper.make_node("Reshape", [f"{v}_x", self.k("row")], [f"{v}_row"])]
        body_nodes += self.rows(f"{v}_row", f"{v}_b", stat, ranked=True, select=False)
        body_nodes.append(helper.make_node("Identity", [cond], [f"{v}_cond_out"]))
        types = [TensorProto.FLOAT] * (count - 1) + [TensorProto.INT64]
        body = helper.make_graph(
            body_nodes, f"{v}_body",
            [helper.make_tensor_value_info(i, TensorProto.INT64, []),
             helper.make_tensor_value_info(cond, TensorProto.BOOL, [])],
            [helper.make_tensor_value_info(f"{v}_cond_out", TensorProto.BOOL, []),
             *[helper.make_tensor_value_info(stat[j], types[j], None) for j in range(count)]])
        stacked = [f"{v}_stacked{j}" for j in range(count)]
        return [helper.make_node("SequenceConstruct", members, [seq]),
                helper.make_node("Loop", [trip, ""], stacked, body=body),
                *[helper.make_node("Reshape", [stacked[j], self.k("flat")], [outs[j]]) for j in range(count)]]


class Measured(NamedTuple):
    """One tensor's statistics from one run (see ``with_statistics``), in the order of ``STATISTICS``."""

    row_max: np.ndarray
    row_sum: np.ndarray
    row_min: np.ndarray
    low_min: np.ndarray
    low_subnormal: np.ndarray
    low_flushed: np.ndarray
    high_finite: np.ndarray
    shape: np.ndarray


def split_units(members: list[str], got: list[np.ndarray]) -> Iterator[tuple[str, Measured]]:
    """A unit's statistics (``got``, in the order of ``STATISTICS``; see ``with_statistics``), member by member:
    a tensor of its own has them all; a group's members are one row each, every statistic one number per member
    and the shapes [1, size] one after the other."""
    if len(members) == 1:
        yield members[0], Measured._make(got)
        return
    for j, member in enumerate(members):
        yield member, Measured._make([*(v[j:j + 1] for v in got[:-1]), got[-1][2 * j:2 * j + 2]])


def add_rows(stats: TensorStats, got: Measured) -> bool:
    """Add one run's statistics of a tensor to ``stats``, as ``add`` would on the whole tensor; False (nothing
    added) if the tensor holds NaN/inf, or has rows too long for exact float32 counts. Finite values past the FP16
    range are counted in the run (``high_finite``: the rows that reach the bound)."""
    rows, width = (int(n) for n in got.shape)
    if np.isnan(got.row_sum).any() or np.isinf(got.row_max).any() or width > EXACT_COUNT:
        return False  # NaN (the sum of |x| holds it) or inf (a max): measured whole
    if not rows * width:
        stats.add_counts(0, 0.0, float("inf"), 0, 0)
        return True
    # a row left out of low_min has no |x| below the normal range: its min is its min over |x| >= 2^-126
    normal = got.row_min[got.row_min >= np.float32(stats.low.smallest_normal)]
    smallest = min(float(normal.min(initial=np.inf)), float(got.low_min.min(initial=np.inf)))
    overflow = len(got.high_finite) * width - int(got.high_finite.astype(np.int64).sum())
    stats.add_counts(rows * width, float(got.row_max.max()), smallest, int(got.low_subnormal.astype(np.int64).sum()),
                     int(got.low_flushed.astype(np.int64).sum()), overflow)
    return True


SMALL = 8  # elements: the constants ``share_constants`` makes one


def _value_key(tensor: onnx.TensorProto) -> tuple | None:
    """A small constant's value (type, shape, bytes), None for a larger or external one."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or np.prod(tensor.dims) > SMALL:
        return None
    value = numpy_helper.to_array(tensor)
    return value.dtype.str, value.shape, value.tobytes()


def _holds_value(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is a Constant holding a tensor (its one attribute ``value``)."""
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1 and (
        node.attribute[0].name == "value")


class SmallConstants:
    """A model's small constants by value: a constant added through ``named`` is one the model already holds
    when it has its value, so that nothing added repeats a constant and ONNX Runtime's ConstantSharing, which
    would otherwise go over the whole instrumented graph a second time, finds nothing to share (see
    ``share_constants``, run on the model's own nodes first)."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.names: dict[tuple, str] = {}
        fed = {i.name for i in model.graph.input}  # an initializer that is also an input can be fed another value
        for t in model.graph.initializer:
            if t.name not in fed:
                self._note(t.name, t)
        for n in model.graph.node:
            if _holds_value(n):
                self._note(n.output[0], n.attribute[0].t)

    def _note(self, name: str, tensor: onnx.TensorProto) -> None:
        key = _value_key(tensor)
        if key is not None:
            self.names.setdefault(key, name)

    def named(self, tensor: onnx.TensorProto) -> str:
        """The name of a constant holding ``tensor``'s value: the model's, or ``tensor`` added as an initializer."""
        key = _value_key(tensor)
        if key is not None and key in self.names:
            return self.names[key]
        self.model.graph.initializer.append(tensor)
        if key is not None:
            self.names[key] = tensor.name
        return tensor.name


def share_constants(model: onnx.ModelProto) -> None:
    """Make the small constants of equal value one (Constant nodes and initializers of at most 8 elements, the
    first of each value kept, its duplicates' readers pointed at it), as ONNX Runtime's ConstantSharing would:
    then the first pass of its graph optimisations changes nothing, and it does not go over the whole graph,
    thousands of statistics nodes, a second time. The values read are the same. Constants read by name in a
    subgraph, the graph's outputs and an initializer that is also an input (a run may feed it) are left alone."""
    keep = {o.name for o in [*model.graph.output, *model.graph.input]} | _read_in_subgraphs(model.graph)
    first: dict[tuple, str] = {}
    same: dict[str, str] = {}  # duplicate -> the constant kept

    def note(name: str, tensor: onnx.TensorProto) -> bool:
        """Whether ``name`` duplicates a constant kept (then noted in ``same``)."""
        key = None if name in keep else _value_key(tensor)
        if key is None:
            return False
        if key in first:
            same[name] = first[key]
            return True
        first[key] = name
        return False

    initializers = [t for t in model.graph.initializer if not note(t.name, t)]
    nodes = [n for n in model.graph.node if not (_holds_value(n) and note(n.output[0], n.attribute[0].t))]
    if not same:
        return
    for node in nodes:
        for j, t in enumerate(node.input):
            if t in same:
                node.input[j] = same[t]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _read_in_subgraphs(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name a node of a subgraph of ``graph`` reads (at any depth)."""
    read: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            for body in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                read.update(t for n in body.node for t in n.input)
                read |= _read_in_subgraphs(body)
    return read


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
