"""Pin ONNX nodes to FP32 in a weakly typed TensorRT 10.x network: ``apply_overrides`` and the layers of a node.

Public (users import it)::

    import tensorrt as trt
    from fp16bisect.tensorrt import apply_overrides, verify_pins

    parser.parse(onnx_bytes)                      # your usual network
    applied = apply_overrides(network, "overrides.json", config)
    engine = builder.build_serialized_network(network, config)
    check = verify_pins(runtime.deserialize_cuda_engine(engine), "overrides.json")
    assert check.ok, check                        # TensorRT may ignore pins where it fuses layers

TensorRT 10.x is weakly typed: a layer stays in FP32 when the config has
``BuilderFlag.FP16`` and ``BuilderFlag.OBEY_PRECISION_CONSTRAINTS`` and the
layer has ``precision = float32`` and FP32 output types. TensorRT 11 and
TensorRT-RTX are strongly typed (types come from the ONNX graph): there,
``fp16bisect apply`` writes a mixed-precision ONNX instead, and
``apply_overrides`` says so. Whether the built engine kept the pins is
``verify_pins``'s job (``inspection.py``).

Layers are matched to ONNX nodes through ``layer.metadata``, which TensorRT's
ONNX parser sets on every layer it creates for a node to
``[ONNX Layer: <node name>]`` (followed by `` | Local Function: <f>`` inside a
local function; onnx-tensorrt ``processMetadata``), where an unnamed node's
name is ``node_of_<first output>`` (``getNodeName``). Layer names are not
used: the parser renames layers that clash (``attn_scale_15``). Helper layers
(constants, broadcast shuffles) have empty metadata.

Every ``trt.<name>`` used here is listed, with its documentation page, in
``fp16bisect/backends/tensorrt/api.py``. Importing this module does not import TensorRT.
"""

from __future__ import annotations

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
_META_PREFIX = "[ONNX Layer: "
LOCAL_FUNCTION = " | Local Function: "


# --------------------------------------------------------------------------- layers of nodes


def metadata_node(metadata: str) -> str | None:
    """The ONNX node name in a layer's metadata, or None for a helper layer."""
    if not metadata.startswith(_META_PREFIX) or not metadata.endswith("]"):
        return None
    body = metadata[len(_META_PREFIX):-1]
    if LOCAL_FUNCTION in body:
        body = body.rsplit(LOCAL_FUNCTION, 1)[0]
    return body


def layers(network) -> list:
    return [network.get_layer(i) for i in range(network.num_layers)]


def node_layers(network) -> dict[str, list]:
    """ONNX node name (as TensorRT's parser names it) -> its layers, in network order, through metadata."""
    found: dict[str, list] = {}
    for layer in layers(network):
        name = metadata_node(layer.metadata)
        if name is not None:
            found.setdefault(name, []).append(layer)
    return found


def _outputs(layer) -> list:
    return [layer.get_output(i) for i in range(layer.num_outputs)]


def _inputs(layer) -> list:
    return [t for t in (layer.get_input(i) for i in range(layer.num_inputs)) if t is not None]


