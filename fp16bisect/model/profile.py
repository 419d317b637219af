"""FP32 activation profile and the FP16 risk ranking built on it.

One FP32 ONNX Runtime run per sample records every float tensor (and the
initializers); each tensor gets a risk tier:

    3 overflow    |x| rounds to inf in FP16 (|x| >= 65520)
    2 near        |x| within a factor of 2 of 65504, or nonzero values that
                  flush to zero in FP16 (|x| < ~3e-8)
    1 subnormal   nonzero values below the FP16 normal range (6.1e-5)
    0 fine

A candidate's risk is the worst of the tensors it reads (in FP16 it would read
them rounded) and writes. The suspicion order sorts candidates by risk, worst
first, ties in topological order; candidates of tier 2 and 3 are the suspects
the search tries first. This one ranking is what ``scan`` prints and what the
search uses.

How the statistics are gathered (the results are those of ``TensorStats.add`` on
every whole tensor): a Constant node's tensor is measured from the model file;
the output of a Reshape, Flatten, Squeeze, Unsqueeze, Transpose or Identity holds
the values of its input, whose statistics it takes. Every other float tensor x
is measured inside one FP32 ONNX Runtime run per sample, on the rows of |x| (its
last axis), by eight elementwise passes and six row reductions, giving six
numbers per row (the run returns O(rows) numbers per tensor, never the tensor):

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
shapes) are measured in groups, one Loop per group, so the instrumented model
has a few nodes per group rather than a dozen per tensor (session creation grows
with the node count). ONNX Runtime's constant folding is skipped when nothing is
foldable. The rare tensor with NaN or inf (finite values past the FP16 range, an
overflow or a Hugging Face mask's -3.4e38, are counted in the run) is fetched
whole in a second run of the instrumented model (only those tensors; once the
first session is gone, so that the two runs' memory does not add up) and
measured by ``TensorStats.add``. A model the statistics nodes cannot be added to
(opset below 11, or ONNX Runtime refuses the instrumented model or fails to run
it) falls back to fetching every tensor, in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from fp16bisect.errors import UsageError
from fp16bisect.model import weights
from fp16bisect.model.graph import Graph
from fp16bisect.model.runtime import nothing_to_fold, run, session

FP16_MAX = 65504.0
CHUNK = 1 << 22  # elements measured at once
FP16_MIN_NORMAL = 6.103515625e-05
FP32_MIN_NORMAL = float(np.finfo(np.float32).tiny)
TIERS = {3: "overflow", 2: "near limit", 1: "subnormal", 0: "fine"}


@dataclass
class TensorStats:
    name: str
    max_abs: float = 0.0
    min_nonzero: float = float("inf")
    overflow: int = 0  # elements that become inf in FP16
    flushed: int = 0  # nonzero elements that become 0 in FP16
    subnormal: int = 0  # nonzero elements below the FP16 normal range
    size: int = 0
    initializer: bool = False

    def add(self, values: np.ndarray) -> None:
        flat = np.asarray(values).reshape(-1)
        if flat.size > CHUNK:  # a weight of 100 MB measured in pieces: a few temporaries of 16 MB, not of 100
            for start in range(0, flat.size, CHUNK):
                self.add(flat[start:start + CHUNK])
            return
        a = np.abs(flat.astype(np.float32, copy=False))
        top = float(a.max()) if a.size else 0.0
        if not np.isfinite(top):  # NaN or inf: counted in the size, measured on the finite values only
            finite = np.isfinite(a)
            self.size += int(a.size - np.count_nonzero(finite))
            a = a[finite]
            top = float(a.max()) if a.size else 0.0
        self.size += int(a.size)
        if top < FP32_MIN_NORMAL:
            return  # nothing but zeros and FP32 denormals
        self.max_abs = max(self.max_abs, top)
        if top >= FP16_OVERFLOW:
            self.overflow += int(np.count_nonzero(a >= FP16_OVERFLOW))
        small = a < FP16_MIN_NORMAL
        below = a[small]
        below = below[below >= FP32_MIN_NORMAL]  # FP32 denormals: zeros to a GPU (flush-to-zero), no FP16 risk
        a[small] = np.inf
        self.min_nonzero = min(self.min_nonzero, float(a.min()), float(below.min()) if below.size else float("inf"))
        self.subnormal += int(below.size)
        self.flushed += int(np.count_nonzero(below <= FP16_FLUSHED))  # 2^-25 ties to 0, above it to 2^-24

    def add_counts(self, size: int, max_abs: float, min_nonzero: float, subnormal: int, flushed: int,
                   overflow: int = 0) -> None:
        """What ``add`` would do on a tensor whose values are all finite, from its counts: its size, max |x|,
        min |x| over |x| >= 2^-126 (inf if none), how many of its |x| >= 2^-126 are below 2^-14 (subnormal in
        FP16) and at most 2^-25 (flushed to 0 in FP16), and how many are at least 65520 (inf in FP16)."""
        self.size += int(size)
        if max_abs < FP32_MIN_NORMAL:
            return  # nothing but zeros and FP32 denormals
        self.max_abs = max(self.max_abs, float(max_abs))
        self.min_nonzero = min(self.min_nonzero, float(min_nonzero))
        self.subnormal += int(subnormal)
        self.flushed += int(flushed)
        self.overflow += int(overflow)

    @property
    def sentinel(self) -> bool:
        """Holds float32's largest magnitude exactly (3.4028235e38): a mask value (Hugging Face exports build
        attention masks from ``torch.finfo(float32).min``), not a result that grew past FP16's range. In FP16 it
        is -inf (or, from a constant, -65504 by the writer's rule): what a mask means. Pinning such a node in FP32
        only carries the 3.4e38 on to the FP16 nodes after it, so it is not a suspect (the search still finds it
        where it matters: a fully masked row, say, by the error it causes)."""
        return self.max_abs >= FLOAT32_MAX

    @property
    def tier(self) -> int:
        if self.overflow:
            return 3
        if self.max_abs >= FP16_MAX / 2 or self.flushed:
            return 2
        if self.subnormal:
            return 1
        return 0

    @property
    def severity(self) -> float:
        """Orders tensors within a tier: how far past the limit, or how much is lost."""
        if self.tier >= 2 and self.max_abs >= FP16_MAX / 2:
            return self.max_abs / FP16_MAX
        if self.size:
            return (self.flushed or self.subnormal) / self.size
        return 0.0

    def describe(self) -> str:
        if self.sentinel:
            return (f"holds +-3.4e38 (float32's max: a mask value, -inf in FP16; {self.overflow} element(s)), "
                    "not a suspect")
        if self.overflow:
            return f"max |x| {self.max_abs:.4g} > 65504 ({self.overflow} element(s) become inf)"
        if self.max_abs >= FP16_MAX / 2:
            return f"max |x| {self.max_abs:.4g} within 2x of 65504"
        if self.flushed:
            return f"{self.flushed} nonzero element(s) flush to 0 (min |x| {self.min_nonzero:.3g})"
        if self.subnormal:
            return f"{self.subnormal} element(s) subnormal in FP16 (min |x| {self.min_nonzero:.3g})"
        return f"max |x| {self.max_abs:.4g}"


@dataclass
class NodeRisk:
    node: str
    op_type: str
    tier: int
    severity: float
    tensor: str  # the tensor that sets the risk
    reason: str


@dataclass
class Profile:
    tensors: dict[str, TensorStats]
    risks: list[NodeRisk] = field(default_factory=list)  # candidates, most suspicious first

    @property
    def order(self) -> list[str]:
        return [r.node for r in self.risks]

    @property
    def suspects(self) -> int:
        return sum(1 for r in self.risks if r.tier >= 2)


def profile(graph: Graph, samples, chunk: int = 256) -> Profile:
    """Run the model in FP32 on every sample, recording every float tensor (see the module's docstring)."""
    names = [t for n in graph.nodes for t in n.outputs if graph.is_float(t)]
    names = list(dict.fromkeys([*graph.float_output_names(), *names]))
    stats = {t: TensorStats(t) for t in names}
    for init in graph.model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            s = stats.setdefault(init.name, TensorStats(init.name, initializer=True))
            s.initializer = True
            s.add(weights.array(init))  # a view of the weight's file
    constants = _constant_values(graph, names)  # the same every run: measured here, once per sample
    for value in constants.values():
        for _ in samples:
            stats[value.name].add(value.array)
    same = _same_values(graph, [t for t in names if t not in constants and t not in graph.initializers])
    computed = [t for t in names if t not in constants and t not in same]
    built = _with_statistics(graph, computed, _sizes(graph, samples[0].inputs) if samples else {})
    fold = not nothing_to_fold(graph.model)  # the statistics nodes read activations: never foldable
    sess = None if built is None else _session(built[0], "the model with statistics nodes", fold,
                                               arena=not graph.large_activations)
    whole = None if sess is None else _in_run(sess, *built, samples, stats)
    del sess  # its memory (ONNX Runtime keeps the run's buffers until the session goes) before any other run's
    if whole is None:
        for t in computed:
            stats[t] = TensorStats(t)
        _fetch(graph.runnable_copy(), computed, samples, stats, chunk)
    for sample, tensors in whole or []:  # from the same instrumented model: the same fusions, the same values
        _fetch(built[0], tensors, [sample], stats, chunk)
    for t, source in same.items():
        stats[t] = replace(stats[source], name=t, initializer=False)
    return Profile(stats, rank(graph, stats))


def _in_run(sess, instrumented: onnx.ModelProto, units: list, samples, stats: dict[str, TensorStats]):
    """Add every sample's statistics from the instrumented model's runs, but for the tensors with NaN/inf or rows
    too long to count, to be measured whole: returns them, [(sample, tensors)], so that
    they are fetched once the session is gone. None if ONNX Runtime fails to run the model (the caller then starts
    over by fetching every tensor, which reports the model's own error if it has one)."""
    outputs = [o.name for o in instrumented.graph.output]  # the model's own, then the statistics
    statistics = {o for _, outs in units for o in outs}
    whole = []
    for sample in samples:
        try:
            values = dict(zip(outputs, run(sess, outputs, sample.inputs, "the model with statistics nodes")))
        except UsageError:
            return None
        model_outputs = {name: values.pop(name) for name in outputs if name not in statistics}
        if getattr(sample, "reference", False) is None:  # the FP32 references come with the run: no run of their own
            sample.reference = model_outputs
        tensors = []
        for members, outs in units:
            got = [values.pop(o) for o in outs]
            for t, row_stats in zip(members, _split(*got)):
                if not _add_rows(stats[t], *row_stats):
                    tensors.append(t)
        del values
        if tensors:
            whole.append((sample, tensors))
    return whole


@dataclass
class _Constant:
    name: str
    array: np.ndarray


def _constant_values(graph: Graph, names: list[str]) -> dict[str, _Constant]:
    """The float tensors of ``names`` that Constant nodes hold as a tensor (weights, in many exported models)."""
    wanted = set(names)
    found = {}
    for node in graph.model.graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or node.output[0] not in wanted:
            continue
        attr = next((a for a in node.attribute if a.name == "value"), None)
        if attr is not None and attr.t.data_type == onnx.TensorProto.FLOAT and not attr.t.data_location:
            found[node.output[0]] = _Constant(node.output[0], onnx.numpy_helper.to_array(attr.t))
    return found


FP16_OVERFLOW = 65520.0  # the smallest float32 that float16 rounds to inf
FP16_FLUSHED = 2.0**-25  # the largest float32 that float16 rounds to 0 (a tie, to even); anything above: 2^-24
ABOVE_FLUSHED = float(np.nextafter(np.float32(FP16_FLUSHED), np.float32(1)))  # |x| <= 2^-25 as |x| < this
# HardSigmoid(v) = clip(-s v + s t, 0, 1) = clip(s (t - v), 0, 1) is 1 for v < t (t - v is at least the spacing
# 1 / s of the float32 just below t, and s a power of 2: exact) and 0 for v >= t: a row sum of it counts v < t
BELOW = {"subnormal": (FP16_MIN_NORMAL, 2.0**38), "flushed": (ABOVE_FLUSHED, 2.0**48),  # bound t, scale s
         "finite16": (FP16_OVERFLOW, 2.0**8)}  # |x| < 65520: not inf in FP16 (s (t - v) is -inf for v near 3e38: 0)
FLOAT32_MAX = float(np.finfo(np.float32).max)
# c / |x| is finite (at most FLOAT32_MAX) for |x| >= 2^-126 and inf below, 0 and FP32 denormals (c = 4 - 2^-22:
# c / 2^-126 = FLOAT32_MAX exactly, c / (2^-126 - 2^-149) rounds past it)
OVERFLOWS_BELOW_NORMAL = float(np.nextafter(np.float32(4), np.float32(0)))
EXACT_COUNT = 1 << 24  # float32 sums of 0 and 1 are exact up to here: the longest row counted in the run
STATISTICS = ("row_max", "row_sum", "row_min", "row_subnormal", "row_flushed", "row_finite16", "shape")  # see _with_statistics
VALUE_PRESERVING = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"}


def _same_values(graph: Graph, names: list[str]) -> dict[str, str]:
    """The tensors of ``names`` that hold exactly the values of another recorded tensor (the output of a
    Reshape, Transpose, Identity... of it), each with the tensor it takes its values from: their statistics
    are copied, not computed again."""
    recorded = set(names)
    source: dict[str, str] = {}
    for node in graph.nodes:  # topological order: a source's own source is known first
        if node.op_type not in VALUE_PRESERVING or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        out, src = node.outputs[0], node.inputs[0] if node.inputs else ""
        if out in recorded and src in recorded:
            source[out] = source.get(src, src)
    return source


def _split(row_max, row_sum, row_min, row_subnormal, row_flushed, row_finite16, shapes):
    """A unit's row statistics (see ``_with_statistics``), member by member, each with its shape [rows, row
    length]: a group's outputs are its members' rows one after the other, ``shapes`` their shapes."""
    start = 0
    for shape in shapes.reshape(-1, 2):
        end = start + int(shape[0])
        yield (row_max[start:end], row_sum[start:end], row_min[start:end], row_subnormal[start:end],
               row_flushed[start:end], row_finite16[start:end], shape)
        start = end


def _add_rows(stats: TensorStats, row_max, row_sum, row_min, row_subnormal, row_flushed, row_finite16,
              shape) -> bool:
    """Add one run's row statistics of a tensor (see ``_with_statistics``) to ``stats``, as ``add`` would on
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


GROUP_TENSOR = 1 << 18  # elements: tensors up to this size are measured in groups (one Loop for many tensors)
GROUP_TOTAL = 1 << 22  # elements per group at most: the members stay alive until their group is measured


def _sizes(graph: Graph, feed: dict) -> dict[str, tuple]:
    """(element count, rank) of the tensors as ONNX shape inference finds them with the inputs' shapes of
    ``feed``, the count guessed from the node's inputs when not inferred, the rank None when unknown. Only used to
    decide which tensors to measure in groups: a wrong count costs time or memory, never correctness."""
    sizes = {name: (int(np.prod(a.shape, dtype=np.int64)), a.ndim) for name, a in feed.items() if hasattr(a, "shape")}
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


def _with_statistics(graph: Graph, names: list[str], sizes: dict[str, tuple] | None = None):
    """The model with six statistics per tensor x of ``names``, computed on the rows of |x| (its last axis),
    each a 1-D float tensor of one number per row: each row's max |x|; its sum of |x| - |x| (NaN exactly when
    the row has NaN or inf); its min |x| over |x| >= 2^-126 (FP32's normal range; inf if none); its count of
    2^-126 <= |x| < 2^-14 (subnormal in FP16); its count of 2^-126 <= |x| <= 2^-25 (flushed to 0 in FP16);
    and its count of |x| < 65520 (the others overflow in FP16). The counts are float32 sums of 0 and 1, exact
    for rows of up to 2^24 elements. A seventh output, int64, is the shape of the rows, [rows, row length]. Nothing is of the
    tensor's size. Large tensors get their own nodes, placed right after the tensor's producer so that the
    tensor is freed early; tensors of at most ``GROUP_TENSOR`` elements (by ``sizes``, see ``_sizes``) are
    measured in groups, each group by one Loop over a sequence of its members (fewer nodes: ONNX Runtime's
    session creation grows with the node count), placed after the last member's producer. Returns the model and
    its units, (tensors, output names): a unit of one tensor has one output per statistic, a group has its
    members' statistics concatenated, in the order of its tensors, and their shapes one after the other
    (see ``_split``); None if the model's opset is below 11."""
    opsets = [o.version for o in graph.model.opset_import if o.domain in ("", "ai.onnx")]
    if not opsets or opsets[0] < 11:  # ThresholdedRelu (10), Flatten with a negative axis, Loop on sequences (11)
        return None
    opset = opsets[0]
    sizes = sizes or {}
    from onnx import TensorProto, helper

    model = graph.runnable_copy()
    prefix = "__fp16bisect_stat"
    k = {c: f"{prefix}_{c}" for c in ("overflow", "first", "axis")}
    model.graph.initializer.extend([
        helper.make_tensor(k["overflow"], TensorProto.FLOAT, [], [OVERFLOWS_BELOW_NORMAL]),
        helper.make_tensor(k["first"], TensorProto.INT64, [1], [0]),
        helper.make_tensor(k["axis"], TensorProto.INT64, [1], [1]),
    ])

    def reduce(op: str, x: str, out: str) -> onnx.NodeProto:  # over axis 1 of a 2-D tensor
        if opset >= 18 or (op == "ReduceSum" and opset >= 13):
            return helper.make_node(op, [x, k["axis"]], [out], keepdims=0)
        return helper.make_node(op, [x], [out], axes=[1], keepdims=0)

    def count(lifted: str, v: str, below: str, out: str) -> list[onnx.NodeProto]:  # per row: lifted < below
        bound, scale = BELOW[below]
        return [helper.make_node("HardSigmoid", [lifted], [f"{v}_{below}"], alpha=-scale, beta=scale * bound),
                reduce("ReduceSum", f"{v}_{below}", out)]

    # Each elementwise node's first input is, where it can be, a temporary read for the last time, which ONNX
    # Runtime may then overwrite in place
    def row_nodes(x: str, v: str, outs: list[str], ranked: bool) -> list[onnx.NodeProto]:
        a, lifted = f"{v}_a", f"{v}_lifted"
        rows = [helper.make_node("Flatten", [f"{v}_abs"], [a], axis=-1)]  # [rows, last axis]
        if not ranked:  # perhaps a scalar: one more axis first ([1] for a scalar, [1, ...] otherwise)
            rows = [helper.make_node("Unsqueeze", [f"{v}_abs", k["first"]], [f"{v}_abs1"]) if opset >= 13 else
                    helper.make_node("Unsqueeze", [f"{v}_abs"], [f"{v}_abs1"], axes=[0]),
                    helper.make_node("Flatten", [f"{v}_abs1"], [a], axis=-1)]
        return [
            helper.make_node("Abs", [x], [f"{v}_abs"]),
            *rows,
            helper.make_node("Shape", [a], [outs[6]]),
            reduce("ReduceMax", a, outs[0]),
            *count(a, v, "finite16", outs[5]),  # |x| < 65520: the others overflow in FP16
            helper.make_node("Div", [k["overflow"], a], [f"{v}_inv"]),  # inf exactly where |x| < 2^-126
            helper.make_node("ThresholdedRelu", [f"{v}_inv"], [f"{v}_excluded"], alpha=FLOAT32_MAX),  # 0, or inf
            helper.make_node("Max", [f"{v}_excluded", a], [lifted]),  # |x| if |x| >= 2^-126, otherwise inf
            reduce("ReduceMin", lifted, outs[2]),
            *count(lifted, v, "subnormal", outs[3]),  # 2^-126 <= |x| < 2^-14
            *count(lifted, v, "flushed", outs[4]),  # 2^-126 <= |x| <= 2^-25
            helper.make_node("Sub", [a, a], [f"{v}_nan"]),  # 0, NaN where |x| is NaN or inf (huge values: 0)
            reduce("ReduceSum", f"{v}_nan", outs[1]),
        ]

    model.graph.initializer.extend([helper.make_tensor(f"{prefix}_no_float", TensorProto.FLOAT, [0], []),
                                    helper.make_tensor(f"{prefix}_no_int", TensorProto.INT64, [0], [])])

    def loop_nodes(members: list[str], v: str, outs: list[str]) -> list[onnx.NodeProto]:
        """One Loop over the members: each iteration appends a member's five row statistics and its shape
        [rows, row length] to six 1-D tensors carried through the loop."""
        seq, trip, i, cond = f"{v}_seq", f"{v}_count", f"{v}_i", f"{v}_cond"
        model.graph.initializer.append(helper.make_tensor(trip, TensorProto.INT64, [], [len(members)]))
        carried = [f"{v}_in{j}" for j in range(7)]
        stat = [f"{v}_stat{j}" for j in range(7)]
        body_nodes = [helper.make_node("SequenceAt", [seq, i], [f"{v}_x"])]
        body_nodes += row_nodes(f"{v}_x", f"{v}_b", stat, ranked=False)
        body_nodes += [helper.make_node("Concat", [carried[j], stat[j]], [f"{v}_out{j}"], axis=0) for j in range(7)]
        body_nodes.append(helper.make_node("Identity", [cond], [f"{v}_cond_out"]))
        types = [TensorProto.FLOAT] * 6 + [TensorProto.INT64]
        body = helper.make_graph(
            body_nodes, f"{v}_body",
            [helper.make_tensor_value_info(i, TensorProto.INT64, []),
             helper.make_tensor_value_info(cond, TensorProto.BOOL, []),
             *[helper.make_tensor_value_info(carried[j], types[j], [None]) for j in range(7)]],
            [helper.make_tensor_value_info(f"{v}_cond_out", TensorProto.BOOL, []),
             *[helper.make_tensor_value_info(f"{v}_out{j}", types[j], [None]) for j in range(7)]])
        start = [f"{prefix}_no_float"] * 6 + [f"{prefix}_no_int"]
        return [helper.make_node("SequenceConstruct", members, [seq]),
                helper.make_node("Loop", [trip, "", *start], outs, body=body)]

    nodes = list(model.graph.node)
    producer = {o: p for p, node in enumerate(nodes) for o in node.output}
    after: dict[int, list] = {}  # producer position -> the statistics nodes to run right after it
    first: list = []  # statistics of tensors no node produces (the model's inputs): run first
    units = []
    group: list[str] = []

    def close_group() -> None:
        if not group:
            return
        v = f"{prefix}_group{len(units)}"
        outs = [f"{v}_{s}" for s in STATISTICS]
        after.setdefault(max(producer[t] for t in group), []).extend(loop_nodes(list(group), v, outs))
        units.append((list(group), outs))
        group.clear()

    for t in sorted(names, key=lambda t: producer.get(t, -1)):
        size = sizes.get(t, (None, None))[0]
        if t in producer and size is not None and size <= GROUP_TENSOR:
            if sum(sizes[m][0] for m in group) + size > GROUP_TOTAL:
                close_group()
            group.append(t)
            continue
        v = f"{prefix}{len(units)}"
        outs = [f"{v}_{s}" for s in STATISTICS]
        made = row_nodes(t, v, outs, ranked=bool(graph.ranks.get(t) or sizes.get(t, (None, None))[1]))
        (after.setdefault(producer[t], []) if t in producer else first).extend(made)
        units.append(([t], outs))
    close_group()
    ordered = list(first)
    for p, node in enumerate(nodes):
        ordered.append(node)
        ordered.extend(after.pop(p, []))
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    model.graph.output.extend(onnx.ValueInfoProto(name=o) for _, outs in units for o in outs)  # after the model's
    return model, units


def _session(model: onnx.ModelProto, what: str, fold_constants: bool = True, arena: bool = True):
    """In producer order, so each tensor is freed once its statistics are taken (ONNX Runtime's default order
    keeps them alive to the end of the run); None if ONNX Runtime refuses the instrumented model."""
    try:
        return session(model, what, producer_order=True, fold_constants=fold_constants, arena=arena)
    except UsageError:
        return None


def _fetch(model: onnx.ModelProto, names: list[str], samples, stats: dict[str, TensorStats], chunk: int) -> None:
    """Fetch the tensors themselves, ``chunk`` per run, and measure each whole (``TensorStats.add``)."""
    model = _copy(model)
    declared = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in names if t not in declared)
    sess = session(model, "the model with every float tensor as an output", producer_order=True)
    for sample in samples:
        for start in range(0, len(names), chunk):
            part = names[start : start + chunk]
            values = run(sess, part, sample.inputs, "the model in FP32")
            for t, v in zip(part, values):
                if isinstance(v, np.ndarray) and v.dtype == np.float32:
                    stats[t].add(v)
            del values


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def rank(graph: Graph, stats: dict[str, TensorStats]) -> list[NodeRisk]:
    risks = []
    for topo, node in enumerate(graph.candidates):
        touched = [t for _, t in graph.rounded_inputs(node)] + graph.float_outputs(node)
        masks = [t for t in touched if t in stats and stats[t].sentinel]  # not a risk: see TensorStats.sentinel
        best = None
        for t in [t for t in touched if t not in masks]:
            s = stats.get(t)
            if s is not None and (best is None or (s.tier, s.severity) > (best.tier, best.severity)):
                best = s
        if best is None:
            said = f"tensor {masks[0]!r}: {stats[masks[0]].describe()}" if masks else "no float tensor recorded"
            risks.append(NodeRisk(node.id, node.op_type, 0, 0.0, masks[0] if masks else "", said))
            continue
        role = "reads" if best.name not in node.outputs else "writes"
        what = "weight" if best.initializer else "tensor"
        reason = f"{role} {what} {best.name!r}: {best.describe()}"
        if masks:
            reason += f"; {masks[0]!r} holds +-3.4e38, a mask value, not counted"
        risks.append(NodeRisk(node.id, node.op_type, best.tier, best.severity, best.name, reason))
    position = {n.id: i for i, n in enumerate(graph.candidates)}
    risks.sort(key=lambda r: (-r.tier, -r.severity if r.tier >= 2 else 0.0, position[r.node]))
    return risks


SCAN_SCHEMA = "fp16bisect.scan/1"


def tensor_rows(graph: Graph, prof: Profile, min_tier: int = 0) -> list[dict]:
    """Every recorded tensor at ``min_tier`` or above, riskiest first: what ``scan`` and the report show."""
    readers: dict[str, list[str]] = {}
    writer: dict[str, str] = {}
    for node in graph.nodes:
        for t in node.inputs:
            readers.setdefault(t, []).append(node.id)
        for t in node.outputs:
            writer[t] = node.id
    rows = []
    for s in prof.tensors.values():
        if s.tier < min_tier:
            continue
        rows.append({
            "name": s.name,
            "kind": "weight" if s.initializer else "activation",
            "tier": s.tier,
            "risk": TIERS[s.tier],
            "max_abs": s.max_abs,
            "min_nonzero_abs": s.min_nonzero if s.min_nonzero != float("inf") else 0.0,
            "overflow": s.overflow,
            "flushed": s.flushed,
            "subnormal": s.subnormal,
            "reason": s.describe(),
            "written_by": writer.get(s.name, ""),
            "read_by": readers.get(s.name, []),
            "_severity": s.severity,
        })
    rows.sort(key=lambda r: (-r["tier"], -r["_severity"], r["name"]))
    for r in rows:
        del r["_severity"]
    return rows


def scan_json(graph: Graph, prof: Profile) -> dict:
    """``scan``'s JSON: risky tensors (weights and activations) and the suspicion order of candidates."""
    return {
        "schema": SCAN_SCHEMA,
        "model": {"path": str(graph.path), "sha256": graph.sha256},
        "limits": {"fp16_max": FP16_MAX, "fp16_min_normal": FP16_MIN_NORMAL, "fp16_min_subnormal": 2.0**-24},
        "tensors": tensor_rows(graph, prof, min_tier=1),
        "nodes": [{"name": r.node, "op_type": r.op_type, "tier": r.tier, "risk": TIERS[r.tier], "reason": r.reason}
                  for r in prof.risks],
        "suspects": prof.suspects,
    }
