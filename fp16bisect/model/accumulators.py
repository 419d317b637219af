"""Accumulator headroom: the largest partial sum each summing candidate can reach, measured in the FP32 profile's run.

A candidate that sums many terms (``plan_states.accumulates``) can overflow FP16 inside its kernel when the
engine adds in FP16, while every value it reads and writes fits. Its *peak* is a bound on the magnitude of any
partial sum, whatever the order of the additions, taken over every output element and every sample; *terms* is
the number of terms summed per output element:

    MatMul, Gemm, Einsum   max of |A| @ |B| (the same op on the absolute values: one more product per node);
                           Gemm with |alpha| and |beta * C| added (C is the accumulator's initial value in
                           GEMM kernels). terms: K, the summed dimension (Einsum: the product of the summed ones)
    Conv, ConvTranspose    the same op on |x| and |W| with the node's attributes, bias excluded (added after the
                           sum). terms: Cin/group x kernel volume (ConvTranspose: an upper bound)
    ReduceSum, ReduceMean, ReduceL1, ReduceLogSum   sum of |x| over the reduced elements (the mean's sum, before
                           the division). ReduceSumSquare, ReduceL2: sum of x^2. ReduceLogSumExp: sum exp(x - max)
    GlobalAveragePool, AveragePool   sum of |x| over the window (Abs, Flatten and ReduceSum; LpPool with p = 1)
    Softmax, LogSoftmax    the normaliser sum exp(x - max) along the axis (before opset 13: over the input
                           coerced to 2-D at the axis). terms: the axis length (the coerced row's)
    LayerNormalization     sum (x - mean)^2 over the normalised axes; GroupNormalization, InstanceNormalization
                           over each group's / instance's elements. terms: that count
    Attention (ONNX, 23)   sum |q k| of Q K^T, unscaled, when Q and K are 4-D with as many heads (known shapes);
                           terms: the head size. Its softmax normaliser (at most the number of keys) and its
                           P V sum are not measured

The bounds are computed in FP32 by extra nodes placed right after the node in the profile's instrumented model,
each ending in a ReduceMax to one number per sample (nothing of a tensor's size is fetched); the terms come from
the shapes of the node's tensors (a few integers per sample). A weight is read inside a Loop (``_Nodes.looped``:
|W| exists only while its node is measured), but for a Conv with one group and a kernel larger than 1x1, whose
|W| is a constant made here: ONNX Runtime then runs that bound in the NCHWc kernels it picks for the model's own
convolutions (about twice as fast on PP-OCRv4's detector as its plain kernel, an im2col and a GEMM), at the cost
of a copy of those weights for the session's life and of a bound that may differ in its last bit from the plain
kernel's (another order of the same FP32 sum). Not measured (listed with ``peak`` None): ONNX's
``Attention`` on 3-D inputs or with fewer key heads (grouped-query). The com.microsoft fused ops (attention,
skip/simplified LayerNorm, FusedMatMul) are not candidates at all (custom domain: the search skips them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fp16bisect.model import weights as weight_files
from fp16bisect.model.graph import Graph
from fp16bisect.model.instrument import SmallConstants
from fp16bisect.model.plan_states import accumulates
from fp16bisect.model.precision import Precision
from fp16bisect.model.signs import non_negative

PREFIX = "__fp16bisect_acc"


@dataclass(frozen=True)
class Accumulator:
    """One summing candidate's largest partial-sum bound over the samples (``peak``, None when not measured), the
    terms it sums per output element (None when unknown) and the sample that reached the peak (-1: none)."""

    node: str
    op_type: str
    peak: float | None
    terms: int | None
    sample: int = -1

    def headroom(self, precision: Precision) -> float | None:
        """The precision's largest finite value over the peak (inf for a sum of zeros; None: not measured)."""
        if self.peak is None:
            return None
        return precision.max / self.peak if self.peak > 0 else math.inf

    def over(self, precision: Precision, factor: float | None = None) -> bool:
        """Whether the peak passes the precision's max (or max / ``factor``, ``--headroom``)."""
        return self.peak is not None and self.peak > precision.max / (factor or 1.0)


