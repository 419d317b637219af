"""Keep the nodes of an fp16bisect override file in FP32 in a TensorRT build.

Public (users import it)::

    import tensorrt as trt
    from fp16bisect.tensorrt import apply_overrides

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
``apply_overrides`` says so.

TensorRT 10.x can silently ignore such pins where it fuses a region into one
kernel (NVIDIA/TensorRT#3889, #4505, #2080, #3224): ``verify_pins`` reads the
built engine's layer information (``EngineInspector``, JSON, needs
``ProfilingVerbosity.DETAILED``, which ``apply_overrides`` sets on the config)
and names every override node whose engine layer does not run in FP32.

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

import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Iterable, Mapping, Sequence


from ...errors import UsageError

NOT_INSTALLED = (
    "TensorRT is not installed: pip install 'fp16bisect[tensorrt]' on a machine with an NVIDIA GPU, "
    "or use --backend emulate"
)
STRONGLY_TYPED = (
    "cannot set layer precisions: {why}, where precision comes from the ONNX graph; write a "
    "mixed-precision model with 'fp16bisect apply OVERRIDES.json MODEL.onnx -o MIXED.onnx' and build that instead"
)
_META_PREFIX = "[ONNX Layer: "
_LOCAL_FUNCTION = " | Local Function: "


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class TensorRT:
    """The imported TensorRT flavour."""

    module: ModuleType
    flavour: str  # "tensorrt" or "tensorrt_rtx"
    version: str
    weakly_typed: bool  # TensorRT 10.x: BuilderFlag.FP16 and layer precisions exist
    # NetworkDefinitionCreationFlag.STRONGLY_TYPED exists (TensorRT 9.0+, so every 10.x; always true on 11/RTX)
    can_strongly_type: bool = True

    def __str__(self) -> str:
        kind = "weakly typed" if self.weakly_typed else "strongly typed"
        return f"{self.flavour} {self.version} ({kind})"

    @property
    def version_tuple(self) -> tuple:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])


def load() -> TensorRT:
    """Import ``tensorrt``, else ``tensorrt_rtx``; a UsageError with the fix when neither imports."""
    broken = []
    for flavour in ("tensorrt", "tensorrt_rtx"):
        try:
            trt = __import__(flavour)
        except ModuleNotFoundError as exc:
            if exc.name != flavour:  # the package is there but a piece of it is missing
                broken.append(f"import {flavour}: {exc}")
            continue
        except (ImportError, OSError) as exc:  # e.g. libnvinfer.so not found
            broken.append(f"import {flavour}: {exc}")
            continue
        return TensorRT(
            module=trt,
            flavour=flavour,
            version=str(getattr(trt, "__version__", "unknown")),
            weakly_typed=hasattr(trt.BuilderFlag, "FP16"),
            can_strongly_type=hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"),
        )
    if broken:
        raise UsageError(
            f"TensorRT is installed but cannot be imported ({'; '.join(broken)}): reinstall it with "
            "pip install 'fp16bisect[tensorrt]' on a machine with an NVIDIA GPU, or use --backend emulate"
        )
    raise UsageError(NOT_INSTALLED)


def gpu_available() -> bool:
    """Whether CUDA sees a GPU (cuda-python ``cudaGetDeviceCount``); never raises."""
    try:
        try:
            from cuda.bindings import runtime as cudart
        except ImportError:
            from cuda import cudart  # cuda-python < 12.6
        err, count = cudart.cudaGetDeviceCount()
        return err == cudart.cudaError_t.cudaSuccess and count > 0
    except Exception:
        return False


# --------------------------------------------------------------------------- layers of nodes


def metadata_node(metadata: str) -> str | None:
    """The ONNX node name in a layer's metadata, or None for a helper layer."""
    if not metadata.startswith(_META_PREFIX) or not metadata.endswith("]"):
        return None
    body = metadata[len(_META_PREFIX):-1]
    if _LOCAL_FUNCTION in body:
        body = body.rsplit(_LOCAL_FUNCTION, 1)[0]
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


def _refs_from(overrides) -> list[NodeRef]:
    if isinstance(overrides, (str, Path)):
        from ...artifacts.overrides import read

        overrides = read(overrides)
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
    refs = _refs_from(overrides)
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


# --------------------------------------------------------------------------- did the pins take effect?

IGNORED = "TensorRT ignored the FP32 pin on {node} (fused into {layer})"
IGNORED_ADVICE = "use the default strongly typed build"
_IGNORED_RE = re.compile(r"TensorRT ignored the FP32 pin on (.+?) \(fused into (.+?)\)(?=; )")
_METADATA_SEPARATOR = "\x1f"  # between the "[ONNX Layer: ...]" entries of a fused layer (seen on TensorRT-RTX 1.7)
_METADATA_ENTRY = re.compile(r"\[ONNX Layer: (.*?)\](?=\[ONNX Layer: |\x1f|$)", re.S)


@dataclass(frozen=True)
class EngineLayer:
    """One layer of a built engine, as the engine inspector describes it."""

    name: str
    nodes: tuple  # ONNX node names in its metadata (a fused layer has several)
    tensors: tuple  # (tensor name, "float32" | "float16" | other type), inputs then outputs

    @property
    def half_tensors(self) -> list[str]:
        return [name for name, kind in self.tensors if kind == "float16"]


def tensor_kind(text: str) -> str:
    """"float32", "float16" or the text itself, from an inspector's "Format/Datatype" or "Datatype":
    "Row major linear FP32", "Channel major FP16 format where ...", Myelin's "Float" / "Half"."""
    upper = str(text).upper()
    if "BF16" in upper or "BFLOAT" in upper:
        return "bfloat16"
    if "FP32" in upper or re.search(r"\bFLOAT\b", upper):
        return "float32"
    if "FP16" in upper or re.search(r"\bHALF\b", upper):
        return "float16"
    return str(text)


