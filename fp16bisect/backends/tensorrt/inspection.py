"""Read a built engine's layers and say whether the FP32 pins took effect: ``verify_pins``.

TensorRT 10.x can silently ignore layer pins (``pin.py``) where it fuses a region into one kernel
(NVIDIA/TensorRT#3889, #4505, #2080, #3224): ``verify_pins`` reads the built engine's layer information
(``EngineInspector``, JSON, needs ``ProfilingVerbosity.DETAILED``) and names every override node whose engine
layer does not run in FP32. An engine layer names its ONNX nodes in its metadata (a fused layer names several).
Importing this module does not import TensorRT.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from fp16bisect.errors import UsageError
from fp16bisect.backends.tensorrt.load import load
from fp16bisect.backends.tensorrt.pin import NodeRef, metadata_nodes, refs_from

IGNORED = "TensorRT ignored the FP32 pin on {node} (fused into {layer})"
IGNORED_ADVICE = "use the default strongly typed build"


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


def node_times(layers: Sequence[EngineLayer], times: Mapping[str, float], refs: Mapping[str, NodeRef]) -> dict:
    """Per node id of ``refs``, the milliseconds of the engine layers whose metadata names it (``times``: per
    layer name, as the profiler reports them); a fused layer's time is shared evenly among the nodes it names.
    Nodes no timed layer names are left out."""
    owner: dict = {}
    for node, ref in refs.items():
        for name in ref.names:
            owner.setdefault(name, node)
    found: dict = {}
    for layer in layers:
        if layer.name not in times:
            continue
        mine = list(dict.fromkeys(owner[n] for n in layer.nodes if n in owner))
        for node in mine:
            found[node] = found.get(node, 0.0) + float(times[layer.name]) / len(mine)
    return found


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
    refs = refs_from(overrides)
    return check_pins(engine_layers(information(engine)), refs)


def information(engine):
    """Layer information (JSON text or dict) of an engine, its bytes, or a file or text of it."""
    if isinstance(engine, Mapping):
        return engine
    if isinstance(engine, Path) or isinstance(engine, str) and not engine.lstrip().startswith("{"):
        try:
            return Path(engine).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read engine layer information {str(engine)!r} ({exc.strerror})") from None
    if isinstance(engine, str):
        return engine
    trt = load().module
    if not hasattr(engine, "create_engine_inspector"):  # a serialized engine (bytes, IHostMemory)
        engine = deserialized(bytes(engine))
    return engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)


def deserialized(engine_bytes: bytes):
    """The ``ICudaEngine`` of a serialized engine, through Polygraphy's ``EngineFromBytes`` (needs the GPU it was
    built for); RunError with TensorRT's messages when it cannot be loaded."""
    from polygraphy.backend.trt import EngineFromBytes

    from fp16bisect.backends.tensorrt.engine import RunError, polygraphy

    with polygraphy(RunError, "TensorRT could not load the engine"):
        return EngineFromBytes(engine_bytes)()
