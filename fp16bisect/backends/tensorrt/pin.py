"""Pin ONNX nodes to FP32 in a weakly typed TensorRT 10.x network: the layers of a node, and ``apply_overrides``.

Public (``from fp16bisect.tensorrt import apply_overrides``; an example in docs/backends/tensorrt.md). A layer stays
in FP32 when the config has ``BuilderFlag.FP16`` and ``OBEY_PRECISION_CONSTRAINTS`` and the layer has FP32
precision (set through Polygraphy's ``SetLayerPrecisions``) and FP32 output types (set here: Polygraphy sets only
network I/O types). Layers are matched to ONNX nodes through ``layer.metadata``, which TensorRT's ONNX parser sets
to ``[ONNX Layer: <node name>]`` (`` | Local Function: <f>`` after it inside a local function; onnx-tensorrt
``processMetadata``), an unnamed node's name being ``node_of_<first output>`` (``getNodeName``); never through
layer names, which the parser renames on clashes. Importing this module does not import TensorRT.

Weak typing exists only in TensorRT 10.x, so these names are the ones no installed TensorRT checks here (the tests
check every other name fp16bisect uses against TensorRT-RTX): ``ILayer.precision``, ``ILayer.set_output_type``
(https://docs.nvidia.com/deeplearning/tensorrt/api/python_api/infer/Graph/LayerBase.html) and ``BuilderFlag.FP16``,
``BF16``, ``OBEY_PRECISION_CONSTRAINTS`` (.../infer/Core/BuilderConfig.html).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from fp16bisect.errors import UsageError
from fp16bisect.backends.tensorrt.load import load

STRONGLY_TYPED = (
    "cannot set layer precisions: {why}, where precision comes from the ONNX graph; write a "
    "mixed-precision model with 'fp16bisect apply MODEL.onnx OVERRIDES.json -o MIXED.onnx' and build that instead"
)
# "[ONNX Layer: <node>]" once per node; an engine layer fusing several joins them, with "\x1f" on TensorRT-RTX 1.7
_METADATA = re.compile(r"\[ONNX Layer: (.*?)(?: \| Local Function: [^\]]*)?\](?=\[ONNX Layer: |\x1f|$)", re.S)
# data movement and constants: pinned when they sit between pinned layers, so none rounds an FP32 tensor
TRANSPARENT = ("CONSTANT", "SHUFFLE", "IDENTITY", "SLICE", "CONCATENATION", "GATHER", "SQUEEZE", "UNSQUEEZE")


def metadata_nodes(metadata: str) -> tuple:
    """The ONNX node names in a layer's metadata (an engine layer fusing several nodes names each; a helper layer
    none)."""
    entries = "\x1f".join(part.strip() for part in str(metadata or "").split("\x1f"))
    return tuple(dict.fromkeys(_METADATA.findall(entries)))


def layers(network) -> list:
    return [network.get_layer(i) for i in range(network.num_layers)]


def _outputs(layer) -> list:
    return [layer.get_output(i) for i in range(layer.num_outputs)]


def _inputs(layer) -> list:
    return [t for t in (layer.get_input(i) for i in range(layer.num_inputs)) if t is not None]


@dataclass(frozen=True)
class NodeRef:
    """A node to pin: the names TensorRT may know it by, and its ONNX output tensors (to tell apart
    nodes that share a name)."""

    label: str
    names: tuple
    outputs: tuple = ()

    @classmethod
    def of(cls, name: str, outputs: Sequence[str] = ()) -> "NodeRef":
        """``name``: a node name or fp16bisect node id (an unnamed node's id is its first output)."""
        outputs = tuple(outputs)
        names = [name]
        if outputs:
            names.append(f"node_of_{outputs[0]}")
        if not outputs or outputs[0] == name:
            names.append(f"node_of_{name}")
        return cls(name, tuple(dict.fromkeys(names)), outputs)


def _computing(group: list, wanted: set) -> list:
    """Of the layers sharing one metadata name (several ONNX nodes of one name), those computing one of ``wanted``
    tensors: their writers and the layers of the group feeding those; all of them when none writes one."""
    writer = {t.name: layer for layer in group for t in _outputs(layer)}
    todo, mine = [writer[t] for t in wanted if t in writer], set()
    while todo:
        layer = todo.pop()
        if layer.name not in mine:
            mine.add(layer.name)
            todo += [writer[t.name] for t in _inputs(layer) if t.name in writer]
    return [layer for layer in group if layer.name in mine] or group


def resolve(network, refs: Iterable[NodeRef]):
    """(ref -> its layers, refs with no layer). Metadata only, never layer names."""
    by_name: dict[str, list] = {}
    for layer in layers(network):
        for name in metadata_nodes(layer.metadata)[:1]:
            by_name.setdefault(name, []).append(layer)
    writer = {t.name: name for name, group in by_name.items() for layer in group for t in _outputs(layer)}
    found: dict[NodeRef, list] = {}
    missing: list[NodeRef] = []
    for ref in refs:
        groups = [by_name[n] for n in ref.names if n in by_name]
        if not groups:  # e.g. a node id that is its output because its name is shared: find it by output
            groups = [by_name[writer[t]] for t in ref.outputs if t in writer][:1]
        if not groups:
            missing.append(ref)
            continue
        wanted = set(ref.outputs)
        chosen = next((g for g in groups if any(t.name in wanted for layer in g for t in _outputs(layer))), groups[0])
        found[ref] = _computing(chosen, wanted)
    return found, missing


@dataclass(frozen=True)
class PinnedLayer:
    layer: str  # TensorRT layer name
    node: str  # the node it was pinned for; for a transparent layer, the node in its metadata or ""
    transparent: bool = False  # pinned because it sits between pinned layers

    def __str__(self) -> str:
        why = " (transparent, between pinned layers)" if self.transparent else ""
        return f"{self.layer} <- {self.node or 'helper layer'}{why}"


def _floats(trt, tensors) -> list:
    return [t for t in tensors if t.dtype in (trt.DataType.FLOAT, trt.DataType.HALF)]


def transparent_closure(network, pinned: set, trt) -> list:
    """Transparent layers (data movement, constants) that sit between pinned layers, so none rounds an FP32 tensor:
    every float input comes from a pinned layer or is not computed in floating point (a network input, a constant,
    data movement of those), every consumer of its float outputs is pinned, and it touches a pinned layer. The
    greatest such set (a fixpoint), then what is connected to a pinned layer through it."""
    all_layers = layers(network)
    kinds = {getattr(trt.LayerType, kind) for kind in TRANSPARENT}
    producer = {t.name: layer.name for layer in all_layers for t in _outputs(layer)}
    consumers: dict[str, set] = {}
    for layer in all_layers:
        for t in _inputs(layer):
            consumers.setdefault(t.name, set()).add(layer.name)
    by_name = {layer.name: layer for layer in all_layers}
    raw: set = set()  # float tensors no layer computed: network inputs, constants, moves of those (topological order)
    for layer in all_layers:
        if layer.type in kinds and all(t.name in raw or t.name not in producer for t in _inputs(layer)):
            raw.update(t.name for t in _outputs(layer))
    keep = {layer.name for layer in all_layers if layer.type in kinds and layer.name not in pinned}
    changed = True
    while changed:
        ok, changed = pinned | keep, False
        for name in list(keep):
            layer = by_name[name]
            ins_ok = all(t.name in raw or producer.get(t.name, name) in ok for t in _floats(trt, _inputs(layer)))
            outs = _floats(trt, _outputs(layer))
            if not (ins_ok and outs and all(consumers.get(t.name, set()) <= ok for t in outs)):
                keep.discard(name)
                changed = True
    reached: set = set()
    frontier = list(pinned)
    while frontier:
        layer = by_name[frontier.pop()]
        neighbours = {producer.get(t.name) for t in _inputs(layer)}
        neighbours |= {c for t in _outputs(layer) for c in consumers.get(t.name, ())}
        for n in neighbours & (keep - reached):
            reached.add(n)
            frontier.append(n)
    return [layer for layer in all_layers if layer.name in reached]


def weakly_typed(network):
    """TensorRT's module, where ``network`` takes layer precisions; else a UsageError saying to build the mixed file
    (a strongly typed TensorRT, or a network created strongly typed)."""
    trt = load().module
    if not hasattr(trt.BuilderFlag, "FP16"):
        flavour = f"{getattr(trt, '__name__', 'tensorrt')} {getattr(trt, '__version__', '')}".strip()
        raise UsageError(STRONGLY_TYPED.format(why=f"{flavour} is strongly typed"))
    strong = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)  # TensorRT 9.0+
    if strong is not None and network.get_flag(strong):
        raise UsageError(STRONGLY_TYPED.format(why="the network was created with "
                                                   "NetworkDefinitionCreationFlag.STRONGLY_TYPED"))
    return trt


