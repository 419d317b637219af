"""Keep the nodes of an fp16bisect override file in FP32 in a TensorRT build.

Public (users import it)::

    import tensorrt as trt
    from fp16bisect.tensorrt import apply_overrides

    parser.parse(onnx_bytes)                      # your usual network
    applied = apply_overrides(network, "overrides.json", config)
    engine = builder.build_serialized_network(network, config)

TensorRT 10.x is weakly typed: a layer stays in FP32 when the config has
``BuilderFlag.FP16`` and ``BuilderFlag.OBEY_PRECISION_CONSTRAINTS`` and the
layer has ``precision = float32`` and FP32 output types. TensorRT 11 and
TensorRT-RTX are strongly typed (types come from the ONNX graph): there,
``fp16bisect apply`` writes a mixed-precision ONNX instead, and
``apply_overrides`` says so.

Layers are matched to ONNX nodes through ``layer.metadata``, which TensorRT's
ONNX parser sets on every layer it creates for a node to
``[ONNX Layer: <node name>]`` (followed by `` | Local Function: <f>`` inside a
local function; onnx-tensorrt ``processMetadata``), where an unnamed node's
name is ``node_of_<first output>`` (``getNodeName``). Layer names are not
used: the parser renames layers that clash (``attn_scale_15``). Helper layers
(constants, broadcast shuffles) have empty metadata.

Every ``trt.<name>`` used here is listed, with its documentation page, in
``fp16bisect/trt_api.py``. Importing this module does not import TensorRT.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Iterable, Mapping, Sequence

import numpy as np

from .errors import UsageError

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

    def __str__(self) -> str:
        kind = "weakly typed" if self.weakly_typed else "strongly typed"
        return f"{self.flavour} {self.version} ({kind})"


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


def _pin_layers(network, found: Mapping[NodeRef, list], trt) -> list[PinnedLayer]:
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
    return [p.layer for p in _pin_layers(network, found, trt)]


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
        from .overrides import read

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
    applied = Applied(_pin_layers(network, found, trt), missing_names)
    if config is not None:
        config.set_flag(trt.BuilderFlag.FP16)
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    return applied


# --------------------------------------------------------------------------- building


class TensorRTError(Exception):
    """TensorRT refused: the message carries TensorRT's own words."""

    def __init__(self, what: str, messages: Sequence[str]):
        self.what = what
        self.messages = list(dict.fromkeys(messages))  # the parser's errors are also logged
        detail = " | ".join(m.strip().replace("\n", " ") for m in self.messages) or "no message from TensorRT"
        super().__init__(f"{what}: {detail}")


class ParseError(TensorRTError):
    pass


class BuildError(TensorRTError):
    pass


class RunError(TensorRTError):
    pass


def collecting_logger(trt):
    """An ``ILogger`` that keeps TensorRT's warning and error lines (``.errors``, ``.warnings``)."""

    class Collecting(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.errors: list[str] = []
            self.warnings: list[str] = []

        def log(self, severity, msg):
            if severity in (trt.ILogger.Severity.ERROR, trt.ILogger.Severity.INTERNAL_ERROR):
                self.errors.append(str(msg))
            elif severity == trt.ILogger.Severity.WARNING:
                self.warnings = (self.warnings + [str(msg)])[-50:]

        @contextlib.contextmanager
        def capture(self):
            """Errors logged inside the block (a fresh list each time)."""
            self.errors = []
            yield self.errors

    return Collecting()


@dataclass
class Built:
    engine: bytes
    timing_cache: bytes | None  # serialized after the build; None when not used (TensorRT-RTX)
    pinned: list[PinnedLayer] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@dataclass
class EngineBuilder:
    """Parse -> (pin) -> build, sharing one logger. Weakly typed TensorRT 10.x builds with FP16 and
    obeyed precision constraints; TensorRT 11 / RTX networks are always strongly typed (precision comes
    from the ONNX model: build a mixed-precision model)."""

    tensorrt: TensorRT
    logger: object = None

    def __post_init__(self):
        if self.logger is None:
            self.logger = collecting_logger(self.tensorrt.module)

    def parse(self, onnx_bytes: bytes):
        """(builder, network, parser); ParseError with TensorRT's messages when it fails."""
        trt = self.tensorrt.module
        builder = trt.Builder(self.logger)
        # 0: weakly typed on 10.x; 11.x and RTX networks are strongly typed whatever the flags say
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, self.logger)
        with self.logger.capture() as logged:
            ok = parser.parse(onnx_bytes)
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        if not ok or errors:
            raise ParseError("TensorRT's ONNX parser rejected the model", errors + logged)
        if network.num_layers == 0 or network.num_outputs == 0:  # RTX accepts garbage and returns an empty network
            raise ParseError("TensorRT's ONNX parser produced an empty network", logged or ["not an ONNX model?"])
        return builder, network, parser

    def build(
        self,
        onnx_bytes: bytes,
        *,
        fp32: Iterable[NodeRef] = (),
        opt_level: int | None = None,
        timing_cache: bytes | None = None,
        shapes: Mapping[str, tuple] | None = None,
    ) -> Built:
        """Build an engine. ``fp32``: nodes to pin (TensorRT 10.x only). ``timing_cache``: the bytes of the
        shared cache (b"" or None for a new one); the result carries the updated cache to save.
        ``shapes``: input name -> (min, opt, max) shapes, for the optimization profile that inputs with
        dynamic dimensions need."""
        trt = self.tensorrt.module
        builder, network, _parser = self.parse(onnx_bytes)
        fp32 = list(fp32)
        pinned: list[PinnedLayer] = []
        missing: list[str] = []
        config = builder.create_builder_config()
        if self.tensorrt.weakly_typed:
            found, lost = resolve(network, fp32)
            pinned = _pin_layers(network, found, trt)
            missing = [r.label for r in lost]
            config.set_flag(trt.BuilderFlag.FP16)
            config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
        elif fp32:
            raise UsageError(STRONGLY_TYPED.format(why=f"{self.tensorrt} is strongly typed"))
        if opt_level is not None:
            config.builder_optimization_level = int(opt_level)
        _add_profile(builder, network, config, shapes or {})
        cache = None
        if self.tensorrt.flavour == "tensorrt":  # TensorRT-RTX: timing-cache calls are deprecated no-ops
            with self.logger.capture():
                cache = config.create_timing_cache(bytes(timing_cache or b""))
                if not config.set_timing_cache(cache, False):  # a cache from another GPU or version
                    cache = config.create_timing_cache(b"")
                    config.set_timing_cache(cache, False)
        with self.logger.capture() as logged:
            serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise BuildError("TensorRT could not build the engine", logged)
        new_cache = bytes(cache.serialize()) if cache is not None else None
        return Built(bytes(serialized), new_cache, pinned, missing)


