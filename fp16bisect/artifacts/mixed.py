"""A plan as a mixed-precision ONNX model, for strongly typed builds (TensorRT 11, TensorRT-RTX).

Every float32 tensor of the main graph gets a precision, decided node by node
in topological order:

- a candidate runs in FP16 unless the plan pins it;
- any other node (transparent ops, comparisons, Shape) runs in FP16 when every
  float tensor it reads is FP16 (constants do not count), else in FP32: a
  Reshape of an FP16 tensor stays FP16, a Concat of FP16 and FP32 parts is FP32;
- nodes of custom domains and control-flow nodes (If, Loop, Scan) run in FP32,
  with their subgraphs untouched.

A node's precision applies to the inputs and outputs that share a type
parameter with it in the operator's schema (``onnx.defs``), so parameters of
other types (Resize scales, shapes, indices, LayerNormalization's mean) keep
theirs. A Cast is inserted only where a tensor crosses from one precision to
the other, once per tensor and direction. Graph inputs and outputs keep FP32 unless ``fp16_io``. A candidate
the plan marks for FP32 accumulation (``plan_states.accumulating``) is written as an FP16 node that computes in FP32
between Casts of its own (``artifacts/accumulation.py``).

Every plan can be written. Initializers and Constant values read in FP16 are stored in FP16 (a copy when
FP32 readers share them), converted by one rule (``model/fp16.py``: TensorRT's own for FP32 weights of FP16
layers): finite values beyond +-65504 saturate to +-65504, non-zero values below 2^-24 become +-2^-24, +-inf
and NaN stay. ``Mixed.conversions`` lists what the rule changed beyond rounding (a Hugging Face attention mask
of -3.4e38 becomes -65504). The emulator reads constants through the same function, so a plan means what
its file computes.

An FP16 BatchNormalization whose statistics stored in FP16 (those its opset types like X: all four before
opset 14, scale and bias at 14, none from 15) would be changed by that rule (PP-OCRv4's detector has a running
variance of 9.79e7) is written as its folded form, as TensorRT's ONNX parser builds it: scale =
gamma / sqrt(var + epsilon) and shift = beta - mean * scale, computed in FP32 at write time, stored in FP16 by
the same rule and applied per channel by a Mul and an Add that writes the BatchNormalization's output tensor
(``Graph.batchnorm_fold``); where X's rank is unknown, on X reshaped to (N, C, -1), then back to Shape(X).

A BF16 graph (``--precision bf16``, ``Graph.precision``) is written the same way with BFLOAT16 for FP16: bfloat16
tensors and Casts, constants by the BF16 rule (``model/fp16.py``), at opset 22 or later (the graph upgraded a
model below it: the first opset whose Conv and pooling take bfloat16).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fp16bisect.artifacts.accumulation import cast_around, checked_states
from fp16bisect.artifacts import edits
from fp16bisect.artifacts.edits import Fresh, rename, rename_reads
from fp16bisect.errors import UsageError, shown
from fp16bisect.model import weights
from fp16bisect.model.fp16 import FLAT, Conversion, constant_to_fp16
from fp16bisect.model.graph import DEFAULT_DOMAINS, PARAMETER_INPUTS, Graph, Node
from fp16bisect.model.plan_states import plan_of
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.model.subgraphs import outer_reads

FLOAT, HALF = TensorProto.FLOAT, TensorProto.FLOAT16
CONTROL_FLOW = {"If", "Loop", "Scan"}


@dataclass
class Mixed:
    model: onnx.ModelProto
    pinned: list[str] = field(default_factory=list)  # the plan: node ids kept in FP32
    fp16_nodes: list[str] = field(default_factory=list)  # node ids stored in FP16 (FP32 accumulation included)
    accumulating: list[str] = field(default_factory=list)  # of those, the ids computing in FP32 between Casts
    casts: int = 0
    fp16_constants: int = 0
    notes: list[str] = field(default_factory=list)
    conversions: list[Conversion] = field(default_factory=list)  # constants the FP16 rule changed beyond rounding
    precision: Precision = FP16  # the low precision it is written in (the graph's)


def mixed_model(graph: Graph, fp32: Iterable[str], *, fp16_io: bool = False) -> onnx.ModelProto:
    return convert(graph, fp32, fp16_io=fp16_io).model


def check_plan(graph: Graph, fp32: Iterable[str]) -> frozenset:
    """The plan (FP32 ids and FP32-accumulation marks, ``model/plan_states.py``), or a UsageError naming the first
    member that cannot be: an unknown node, a pin on a node with no float output, a mark on a node that does not
    sum. A node both pinned and marked is pinned."""
    plan, accumulate = checked_states(graph, fp32)
    for node_id in sorted(plan):
        node = graph.by_id.get(node_id)
        if node is None:
            raise UsageError(
                f"node {shown(node_id)} is not in the model: the override file was made for another version of it; "
                "rerun 'fp16bisect search'"
            )
        if not graph.float_outputs(node):
            raise UsageError(
                f"node {shown(node_id)} ({node.op_type}) has no float output, so there is nothing to keep in FP32: "
                "remove it from the override file's fp32_nodes"
            )
    return plan_of(plan, accumulate)


def convert(graph: Graph, fp32: Iterable[str], *, fp16_io: bool = False) -> Mixed:
    return _Converter(graph, check_plan(graph, fp32), fp16_io).run()


def conversions(graph: Graph, fp32: Iterable[str] = ()) -> list[Conversion]:
    """What the plan's file converts beyond rounding (constants FP16 cannot hold), without writing it."""
    converter = _Converter(graph, check_plan(graph, fp32), False)
    return converter.conversions(*converter.reads(converter.decide()))


