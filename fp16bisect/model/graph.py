"""A read-only view of an ONNX model: node ids, topological order, candidates.

Node identity (a public interface): a node is named by its ONNX ``name`` when
that is non-empty and unique in the graph, else by its first output tensor's
name (unique in ONNX).

Candidates are the nodes that compute floating-point tensors: not transparent
(data movement and shape ops take the precision of their producer and never
round a value themselves), in the default ONNX domain, with at least one
float32 output.
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from fp16bisect.errors import UsageError
from fp16bisect.model import fp16, weights
from fp16bisect.model.functions import inline
from fp16bisect.model.loading import DEFAULT_DOMAINS, load_model
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.model.subgraphs import nested_nodes, outer_reads, subgraphs

FLOAT = TensorProto.FLOAT
EXACT_TYPES = {TensorProto.BOOL, TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
               TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}  # compared exactly

# Ops that move or reshape data, compute shapes, or only change types.
TRANSPARENT_OPS = frozenset(
    """
    Reshape Transpose Squeeze Unsqueeze Flatten Identity Concat Split SplitToSequence
    Slice Gather GatherElements GatherND Expand Tile Shape Size Constant ConstantOfShape
    Cast CastLike Dropout DepthToSpace SpaceToDepth Pad NonZero Range Optional
    OptionalGetElement OptionalHasElement SequenceAt SequenceConstruct SequenceEmpty
    SequenceInsert SequenceErase SequenceLength ConcatFromSequence EyeLike Trilu
    """.split()
)

# Float inputs that are parameters, not data: rounding Resize's could change a shape. BatchNormalization's
# statistics are parameters too; those its opset types like X are stored in FP16 when it runs in FP16 (before
# opset 15: ``half_statistics``), unless the writer folds them (``Graph.batchnorm_fold``), as TensorRT's parser
# folds them into one scale and shift in FP32 (a variance of 1e8, seen in PP-OCRv4, is no overflow there).
PARAMETER_INPUTS = {"Resize": {1, 2}, "Upsample": {1}, "BatchNormalization": {1, 2, 3, 4}}

LARGE = 1 << 22  # elements of an activation that make a model's activations large


_STORE_LOCK = threading.Lock()


@dataclass(frozen=True)
class Node:
    index: int  # position in the model's graph.node
    id: str
    name: str
    op_type: str
    domain: str
    inputs: tuple
    outputs: tuple
    implicit: tuple = ()  # outer-scope tensors read by its subgraphs (If, Loop, Scan)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    elem_type: int
    shape: tuple | None  # ints, strings for symbolic dims, None for unknown (the whole shape None: unknown rank)


class Graph:
    """Load once, ask many questions."""

    def __init__(self, model: onnx.ModelProto, path: Path | None = None, sha256: str = "",
                 workdir: str | Path | None = None, precision: Precision = FP16):
        """``precision``: the low precision every plan of this graph runs in (``model/precision.py``); a BF16
        graph below the opset where its operators take bfloat16 is upgraded (``upgraded_for``)."""
        self.precision = precision
        model, self.calls = inline(model)  # inlined node id -> (function, outermost call id): ``model/functions.py``
        model = upgraded_for(model, precision)
        self.model = model  # loaded by ``load``: a skeleton whose weights are in files (``model/weights.py``)
        self.path = path  # the file the model is read from
        self.name: str | None = None  # what files and messages call it, when not ``path`` (``shown``)
        self.sha256 = sha256
        self._workdir = workdir
        self._store: weights.Store | None = None
        graph = model.graph
        if len(graph.node) == 0:
            raise UsageError("the model's graph has no nodes: export the model again with its operators")
        if len(graph.output) == 0:
            raise UsageError("the model's graph declares no outputs: export the model again with its outputs")
        self.initializers = {t.name for t in graph.initializer}
        self.opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 1)
        self._folds: dict[str, fp16.BatchNormFold | None] = {}
        self._conversions: dict[str, fp16.Conversion | None] = {}
        self._constants: dict | None = None
        self.inputs = [_spec(v) for v in graph.input if v.name not in self.initializers]
        self.outputs = [_spec(v) for v in graph.output]
        self.dtypes, self.ranks, self.shapes, self.inner_types = _tensor_types(model)

        names = Counter(n.name for n in graph.node if n.name)
        self.duplicate_names = {name for name, count in names.items() if count > 1}
        raw = []
        for i, n in enumerate(graph.node):
            if n.name and names[n.name] == 1:
                node_id = n.name
            elif n.output and n.output[0]:
                node_id = n.output[0]
            else:
                node_id = f"#{i}"
            raw.append(
                Node(i, node_id, n.name, n.op_type, n.domain, tuple(n.input), tuple(n.output), outer_reads(n))
            )
        self.nodes = _toposort(raw, {v.name for v in graph.input} | self.initializers)
        self.by_id = {n.id: n for n in self.nodes}
        self.skipped: dict[str, str] = {}
        self.candidates = [n for n in self.nodes if self._is_candidate(n)]
        self.nested = {  # control-flow node id -> nodes inside its subgraphs
            node.id: count for node in self.nodes if (count := nested_nodes(graph.node[node.index]))
        }

    def runnable_copy(self) -> onnx.ModelProto:
        """A copy of the model ONNX Runtime accepts: nodes that share a name are renamed to their id."""
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        taken = {n.name for n in model.graph.node if n.name and n.name not in self.duplicate_names}
        for node in self.nodes:
            if node.name in self.duplicate_names:
                name = node.id
                while name in taken:
                    name += "_"
                taken.add(name)
                model.graph.node[node.index].name = name
        return model

    @property
    def shown(self) -> str:
        """The model as override files, their exported commands and messages name it: ``name`` when set (a model
        the Python API was given in memory is ``model.onnx``, read from a temporary file), else its path."""
        return self.name or (str(self.path) if self.path else "model.onnx")

    @classmethod
    def load(cls, path: str | Path, workdir: str | Path | None = None, precision: Precision = FP16) -> "Graph":
        """The model at ``path``, its weights read where they are (its own file, or its external data files);
        the FP16 copies of constants that need one are written to a work directory made in ``workdir``
        (default: the system's temporary directory) when first asked for."""
        return cls(*load_model(path), workdir=workdir, precision=precision)

    @property
    def store(self) -> weights.Store | None:
        """The work directory of this model's FP16 constants: made on first use for a model read from a file
        (written copies shared by the emulation and every plan's file), None for one built in memory."""
        with _STORE_LOCK:  # plans written from several threads (the command backend) share one store
            return self._store_made()

    def _store_made(self) -> weights.Store | None:
        if self._store is None and self.path is not None:
            try:
                self._store = weights.Store(self._workdir)
            except OSError as exc:
                raise UsageError(f"cannot make a work directory in {str(self._workdir or '')!r} ({exc.strerror}): "
                                 "free some disk space or choose another -o") from None
        return self._store

    def half_constant(self, tensor: str, name: str) -> onnx.TensorProto:
        """An initializer ``name`` holding the FP16 value the writer stores for float32 constant ``tensor``
        (``fp16.convert``): written once to the work directory and shared, or inline without one."""
        if self.store is None:
            return onnx.numpy_helper.from_array(self._convert(tensor), name)
        kind = "half" if self.precision is FP16 else self.precision.name
        return self.store.derived(f"{kind}/{tensor}", name, lambda: self._convert(tensor))

    def _convert(self, tensor: str) -> np.ndarray:
        """The constant in FP16 by the rule; what the rule changed is kept (``conversion``)."""
        half, self._conversions[tensor] = fp16.convert(self.constant_value(tensor), tensor, precision=self.precision)
        return half

    @property
    def external_data(self) -> bool:
        """The model keeps weights in files of their own (external data), not in its .onnx file."""
        own = str(self.path.resolve()) if self.path is not None else None
        return any(weights.is_external(t) and weights.reference(t)[0] != own for t in self.model.graph.initializer)

    @property
    def large_activations(self) -> bool:
        """Some float tensor computed at run time holds 4M elements or more (by shape inference): its sessions
        run without ONNX Runtime's memory arena (``runtime.session``)."""
        return any(len(shape) and all(isinstance(d, int) for d in shape) and np.prod(shape) >= LARGE
                   for name, shape in self.shapes.items() if name not in self.initializers)

    def is_float(self, tensor: str) -> bool:
        return bool(tensor) and self.dtypes.get(tensor) == FLOAT

    def float_outputs(self, node: Node) -> list[str]:
        return [t for t in node.outputs if self.is_float(t)]

    def rounded_inputs(self, node: Node) -> list[tuple[int, str]]:
        """(position, tensor) of the float inputs an FP16 node reads in FP16: its data inputs, and the
        BatchNormalization statistics its opset stores in FP16 (none when the writer folds them)."""
        params = PARAMETER_INPUTS.get(node.op_type, set())
        if node.op_type == "BatchNormalization" and self.batchnorm_fold(node) is None:
            params = params - set(fp16.half_statistics(self.opset))
        return [(i, t) for i, t in enumerate(node.inputs) if i not in params and self.is_float(t)]

    def constant_value(self, tensor: str) -> np.ndarray | None:
        """The value of a float32 constant: an initializer that is not a graph input, or a Constant's value."""
        if not self.is_float(tensor):
            return None
        if self._constants is None:
            inputs = {v.name for v in self.model.graph.input}
            self._constants = {t.name: t for t in self.model.graph.initializer if t.name not in inputs}
            self._constants.update((n.output[0], n) for n in self.model.graph.node if n.op_type == "Constant" and n.output)
        found = self._constants.get(tensor)
        if found is None:
            return None
        if isinstance(found, onnx.TensorProto):
            return weights.array(found)
        return fp16.constant_node_value(found)

    def conversion(self, tensor: str, readers=()) -> fp16.Conversion | None:
        """What storing float32 constant ``tensor`` in FP16 changes beyond rounding (``fp16.conversion``), found
        when it is first converted (its FP16 copy written then, for a model read from a file); ``readers``: the
        FP16 nodes that read it, for the message."""
        if tensor not in self._conversions:
            if self.store is not None and tensor in self.initializers:
                self.half_constant(tensor, tensor)
            else:
                self._convert(tensor)
        found = self._conversions[tensor]
        return None if found is None else replace(found, readers=tuple(readers))

    def batchnorm_fold(self, node: Node) -> fp16.BatchNormFold | None:
        """How an FP16 BatchNormalization is written when FP16 cannot hold the statistics its opset stores in
        FP16: its folded scale and shift (``fp16.batchnorm_fold``); None when it is written as it is."""
        if node.op_type != "BatchNormalization":
            return None
        if node.id not in self._folds:
            self._folds[node.id] = fp16.batchnorm_fold(self, node, self.precision)
        return self._folds[node.id]

    def producers(self, node: Node) -> list[str]:
        """The candidates whose values transparent ``node`` passes on (it takes their precision): the producers of
        its float inputs, followed back through other transparent nodes; graph inputs and constants have none."""
        made = {t: n for n in self.nodes for t in n.outputs if t}
        candidates, found, seen = {n.id for n in self.candidates}, [], set()
        passes = node.op_type in TRANSPARENT_OPS and self.float_outputs(node)  # a Shape passes on no float
        stack = [t for t in reversed(node.inputs) if self.is_float(t)] if passes else []
        while stack:
            source = made.get(tensor := stack.pop())
            if source is None or tensor in seen:
                continue
            seen.add(tensor)
            if source.id in candidates:
                found.append(source.id)
            elif source.op_type in TRANSPARENT_OPS:
                stack.extend(t for t in reversed(source.inputs) if self.is_float(t))
        return list(dict.fromkeys(found))

    def float_output_names(self) -> list[str]:
        return [o.name for o in self.outputs if o.elem_type == FLOAT]

    def judged_output_names(self) -> list[str]:
        """The outputs a plan is judged on: the float32 ones, and the integer and boolean ones (exactly)."""
        return [o.name for o in self.outputs if o.elem_type == FLOAT or o.elem_type in EXACT_TYPES]

    def _is_candidate(self, node: Node) -> bool:
        if node.op_type in TRANSPARENT_OPS:
            return False
        if not self.float_outputs(node):
            return False
        if node.domain not in DEFAULT_DOMAINS:
            self.skipped[node.id] = f"custom domain {node.domain!r}"
            return False
        return True


BF16_OPSET = 22  # the first opset whose Conv, pooling, GRU/LSTM and the rest take bfloat16 (13 for Cast, MatMul)


def upgraded_for(model: onnx.ModelProto, precision: Precision) -> onnx.ModelProto:
    """The model as a ``precision`` plan's file holds it: a BF16 model below opset 22 is upgraded to opset 22
    with ``onnx.version_converter`` (before 22, Conv, pooling and recurrent ops do not take bfloat16, and before
    13 no Cast does); FP16 models, and BF16 ones at 22 or later, are returned as they are. A model the converter
    cannot upgrade is a usage error."""
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 1)
    if precision is FP16 or opset >= BF16_OPSET:
        return model
    from onnx import version_converter

    try:
        upgraded = version_converter.convert_version(model, BF16_OPSET)
    except Exception as exc:  # noqa: BLE001 (the converter raises its own kinds)
        raise UsageError(f"this opset {opset} model cannot be upgraded to opset {BF16_OPSET}, the first where its "
                         f"operators take bfloat16 ({str(exc).splitlines()[0][:120]}): export it at opset "
                         f"{BF16_OPSET} or later, or use --precision fp16") from None
    upgraded.ir_version = max(model.ir_version, 8)
    return upgraded


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    t = value.type.tensor_type
    dims = []
    if t.HasField("shape"):
        for d in t.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    shape = tuple(dims) if t.HasField("shape") else None
    return TensorSpec(value.name, t.elem_type, shape)