def pin(network, refs: Iterable[NodeRef]) -> tuple[list[PinnedLayer], list[NodeRef]]:
    """(the layers pinned, the refs with no layer): every layer of each node found, and the transparent layers
    between them, kept in FP32 (precision through Polygraphy's ``SetLayerPrecisions``, float output types here)."""
    from polygraphy.backend.trt import SetLayerPrecisions

    trt = weakly_typed(network)
    found, missing = resolve(network, refs)
    first: dict[str, PinnedLayer] = {}
    for ref, group in found.items():
        for layer in group:
            first.setdefault(layer.name, PinnedLayer(layer.name, ref.label))
    between = transparent_closure(network, set(first), trt)
    pinned = [*first.values(), *(PinnedLayer(layer.name, next(iter(metadata_nodes(layer.metadata)), ""),
                                             transparent=True) for layer in between)]
    SetLayerPrecisions((None, network), {p.layer: trt.float32 for p in pinned})()
    for layer in [layer for group in found.values() for layer in group] + between:
        for i, tensor in enumerate(_outputs(layer)):
            if _floats(trt, [tensor]):  # never int or bool outputs
                layer.set_output_type(i, trt.float32)
    return pinned, missing


class MissingNodesWarning(UserWarning):
    """Override nodes that have no layer in the TensorRT network."""