class _Constants(Mapping):
    """The model's float constants (initializers, Constant values), name -> value, read from the model when
    asked: membership costs no copy of the weights."""

    def __init__(self, graph: Graph):
        self.graph = graph
        g = graph.model.graph
        self.initializers = {t.name: t for t in g.initializer if t.data_type == FLOAT}
        self.names = list(self.initializers) + [n.output[0] for n in g.node if n.op_type == "Constant" and n.output
                                                and graph.is_float(n.output[0])]
        self.known = set(self.names)

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.initializers:
            return weights.array(self.initializers[name])
        if name in self.known and (value := self.graph.constant_value(name)) is not None:
            return value
        raise KeyError(name)

    def __contains__(self, name) -> bool:
        return name in self.known

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


class _Views:
    """A tensor's name in a precision (``views(t, q)``): its own where it already is in ``q``, a constant's FP16
    copy, else the output of a Cast inserted on first use (one per tensor and direction)."""

    def __init__(self, converter: _Converter, out: onnx.GraphProto, half_name: dict[str, str], fresh_t: Fresh,
                 fresh_n: Fresh) -> None:
        self.converter, self.out, self.half_name = converter, out, half_name
        self.fresh_t, self.fresh_n = fresh_t, fresh_n
        self.casts: dict[tuple[str, int], str] = {}

    def __call__(self, t: str, q: int) -> str:
        c = self.converter
        if t in c.constants:
            return self.half_name[t] if q == c.half else t
        if c.prec.get(t, q) == q:
            return t
        if (t, q) not in self.casts:
            kind = "fp16" if q == c.half else "fp32"
            name = self.fresh_t(f"{t}_{kind}")
            self.out.node.append(helper.make_node("Cast", [t], [name], name=self.fresh_n(f"fp16bisect/cast_{kind}/{t}"),
                                                  to=q))
            self.casts[(t, q)] = name
        return self.casts[(t, q)]