def _tensor_types(model: onnx.ModelProto) -> tuple[dict, dict, dict, dict]:  # noqa: C901  every source of a type
    # or shape (declared, initializer, Constant, inferred, in subgraphs) in one pass; visit() counts into it
    """Element type of every tensor (declared, initializer, Constant, or inferred), the rank of those whose rank
    is declared or inferred, the shapes (ints, None for unknown dims) and the types of tensors inside subgraphs.
    One shape inference, on the model as loaded: its weights are in files, so this reads no weight bytes."""
    graph = model.graph
    types: dict[str, int] = {}
    ranks: dict[str, int] = {}
    shapes: dict[str, tuple] = {}
    inner: dict[str, int] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        inferred = model
    for v in [*graph.input, *graph.output, *graph.value_info, *inferred.graph.value_info]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
            types.setdefault(v.name, v.type.tensor_type.elem_type)
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            ranks.setdefault(v.name, len(v.type.tensor_type.shape.dim))
    for t in graph.initializer:
        types[t.name] = t.data_type
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    types[n.output[0]] = a.t.data_type
                elif a.name in ("value_float", "value_floats"):
                    types[n.output[0]] = FLOAT

    def visit(g: onnx.GraphProto, top: bool) -> None:
        for v in [*g.input, *g.output, *g.value_info]:
            t = v.type.tensor_type
            if v.type.HasField("tensor_type") and t.elem_type:
                if not top:
                    inner.setdefault(v.name, t.elem_type)
                if t.HasField("shape"):
                    shapes.setdefault(v.name, tuple(d.dim_value if d.HasField("dim_value") else None
                                                    for d in t.shape.dim))
        for t in g.initializer:
            if not top:
                inner.setdefault(t.name, t.data_type)
            shapes.setdefault(t.name, tuple(t.dims))
        for n in g.node:
            for sub in subgraphs(n):
                visit(sub, False)

    visit(inferred.graph, True)
    unknown = [t for n in graph.node for t in n.output if t and t not in types]
    if unknown:
        types.update(_types_from_runtime(model, unknown))
    return types, ranks, shapes, inner


