"""The answer's engine against the all-FP16 engine: where each FP32 pin and FP32-accumulation node landed.

From two build logs (``build_log.py``: the engine of the answer's mixed-precision file and the engine of the
all-FP16 file) and the written files' wiring, for each node of the answer: the kernel it landed in, the model's
nodes that kernel covers, the data types the kernel reads and writes, and whether the node's output is stored (a
tensor between kernels, or an output of the model) or internal to its kernel. A pin is moot where the all-FP16
engine does not compute the node at all (the compiler removed it: a cancelled ``x*4096/4096`` pair), so that
nothing can overflow there; it is told from the kernels' metadata and the operations a generated kernel's name
lists, never guessed for kernels whose names list none (GEMM, convolution, fused attention). A pin splits a kernel
where the model nodes of one all-FP16 kernel are spread over more kernels in the answer's engine.

Nothing here changes a verdict: the engines are built, not run.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
import onnx

from fp16bisect.artifacts.accumulation import CAST_PREFIX
from fp16bisect.artifacts.exports import trtexec_layer_name
from fp16bisect.diagnose.build_log import BuildLog, LoggedWarning
from fp16bisect.model.graph import TRANSPARENT_OPS, Graph, Node

FP32, ACCUMULATION = "fp32", "fp32-accumulation"  # the two states a node of the answer is in
STORED, INTERNAL, SPREAD, UNTOLD, ABSENT = "stored", "internal", "spread", "not told", "no kernel names it"
PASS_THROUGH = TRANSPARENT_OPS - {"Shape", "Size"}  # ops that hand their input's values on
# The words a kernel Myelin generated writes in its name for an op's arithmetic (seen on TensorRT-RTX 1.7 builds
# of the sample models and PP-OCRv4: Div -> Mul by the reciprocal, Pow(x, 2) -> Mul, MatMul -> Fc, Conv -> Corr).
# An op type not listed here is never said to be removed.
OP_WORDS = {
    "Add": {"Add"}, "Sub": {"Sub", "Add"}, "Mul": {"Mul"}, "Div": {"Div", "Mul"}, "Pow": {"Pow", "Mul"},
    "Sqrt": {"Sqrt", "Rsqrt"}, "Reciprocal": {"Div", "Rcp"}, "Neg": {"Neg", "Sub", "Mul"}, "Abs": {"Abs"},
    "Exp": {"Exp"}, "Log": {"Log"}, "Erf": {"Erf"}, "Tanh": {"Tanh"}, "Relu": {"Relu", "Max"},
    "Sigmoid": {"Sigm", "Sigmoid", "Silu"}, "Clip": {"Max", "Min", "Clip"}, "MatMul": {"Fc"}, "Gemm": {"Fc"},
    "Conv": {"Corr", "Conv", "Fc"}, "ReduceMean": {"Mean"}, "ReduceSum": {"Sum"}, "GlobalAveragePool": {"Mean"},
    "Softmax": {"Exp"}, "BatchNormalization": {"Mul", "Add"},
}
LIMITS = ("the engines are built, not run: which arithmetic and accumulators the kernels use inside is chosen at "
          "JIT time on a GPU")
RTX_ONLY = "TensorRT-RTX compiled these engines; TensorRT 10/11 on a GPU may fuse and remove otherwise"


@dataclass(frozen=True)
class Wiring:
    """A written file's nodes as TensorRT names their layers: which model node each computes (``owner``; "" for a
    node fp16bisect wrote: Casts, folds), its op type and outputs, and each tensor's readers."""

    owner: Mapping[str, str]
    op_type: Mapping[str, str]
    outputs: Mapping[str, tuple[str, ...]]
    readers: Mapping[str, tuple[str, ...]]
    graph_outputs: frozenset[str]
    layers: Mapping[str, str] = field(default_factory=dict)  # model node id -> the layer that computes it

    @classmethod
    def of(cls, model: onnx.ModelProto, graph: Graph) -> Wiring:
        """The wiring of ``model``, a file written from ``graph`` (the model's nodes keep their names there; an
        unnamed node in FP32 accumulation writes a renamed tensor that its own Cast down reads)."""
        named = {n.name: n.id for n in graph.nodes if n.name and n.name not in graph.duplicate_names}
        ids = set(named.values())
        first = {n.outputs[0]: n.id for n in graph.nodes if n.outputs and n.id not in ids}
        owner: dict[str, str] = {}
        op_type: dict[str, str] = {}
        outputs: dict[str, tuple[str, ...]] = {}
        readers: dict[str, list[str]] = {}
        for i, proto in enumerate(model.graph.node):
            layer = trtexec_layer_name(Node(i, "", proto.name, proto.op_type, proto.domain, tuple(proto.input),
                                            tuple(proto.output)))
            owner[layer] = named.get(proto.name) or first.get(proto.output[0] if proto.output else "", "")
            op_type[layer], outputs[layer] = proto.op_type, tuple(proto.output)
            for tensor in proto.input:
                readers.setdefault(tensor, []).append(layer)
        for layer in [name for name, node in owner.items() if not node]:
            for reader in readers.get(outputs[layer][0] if outputs[layer] else "", ()):  # its own Cast down
                if reader.startswith(CAST_PREFIX) and "/out/" in reader:
                    owner[layer] = reader[len(CAST_PREFIX):].rsplit("/out/", 1)[0]
        layers: dict[str, str] = {}
        for layer, node in owner.items():
            if node:
                layers.setdefault(node, layer)
        return cls(owner, op_type, outputs, {t: tuple(r) for t, r in readers.items()},
                   frozenset(o.name for o in model.graph.output), layers)

    @functools.cached_property
    def order(self) -> dict[str, int]:
        """Model node id -> its place in the file (topological order)."""
        return {node: i for i, node in enumerate(self.layers)}

    def layer_of(self, node: str) -> str | None:
        """The layer that computes model node ``node`` (None: the file has none)."""
        return self.layers.get(node)


