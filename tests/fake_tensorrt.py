"""A test double of what cannot run here: TensorRT 10.x's weak typing, and deserialising and running an engine.

TensorRT-RTX parses and builds here for real, through the same adapter (every strongly typed build in the tests is
one of its builds); what cannot run is real TensorRT 10.x (it does not install here) with its weak typing, and
deserialising or running any engine (no GPU). So:

* ``make()`` is the ``tensorrt`` module of TensorRT 10.x as Polygraphy's loaders call it for a weakly typed build:
  ``NetworkFromOnnxBytes`` and ``NetworkFromOnnxPath`` (``Builder``, ``init_libnvinfer_plugins``, ``OnnxParser``,
  the network and its layers), ``CreateConfig`` (``IBuilderConfig``: flags, the timing cache, what Polygraphy prints
  of a config), ``EngineBytesFromNetwork`` (``build_serialized_network``, ``IHostMemory``), ``EngineFromBytes``
  (``Runtime``), ``SetLayerPrecisions`` (``ILayer.precision``); and as fp16bisect's own code calls it (``pin.py``'s
  output types, ``inspection.py``'s engine inspector, the profiler). Every name it exposes is checked against
  TensorRT-RTX's, but those only 10.x has (tests/test_tensorrt.py). Install it with ``install(fake, monkeypatch)``:
  ``import tensorrt`` gives it, and Polygraphy's loaders use it.
* ``runner(trt, outputs)`` is a class standing in for ``polygraphy.backend.trt.TrtRunner``: it activates by calling
  its engine loader (Polygraphy's ``EngineFromBytes``), ``infer`` returns ``outputs(engine, feed)`` and reports
  each engine layer's time to a profiler set on its ``context``, as TensorRT does after a run.
* ``make_cuda()`` is cuda-python's runtime module as ``device.py`` asks it (a GPU, its driver and runtime).

Its ``OnnxParser`` reads an ONNX model (FP32, as weak typing builds it) and imports it the way onnx-tensorrt does,
in small: one layer per node (a Gemm is a matrix multiply plus an elementwise layer, a Sum of n inputs is n-1
elementwise layers, a Softmax is a softmax plus a helper shuffle writing the node's output), named ``getNodeName``
style (``node_of_<first output>`` for unnamed nodes, clashes get ``_<counter>``), with metadata ``[ONNX Layer:
<name>]``; initializers and Constant nodes become CONSTANT layers and, where an elementwise or matrix layer reads
them, a broadcast SHUFFLE, both with empty metadata.

``build_serialized_network`` returns JSON describing what would be built (the precision flags, every layer's
precision and output types) and the engine's layers as TensorRT's engine inspector reports them
(``EngineInspector.get_engine_information(LayerInformationFormat.JSON)`` with ``ProfilingVerbosity.DETAILED``), so
tests can assert what was pinned and what ran. A layer runs in its precision (pinned: FP32, else FP16 with the FP16
flag) and its float inputs are reformatted to it. ``trt._myelin`` (lists of ONNX node names) imitates
NVIDIA/TensorRT#3889: a build fuses each such group into one Myelin layer, which runs in FP16 unless every layer of
the group is pinned (pins ignored); its metadata joins the nodes' ``[ONNX Layer: ...]`` with ``\x1f`` as
TensorRT-RTX prints it. Test hooks are private (``_``-prefixed) module attributes.
"""

from __future__ import annotations

import enum
import json
import types

import numpy as np
import onnx
from onnx import TensorProto

TRANSPARENT_OPS = {
    "Reshape": "SHUFFLE", "Transpose": "SHUFFLE", "Flatten": "SHUFFLE", "Squeeze": "SQUEEZE",
    "Unsqueeze": "UNSQUEEZE", "Concat": "CONCATENATION", "Slice": "SLICE", "Gather": "GATHER",
    "Identity": "IDENTITY",
}
COMPUTE_OPS = {
    "MatMul": "MATRIX_MULTIPLY", "Conv": "CONVOLUTION", "BatchNormalization": "SCALE", "Relu": "ACTIVATION",
    "Sigmoid": "ACTIVATION", "Tanh": "ACTIVATION", "Sqrt": "UNARY", "Exp": "UNARY", "Log": "UNARY",
    "Erf": "UNARY", "Reciprocal": "UNARY", "Neg": "UNARY", "Abs": "UNARY", "ReduceMean": "REDUCE",
    "ReduceSum": "REDUCE", "GlobalAveragePool": "REDUCE", "MaxPool": "POOLING", "AveragePool": "POOLING",
}
BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Max", "Min", "Gemm", "Sum"}
ONNX_TO_DT = {TensorProto.FLOAT: "FLOAT", TensorProto.INT32: "INT32", TensorProto.INT64: "INT64",
              TensorProto.BOOL: "BOOL"}