@dataclass
class Probe:
    """The nodes measuring one candidate's accumulator: its peak output (one number per sample) and the shapes its
    terms are counted from (the outputs holding them; a weight's, known)."""

    node: str
    op_type: str
    proto: onnx.NodeProto
    opset: int
    peak: str | None  # None: not measured
    shapes: list[str | tuple[int, ...]] = field(default_factory=list)  # an output, or a weight's shape

    def terms(self, shapes: list[tuple[int, ...]]) -> int | None:
        try:
            return _terms(self.proto, self.opset, shapes)
        except (IndexError, ValueError, ZeroDivisionError):
            return None


class Probes:
    """The probes of an instrumented model and what the runs measured: each sample's outputs go through ``take``."""

    def __init__(self, probes: list[Probe]):
        self.probes = probes
        self.best: dict[str, tuple[float, int]] = {}  # node -> (peak, sample)
        self.counted: dict[str, int] = {}  # node -> terms (the largest over the samples)

    @property
    def outputs(self) -> set[str]:
        return {o for p in self.probes for o in [p.peak, *p.shapes] if isinstance(o, str)}

    def take(self, values: dict, sample: int) -> None:
        """Note one sample's measures, removing the probes' outputs from ``values`` (the run's, by name)."""
        for p in self.probes:
            shapes = [s if isinstance(s, tuple) else tuple(int(d) for d in values.pop(s)) for s in p.shapes]
            terms = p.terms(shapes)
            if terms is not None:
                self.counted[p.node] = max(terms, self.counted.get(p.node, 0))
            if p.peak is None:
                continue
            peak = float(np.nanmax(np.asarray(values.pop(p.peak), dtype=np.float64), initial=0.0))
            if p.node not in self.best or peak > self.best[p.node][0]:
                self.best[p.node] = (peak, sample)

    def results(self) -> list[Accumulator]:
        """Every probed candidate, the highest peak first (not measured last), ties in topological order."""
        found = [Accumulator(p.node, p.op_type, self.best[p.node][0] if p.node in self.best else None,
                             self.counted.get(p.node), self.best[p.node][1] if p.node in self.best else -1)
                 for p in self.probes]
        return sorted(found, key=lambda a: (a.peak is None, -(a.peak or 0.0)))


def add_probes(model: onnx.ModelProto, graph: Graph, opset: int, signs: set[str] | None = None) -> Probes:
    """Add to ``model`` (the instrumented copy of ``graph``'s model) the nodes measuring the accumulator of every
    summing candidate, each placed right after its node, and their outputs; the probes that read them back.
    ``signs``: ``signs.non_negative(graph)`` when the caller has it already."""
    build = _Nodes(model, opset, graph.shapes, non_negative(graph) if signs is None else signs)
    at = {o: i for i, n in enumerate(model.graph.node) for o in n.output if o}
    after: dict[int, list] = {}
    probes: list[Probe] = []
    for node in graph.candidates:
        if not accumulates(node.op_type, node.domain) or not node.outputs or node.outputs[0] not in at:
            continue
        position = at[node.outputs[0]]
        proto = model.graph.node[position]
        v = f"{PREFIX}{len(probes)}"
        build.position = position
        made, peak, shaped = build.measure(proto, v)
        for j, made_node in enumerate(made):  # named after what they measure: an error of ONNX Runtime names it
            made_node.name = f"{v}_{j} (measuring {node.id})"
        made, peak = build.looped(made, peak, v)
        shapes: list[str | tuple[int, ...]] = [build.dims.get(t) or f"{v}_shape{j}" for j, t in enumerate(shaped)]
        # a weight's shape is known: no Shape node (ONNX Runtime would fold it, and go over the graph once more)
        made += [helper.make_node("Shape", [t], [s]) for t, s in zip(shaped, shapes) if isinstance(s, str)]
        after.setdefault(position, []).extend(made)
        probes.append(Probe(node.id, node.op_type, proto, opset, peak, shapes))
        if peak:
            model.graph.output.append(onnx.ValueInfoProto(name=peak))
        model.graph.output.extend(onnx.ValueInfoProto(name=s) for s in shapes if isinstance(s, str))
    ordered = []
    for i, n in enumerate(model.graph.node):
        ordered.append(n)
        ordered.extend(after.pop(i, []))
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    return Probes(probes)