@dataclass(frozen=True)
class Landing:
    """A kernel a node landed in: its name and type, the data types it reads and writes, the model's nodes it
    covers and how many nodes fp16bisect wrote (Casts) it covers too."""

    name: str
    layer_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    covers: tuple[str, ...]
    casts: int

    def to_dict(self) -> dict:
        return {"name": self.name, "layer_type": self.layer_type, "inputs": list(self.inputs),
                "outputs": list(self.outputs), "covers": list(self.covers), "casts": self.casts}


@dataclass(frozen=True)
class Split:
    """One all-FP16 kernel whose model nodes are in more kernels in the answer's engine."""

    kernel: str  # the all-FP16 kernel
    nodes: int  # model nodes it covers
    into: tuple[str, ...]  # the answer's kernels covering them

    def __str__(self) -> str:
        return f"splits {self.kernel} ({self.nodes} nodes) into {len(self.into)} kernels: {', '.join(self.into)}"


@dataclass(frozen=True)
class Placement:
    """Where one node of the answer (an FP32 pin or an FP32-accumulation node) landed."""

    node: str
    op_type: str
    state: str  # FP32 or ACCUMULATION
    kernels: tuple[Landing, ...]  # in the answer's engine (usually one)
    output: str  # STORED, INTERNAL, SPREAD (in several kernels), UNTOLD (a reader in no named kernel) or ABSENT
    moot: str = ""  # why the all-FP16 engine does not compute it ("" when it does, or when that is not told)
    computed: bool | None = True  # the answer's engine computes it (None: not told)
    split: Split | None = None
    warned: bool = False  # a warning of the all-FP16 build names it
    fp16_kernels: tuple[Landing, ...] = ()  # the kernels that name it in the all-FP16 engine

    def to_dict(self) -> dict:
        return {"name": self.node, "op_type": self.op_type, "state": self.state,
                "kernels": [k.to_dict() for k in self.kernels], "output": self.output, "moot": bool(self.moot),
                "fp16_kernels": [k.to_dict() for k in self.fp16_kernels],
                "moot_reason": self.moot or None, "computed": self.computed,
                "split": None if self.split is None else {"kernel": self.split.kernel, "nodes": self.split.nodes,
                                                          "into": list(self.split.into)},
                "warned_all_fp16": self.warned}