def metadata_nodes(metadata: str) -> tuple:
    """The ONNX node names in an engine layer's metadata (fused layers list several)."""
    names = []
    for part in str(metadata or "").split(_METADATA_SEPARATOR):
        for found in _METADATA_ENTRY.findall(part.strip()):
            if _LOCAL_FUNCTION in found:
                found = found.rsplit(_LOCAL_FUNCTION, 1)[0]
            names.append(found)
    return tuple(dict.fromkeys(names))


def engine_layers(information) -> list[EngineLayer]:
    """Parse ``EngineInspector.get_engine_information(LayerInformationFormat.JSON)`` (a str or its dict).

    Needs an engine built with ``ProfilingVerbosity.DETAILED``: with the default, the inspector gives
    layer names only, and nothing can be said about types (UsageError)."""
    data = json.loads(information) if isinstance(information, (str, bytes)) else information
    records = data.get("Layers") if isinstance(data, Mapping) else data
    if not isinstance(records, list):
        raise UsageError("not TensorRT engine layer information: expected a JSON object with a 'Layers' list")
    found = []
    for record in records:
        if not isinstance(record, Mapping) or "Inputs" not in record and "Outputs" not in record:
            raise UsageError(
                "the engine has no detailed layer information (only layer names): build it with "
                "config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED (trtexec --profilingVerbosity=detailed)"
            )
        tensors = []
        for key in ("Inputs", "Outputs"):
            for tensor in record.get(key) or []:
                kind = tensor.get("Datatype") or tensor.get("Format/Datatype") or ""
                tensors.append((str(tensor.get("Name", "")), tensor_kind(kind)))
        found.append(EngineLayer(str(record.get("Name", "")), metadata_nodes(record.get("Metadata", "")),
                                 tuple(tensors)))
    return found


@dataclass(frozen=True)
class IgnoredPin:
    node: str  # the override node (fp16bisect id)
    layer: str  # the engine layer it was fused into, which does not run in FP32

    def __str__(self) -> str:
        return IGNORED.format(node=self.node, layer=self.layer)

    def to_json(self) -> dict:
        return {"node": self.node, "layer": self.layer}


@dataclass
class PinCheck:
    """What ``verify_pins`` found: ``ok`` when every override node's engine layers run in FP32."""

    verified: list[str] = field(default_factory=list)  # nodes whose every engine layer has only FP32 float tensors
    ignored: list[IgnoredPin] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)  # nodes no engine layer names (folded or removed)

    @property
    def ok(self) -> bool:
        return not self.ignored

    def message(self) -> str:
        """One line: "TensorRT ignored the FP32 pin on NODE (fused into LAYER); ...; use the default ..."."""
        return "; ".join([*map(str, self.ignored), IGNORED_ADVICE])

    def __str__(self) -> str:
        if self.ignored:
            return self.message()
        text = f"{len(self.verified)} override node(s) run in FP32 in this engine"
        if self.unseen:
            text += f"; no engine layer names {', '.join(self.unseen)} (folded or removed by TensorRT)"
        return text


def ignored_in(message: str) -> list[IgnoredPin]:
    """The ignored pins a ``PinCheck.message()`` names (e.g. in a failed evaluation's error)."""
    return [IgnoredPin(node, layer) for node, layer in _IGNORED_RE.findall(str(message))]


def check_pins(layers: Sequence[EngineLayer], refs: Iterable[NodeRef]) -> PinCheck:
    """Every engine layer naming a pinned node must have only FP32 float tensors (inputs and outputs)."""
    result = PinCheck()
    for ref in refs:
        mine = [layer for layer in layers if set(layer.nodes) & set(ref.names)]
        if not mine:
            result.unseen.append(ref.label)
            continue
        bad = [layer for layer in mine if layer.half_tensors]
        if bad:
            result.ignored.append(IgnoredPin(ref.label, bad[0].name))
        else:
            result.verified.append(ref.label)
    return result


def verify_pins(engine, overrides) -> PinCheck:
    """Did TensorRT keep the override nodes in FP32 in this engine? (TensorRT 10.x weakly typed builds.)

    ``engine``: a deserialized ``ICudaEngine`` built with ``ProfilingVerbosity.DETAILED`` (a serialized
    engine's bytes are deserialized first: that needs the GPU it was built for), or its layer information
    as JSON text, a parsed dict, or a path to a file (``trtexec --profilingVerbosity=detailed
    --exportLayerInfo=FILE`` writes one). ``overrides``: as for ``apply_overrides``.

    A pin counts as taken when every engine layer whose metadata names the node reads and writes float
    tensors only in FP32. A layer that mixes the node with FP16 tensors (TensorRT fused it with FP16
    neighbours, NVIDIA/TensorRT#3889) is reported in ``.ignored``: nothing in the engine shows the node
    ran in FP32. Strongly typed builds of ``fp16bisect apply``'s mixed model do not need this check.
    """
    refs = _refs_from(overrides)
    return check_pins(engine_layers(_information(engine)), refs)


def _information(engine):
    if isinstance(engine, Mapping):
        return engine
    if isinstance(engine, Path) or isinstance(engine, str) and not engine.lstrip().startswith("{"):
        try:
            return Path(engine).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read engine layer information {str(engine)!r} ({exc.strerror})") from None
    if isinstance(engine, str):
        return engine
    loaded = load()
    runtime = None
    if not hasattr(engine, "create_engine_inspector"):  # a serialized engine (bytes, IHostMemory)
        from .engine import deserialize

        runtime, engine = deserialize(loaded, bytes(engine))
    information = engine.create_engine_inspector().get_engine_information(loaded.module.LayerInformationFormat.JSON)
    del runtime
    return information