class _Converter:
    def __init__(self, graph: Graph, plan: frozenset, fp16_io: bool):
        self.graph = graph
        self.half = graph.precision.onnx_type  # FLOAT16, or BFLOAT16 for a BF16 graph
        self.plan, self.accumulate = checked_states(graph, plan)  # FP32 ids; FP32-accumulation ids
        self.fp16_io = fp16_io
        self.candidates = {n.id for n in graph.candidates}
        self.opset = graph.opset
        self.constants = _Constants(graph)
        self.prec: dict[str, int] = {}  # float tensor -> FLOAT or self.half
        self.notes: list[str] = []
        self.folds: dict = {}  # BatchNormalization id -> its fp16.BatchNormFold

    # -- pass 1: decide -------------------------------------------------------------------------
    def decide(self) -> dict[str, tuple[int, list[int | None]]]:
        """node id -> (node precision, required precision per input slot or None for untouched)."""
        for v in self.graph.model.graph.input:
            if self.graph.is_float(v.name) and v.name not in self.constants:
                self.prec[v.name] = self.half if self.fp16_io else FLOAT
        decisions = {}
        for node in self.graph.nodes:
            if node.op_type == "Constant" and node.outputs and node.outputs[0] in self.constants:
                continue
            p = self._precision(node)
            required, outputs = self._slots(node, p)
            fold = self.graph.batchnorm_fold(node) if p == self.half else None
            if fold is not None:
                self.folds[node.id] = fold
                self.notes.append(f"BatchNormalization {node.id} written as its folded FP32-computed scale and shift "
                                  f"in FP16 ({fold.reason}; TensorRT folds it the same way)")
                required = [required[0]] + [None] * (len(required) - 1)  # the statistics are not read as such
            for t, q in zip(node.outputs, outputs):
                if q is not None:
                    self.prec[t] = q
            decisions[node.id] = (p, required)
        return decisions

    def _precision(self, node: Node) -> int:
        if node.id in self.plan:
            return FLOAT
        if node.domain not in DEFAULT_DOMAINS or node.op_type in CONTROL_FLOW:
            if node.id in self.candidates:
                self.notes.append(f"{node.op_type} node {node.id!r} stays in FP32: its subgraphs are not converted")
            return FLOAT
        if node.id in self.candidates:
            return self.half
        read = [t for t in node.inputs if self.graph.is_float(t) and t not in self.constants]
        return self.half if read and all(self.prec.get(t) == self.half for t in read) else FLOAT

    def _slots(self, node: Node, p: int) -> tuple[list[int | None], list[int | None]]:
        """Required precision of each input and resulting precision of each output (None: not float)."""
        ins: list[int | None] = [FLOAT if self.graph.is_float(t) else None for t in node.inputs]
        outs: list[int | None] = [FLOAT if self.graph.is_float(t) else None for t in node.outputs]
        schema = edits.schema(node, self.opset)
        if schema is None or node.op_type in CONTROL_FLOW:
            return ins, outs  # everything float in FP32
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        groups: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for kind, formals, actual in (("in", schema.inputs, ins), ("out", schema.outputs, outs)):
            for i, q in enumerate(actual):
                if q is None:
                    continue
                formal = edits.formal(formals, i)
                if formal is not None and formal.type_str in allowed:
                    groups[formal.type_str].append((kind, i))
        params = PARAMETER_INPUTS.get(node.op_type, set())
        for var, slots in groups.items():
            has_in = any(kind == "in" for kind, _ in slots)
            has_out = any(kind == "out" for kind, _ in slots)
            if not has_in:
                continue  # type set by an attribute (Cast's "to"): stays FP32
            if not has_out and any(kind == "in" and i in params for kind, i in slots):
                continue  # parameters with a type of their own (BatchNormalization-15 statistics) stay FP32
            q = self.half if p == self.half and self.graph.precision.onnx_type_str in allowed[var] else FLOAT
            if p == self.half and q == FLOAT and has_out and node.id in self.candidates:
                self.notes.append(
                    f"{node.op_type} node {node.id!r} stays in FP32: opset {self.opset} has no FP16 {node.op_type}"
                )
            for kind, i in slots:
                (ins if kind == "in" else outs)[i] = q
        return ins, outs

    # -- BatchNormalization with statistics FP16 cannot hold -------------------------------------
    def _write_fold(self, out: onnx.GraphProto, node: Node, proto: onnx.NodeProto, x: str, fresh_t, fresh_n,
                    mixed: Mixed) -> None:
        """Mul by the folded scale, Add the folded shift, into the BatchNormalization's own output tensor; a
        ``flat`` fold (X's rank unknown) does that on X reshaped to (N, C, -1), then reshapes back to Shape(X)."""
        fold = self.folds[node.id]
        names = [fresh_t(f"{node.id}/folded_{what}") for what in ("scale", "shift")]
        out.initializer.extend(numpy_helper.from_array(v, name) for name, v in zip(names, (fold.scale, fold.shift)))
        mixed.fp16_constants += 2
        scaled, result = fresh_t(f"{node.id}/scaled"), proto.output[0]
        if fold.flat:
            flat, flat_shape, shape, result = (fresh_t(f"{node.id}/{what}")
                                               for what in ("flat", "flat_shape", "shape_of_x", "shifted"))
            out.initializer.append(numpy_helper.from_array(FLAT, flat_shape))
            out.node.append(helper.make_node("Shape", [x], [shape], name=fresh_n(f"{node.id}/shape_of_x")))
            out.node.append(helper.make_node("Reshape", [x, flat_shape], [flat], name=fresh_n(f"{node.id}/flat")))
            x, self.prec[flat], self.prec[result] = flat, self.half, self.half
        self.prec[scaled] = self.half
        out.node.append(helper.make_node("Mul", [x, names[0]], [scaled], name=fresh_n(f"{node.id}/folded_scale")))
        out.node.append(helper.make_node("Add", [scaled, names[1]], [result], name=proto.name))
        if fold.flat:
            out.node.append(helper.make_node("Reshape", [result, shape], [proto.output[0]],
                                             name=fresh_n(f"{node.id}/unflat")))

    def reads(self, decisions) -> tuple[dict[str, set], dict[str, list[str]]]:
        """What each constant is read as (FLOAT, self.half), and which nodes read it in FP16."""
        wants: dict[str, set] = defaultdict(set)
        readers: dict[str, list[str]] = defaultdict(list)
        for node in self.graph.nodes:
            if node.id not in decisions:
                continue
            _, required = decisions[node.id]
            for t, q in zip(node.inputs, required):
                if q is not None and t in self.constants:
                    wants[t].add(q)
                    if q == self.half:
                        readers[t].append(node.id)
            for t in node.implicit:
                if t in self.constants:
                    wants[t].add(FLOAT)
        return wants, readers

    def conversions(self, wants: dict[str, set], readers: dict[str, list[str]]) -> list[Conversion]:
        """The constants stored in FP16 that the rule changes beyond rounding, then the folds' scales and shifts."""
        found = [self.graph.conversion(t, readers[t]) for t in self.constants if self.half in wants.get(t, ())]
        found += [c for fold in self.folds.values() for c in fold.conversions]
        return [c for c in found if c is not None]

    # -- pass 2: write --------------------------------------------------------------------------
    def run(self) -> Mixed:
        decisions = self.decide()
        model, originals, fresh_t, fresh_n = self._emptied_copy()
        out = model.graph
        wants, readers = self.reads(decisions)
        half_name = self._half_names(wants, fresh_t)
        mixed = Mixed(model, pinned=[n.id for n in self.graph.nodes if n.id in self.plan], precision=self.graph.precision)
        mixed.accumulating = [n.id for n in self.graph.nodes if n.id in self.accumulate and decisions[n.id][0] == self.half]
        mixed.conversions = self.conversions(wants, readers)
        self._write_constants(out, half_name, readers, mixed)
        views = _Views(self, out, half_name, fresh_t, fresh_n)
        for node in self.graph.nodes:
            self._write_node(out, node, originals[node.index], decisions.get(node.id), views, mixed)

        if self.folds:
            self._drop_unread(out, {t for i in self.folds for t in self.graph.by_id[i].inputs[1:5]})
        self._retype_io(out, fresh_t, fresh_n)
        self._retype_value_info(out)
        mixed.casts = sum(1 for n in out.node if n.name.startswith("fp16bisect/cast"))
        mixed.notes = self.notes
        return mixed

    def _emptied_copy(self) -> tuple[onnx.ModelProto, list[onnx.NodeProto], Fresh, Fresh]:
        """A copy of the model without its nodes, the nodes, and the makers of new tensor and node names (none
        taken by the model)."""
        g = self.graph.model.graph
        model = onnx.ModelProto()
        model.CopyFrom(self.graph.model)
        originals = list(model.graph.node)
        del model.graph.node[:]
        taken_tensors = {t for n in originals for t in (*n.input, *n.output)} | {v.name for v in g.input}
        taken_tensors |= {t.name for t in g.initializer}
        taken_nodes = {n.name for n in originals if n.name}
        return model, originals, Fresh(taken_tensors), Fresh(taken_nodes)

    def _half_names(self, wants: dict[str, set], fresh_t: Fresh) -> dict[str, str]:
        """Constant -> the name of its FP16 copy: its own when nothing reads it in FP32 and it is no graph output."""
        outputs = {o.name for o in self.graph.model.graph.output}
        return {t: t if wants[t] == {self.half} and t not in outputs else fresh_t(f"{t}_fp16")
                for t in self.constants if self.half in wants.get(t, ())}

    def _write_node(self, out: onnx.GraphProto, node: Node, original: onnx.NodeProto,
                    decision: tuple[int, list[int | None]] | None, views: _Views, mixed: Mixed) -> None:
        """One node as decided: its inputs read in the precisions required (Casts where they cross), written as
        it is, as a BatchNormalization fold, or between the Casts of FP32 accumulation."""
        proto = onnx.NodeProto()
        proto.CopyFrom(original)
        if decision is None:  # a float Constant: rewritten in place by _write_constants
            out.node.add().CopyFrom(self._constant_node(proto, views.half_name))
            return
        p, required = decision
        for i, (t, q) in enumerate(zip(node.inputs, required)):
            if q is not None:
                proto.input[i] = views(t, q)
        for t in node.implicit:  # subgraphs read outer tensors in FP32
            if self.graph.is_float(t) and t not in self.constants and self.prec.get(t) == self.half:
                rename_reads(proto, t, views(t, FLOAT))
        if p == self.half:
            mixed.fp16_nodes.append(node.id)
        if node.id in self.folds:
            self._write_fold(out, node, proto, proto.input[0], views.fresh_t, views.fresh_n, mixed)
        elif node.id in self.accumulate and p == self.half:
            cast_around(out, proto, node.id, self.half, [i for i, q in enumerate(required) if q == self.half],
                        [i for i, t in enumerate(node.outputs) if self.prec.get(t) == self.half], views.fresh_t,
                        views.fresh_n)
        else:
            out.node.append(proto)

    def _write_constants(self, out: onnx.GraphProto, half_name: dict, readers: dict, mixed: Mixed) -> None:
        by_name = {t.name: t for t in out.initializer}
        for t, name in half_name.items():
            mixed.fp16_constants += 1
            tensor = self.graph.half_constant(t, name)  # in the work directory when the graph has one: shared
            if t in by_name and name == t:
                by_name[t].CopyFrom(tensor)
            elif t in by_name or name != t:
                out.initializer.append(tensor)
        for v in [*out.input, *out.value_info]:  # declarations of constants now stored in FP16
            if v.name in half_name and half_name[v.name] == v.name and v.type.HasField("tensor_type"):
                v.type.tensor_type.elem_type = self.half

    def _constant_node(self, proto: onnx.NodeProto, half_name: dict) -> onnx.NodeProto:
        t = proto.output[0]
        if half_name.get(t) != t:
            return proto  # read in FP32 only, or its FP16 copy is an initializer
        node = helper.make_node("Constant", [], [t], name=proto.name,
                                value=numpy_helper.from_array(constant_to_fp16(self.constants[t], self.graph.precision), t))
        return node

    def _retype_io(self, out: onnx.GraphProto, fresh_t, fresh_n) -> None:
        want = self.half if self.fp16_io else FLOAT
        for v in out.input:
            if v.name in self.prec:
                v.type.tensor_type.elem_type = self.prec[v.name]
        inputs = {v.name for v in out.input}
        for v in out.output:
            t = v.name
            if t not in self.prec or t in inputs:
                continue
            if self.prec[t] != want:
                inner = fresh_t(f"{t}_{'fp32' if want == self.half else 'fp16'}")
                for n in out.node:
                    if t in n.output and not n.name:  # keep the name TensorRT gives it: node_of_<first output>
                        n.name = fresh_n(f"node_of_{n.output[0]}")
                    rename(n, t, inner)
                self.prec[inner] = self.prec[t]
                out.node.append(helper.make_node("Cast", [inner], [t], name=fresh_n(f"fp16bisect/cast_output/{t}"),
                                                 to=want))
                self.prec[t] = want
            v.type.tensor_type.elem_type = want

    @staticmethod
    def _drop_unread(out: onnx.GraphProto, names: set) -> None:
        """Statistics of folded BatchNormalizations that nothing else reads: no dead weights in the file."""
        read = {t for n in out.node for t in (*n.input, *outer_reads(n))} | {v.name for v in out.output}
        dead = names - read
        if not dead:
            return
        keep = [t for t in out.initializer if t.name not in dead]
        del out.initializer[:]
        out.initializer.extend(keep)
        keep_nodes = [n for n in out.node if not (n.op_type == "Constant" and n.output and n.output[0] in dead)]
        del out.node[:]
        out.node.extend(keep_nodes)
        keep_info = [v for v in out.value_info if v.name not in dead]
        del out.value_info[:]
        out.value_info.extend(keep_info)

    def _retype_value_info(self, out: onnx.GraphProto) -> None:
        for v in out.value_info:
            if v.name in self.prec and v.type.HasField("tensor_type"):
                v.type.tensor_type.elem_type = self.prec[v.name]