@dataclass(frozen=True)
class NamedWarning:
    """A warning of the answer's build that names model nodes."""

    text: str
    nodes: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.text.rstrip('.')}: {', '.join(self.nodes)}"


@dataclass(frozen=True)
class KernelPlan:
    """The answer's engine, as TensorRT built it: each node of the answer with its kernel (``placements``),
    the kernel counts of both engines, how many model nodes store their output, and TensorRT's warnings that
    name model nodes. ``str()`` reads as a report; ``to_dict()`` is the JSON."""

    model: str
    overrides: str
    runtime: str  # e.g. "tensorrt_rtx 1.7.0.12 (strongly typed)"
    placements: tuple[Placement, ...]
    kernels: int  # in the answer's engine
    fp16_kernels: int  # in the all-FP16 engine
    outputs: Mapping[str, int]  # model nodes of the answer's engine by where their output is: STORED, INTERNAL, ...
    warnings: tuple[NamedWarning, ...] = ()
    notes: tuple[str, ...] = (LIMITS,)
    shapes: Mapping[str, tuple] = field(default_factory=dict)  # input -> (min, opt, max) the engines were built for
    sha256: str = ""  # the model's
    unnamed: int = 0  # kernels of the answer's engine whose metadata names no ONNX node
    fp16_unnamed: int = 0  # the same in the all-FP16 engine

    @property
    def moot(self) -> list[Placement]:
        return [p for p in self.placements if p.moot]

    @property
    def splits(self) -> list[Placement]:
        return [p for p in self.placements if p.split]

    def summary(self) -> str:
        more = self.kernels - self.fp16_kernels
        count = f"{self.kernels} kernels (all-FP16: {self.fp16_kernels}" + \
            (f"; the answer's pins add {more})" if more > 0 else ")")
        stored = ", ".join(f"{n} {where}" for where, n in self.outputs.items() if n)
        unnamed = f"; {self.unnamed} kernels name no ONNX node (all-FP16: {self.fp16_unnamed})" \
            if self.unnamed or self.fp16_unnamed else ""
        return f"{self.runtime}: {count}; the model's node outputs: {stored or 'none'}{unnamed}"

    def lines(self) -> list[str]:
        """The findings after the table: moot pins, splits, warnings, notes."""
        said = [f"moot: {p.node}: {p.moot}" for p in self.moot]
        said += [f"split: {p.node} {p.split}" for p in self.splits]
        said += [f"{p.node}: no kernel of the all-FP16 engine names it, and {self.fp16_unnamed} of its kernels name "
                 "no node: whether it computes it is not told" for p in self.placements
                 if not p.fp16_kernels and not p.moot]
        said += [f"{p.node}: no kernel of the answer's engine names it" + (
            f", and {self.unnamed} of its kernels name no node: whether it computes it is not told" if self.unnamed
            else ": it does not compute it either") for p in self.placements if not p.kernels]
        said += [f"TensorRT warns: {w}" for w in self.warnings]
        quiet = {n for w in self.warnings for n in w.nodes}
        said += [f"TensorRT's warning in the all-FP16 build names {p.node}; the answer's build does not"
                 for p in self.placements if p.warned and p.node not in quiet]
        return said + list(self.notes)

    def __str__(self) -> str:
        rows = [f"kernel plan of {self.model} with {self.overrides}", self.summary()]
        for p in self.placements:
            rows.append(f"  {p.node} ({p.op_type}, {_STATE[p.state]}): " + "; ".join(
                f"{k.name} [{k.layer_type}] {types(k.inputs)} -> {types(k.outputs)}" for k in p.kernels)
                + f"; output {p.output}" if p.kernels else f"  {p.node} ({p.op_type}, {_STATE[p.state]}): no kernel")
        return "\n".join(rows + self.lines())

    def to_dict(self) -> dict:
        return {"model": self.model, "model_sha256": self.sha256, "overrides": self.overrides, "runtime": self.runtime,
                "summary": self.summary(),
                "shapes": {k: [list(s) for s in v] for k, v in self.shapes.items()},
                "kernels": self.kernels, "fp16_kernels": self.fp16_kernels, "outputs": dict(self.outputs),
                "nodes": [p.to_dict() for p in self.placements],
                "warnings": [{"text": w.text, "nodes": list(w.nodes)} for w in self.warnings], "notes": list(self.notes),
                "findings": self.lines()}