def _types_from_runtime(model: onnx.ModelProto, tensors: list[str]) -> dict[str, int]:
    """Ask ONNX Runtime for the types shape inference could not find."""
    from fp16bisect.model.runtime import session

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=t) for t in tensors)
    try:  # best effort: a model ONNX Runtime cannot load fails later with a clear message
        outputs = session(probe, "the model").get_outputs()
    except UsageError:
        return {}
    found: dict[str, int] = {}
    for out in outputs:
        kind = out.type  # e.g. "tensor(float)"
        if kind.startswith("tensor(") and kind.endswith(")"):
            np_name = {"float": "float32", "double": "float64"}.get(kind[7:-1], kind[7:-1])
            try:
                found[out.name] = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(np_name))
            except TypeError:
                pass
    return found


def _toposort(nodes: list[Node], available: set[str]) -> list[Node]:
    """Kahn's algorithm; stable (keeps file order among ready nodes)."""
    produced = {t: n.index for n in nodes for t in n.outputs if t}
    waiting: dict[int, int] = {}
    consumers: dict[int, list[int]] = {n.index: [] for n in nodes}
    for n in nodes:
        deps = {produced[t] for t in (*n.inputs, *n.implicit) if t in produced and t not in available}
        deps.discard(n.index)
        waiting[n.index] = len(deps)
        for d in deps:
            consumers[d].append(n.index)
    by_index = {n.index: n for n in nodes}
    ready = [i for i, w in waiting.items() if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(by_index[i])
        for c in consumers[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, c)
    if len(order) != len(nodes):
        stuck = sorted(set(by_index) - {n.index for n in order})[:3]
        names = ", ".join(by_index[i].id for i in stuck)
        raise UsageError(f"the graph has a cycle (through {names}): export an acyclic ONNX graph")
    return order


def notes(graph: "Graph") -> list[str]:
    """What the search does not cover in this model, said up front."""
    found = []
    if graph.skipped:
        names = ", ".join(list(graph.skipped)[:5]) + (", ..." if len(graph.skipped) > 5 else "")
        found.append(f"{len(graph.skipped)} node(s) of custom domains are not searched and run as in the model: {names}")
    if graph.nested:
        inside = sum(graph.nested.values())
        found.append(
            f"{inside} node(s) inside the subgraphs of {len(graph.nested)} control-flow node(s) "
            f"({', '.join(list(graph.nested)[:5])}) are not searched one by one: each control-flow node is one "
            "candidate, and its subgraphs are rounded with it (FP16 inside when it is in FP16)"
        )
    if graph.calls:
        calls = sorted({call for _, call in graph.calls.values()})
        found.append(f"the model's local functions were inlined: node ids <call>/<node> name the nodes of "
                     f"{len(calls)} function call(s) ({', '.join(calls[:5])}{', ...' if len(calls) > 5 else ''})")
    return found