def _components(group: list) -> list[list]:
    """Split the layers sharing one metadata name into connected pieces (one per ONNX node)."""
    produced = {t.name: i for i, layer in enumerate(group) for t in _outputs(layer)}
    parent = list(range(len(group)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, layer in enumerate(group):
        for t in _inputs(layer):
            j = produced.get(t.name)
            if j is not None:
                parent[root(i)] = root(j)
    pieces: dict[int, list] = {}
    for i, layer in enumerate(group):
        pieces.setdefault(root(i), []).append(layer)
    return list(pieces.values())


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


def resolve(network, refs: Iterable[NodeRef], *, by_name: Mapping[str, list] | None = None):
    """(ref -> its layers, refs with no layer). Metadata only, never layer names."""
    by_name = node_layers(network) if by_name is None else by_name
    found: dict[NodeRef, list] = {}
    missing: list[NodeRef] = []
    writer: dict[str, str] = {}  # tensor -> metadata name of the layer writing it
    for name, group in by_name.items():
        for layer in group:
            for t in _outputs(layer):
                writer.setdefault(t.name, name)
    for ref in refs:
        groups = [by_name[n] for n in ref.names if n in by_name]
        if not groups:  # e.g. a node id that is its output because its name is shared: find it by output
            groups = [by_name[writer[t]] for t in ref.outputs if t in writer][:1]
        if not groups:
            missing.append(ref)
            continue
        chosen = groups[0]
        if ref.outputs:
            wanted = set(ref.outputs)
            matching = [g for g in groups if any(t.name in wanted for layer in g for t in _outputs(layer))]
            chosen = matching[0] if matching else chosen
            pieces = _components(chosen)
            if len(pieces) > 1:  # several ONNX nodes share this name: keep the one writing our outputs
                mine = [p for p in pieces if any(t.name in wanted for layer in p for t in _outputs(layer))]
                if mine:
                    chosen = [layer for p in mine for layer in p]
        found[ref] = chosen
    return found, missing


# --------------------------------------------------------------------------- pinning


@dataclass(frozen=True)
class PinnedLayer:
    layer: str  # TensorRT layer name
    node: str  # the node it was pinned for; for a transparent layer, the node in its metadata or ""
    transparent: bool = False  # pinned because it sits between pinned layers

    def __str__(self) -> str:
        why = " (transparent, between pinned layers)" if self.transparent else ""
        return f"{self.layer} <- {self.node or 'helper layer'}{why}"


def _transparent_types(trt) -> frozenset:
    return frozenset(
        {
            trt.LayerType.CONSTANT,
            trt.LayerType.SHUFFLE,
            trt.LayerType.IDENTITY,
            trt.LayerType.SLICE,
            trt.LayerType.CONCATENATION,
            trt.LayerType.GATHER,
            trt.LayerType.SQUEEZE,
            trt.LayerType.UNSQUEEZE,
        }
    )


def _is_float(trt, tensor) -> bool:
    return tensor.dtype in (trt.DataType.FLOAT, trt.DataType.HALF)


def _set_fp32(trt, layer) -> None:
    layer.precision = trt.float32
    for i, tensor in enumerate(_outputs(layer)):
        if _is_float(trt, tensor):  # never int or bool outputs
            layer.set_output_type(i, trt.float32)


def transparent_closure(network, pinned: set, trt) -> list:
    """Transparent layers (data movement, constants) that sit between pinned layers, so none rounds an
    FP32 tensor: every float input comes from a pinned layer or is not computed in floating point
    (a network input, a constant, data movement of those), every consumer of its float outputs is
    pinned, and it touches a pinned layer. The greatest such set (a fixpoint)."""
    all_layers = layers(network)
    kinds = _transparent_types(trt)
    producer = {t.name: layer.name for layer in all_layers for t in _outputs(layer)}
    consumers: dict[str, set] = {}
    for layer in all_layers:
        for t in _inputs(layer):
            consumers.setdefault(t.name, set()).add(layer.name)
    by_name = {layer.name: layer for layer in all_layers}
    raw: set = set()  # float tensors no layer computed: network inputs, constants, moves of those
    for layer in all_layers:  # network order is topological
        if layer.type in kinds and all(t.name in raw or producer.get(t.name) is None for t in _inputs(layer)):
            raw.update(t.name for t in _outputs(layer))

    def float_ins(layer):
        return [t for t in _inputs(layer) if _is_float(trt, t)]

    def float_outs(layer):
        return [t for t in _outputs(layer) if _is_float(trt, t)]

    keep = {layer.name for layer in all_layers if layer.type in kinds and layer.name not in pinned}
    changed = True
    while changed:
        changed = False
        ok = pinned | keep
        for name in list(keep):
            layer = by_name[name]
            ins_ok = all(
                t.name in raw or producer.get(t.name) is None or producer[t.name] in ok for t in float_ins(layer)
            )
            outs_ok = all(consumers.get(t.name, set()) <= ok for t in float_outs(layer))
            if not (ins_ok and outs_ok and float_outs(layer)):
                keep.discard(name)
                changed = True
    # only what is connected to a pinned layer through kept layers
    reached: set = set()
    frontier = list(pinned)
    while frontier:
        name = frontier.pop()
        layer = by_name.get(name)
        if layer is None:
            continue
        neighbours = {producer.get(t.name) for t in _inputs(layer)}
        for t in _outputs(layer):
            neighbours |= consumers.get(t.name, set())
        for n in neighbours:
            if n in keep and n not in reached:
                reached.add(n)
                frontier.append(n)
    return [layer for layer in all_layers if layer.name in reached]


def pin_layers(network, found: Mapping[NodeRef, list], trt) -> list[PinnedLayer]:
    pinned: list[PinnedLayer] = []
    names: set = set()
    for ref, group in found.items():
        for layer in group:
            if layer.name not in names:
                _set_fp32(trt, layer)
                names.add(layer.name)
                pinned.append(PinnedLayer(layer.name, ref.label))
    for layer in transparent_closure(network, names, trt):
        _set_fp32(trt, layer)
        pinned.append(PinnedLayer(layer.name, metadata_node(layer.metadata) or "", transparent=True))
    return pinned


def pin(network, node_names: Iterable[str], trt, *, outputs: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Keep these nodes in FP32 (TensorRT 10.x): precision and float output types of every layer of
    each node, found through metadata, plus the transparent layers between pinned layers.

    ``node_names``: node names as TensorRT's parser knows them (``node_of_<output>`` for an unnamed
    node; an fp16bisect node id also works). ``outputs``: a node's ONNX output tensors, to tell apart
    nodes that share a name. Returns the names of the layers pinned; names with no layer are skipped
    (``apply_overrides`` reports them).
    """
    _require_weak_typing(network, trt)
    outputs = outputs or {}
    refs = [NodeRef.of(n, outputs.get(n, ())) for n in node_names]
    found, _missing = resolve(network, refs)
    return [p.layer for p in pin_layers(network, found, trt)]


def _require_weak_typing(network, trt) -> None:
    if not hasattr(trt.BuilderFlag, "FP16"):
        flavour = f"{getattr(trt, '__name__', 'tensorrt')} {getattr(trt, '__version__', '')}".strip()
        raise UsageError(STRONGLY_TYPED.format(why=f"{flavour} is strongly typed"))
    if network.get_flag(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED):
        raise UsageError(
            STRONGLY_TYPED.format(why="the network was created with NetworkDefinitionCreationFlag.STRONGLY_TYPED")
        )


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
    ``node_of_<output>``; both work). With ``config``, also sets ``BuilderFlag.FP16`` and
    ``BuilderFlag.OBEY_PRECISION_CONSTRAINTS`` on it. Names with no layer are warned about
    (``MissingNodesWarning``) and listed in ``.missing``; ``strict=True`` raises instead.
    """
    trt = load().module
    _require_weak_typing(network, trt)
    refs = refs_from(overrides)
    found, missing = resolve(network, refs)
    missing_names = [r.label for r in missing]
    if missing_names:
        message = (
            f"{len(missing_names)} override node(s) have no layer in this TensorRT network: "
            f"{', '.join(missing_names)} (no layer has metadata '[ONNX Layer: <name>]'; check the override file "
            "was made for this model; a node TensorRT folds into a constant has no layer)"
        )
        if strict:
            raise UsageError(message)
        warnings.warn(message, MissingNodesWarning, stacklevel=2)
    applied = Applied(pin_layers(network, found, trt), missing_names)
    if config is not None:
        config.set_flag(trt.BuilderFlag.FP16)
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # so verify_pins can read the engine
    return applied