_STATE = {FP32: "FP32", ACCUMULATION: "FP32 accumulation"}
_LABELS = {"float16": "FP16", "float32": "FP32", "bfloat16": "BF16"}


def types(dtypes: Iterable[str]) -> str:
    """``FP16, FP32``: the distinct data types, in order; ``-`` for none."""
    return ", ".join(dict.fromkeys(_LABELS.get(d, d) for d in dtypes)) or "-"


@dataclass(frozen=True)
class Engine:
    """One engine: its build log and the wiring of the file it was built from."""

    log: BuildLog
    wiring: Wiring

    def homes(self) -> dict[str, tuple[int, ...]]:
        """Layer name -> the indexes of the kernels whose metadata names it."""
        found: dict[str, list[int]] = {}
        for i, kernel in enumerate(self.log.kernels):
            for layer in kernel.nodes:
                found.setdefault(layer, []).append(i)
        return {layer: tuple(dict.fromkeys(k)) for layer, k in found.items()}

    @property
    def unnamed(self) -> int:
        """Its kernels whose metadata names no ONNX node (Myelin leaves some so: a node may be in one unseen)."""
        return sum(1 for kernel in self.log.kernels if not kernel.nodes)

    def landing(self, i: int) -> Landing:
        kernel = self.log.kernels[i]
        covers = [self.wiring.owner.get(layer, "") for layer in kernel.nodes]
        order = self.wiring.order
        nodes = sorted(dict.fromkeys(c for c in covers if c), key=lambda n: order.get(n, len(order)))
        return Landing(kernel.name, kernel.layer_type, tuple(t.dtype for t in kernel.inputs),
                       tuple(t.dtype for t in kernel.outputs), tuple(nodes), sum(1 for c in covers if not c))


def compare(answer: Engine, fp16: Engine, nodes: Mapping[str, tuple[str, str]], *, model: str = "",
            overrides: str = "", runtime: str = "", notes: tuple[str, ...] = (LIMITS,)) -> KernelPlan:
    """The kernel plan of the answer: ``nodes`` (model node id -> (op type, FP32 or ACCUMULATION), in order) in
    the answer's engine against the all-FP16 one."""
    homes, homes16 = answer.homes(), fp16.homes()
    warned = {n for w in fp16.log.warnings for n in _named(w, fp16.wiring)}
    more = len(answer.log.kernels) > len(fp16.log.kernels)  # a split is said only where the pins add kernels
    placements = []
    for node, (op_type, state) in nodes.items():
        layer, layer16 = answer.wiring.layer_of(node), fp16.wiring.layer_of(node)
        mine = homes.get(layer, ()) if layer else ()
        theirs = homes16.get(layer16, ()) if layer16 else ()
        placements.append(Placement(
            node, op_type, state, tuple(answer.landing(i) for i in mine),
            output_kept(layer, answer.wiring, homes, answer.unnamed > 0) if layer else ABSENT,
            moot=_not_computed(fp16, theirs, op_type),
            computed=None if not mine and answer.unnamed else not _not_computed(answer, mine, op_type),
            split=_split(node, answer, fp16, homes, homes16) if more else None, warned=node in warned,
            fp16_kernels=tuple(fp16.landing(i) for i in theirs)))
    outputs = {STORED: 0, INTERNAL: 0, SPREAD: 0}
    for layer, owner in answer.wiring.owner.items():
        if owner and layer in homes:
            where = output_kept(layer, answer.wiring, homes, answer.unnamed > 0)
            outputs[where] = outputs.get(where, 0) + 1
    warnings = tuple(NamedWarning(w.text, named) for w in answer.log.warnings if (named := _named(w, answer.wiring)))
    return KernelPlan(model, overrides, runtime, tuple(placements), len(answer.log.kernels), len(fp16.log.kernels),
                      outputs, warnings, notes, unnamed=answer.unnamed, fp16_unnamed=fp16.unnamed)