@dataclass
class Applied:
    """What apply_overrides set."""

    layers: list[PinnedLayer] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # node names with no layer in the network

    def __str__(self) -> str:
        text = f"{len(self.layers)} layer(s) kept in FP32"
        if self.missing:
            text += f"; not found: {', '.join(self.missing)}"
        return text


def refs_from(overrides) -> list[NodeRef]:
    if isinstance(overrides, (str, Path)):
        from fp16bisect.artifacts.overrides import read

        overrides = read(overrides).to_json()
    if isinstance(overrides, Mapping):
        nodes = overrides.get("fp32_nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, Mapping) and isinstance(n.get("name"), str) for n in nodes):
            raise UsageError("the override data has no valid fp32_nodes list: pass the JSON 'fp16bisect search' wrote")
        return [NodeRef.of(n["name"], n.get("outputs") or ()) for n in nodes]
    names = list(overrides)
    if not all(isinstance(n, str) for n in names):
        raise UsageError("overrides must be a path to an override JSON, its parsed data, or node names")
    return [NodeRef.of(n) for n in names]


def apply_overrides(network, overrides, config=None, *, strict: bool = False) -> Applied:
    """Keep the override file's nodes in FP32 in a TensorRT 10.x network (weakly typed).

    ``overrides``: a path to an override JSON, its parsed dict, or node names. JSON entries name
    nodes by fp16bisect node id (an unnamed node's id is its first output, which TensorRT calls
    ``node_of_<output>``; both work). With ``config``, also sets ``BuilderFlag.FP16``,
    ``BuilderFlag.OBEY_PRECISION_CONSTRAINTS`` and ``ProfilingVerbosity.DETAILED`` (so ``verify_pins`` can read
    the engine) on it. Names with no layer are warned about (``MissingNodesWarning``) and listed in ``.missing``;
    ``strict=True`` raises instead.
    """
    trt = weakly_typed(network)
    refs = refs_from(overrides)
    missing = [r.label for r in resolve(network, refs)[1]]
    if missing:
        message = (
            f"{len(missing)} override node(s) have no layer in this TensorRT network: {', '.join(missing)} (no "
            "layer has metadata '[ONNX Layer: <name>]'; check the override file was made for this model; a node "
            "TensorRT folds into a constant has no layer)"
        )
        if strict:
            raise UsageError(message)
        warnings.warn(message, MissingNodesWarning, stacklevel=2)
    applied = Applied(pin(network, refs)[0], missing)
    if config is not None:
        config.set_flag(trt.BuilderFlag.FP16)
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    return applied