def _add_profile(builder, network, config, shapes: Mapping[str, tuple]) -> None:
    """One optimization profile covering the samples' shapes, when an input has a dynamic dimension."""
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    dynamic = [t for t in inputs if any(d < 0 for d in t.shape)]
    if not dynamic:
        return
    unknown = [t.name for t in dynamic if t.name not in shapes]
    if unknown:
        raise BuildError("the model has dynamic input dimensions", [
            f"no sample shape for input(s) {', '.join(unknown)}: pass samples for every input"])
    profile = builder.create_optimization_profile()
    for t in dynamic:
        low, opt, high = shapes[t.name]
        profile.set_shape(t.name, tuple(low), tuple(opt), tuple(high))
    config.add_optimization_profile(profile)


def sample_shapes(samples: Iterable[Mapping[str, np.ndarray]]) -> dict[str, tuple]:
    """input -> (min, opt, max) over the samples' shapes (opt: the first sample's)."""
    seen: dict[str, list] = {}
    for inputs in samples:
        for name, array in inputs.items():
            seen.setdefault(name, []).append(tuple(np.shape(array)))
    return {
        name: (tuple(map(min, zip(*found))), found[0], tuple(map(max, zip(*found))))
        for name, found in seen.items()
        if len({len(s) for s in found}) == 1
    }


# --------------------------------------------------------------------------- running


class Engine:
    """A deserialized engine with one execution context and device buffers (``polygraphy.cuda``).

    Use as a context manager: buffers and the stream are freed on exit::

        with Engine(tensorrt, engine_bytes) as engine:
            outputs = engine.infer({"x": x})
    """

    def __init__(self, tensorrt: TensorRT, engine_bytes: bytes, logger=None):
        self.tensorrt = tensorrt
        self.engine_bytes = engine_bytes
        self.logger = logger if logger is not None else collecting_logger(tensorrt.module)
        self.buffers: dict = {}
        self.stream = None

    def __enter__(self) -> "Engine":
        trt = self.tensorrt.module
        try:
            from polygraphy import cuda
        except ImportError:
            raise UsageError("polygraphy is not installed: pip install 'fp16bisect[tensorrt]'") from None
        self._cuda = cuda
        self.runtime = trt.Runtime(self.logger)
        with self.logger.capture() as logged:
            self.engine = self.runtime.deserialize_cuda_engine(self.engine_bytes)
        if self.engine is None:
            raise RunError("TensorRT could not load the engine", logged)
        with self.logger.capture() as logged:
            self.context = self.engine.create_execution_context()
        if self.context is None:
            raise RunError("TensorRT could not create an execution context", logged)
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self.stream = cuda.Stream()
        return self

    def __exit__(self, *exc) -> None:
        for buffer in self.buffers.values():
            buffer.free()
        self.buffers.clear()
        if self.stream is not None:
            self.stream.free()
            self.stream = None
        self.context = None
        self.engine = None

    def _buffer(self, name: str, shape: tuple, dtype):
        buffer = self.buffers.get(name)
        if buffer is None:
            buffer = self.buffers[name] = self._cuda.DeviceArray(shape=shape, dtype=dtype)
        else:
            buffer.resize(shape)
        return buffer

    def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        trt = self.tensorrt.module
        missing = [n for n in self.inputs if n not in inputs]
        if missing:
            raise UsageError(f"no value for engine input(s) {', '.join(missing)}: pass every model input")
        for name in self.inputs:
            dtype = np.dtype(trt.nptype(self.engine.get_tensor_dtype(name)))
            array = np.ascontiguousarray(inputs[name], dtype=dtype)
            with self.logger.capture() as logged:
                ok = self.context.set_input_shape(name, array.shape)
            if not ok:
                raise RunError(f"TensorRT refused shape {array.shape} for input {name!r}", logged)
            buffer = self._buffer(name, array.shape, dtype)
            buffer.copy_from(array, self.stream)
            self.context.set_tensor_address(name, buffer.ptr)
        host = {}
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise RunError(f"output {name!r} has a data-dependent shape {shape}", ["not supported by fp16bisect"])
            dtype = np.dtype(trt.nptype(self.engine.get_tensor_dtype(name)))
            buffer = self._buffer(name, shape, dtype)
            self.context.set_tensor_address(name, buffer.ptr)
            host[name] = np.empty(shape, dtype=dtype)
        with self.logger.capture() as logged:
            ok = self.context.execute_async_v3(self.stream.ptr)
        if not ok:
            raise RunError("TensorRT could not run the engine", logged)
        for name, array in host.items():
            self.buffers[name].copy_to(array, self.stream)
        self.stream.synchronize()
        return host