def _im2col(proto: onnx.NodeProto, weight: tuple[int, ...]) -> bool:
    """Whether a Conv with weights of shape ``weight`` is one that ONNX Runtime's plain (NCHW) kernel runs as an
    im2col and a GEMM (one group, a kernel larger than 1x1)"""
    return _attr(proto, "group", 1) == 1 and _size(weight[2:]) > 1


def _attr(proto: onnx.NodeProto, name: str, default=None):
    found = next((a for a in proto.attribute if a.name == name), None)
    return default if found is None else helper.get_attribute_value(found)


def _copied(proto: onnx.NodeProto, names: tuple[str, ...]) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in proto.attribute if a.name in names}


class _Nodes:
    """Makes the measuring nodes of one candidate (``measure``), adding the constants they read to the model."""

    def __init__(self, model: onnx.ModelProto, opset: int, shapes: dict[str, tuple], non_negative: set[str]):
        self.model = model
        constants = {n.output[0]: n.attribute[0].t for n in model.graph.node
                     if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
        self.dims = {name: tuple(int(d) for d in t.dims)  # each weight's shape
                     for name, t in [*((t.name, t) for t in model.graph.initializer), *constants.items()]}
        fed = {i.name for i in model.graph.input}  # an initializer that is also an input: a run may feed it
        self.floats = {name: t for name, t in [*((t.name, t) for t in model.graph.initializer if t.name not in fed),
                                               *constants.items()] if t.data_type == TensorProto.FLOAT}
        self.weights = {t.name for t in model.graph.initializer} | {
            o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
        self.absolute: dict[str, tuple[int, str]] = {}  # tensor -> the first Abs of it in the model: (position, output)
        for i, n in enumerate(model.graph.node):
            if n.op_type == "Abs" and n.domain in ("", "ai.onnx"):
                self.absolute.setdefault(n.input[0], (i, n.output[0]))
        self.absolute.update((t, (-1, t)) for t in non_negative)  # |t| is t (``signs.non_negative``)
        self.position = 0  # the measured node's
        self.opset = opset
        self.shapes = shapes  # the graph's inferred shapes (Attention's heads)
        self.constants: dict[tuple, str] = {}
        self.looping: tuple[str, str] | None = None  # the Loops' trip count and start value, once in the model
        self.small = SmallConstants(model)
        self.zeroed: set[str] = set()  # the probes whose Loop body has its 0 (``live``)

    def looped(self, nodes: list, peak: str | None, v: str) -> tuple[list, str | None]:
        """The nodes inside a Loop run once, its one output the peak: a node reading only weights (|W|) then runs
        when the Loop does, after the measured node, and its result is freed at once (ONNX Runtime otherwise runs
        it as soon as its inputs exist, holding a second copy of the weights until the measured node runs). A
        weight is read as W + 0, the 0 from the Loop's iteration number (``live``), so that constant folding (kept
        on: it decides kernels, and so FP32 values) cannot turn |W| into that second copy either."""
        if peak is None or v not in self.zeroed:
            return nodes, peak  # no weight read: the nodes wait for the measured node's inputs anyway
        if not self.looping:
            self.looping = (self.small.named(helper.make_tensor(f"{PREFIX}_once", TensorProto.INT64, [], [1])),
                            self.small.named(helper.make_tensor(f"{PREFIX}_zero", TensorProto.FLOAT, [], [0.0])))
        body = helper.make_graph(
            [*nodes, helper.make_node("Identity", [f"{v}_cond"], [f"{v}_cond_out"])], f"{v}_body",
            [helper.make_tensor_value_info(f"{v}_i", TensorProto.INT64, []),
             helper.make_tensor_value_info(f"{v}_cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info(f"{v}_start", TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info(f"{v}_cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info(peak, TensorProto.FLOAT, None)])
        out = f"{v}_measured"
        once, zero = self.looping
        return [helper.make_node("Loop", [once, "", zero], [out], body=body)], out

    def absolute_weight(self, t: str, out: str) -> str:
        """|W| of a convolution's weight ``t`` as an initializer ``out``, computed here once: ONNX Runtime then
        runs the bound convolution in the kernels it picks for the model's own (NCHWc, weights reordered when the
        session is made), not in a Loop."""
        self.model.graph.initializer.append(numpy_helper.from_array(np.abs(weight_files.array(self.floats[t])), out))
        return out

    def absolute_of(self, t: str, out: str) -> tuple[list, str]:
        """|t|: an Abs node making ``out``, or the output of an Abs of ``t`` the model already computes before the
        measured node (the statistics' own: the same values, one pass fewer, and nothing for ONNX Runtime's
        common-subexpression elimination to merge), or ``t`` itself when it cannot be negative."""
        at, made = self.absolute.get(t, (self.position, ""))
        if at < self.position:
            return [], made
        return [helper.make_node("Abs", [t], [out])], out

    def live(self, t: str, v: str) -> tuple[list, str]:
        """``t``, or for a weight (an initializer or a Constant's output) ``t`` + 0 with the 0 from the Loop's
        iteration number ``{v}_i``: exactly ``t``'s values, not a constant (see ``looped``)."""
        if t not in self.weights:
            return [], t
        zero = [] if v in self.zeroed else [helper.make_node("Cast", [f"{v}_i"], [f"{v}_zero"], to=TensorProto.FLOAT)]
        self.zeroed.add(v)
        return [*zero, helper.make_node("Add", [t, f"{v}_zero"], [f"{v}_live_{t}"])], f"{v}_live_{t}"

    def ints(self, values: list[int]) -> str:
        key = tuple(values)
        if key not in self.constants:
            name = f"{PREFIX}_ints{len(self.constants)}"
            self.constants[key] = self.small.named(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
        return self.constants[key]

    def reduce(self, op: str, x: str, out: str, axes: list[int], keepdims: int) -> onnx.NodeProto:
        """``op`` over ``axes`` in this opset's form (axes an input: ReduceSum from 13, the others from 18)."""
        if self.opset >= 18 or (op == "ReduceSum" and self.opset >= 13):
            return helper.make_node(op, [x, self.ints(axes)], [out], keepdims=keepdims)
        return helper.make_node(op, [x], [out], axes=axes, keepdims=keepdims)

    def measure(self, proto: onnx.NodeProto, v: str) -> tuple[list, str | None, list[str]]:
        """(the nodes, the peak's output or None, the tensors whose shapes count the terms) for node ``proto``."""
        op, ins = proto.op_type, [i for i in proto.input]
        if proto.domain not in ("", "ai.onnx") or (op == "Attention" and not self.same_heads(proto)):
            return [], None, []
        peak = f"{v}_peak"
        if op == "Attention":
            (q_made, q), (k_made, k) = self.absolute_of(ins[0], f"{v}_q"), self.absolute_of(ins[1], f"{v}_k")
            nodes = [*q_made, *k_made, helper.make_node("Transpose", [k], [f"{v}_kt"], perm=[0, 1, 3, 2]),
                     helper.make_node("MatMul", [q, f"{v}_kt"], [f"{v}_sum"])]
            bound, shaped = f"{v}_sum", ins[:1]
        elif op in ("MatMul", "Gemm", "Einsum", "Conv", "ConvTranspose"):
            nodes, bound, shaped = self.products(proto, v)
        elif op in ("Softmax", "LogSoftmax", "ReduceLogSumExp"):
            nodes, bound, shaped = self.normaliser(proto, v)
        elif op in ("LayerNormalization", "GroupNormalization", "InstanceNormalization"):
            nodes, bound, shaped = self.deviations(proto, v)
        elif op == "GlobalAveragePool":  # |x| summed per (N, C): ONNX Runtime has no GlobalLpPool at opset 22
            made, absolute = self.absolute_of(ins[0], f"{v}_abs")
            nodes = [*made, helper.make_node("Flatten", [absolute], [f"{v}_rows"], axis=2),
                     self.reduce("ReduceSum", f"{v}_rows", f"{v}_sum", [1], 0)]
            bound, shaped = f"{v}_sum", [ins[0], proto.output[0]]
        elif op == "AveragePool":
            nodes, bound, shaped = [helper.make_node("LpPool", [ins[0]], [f"{v}_sum"], p=1, **_copied(proto, (
                "kernel_shape", "strides", "pads", "auto_pad") + (("ceil_mode", "dilations") if self.opset >= 18 else ())))], \
                f"{v}_sum", [ins[0], proto.output[0]]
        else:  # the Reduce ops: the same axes (attribute or input) and attributes
            kind = "ReduceSumSquare" if op in ("ReduceSumSquare", "ReduceL2") else "ReduceL1"
            if op == "ReduceSum":
                made, absolute = self.absolute_of(ins[0], f"{v}_abs")
                nodes = [*made, helper.make_node("ReduceSum", [absolute, *ins[1:]], [f"{v}_sum"], **_copied(
                    proto, ("keepdims", "noop_with_empty_axes")))]
            else:
                nodes = [helper.make_node(kind, ins, [f"{v}_sum"], **_copied(
                    proto, ("axes", "keepdims", "noop_with_empty_axes")))]
            bound, shaped = f"{v}_sum", [ins[0], proto.output[0]]
        return [*nodes, helper.make_node("ReduceMax", [bound], [peak], keepdims=0)], peak, shaped

    def same_heads(self, proto: onnx.NodeProto) -> bool:
        """Whether an Attention's Q and K are 4-D with as many heads, by the graph's shapes."""
        q, k = (self.shapes.get(t) for t in proto.input[:2])
        return q is not None and k is not None and len(q) == len(k) == 4 and isinstance(q[1], int) and q[1] == k[1]

    def products(self, proto: onnx.NodeProto, v: str) -> tuple[list, str, list[str]]:
        """MatMul, Gemm, Einsum, Conv, ConvTranspose on the absolute values of their inputs (Conv's bias left out;
        Gemm's C added as |beta * C|, alpha as |alpha|)."""
        op, ins = proto.op_type, [i for i in proto.input]
        used = ins if op in ("Einsum", "Gemm") else ins[:2]
        nodes, absolute = [], []
        for j, t in enumerate(used):
            if j == 1 and op == "Conv" and t in self.floats and _im2col(proto, self.dims[t]):
                absolute.append(self.absolute_weight(t, f"{v}_abs{j}"))
                continue
            made, read = self.live(t, v) if t else ([], "")
            if made:  # a weight, read inside the Loop
                made, read = [*made, helper.make_node("Abs", [read], [f"{v}_abs{j}"])], f"{v}_abs{j}"
            elif t:
                made, read = self.absolute_of(t, f"{v}_abs{j}")
            nodes += made
            absolute.append(read)
        attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        if op == "Gemm":
            attrs["alpha"], attrs["beta"] = abs(attrs.get("alpha", 1.0)), abs(attrs.get("beta", 1.0))
        nodes.append(helper.make_node(op, absolute, [f"{v}_sum"], **attrs))
        shaped = {"MatMul": ins[:1], "Gemm": ins[:1], "Einsum": ins, "Conv": ins[1:2], "ConvTranspose": ins[:1]}[op]
        return nodes, f"{v}_sum", list(shaped)

    def normaliser(self, proto: onnx.NodeProto, v: str) -> tuple[list, str, list[str]]:
        """sum exp(x - max) along Softmax's axis (the 2-D coercion before opset 13) or over a ReduceLogSumExp's axes."""
        x = proto.input[0]
        if proto.op_type == "ReduceLogSumExp":
            keep = _copied(proto, ("axes", "keepdims", "noop_with_empty_axes"))
            peak_axes = dict(keep, keepdims=1)
            top = helper.make_node("ReduceMax", proto.input[:], [f"{v}_max"], **peak_axes)
            sub = helper.make_node("Sub", [x, f"{v}_max"], [f"{v}_centred"])
            exp = helper.make_node("Exp", [f"{v}_centred"], [f"{v}_exp"])
            total = helper.make_node("ReduceL1", [f"{v}_exp", *proto.input[1:]], [f"{v}_sum"], **keep)
            return [top, sub, exp, total], f"{v}_sum", [x, proto.output[0]]
        axis = _attr(proto, "axis", -1 if self.opset >= 13 else 1)
        nodes = []
        if self.opset < 13:
            nodes.append(helper.make_node("Flatten", [x], [f"{v}_rows"], axis=axis))
            x, axis = f"{v}_rows", 1
        nodes += [self.reduce("ReduceMax", x, f"{v}_max", [axis], 1),
                  helper.make_node("Sub", [x, f"{v}_max"], [f"{v}_centred"]),
                  helper.make_node("Exp", [f"{v}_centred"], [f"{v}_exp"]),
                  self.reduce("ReduceSum", f"{v}_exp", f"{v}_sum", [axis], 0)]
        return nodes, f"{v}_sum", [proto.input[0]]

    def deviations(self, proto: onnx.NodeProto, v: str) -> tuple[list, str, list[str]]:
        """sum (x - mean)^2 over each normalised row: LayerNormalization's axes from ``axis`` on, a group's or an
        instance's elements."""
        x = proto.input[0]
        if proto.op_type == "LayerNormalization":
            rows = helper.make_node("Flatten", [x], [f"{v}_rows"], axis=_attr(proto, "axis", -1))
        elif proto.op_type == "GroupNormalization":
            rows = helper.make_node("Reshape", [x, self.ints([0, _attr(proto, "num_groups", 1), -1])], [f"{v}_rows"])
        else:
            rows = helper.make_node("Flatten", [x], [f"{v}_rows"], axis=2)
        axis = 2 if proto.op_type == "GroupNormalization" else 1
        nodes = [rows, self.reduce("ReduceMean", f"{v}_rows", f"{v}_mean", [axis], 1),
                 helper.make_node("Sub", [f"{v}_rows", f"{v}_mean"], [f"{v}_centred"]),
                 self.reduce("ReduceSumSquare", f"{v}_centred", f"{v}_sum", [axis], 0)]
        return nodes, f"{v}_sum", [x]


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _terms(proto: onnx.NodeProto, opset: int, shapes: list[tuple[int, ...]]) -> int | None:
    """Terms per output element of node ``proto``'s sum, from the shapes its probe measured (see ``measure``)."""
    op = proto.op_type
    if proto.domain not in ("", "ai.onnx"):
        return None
    if op in ("MatMul", "Attention"):
        return shapes[0][-1]
    if op == "Gemm":
        return shapes[0][0 if _attr(proto, "transA", 0) else 1]
    if op == "Einsum":
        equation = _attr(proto, "equation", b"")
        return _einsum_terms(equation.decode() if isinstance(equation, bytes) else str(equation), shapes)
    if op == "Conv":
        return _size(shapes[0][1:])
    if op == "ConvTranspose":
        kernel = _attr(proto, "kernel_shape")
        return shapes[0][1] // _attr(proto, "group", 1) * (_size(tuple(kernel)) if kernel else 1)
    if op == "AveragePool":
        return _size(tuple(_attr(proto, "kernel_shape", [])))
    x = shapes[0]
    if op in ("Softmax", "LogSoftmax"):
        axis = _attr(proto, "axis", -1 if opset >= 13 else 1)
        return x[axis] if opset >= 13 else _size(x[axis:])
    if op == "LayerNormalization":
        return _size(x[_attr(proto, "axis", -1):])
    if op == "GroupNormalization":
        return _size(x) // (x[0] * _attr(proto, "num_groups", 1))
    if op == "InstanceNormalization":
        return _size(x[2:])
    return _size(x) // max(_size(shapes[1]), 1)  # reductions and global pooling: inputs per output


def _einsum_terms(equation: str, shapes: list[tuple[int, ...]]) -> int | None:
    """The product of the sizes of the indices an Einsum sums over (None with an ellipsis)."""
    equation = equation.replace(" ", "")
    if "..." in equation:
        return None
    left, _, right = equation.partition("->")
    operands = left.split(",")
    if not right and "->" not in equation:
        letters = "".join(operands)
        right = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    sizes: dict[str, int] = {}
    for term, shape in zip(operands, shapes):
        sizes.update(zip(term, shape))
    return _size(tuple(n for c, n in sizes.items() if c not in right))
