"""The emulation's graph rewrite: rounding sites, Cast round trips a mask input selects, one model for all plans.

Semantics (ARCHITECTURE.md): with ``r(x) = float32(float16(x))``, a candidate in
FP16 computes ``r`` of its float outputs from ``r`` of its float inputs
(initializers included); a candidate in FP32 computes on its inputs as they
arrive; graph inputs arrive in FP32; transparent ops never round. A control-flow
candidate (If, Loop, Scan) in FP16 also rounds inside its subgraphs, recursively:
every non-transparent node there that computes a float output rounds its float
outputs and the float tensors it reads that no such node of the subgraph has
rounded already (outer-scope reads, subgraph inputs, transparent results).

One session serves every plan. A rounding site selects between a tensor and its
rounding ``Cast(Cast(x, FLOAT16), FLOAT)`` with one bool of a mask graph input
(``MASK``, one entry per site; ``EmulateBackend.mask`` derives it from the plan),
so evaluating a plan is one run. Two forms of site, chosen per tensor:

* small tensors of known rank >= 1: ``Where(keep, x, r(x))``, with ``r(x)``
  computed once per tensor and shared by all its sites (an ``If`` costs ONNX
  Runtime a subgraph execution, which dominates on small tensors: on 10,000
  candidates of 1024 floats it was the whole cost);
* large, scalar or unknown-shape tensors: ``If(keep) then x else r(x)``, so the
  rounding runs only when needed (``Where`` would compute both sides; on real
  OCR models ``If`` measured 3-4x faster).

A select picks one of its operands bit for bit, so ``inf``, ``NaN`` and ``-0``
pass unchanged; no arithmetic select (``x + m * (r(x) - x)`` is NaN when
``r(x)`` is inf). Sites are fused where the semantics allow: a candidate B
reading the output t of candidate A reads ``t`` when both A and B are in FP32
and ``r(t)`` otherwise (``r`` is idempotent), one site instead of two.

The emulation models the plan's mixed-precision file (``artifacts/mixed.py``),
the plan's definition: a float constant (initializer or Constant value) read in
FP16 holds what the file stores, converted once with NumPy by the writer's own
rule (``model/fp16.py``: beyond +-65504 saturates, below 2^-24 becomes +-2^-24).
A small constant (a Where-sized one) is rounded here into a constant of the
emulation, and needs no site when that is its own value; a weight is read in
FP16 from the writer's own FP16 copy (``Graph.half_constant``: a file written
once, which ONNX Runtime maps) through a Cast in the site's rounding branch.
The session does not fold constants, so no rounded FP32 copy of a weight is
ever held beside the weight itself. An FP16 BatchNormalization reads
the statistics its opset stores in FP16 (before opset 15) the same way, or, where
the writer folds them, computes the file's ``Mul(x, scale)`` and ``Add(., shift)``
in FP16 (``Graph.batchnorm_fold``). ONNX Runtime keeps explicit
Cast pairs in an FP32 graph; the start-up self-test (``selftest.py``) proves, for both
forms, that 70000 becomes inf on this machine.

BF16 (``--precision bf16``): the same sites with ``Cast(Cast(x, BFLOAT16), FLOAT)``,
which ONNX Runtime's CPU provider computes exactly (round to nearest even, BF16
subnormals kept, +-inf and NaN kept; measured against ml_dtypes in
tests/test_bf16.py); it takes them from opset 13, so a BF16 graph below opset 22
is the version-converted model (``graph.upgraded_for``), the one the writer writes.

FP16 accumulation (``accumulate="fp16"``, ``accumulate.py`` says the model): an accumulating candidate
(``plan_states.accumulates``) whose sums the model covers computes its first output in an ``If``: its own
result (FP32 arithmetic) when it is in FP32 or FP32 accumulation, else the FP16-accumulated one. Its condition
is one more mask entry per such candidate (``accumulators``: candidate indices; ``EmulateBackend.mask`` appends
"adds in FP32" for each after the candidates' own entries). With ``accumulate="fp32"`` (the default) the
emulation is exactly the storage one: no such entry, no extra node.

Not emulated: TensorRT's fused kernels.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fp16bisect.model.fp16 import FLAT, constant_as_stored
from fp16bisect.model.precision import Precision
from fp16bisect.model.graph import DEFAULT_DOMAINS, PARAMETER_INPUTS, TRANSPARENT_OPS, Graph
from fp16bisect.model.plan_states import accumulates
from fp16bisect.model.subgraphs import subgraphs
from fp16bisect.backends.emulate.accumulate import FP16Sums, Unmodelled
from fp16bisect.backends.emulate.seen import Seen

MASK = "fp16bisect_fp32_mask"
_PREFIX = "fp16bisect/"
MASK_GROUP = 64  # sites per Split of the mask's second level
WHERE_MAX_ELEMENTS = 1 << 14  # up to this many elements (and known rank >= 1) a site is a Where, else an If


class Emulation:
    """The emulation model and its sites: site ``s`` keeps its tensor unrounded when every candidate in
    ``owners[s]`` (one or two candidate indices) is in FP32."""

    def __init__(  # noqa: C901, PLR0912, PLR0915  two steps in one body (below), to be split with emulate/'s rework
            self, graph: Graph, extra_outputs=(), where_max: int = WHERE_MAX_ELEMENTS, accumulate: str = "fp32",
            seen: Seen | None = None):
        """``seen``: the ranks and sizes of the summing nodes' tensors a run showed (``seen.py``), for
        ``accumulate="fp16"``."""
        # the outputs that need a site, then each node rewritten: a method each, once backends/emulate/ (reworked at
        # the same time, issue 40) settles
        self.graph = graph
        self.accumulators: list[int] = []  # candidates summing in FP16 unless in FP32 (accumulation): mask n + j
        self.unmodelled: list[tuple[str, str, str]] = []  # summing candidates not modelled: (id, op type, why)
        self.where_max = where_max
        self.owners: list[tuple[int, int]] = []
        self.forms = {"where": 0, "if": 0}
        model = graph.runnable_copy()
        self.model = model
        g = model.graph
        self.types, self.shapes = types_and_shapes(graph)
        self.seen = seen or Seen()
        self.summed_shapes = {**{t: (None,) * r for t, r in self.seen.ranks.items()}, **self.shapes}
        self._names = 0
        self._rounded: dict[str, str] = {}  # tensor -> name of r(tensor) (shared by its Where sites)
        self._halves: dict[str, str] = {}  # weight -> its FP16 initializer (the writer's copy)
        self._shared: dict = {}  # the FP16 sums' small constants, by value (``sums.Nodes.constant``)
        originals = list(g.node)
        del g.node[:]
        self._out = g.node
        index = {n.id: i for i, n in enumerate(graph.candidates)}
        producer = {t: index[n.id] for n in graph.candidates for t in graph.float_outputs(n)}

        # Which candidate outputs must exist as selected by their producer alone: read by anything other than
        # a candidate's rounded input (transparent ops, parameter inputs, subgraphs, graph outputs, extra outputs).
        direct: set[tuple[str, str]] = set()  # (consumer id, tensor): fused edge sites
        needed = {o.name for o in graph.outputs} | set(extra_outputs)
        for node in graph.nodes:
            rounded = {pos for pos, _ in graph.rounded_inputs(node)} if node.id in index else set()
            for pos, t in enumerate(node.inputs):
                if t in producer and pos in rounded:
                    direct.add((node.id, t))
                elif t in producer:
                    needed.add(t)
            needed.update(t for t in node.implicit if t in producer)

        for node in graph.nodes:
            proto = onnx.NodeProto()
            proto.CopyFrom(originals[node.index])
            i = index.get(node.id)
            if i is None:
                self._out.append(proto)
                continue
            selected: dict[str, str] = {}
            for pos, tensor in graph.rounded_inputs(node):
                if tensor not in selected:
                    if (node.id, tensor) in direct:
                        a = producer[tensor]
                        selected[tensor] = self._site((a, i), _raw(tensor), tensor)
                    else:
                        selected[tensor] = self._site((i, i), tensor, tensor)
                proto.input[pos] = selected[tensor]
            if subgraphs(proto):
                self._round_inside(proto, i)
            outs = []
            for pos, tensor in enumerate(node.outputs):
                if tensor in producer:
                    proto.output[pos] = _raw(tensor)
                    outs.append(tensor)
            fold = graph.batchnorm_fold(node)
            if fold is not None:
                self._folded(proto, i, fold)
            elif accumulate == "fp16" and accumulates(node.op_type, node.domain):
                self._accumulating(proto, node, i)
            else:
                self._out.append(proto)
            for tensor in outs:
                if tensor in needed:
                    self._site((i, i), _raw(tensor), tensor, out=tensor)
        g.input.append(helper.make_tensor_value_info(MASK, TensorProto.BOOL, [len(self.owners)]))
        self._split_mask(g)
        self.owner_a = np.array([a for a, _ in self.owners], dtype=np.int64)
        self.owner_b = np.array([b for _, b in self.owners], dtype=np.int64)

    # ------------------------------------------------------------------ sites

    def _name(self, what: str) -> str:
        self._names += 1
        return f"{_PREFIX}n{self._names}/{what}"

    def _cond(self, owners: tuple[int, int]) -> str:
        self.owners.append(owners)
        return f"{_PREFIX}keep{len(self.owners) - 1}"

    def _site(self, owners, tensor: str, shape_of: str, out: str | None = None, cond: str | None = None,
              nodes=None) -> str:
        """A node selecting ``tensor`` (kept) or ``r(tensor)``; returns its output name. ``shape_of``: the
        tensor whose inferred shape ``tensor`` has. ``cond``: an existing condition (inside subgraphs)."""
        nodes = self._out if nodes is None else nodes
        out = out or self._name("sel")
        value = self.graph.constant_value(tensor)
        stored = half = None  # a constant's value as the file stores it: in FP32 (small ones), or in FP16
        if value is not None and value.size <= self.where_max:  # small: rounded here, a constant of the emulation
            if _exact_in(value, self.graph.precision):
                return tensor  # stored exactly in FP16: nothing changes
            stored = self._rounded.get(tensor)
            if stored is None:
                stored = self._rounded[tensor] = self._name("r_const")
                self.model.graph.initializer.append(
                    numpy_helper.from_array(constant_as_stored(value, self.graph.precision), stored))
        elif value is not None:  # a weight: the writer's FP16 copy (a file both map), read through a Cast
            half = self._half_constant(tensor)
        cond = cond or self._cond(owners)
        shape = self.shapes.get(shape_of)
        small = shape is not None and len(shape) >= 1 and all(isinstance(d, int) for d in shape) \
            and int(np.prod(shape)) <= self.where_max
        if small and nodes is self._out:
            r = self._rounded.get(tensor)
            if r is None and half is not None:
                r = self._rounded[tensor] = self._name("r_const")
                nodes.append(helper.make_node("Cast", [half], [r], to=TensorProto.FLOAT))
            if r is None:
                r = self._rounded[tensor] = self._name("r")
                h = self._name("h")
                nodes.append(helper.make_node("Cast", [tensor], [h], to=self.graph.precision.onnx_type))
                nodes.append(helper.make_node("Cast", [h], [r], to=TensorProto.FLOAT))
            nodes.append(helper.make_node("Where", [cond, tensor, r], [out], name=self._name("site")))
            self.forms["where"] += 1
            return out
        kept, back = self._name("fp32"), self._name("fp16")
        as_is = helper.make_graph([helper.make_node("Identity", [tensor], [kept])], "fp32", [], [_float_info(kept)])
        if stored is not None:
            body = [helper.make_node("Identity", [stored], [back])]
        elif half is not None:
            body = [helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT)]
        else:
            h = self._name("h")
            body = [helper.make_node("Cast", [tensor], [h], to=self.graph.precision.onnx_type),
                    helper.make_node("Cast", [h], [back], to=TensorProto.FLOAT)]
        rounded_graph = helper.make_graph(body, "fp16", [], [_float_info(back)])
        nodes.append(helper.make_node("If", [cond], [out], name=self._name("site"), then_branch=as_is,
                                      else_branch=rounded_graph))
        self.forms["if"] += 1
        return out

    def _half_constant(self, tensor: str) -> str:
        """The name of an FP16 initializer holding ``tensor`` as the file stores it: the writer's copy, in the
        work directory and shared with the written files; the site reads it through a Cast."""
        found = self._halves.get(tensor)
        if found is None:
            found = self._halves[tensor] = self._name("c16")
            self.model.graph.initializer.append(self.graph.half_constant(tensor, found))
        return found

    def _folded(self, proto: onnx.NodeProto, i: int, fold) -> None:
        """An FP16 BatchNormalization the writer folds: in FP32 the node as it is, in FP16 the file's
        ``Mul(x, scale)`` and ``Add(., shift)`` (FP16 constants, the Mul's output rounded); its output sites
        round the result as for any candidate."""
        raw = proto.output[0]
        proto.output[0] = self._name("bn_fp32")
        self._out.append(proto)
        x = proto.input[0]
        scale, shift = self._name("folded_scale"), self._name("folded_shift")
        self.model.graph.initializer.extend([numpy_helper.from_array(fold.scale.astype(np.float32), scale),
                                             numpy_helper.from_array(fold.shift.astype(np.float32), shift)])
        scaled, half, back, folded = (self._name(w) for w in ("scaled", "h", "r", "folded"))
        if fold.flat:  # X's rank unknown: the file's fold on X reshaped to (N, C, -1), then back (fp16.FLAT)
            shape, flat, flat_shape, shifted = (self._name(w) for w in ("shape", "flat", "flat_shape", "shifted"))
            self.model.graph.initializer.append(numpy_helper.from_array(FLAT, flat_shape))
            self._out.extend([helper.make_node("Shape", [x], [shape]), helper.make_node("Reshape", [x, flat_shape], [flat])])
            x, folded = flat, shifted
        self._out.extend([
            helper.make_node("Mul", [x, scale], [scaled], name=self._name("fold_mul")),
            helper.make_node("Cast", [scaled], [half], to=self.graph.precision.onnx_type),
            helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT),
            helper.make_node("Add", [back, shift], [folded], name=self._name("fold_add")),
        ])
        if fold.flat:
            folded = self._name("folded")
            self._out.append(helper.make_node("Reshape", [shifted, shape], [folded]))
        self._out.append(
            helper.make_node("Where", [self._cond((i, i)), proto.output[0], folded], [raw], name=self._name("fold")))

    def _accumulating(self, proto: onnx.NodeProto, node, i: int) -> None:
        """Candidate ``i`` with its first output selected between its own result and its FP16-accumulated one
        (``accumulate.py``), by its "adds in FP32" mask entry; as it is when its sums are short or not modelled.
        A node whose only output is that one is computed inside the If's FP32 branch, so that a plan runs either
        it or its FP16 sums, never both."""
        raw = proto.output[0]
        sums = FP16Sums(self.model, self._name, self.summed_shapes, self.graph.opset,
                        self.graph.precision.onnx_type, self.seen.sizes, self._shared)
        try:
            summed = sums.build(proto, node)
        except Unmodelled as why:
            self.unmodelled.append((node.id, node.op_type, str(why)))
            summed = None
        if summed is None:
            self._out.append(proto)
            return
        cond = self._cond((len(self.graph.candidates) + len(self.accumulators),) * 2)
        self.accumulators.append(i)
        kept = self._name("acc32")
        proto.output[0] = kept
        if sum(1 for t in proto.output if t) == 1:
            as_is = helper.make_graph([proto], "fp32_sum", [], [_float_info(kept)])
        else:  # its other outputs are read outside the If
            self._out.append(proto)
            own = self._name("kept")
            as_is = helper.make_graph([helper.make_node("Identity", [kept], [own])], "fp32_sum", [], [_float_info(own)])
        in_fp16 = helper.make_graph(sums.nodes, "fp16_sum", [], [_float_info(summed)])
        self._out.append(helper.make_node("If", [cond], [raw], name=self._name("sum"), then_branch=as_is,
                                          else_branch=in_fp16))

    def _round_inside(self, proto: onnx.NodeProto, i: int) -> None:
        """Round inside the subgraphs of control-flow candidate ``i`` with its own mask entry."""
        cond = self._cond((i, i))

        def site(tensor: str, nodes, out: str | None = None) -> str:
            return self._site(None, tensor, tensor, out=out, cond=cond, nodes=nodes)

        round_subgraphs(proto, self.types, site, self._name)

    def _split_mask(self, g: onnx.GraphProto) -> None:
        """A two-level tree of Splits turns the mask into one single-element condition per site: the mask into
        groups of ``MASK_GROUP``, each group into its sites. (One Split with one output per site cost ONNX
        Runtime 3 to 9 s on the first run at 10,000 candidates; the tree, 0.1 s.)"""
        n = len(self.owners)
        if not n:
            return
        outputs = [f"{_PREFIX}keep{s}" for s in range(n)]
        if n <= MASK_GROUP:
            g.node.insert(0, self._split(g, MASK, outputs, "mask"))
            return
        groups = [outputs[i:i + MASK_GROUP] for i in range(0, n, MASK_GROUP)]
        names = [f"{_PREFIX}mask_group{j}" for j in range(len(groups))]
        split = [self._split(g, MASK, names, "mask", sizes=[len(members) for members in groups])]
        split += [self._split(g, name, members, f"mask_group{j}") for j, (name, members) in
                  enumerate(zip(names, groups))]
        for i, node in enumerate(split):
            g.node.insert(i, node)

    def _split(self, g: onnx.GraphProto, source: str, outputs: list[str], what: str, sizes=None) -> onnx.NodeProto:
        sizes = sizes or [1] * len(outputs)
        if self.graph.opset >= 13:
            name = f"{_PREFIX}{what}_split"
            g.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(sizes)], sizes))
            return helper.make_node("Split", [source, name], outputs, name=f"{_PREFIX}{what}", axis=0)
        return helper.make_node("Split", [source], outputs, name=f"{_PREFIX}{what}", axis=0, split=sizes)

    def mask(self, fp32: np.ndarray) -> np.ndarray:
        """The site mask of a plan given as one bool per candidate (True: FP32)."""
        return fp32[self.owner_a] & fp32[self.owner_b]


def _exact_in(value: np.ndarray, precision: Precision) -> bool:
    """True when the precision holds every value of a float32 constant exactly (its conversion changes nothing)."""
    value = np.asarray(value, dtype=np.float32)
    if value.size == 0:
        return True
    bits = value.view(np.uint32)  # FP16 keeps 10 of FP32's 23 mantissa bits (BF16 7): the others must be zero
    if np.any(bits & ((1 << precision.dropped_bits) - 1)):
        return False
    return np.array_equal(constant_as_stored(value, precision).view(np.uint32), bits)


def _raw(tensor: str) -> str:
    return f"{_PREFIX}raw/{tensor}"


def _float_info(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def round_subgraphs(proto: onnx.NodeProto, types: dict[str, int], site, fresh, rounded=frozenset()) -> None:
    """Rewrite the subgraphs of control-flow node ``proto`` in place, recursively: every non-transparent
    default-domain node with a float output rounds its float outputs, and its float inputs that no rounding
    node has produced. ``site(tensor, nodes, out=None)`` appends a rounding of ``tensor`` to ``nodes`` and
    returns its name; ``fresh(what)`` makes a model-unique name."""
    for sub in subgraphs(proto):
        done = set(rounded)
        originals = list(sub.node)
        del sub.node[:]
        for original in originals:
            node = onnx.NodeProto()
            node.CopyFrom(original)
            is_float = [types.get(t) == TensorProto.FLOAT for t in node.output]
            if node.op_type in TRANSPARENT_OPS or node.domain not in DEFAULT_DOMAINS or not any(is_float):
                sub.node.append(node)
                continue
            params = PARAMETER_INPUTS.get(node.op_type, set())
            selected: dict[str, str] = {}
            for pos, t in enumerate(node.input):
                if pos in params or not t or t in done or types.get(t) != TensorProto.FLOAT:
                    continue
                if t not in selected:
                    selected[t] = site(t, sub.node)
                node.input[pos] = selected[t]
            if subgraphs(node):
                round_subgraphs(node, types, site, fresh, done)
            outs = []
            for pos, t in enumerate(node.output):
                if t and is_float[pos]:
                    node.output[pos] = fresh("raw")
                    types[node.output[pos]] = TensorProto.FLOAT
                    outs.append((node.output[pos], t))
            sub.node.append(node)
            for raw, t in outs:
                site(raw, sub.node, out=t)
                done.add(t)


def types_and_shapes(graph: Graph) -> tuple[dict[str, int], dict[str, tuple]]:
    """Element types (subgraphs included: the caller adds its own) and shapes of tensors, as the graph found them."""
    types = dict(graph.dtypes)
    for name, kind in graph.inner_types.items():
        types.setdefault(name, kind)
    return types, graph.shapes