def output_kept(layer: str, wiring: Wiring, homes: Mapping[str, tuple[int, ...]], unnamed: bool = False) -> str:
    """Where the output of ``layer`` lives in the engine: STORED when it reaches another kernel or is an output of
    the model (through Casts fp16bisect wrote and data movement no kernel names), INTERNAL when every reader is in
    its one kernel, SPREAD when the layer is in several kernels and no reader shows a boundary, UNTOLD when a reader
    is in no named kernel while some kernels name no node (``unnamed``: it may be in one of those), ABSENT when no
    kernel names the layer."""
    mine = set(homes.get(layer, ()))
    if not mine:
        return ABSENT
    untold = False
    seen: set[str] = set()
    todo = list(wiring.outputs.get(layer, ()))
    while todo:
        tensor = todo.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor in wiring.graph_outputs:
            return STORED
        for reader in wiring.readers.get(tensor, ()):
            theirs = set(homes.get(reader, ()))
            if theirs and theirs.isdisjoint(mine):
                return STORED
            if not wiring.owner.get(reader) or not theirs and wiring.op_type.get(reader) in PASS_THROUGH:
                todo.extend(wiring.outputs.get(reader, ()))  # our Casts, and data movement: the value goes on
            elif not theirs and unnamed:
                untold = True
    return UNTOLD if untold else INTERNAL if len(mine) == 1 else SPREAD


def _not_computed(engine: Engine, mine: Iterable[int], op_type: str) -> str:
    """Why no kernel of ``engine`` computes a node of ``op_type`` its kernels ``mine`` name ("" when one may, or
    when that is not told: no kernel names it, but some kernels name no node)."""
    mine = list(mine)
    if not mine:
        return "" if engine.unnamed else \
            "no kernel of the all-FP16 engine names it, and each kernel there names its nodes: it is removed or folded"
    words = OP_WORDS.get(op_type)
    if words is None:
        return ""
    kernels = engine.log.kernels
    for i in mine:
        ops = kernels[i].ops
        if ops is None or words & set(ops):
            return ""
    names = ", ".join(kernels[i].name for i in mine)
    return (f"the all-FP16 engine's {names} names it but computes no {'/'.join(sorted(words))}: the compiler "
            "removed it, so it cannot overflow there")


def _split(node: str, answer: Engine, fp16: Engine, homes: Mapping, homes16: Mapping) -> Split | None:
    """The all-FP16 kernel of ``node`` whose model nodes the answer's engine spreads over more kernels."""
    layer16 = fp16.wiring.layer_of(node)
    before = homes16.get(layer16, ()) if layer16 else ()
    for i in before:
        together = {owner for layer in fp16.log.kernels[i].nodes if (owner := fp16.wiring.owner.get(layer))}
        layers = [answer.wiring.layer_of(n) for n in sorted(together)]
        after = dict.fromkeys(k for layer in layers if layer for k in homes.get(layer, ()))
        if len(after) > len(before):
            return Split(fp16.log.kernels[i].name, len(together), tuple(answer.log.kernels[k].name for k in after))
    return None


def _named(warning: LoggedWarning, wiring: Wiring) -> tuple[str, ...]:
    """The model nodes a warning names: in the list after it, or as words of its text."""
    words = [w.rstrip(".:") for w in re.split(r"[\s,;'\"()\[\]{}]+", warning.text)]
    return tuple(dict.fromkeys(wiring.owner[w] for w in (*warning.listed, *words) if wiring.owner.get(w)))