NUMPY = {"FLOAT": "float32", "HALF": "float16", "INT32": "int32", "INT64": "int64", "BOOL": "bool"}
# TensorRT names that only 10.x has (weak typing; Polygraphy's explicit-batch flag for TensorRT before 10), with the
# pages that document them: every other name the fake exposes or fp16bisect uses is checked against TensorRT-RTX
_PAGES = "https://docs.nvidia.com/deeplearning/tensorrt/10.16.0/_static/python-api/infer"
ONLY_10 = {"ILayer.precision": f"{_PAGES}/Graph/LayerBase.html", "ILayer.set_output_type": f"{_PAGES}/Graph/LayerBase.html",
           **{f"BuilderFlag.{flag}": f"{_PAGES}/Core/BuilderConfig.html" for flag in
              ("FP16", "BF16", "OBEY_PRECISION_CONSTRAINTS")},
           "NetworkDefinitionCreationFlag.EXPLICIT_BATCH": f"{_PAGES}/Core/Builder.html"}


def make(  # noqa: C901, PLR0915  a whole fake module: its classes close over it and the flags, and count into it
        version: str = "10.16.1.11", strongly_typed_flag: bool = True, bf16_flag: bool = True) -> types.ModuleType:
    """TensorRT ``version`` (10.x, weakly typed). ``strongly_typed_flag=False``: a TensorRT before 9.0 (no
    NetworkDefinitionCreationFlag.STRONGLY_TYPED); ``bf16_flag=False``: one without ``BuilderFlag.BF16`` (weakly
    typed BF16 builds impossible)."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt._builds = []  # every build: the JSON dict it produced
    trt._fail_build = None  # a message: the next build logs it as an error and returns None
    trt._myelin = []  # groups of ONNX node names a build fuses into one layer (see above)
    trt._inspected = 0  # engines whose layer information was read
    # an engine layer's milliseconds as the profiler reports them: by default 0.1 ms per layer with an FP16 tensor,
    # 0.3 ms per other layer (FP32 slower); tests replace it
    trt._layer_ms = lambda layer: 0.1 if any(tensor_kind_of(t) == "float16" for t in layer.get("Inputs", []) +
                                             layer.get("Outputs", [])) else 0.3

    class DataType(enum.Enum):
        FLOAT = 0
        HALF = 1
        INT32 = 3
        BOOL = 4
        INT64 = 8

    LayerType = enum.Enum("LayerType", sorted({*TRANSPARENT_OPS.values(), *COMPUTE_OPS.values(), "CONSTANT",
                                               "ELEMENTWISE", "SOFTMAX"}))
    BuilderFlag = enum.IntEnum("BuilderFlag", ["FP16", "OBEY_PRECISION_CONSTRAINTS", "TF32",
                                               *(["BF16"] if bf16_flag else [])])
    NetworkDefinitionCreationFlag = enum.IntEnum(
        "NetworkDefinitionCreationFlag", {"EXPLICIT_BATCH": 0, **({"STRONGLY_TYPED": 1} if strongly_typed_flag else {})})

    class ProfilingVerbosity(enum.Enum):  # LAYER_NAMES_ONLY (the default) and NONE exist too, unused
        DETAILED = 2

    class LayerInformationFormat(enum.Enum):  # ONELINE exists too, unused
        JSON = 1

    class DeviceType(enum.Enum):  # what Polygraphy prints of a config reads these
        GPU = 0
        DLA = 1

    class ILogger:
        class Severity(enum.IntEnum):
            INTERNAL_ERROR = 0
            ERROR = 1
            WARNING = 2
            INFO = 3
            VERBOSE = 4

        def __init__(self):
            pass

        def log(self, severity, msg):
            pass

    class Logger(ILogger):  # what Polygraphy's TensorRT logger reads the severities from
        INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = ILogger.Severity

    def init_libnvinfer_plugins(logger, namespace):
        return True

    class ITensor:
        name = ""
        dtype = None
        shape = ()

        def __init__(self, name, dtype, shape=()):
            self.name = name
            self.dtype = dtype
            self.shape = tuple(shape)

    class ILayer:
        name = ""
        metadata = ""
        type = None
        precision = DataType.FLOAT  # TensorRT's default; set (SetLayerPrecisions): the layer's own, a pin

        def __init__(self, name, type, metadata, inputs, outputs):
            self.name = name
            self.type = type
            self.metadata = metadata
            self._inputs = list(inputs)
            self._outputs = list(outputs)
            self._output_types = {}

        @property
        def num_inputs(self):
            return len(self._inputs)

        @property
        def num_outputs(self):
            return len(self._outputs)

        def get_input(self, index):
            return self._inputs[index] if 0 <= index < len(self._inputs) else None

        def get_output(self, index):
            return self._outputs[index] if 0 <= index < len(self._outputs) else None

        def set_output_type(self, index, dtype):
            if self._outputs[index].dtype not in (DataType.FLOAT, DataType.HALF):
                raise ValueError(f"set_output_type on non-float output {index} of {self.name}")
            self._output_types[index] = dtype

    def _pinned(layer):
        """The precision set on a layer, None when unset (it runs in the precision the flags allow)."""
        return vars(layer).get("precision")

    class INetworkDefinition:
        def __init__(self, flags):
            self._flags = flags
            self._layers = []
            self._inputs = []
            self._outputs = []

        def __iter__(self):  # Polygraphy's SetLayerPrecisions and CreateConfig walk the layers so
            return iter(self._layers)

        @property
        def num_inputs(self):
            return len(self._inputs)

        def get_input(self, index):
            return self._inputs[index] if 0 <= index < len(self._inputs) else None

        @property
        def num_layers(self):
            return len(self._layers)

        def get_layer(self, index):
            return self._layers[index] if 0 <= index < len(self._layers) else None

        @property
        def num_outputs(self):
            return len(self._outputs)

        def get_flag(self, flag):
            return bool(self._flags & (1 << int(flag)))

    class OnnxParser:  # parse errors are TensorRT-RTX's to show (tests/test_tensorrt.py)
        num_errors = 0

        def __init__(self, network, logger):
            self._network = network

        def parse(self, model):
            _import(onnx.load_model_from_string(bytes(model)), self._network)
            return True

        def parse_from_file(self, path):  # the backend's models: their weights in files of their own
            return self.parse(onnx.load(path).SerializeToString())

    def _import(model, network):  # noqa: C901, PLR0915  the fake ONNX parser: the layers of each node, in one pass
        inferred = onnx.shape_inference.infer_shapes(model)
        g = inferred.graph
        types_ = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]}
        types_.update({t.name: t.data_type for t in g.initializer})
        for n in g.node:
            if n.op_type == "Constant":
                types_[n.output[0]] = n.attribute[0].t.data_type

        def dt(name):
            return getattr(DataType, ONNX_TO_DT.get(types_.get(name, TensorProto.FLOAT), "FLOAT"))

        taken, counter = set(), [0]

        def unique(base):
            name = base
            while name in taken:
                name = f"{base}_{counter[0]}"
                counter[0] += 1
            taken.add(name)
            return name

        def dims(v):
            return [d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim]

        inits = {t.name for t in g.initializer}
        tensors = {v.name: ITensor(v.name, dt(v.name), dims(v)) for v in g.input if v.name not in inits}
        network._inputs = list(tensors.values())
        weights = {t.name for t in g.initializer} | {n.output[0] for n in g.node if n.op_type == "Constant"}

        def add(base, kind, metadata, inputs, outputs):
            layer = ILayer(unique(base), getattr(LayerType, kind), metadata, inputs, outputs)
            network._layers.append(layer)
            return layer

        def read(name, broadcast):
            if name in weights:
                if name not in tensors:
                    add(name, "CONSTANT", "", [], [ITensor(f"{name}_output", dt(name))])
                    tensors[name] = network._layers[-1].get_output(0)
                if broadcast and tensors[name].dtype in (DataType.FLOAT, DataType.HALF):
                    shuffle = add("ONNXTRT_Broadcast", "SHUFFLE", "", [tensors[name]], [])
                    shuffle._outputs.append(ITensor(f"{shuffle.name}_output", tensors[name].dtype))
                    return shuffle.get_output(0)
            if name not in tensors:
                raise ValueError(f"tensor {name!r} is read before it is written")
            return tensors[name]

        for node in g.node:
            if node.op_type == "Constant":
                continue
            base = node.name if node.name else f"node_of_{node.output[0]}"
            meta = f"[ONNX Layer: {base}]"
            ins = [read(t, node.op_type in BROADCASTING) for t in node.input if t]
            out = ITensor(node.output[0], dt(node.output[0]))
            if node.op_type == "Gemm":
                mm = add(base, "MATRIX_MULTIPLY", meta, ins[:2], [])
                mm._outputs.append(ITensor(f"{mm.name}_output", out.dtype))
                add(base, "ELEMENTWISE", meta, [mm.get_output(0), *ins[2:]], [out])
            elif node.op_type == "Sum":
                acc = ins[0]
                for k, nxt in enumerate(ins[1:]):
                    last = k == len(ins) - 2
                    layer = add(base, "ELEMENTWISE", meta, [acc, nxt], [out] if last else [])
                    if not last:
                        layer._outputs.append(ITensor(f"{layer.name}_output", out.dtype))
                    acc = layer.get_output(0)
            elif node.op_type == "Softmax":
                soft = add(base, "SOFTMAX", meta, ins, [])
                soft._outputs.append(ITensor(f"{soft.name}_output", out.dtype))
                add("ONNXTRT_ShapeShuffle", "SHUFFLE", "", [soft.get_output(0)], [out])
            else:
                kind = TRANSPARENT_OPS.get(node.op_type) or COMPUTE_OPS.get(node.op_type, "ELEMENTWISE")
                add(base, kind, meta, ins, [out])
            tensors[node.output[0]] = out
        network._outputs = [tensors[o.name] for o in g.output]

    class IHostMemory(bytes):  # the buffer protocol, and a context manager (Polygraphy saves a cache within one)
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    class ITimingCache:
        def __init__(self, data):
            self._data = bytes(data)

        def serialize(self):
            return IHostMemory(self._data)

        def combine(self, other, ignore_mismatch):
            return True  # every build adds to the cache it was given: nothing to merge

    class IBuilderConfig:
        builder_optimization_level = 3
        profiling_verbosity = None  # ProfilingVerbosity.LAYER_NAMES_ONLY in TensorRT
        DLA_core = -1
        default_device_type = DeviceType.GPU
        num_optimization_profiles = 0

        def __init__(self):
            self._flags = set()
            self._cache = None

        def set_flag(self, flag):
            self._flags.add(flag)

        def get_flag(self, flag):
            return flag in self._flags

        def create_timing_cache(self, data):
            return ITimingCache(data)

        def set_timing_cache(self, cache, ignore_mismatch):
            if bytes(cache._data).startswith(b"other"):  # a cache made on another GPU or TensorRT: refused
                return False
            self._cache = cache
            return True

        def get_timing_cache(self):
            return self._cache

    class Builder:
        def __init__(self, logger):
            self._logger = logger

        def create_network(self, flags=0):
            return INetworkDefinition(flags)

        def create_builder_config(self):
            return IBuilderConfig()

        def build_serialized_network(self, network, config):
            if trt._fail_build:
                message, trt._fail_build = trt._fail_build, None
                self._logger.log(Logger.ERROR, message)
                return None
            if config._cache is not None:  # every build adds one entry to the timing cache
                config._cache._data += b"+"
            layers = {layer.name: {"metadata": layer.metadata, "precision": getattr(_pinned(layer), "name", None),
                                   "output_types": {str(i): t.name for i, t in sorted(layer._output_types.items())}}
                      for layer in network._layers}
            built = {
                "fp16": BuilderFlag.FP16 in config._flags,
                "bf16": bf16_flag and BuilderFlag.BF16 in config._flags,
                "obey": BuilderFlag.OBEY_PRECISION_CONSTRAINTS in config._flags,
                "tf32": BuilderFlag.TF32 in config._flags,
                "opt_level": config.builder_optimization_level,
                "profiling_verbosity": getattr(config.profiling_verbosity, "name", None),
                "layers": layers,
                "engine": _engine_layers(network, BuilderFlag.FP16 in config._flags),
                "inputs": [(t.name, NUMPY[t.dtype.name], list(t.shape)) for t in network._inputs],
                "bindings": [t.name for t in network._inputs + network._outputs],
            }
            trt._builds.append(built)
            return IHostMemory(json.dumps(built).encode())

    def _engine_layers(network, fp16):
        """What the engine runs, as the inspector reports it with ProfilingVerbosity.DETAILED."""
        floats = (DataType.FLOAT, DataType.HALF)

        def runs_in(layer):
            return _pinned(layer) or (DataType.HALF if fp16 else DataType.FLOAT)

        def tensor(t, dtype, myelin=False):
            text = {DataType.FLOAT: "Float", DataType.HALF: "Half"}.get(dtype) if myelin else None
            text = text or {DataType.FLOAT: "Row major linear FP32", DataType.HALF: "Row major linear FP16 format",
                            DataType.INT32: "Row major linear Int32", DataType.INT64: "Row major linear Int64",
                            DataType.BOOL: "Row major linear Bool"}[dtype]
            return {"Name": t.name, "Location": "Device", "Dimensions": list(t.shape), "Format/Datatype": text}

        def node(layer):
            return layer.metadata[len("[ONNX Layer: "):-1] if layer.metadata else None

        computed = [layer for layer in network._layers if layer.type != LayerType.CONSTANT]
        fused = {}  # layer name -> group index
        for g, group in enumerate(trt._myelin):
            for layer in [layer for layer in computed if node(layer) in set(group)]:
                fused[layer.name] = g
        records, done = [], set()
        for layer in computed:
            g = fused.get(layer.name)
            if g is None:
                kind = runs_in(layer)
                outs = [layer._output_types.get(i, kind) if t.dtype in floats else t.dtype
                        for i, t in enumerate(layer._outputs)]
                records.append({
                    "Name": layer.name, "LayerType": layer.type.name.title(),
                    "Inputs": [tensor(t, kind if t.dtype in floats else t.dtype) for t in layer._inputs],
                    "Outputs": [tensor(t, d) for t, d in zip(layer._outputs, outs)],
                    "TacticValue": "0x0000000000000000", "StreamId": 0, "Metadata": layer.metadata,
                })
                continue
            if g in done:
                continue
            done.add(g)
            members = [m for m in computed if fused.get(m.name) == g]
            made = {t.name for m in members for t in m._outputs}
            used_outside = {t.name for m in computed if fused.get(m.name) != g for t in m._inputs}
            used_outside |= {t.name for t in network._outputs}
            kind = DataType.FLOAT if all(_pinned(m) == DataType.FLOAT for m in members) else DataType.HALF
            inputs = list({t.name: t for m in members for t in m._inputs if t.name not in made}.values())
            outputs = [t for m in members for t in m._outputs if t.name in used_outside]
            records.append({
                "Name": f"{{ForeignNode[{node(members[0])}...{node(members[-1])}]}}", "LayerType": "Myelin",
                "Inputs": [tensor(t, kind if t.dtype in floats else t.dtype, True) for t in inputs],
                "Outputs": [tensor(t, kind if t.dtype in floats else t.dtype, True) for t in outputs],
                "TacticName": "__myl_fused", "StreamId": 0,
                "Metadata": "\x1f".join(m.metadata for m in members if m.metadata),
            })
        return records

    class EngineInspector:
        def __init__(self, built):
            self._built = built

        def get_engine_information(self, format):
            assert format == LayerInformationFormat.JSON
            trt._inspected += 1
            built = self._built
            if built["profiling_verbosity"] == "DETAILED":
                return json.dumps({"Layers": built["engine"], "Bindings": built["bindings"]})
            return json.dumps({"Layers": [layer["Name"] for layer in built["engine"]], "Bindings": built["bindings"]})

    class ICudaEngine:
        def __init__(self, data):
            self._data = data

        def create_engine_inspector(self):
            return EngineInspector(json.loads(self._data))

    class IProfiler:
        def __init__(self):
            pass

        def report_layer_time(self, layer_name, ms):
            raise NotImplementedError("a subclass reports layer times")

    class IExecutionContext:  # the runner's: told each engine layer's time after every run (trt._layer_ms says it)
        profiler = None

    class Runtime:
        def __init__(self, logger):
            self._logger = logger

        def deserialize_cuda_engine(self, data):
            return ICudaEngine(bytes(data))

    for name, value in list(locals().items()):
        if not name.startswith("_") and name not in ("version", "trt", "name", "value", "strongly_typed_flag",
                                                      "bf16_flag"):
            setattr(trt, name, value)
    trt.float32 = DataType.FLOAT
    return trt


def install(fake: types.ModuleType, monkeypatch=None) -> types.ModuleType:
    """``import tensorrt`` gives ``fake``, and Polygraphy's loaders use it (each of its modules a fresh import of
    TensorRT, as fp16bisect's ``load.rebind_polygraphy`` does); undone after the test with ``monkeypatch``, for good
    without (a worker process)."""
    import sys

    import polygraphy.backend.tensorrt_rtx  # noqa: F401  (imported now, so that its TensorRT import is undone too)
    import polygraphy.backend.trt  # noqa: F401
    from fp16bisect.backends.tensorrt import load

    if monkeypatch is None:
        sys.modules["tensorrt"] = fake
        load.rebind_polygraphy(False)
    else:
        monkeypatch.setitem(sys.modules, "tensorrt", fake)
        load.rebind_polygraphy(False, monkeypatch.setattr)
    return fake


def runner(trt, outputs):
    """A class standing in for ``polygraphy.backend.trt.TrtRunner`` (which needs a GPU): ``outputs(engine, feed)``
    computes what a run returns, ``engine`` being what its loader gave (the fake's ``ICudaEngine``)."""
    from polygraphy.common import TensorMetadata

    class Runner:
        def __init__(self, engine):
            self._loader, self.is_active, self.engine, self.context = engine, False, None, None

        def activate(self):
            self.engine, self.context, self.is_active = self._loader(), trt.IExecutionContext(), True

        def deactivate(self):
            self.is_active = False

        def get_input_metadata(self, use_numpy_dtypes=None):
            found = TensorMetadata()
            for name, dtype, shape in json.loads(self.engine._data)["inputs"]:
                found.add(name, np.dtype(dtype), shape)
            return found

        def infer(self, feed):
            result = outputs(self.engine, feed)
            if self.context.profiler is not None:
                for layer in json.loads(self.engine._data)["engine"]:
                    self.context.profiler.report_layer_time(layer["Name"], trt._layer_ms(layer))
            return result

    return Runner


def tensor_kind_of(tensor: dict) -> str:
    """An inspector tensor record's type, as fp16bisect reads it (inspection.tensor_kind)."""
    from fp16bisect.backends.tensorrt.inspection import tensor_kind

    return tensor_kind(tensor.get("Datatype") or tensor.get("Format/Datatype") or "")


def make_cuda(gpu: str = "NVIDIA L4", capability: tuple = (8, 9), driver: int = 12040, runtime: int = 12040,
              devices: int = 1) -> types.ModuleType:
    """A double of cuda-python's runtime module (``cuda.bindings.runtime``) answering the calls
    ``fp16bisect.backends.tensorrt.device`` makes, as the real one does: a ``(cudaError_t, value)`` tuple, the
    device's properties a ``cudaDeviceProp`` whose ``name`` is NUL-padded bytes. ``devices=0`` answers as on a
    machine without a GPU or driver (TensorRT-RTX on a CPU): cudaErrorInsufficientDriver (35) for the device
    calls, driver version 0. Install it with ``install_cuda(monkeypatch, make_cuda(...))``."""
    cudart = types.ModuleType("cuda.bindings.runtime")
    cudart.cudaError_t = types.SimpleNamespace(cudaSuccess=0, cudaErrorInsufficientDriver=35)
    no_driver = 35
    props = types.SimpleNamespace(name=gpu.encode() + b"\x00" * (256 - len(gpu)), major=capability[0],
                                  minor=capability[1])
    cudart.cudaGetDeviceCount = lambda: (0, devices) if devices else (no_driver, 0)
    cudart.cudaGetDevice = lambda: (0, 0) if devices else (no_driver, 0)
    cudart.cudaGetDeviceProperties = lambda device: (0, props) if device < devices else (no_driver, None)
    cudart.cudaDriverGetVersion = lambda: (0, driver if devices else 0)
    cudart.cudaRuntimeGetVersion = lambda: (0, runtime)
    return cudart


def install_cuda(monkeypatch, cudart: types.ModuleType) -> None:
    """Make ``from cuda.bindings import runtime`` import ``cudart`` (cuda-python 12.6+'s layout)."""
    import sys

    cuda = types.ModuleType("cuda")
    cuda.bindings = types.ModuleType("cuda.bindings")
    cuda.bindings.runtime = cudart
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.bindings", cuda.bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", cudart)
