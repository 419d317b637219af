"""The one list of TensorRT Python API names fp16bisect uses, each with the page that documents it.

``fp16bisect/backends/tensorrt/*.py`` may use a
``trt.<name>`` only if it is listed here, and the test double
``tests/fake_tensorrt.py`` exposes exactly these names (tests check both), so
the fake cannot drift from the real API without a test failing.

Names were checked against the bindings' docstring sources in NVIDIA/TensorRT
(``python/docstrings/infer/pyCoreDoc.h``, ``pyGraphDoc.h``,
``pyFoundationalTypesDoc.h``, ``parsers/pyOnnxDoc.h``) on branches
``release/10.16`` (weakly typed) and ``release/11.x`` / main (strongly typed
only), and against a real TensorRT-RTX 1.7 install.

Strong typing on TensorRT 10.x: ``NetworkDefinitionCreationFlag::kSTRONGLY_TYPED``
first appears in TensorRT 9.0 (``include/NvInfer.h`` and its Python binding in
``python/src/infer/pyCore.cpp`` on NVIDIA/TensorRT ``release/9.0``; 8.6 has no
such flag), and the ONNX parser honours it from the same release (onnx-tensorrt
``9.0-EA``/``9.0-GA``: ``ModelImporter.cpp`` and the Q/DQ importers check
``getFlag(kSTRONGLY_TYPED)``). Later fixes, from NVIDIA/TensorRT ``CHANGELOG.md``:
9.2 "changes to a few operator importers to ensure that TensorRT preserves the
precision of operations when using strongly typed mode"; 10.7 "support for
parsing mixed-precision BatchNormalization nodes in strongly-typed mode" (the
mixed models we write keep BatchNormalization statistics in FP32, so 10.0-10.6
may refuse such a node: ``STRONG_BATCHNORM``). Weak typing (``BuilderFlag.FP16``,
layer precisions) is deprecated since 10.12 ("Deprecated in TensorRT 10.12.
Superseded by strong typing", ``include/NvInfer.h`` on ``release/10.16``) and
gone in 11. So: every 10.x can build strongly typed; an older TensorRT (no
``STRONGLY_TYPED`` member) falls back to weak typing.

``WEAK_TYPING``: names that exist only in TensorRT 10.x. TensorRT 11 and
TensorRT-RTX are strongly typed: no ``BuilderFlag.FP16``, no precision
constraints, no ``ILayer.precision`` / ``set_output_type``; precision there
comes from the ONNX graph (Cast nodes), see ``fp16bisect/artifacts/mixed.py``.
"""

from __future__ import annotations

_PY = "https://docs.nvidia.com/deeplearning/tensorrt/api/python_api"
LOGGER = f"{_PY}/infer/Core/Logger.html"
BUILDER = f"{_PY}/infer/Core/Builder.html"
CONFIG = f"{_PY}/infer/Core/BuilderConfig.html"
TIMING_CACHE = f"{_PY}/infer/Core/TimingCache.html"
RUNTIME = f"{_PY}/infer/Core/Runtime.html"
PROFILE = f"{_PY}/infer/Core/OptimizationProfile.html"
ENGINE = f"{_PY}/infer/Core/Engine.html"
CONTEXT = f"{_PY}/infer/Core/ExecutionContext.html"
PROFILER = f"{_PY}/infer/Core/Profiler.html"
NETWORK = f"{_PY}/infer/Graph/Network.html"
LAYER_BASE = f"{_PY}/infer/Graph/LayerBase.html"
DATA_TYPE = f"{_PY}/infer/FoundationalTypes/DataType.html"
HOST_MEMORY = f"{_PY}/infer/FoundationalTypes/HostMemory.html"
ONNX_PARSER = f"{_PY}/parsers/Onnx/pyOnnx.html"
INSPECTOR = f"{_PY}/infer/Core/EngineInspector.html"
INDEX = _PY
# The JSON an engine inspector returns with ProfilingVerbosity.DETAILED: {"Layers": [{"Name", "LayerType",
# "Inputs": [{"Name", "Location", "Dimensions", "Format/Datatype"}], "Outputs": [...], ..., "Metadata"}],
# "Bindings": [...]}; TensorRT 11 also writes "Datatype" per tensor and "I/O Tensors" instead of "Bindings".
LAYER_INFORMATION = "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/engine-tools.html"
LAYER_INFORMATION_11 = (
    "https://docs.nvidia.com/deeplearning/tensorrt/11.3.0/api/migration/tensorrt-10x-to-11x-IEngineInspector.html"
)
STRONG_BATCHNORM = (10, 7)  # the parser reads mixed-precision BatchNormalization in strongly typed mode

# LayerType members: the ones pin() treats as transparent (they move data and never compute),
# and the ones the test double's parser creates. Same page as ILayer.type.
_LAYER_TYPES = (
    "CONSTANT", "SHUFFLE", "IDENTITY", "SLICE", "CONCATENATION", "GATHER", "SQUEEZE", "UNSQUEEZE",
    "ELEMENTWISE", "MATRIX_MULTIPLY", "ACTIVATION", "UNARY", "REDUCE", "SOFTMAX", "CONVOLUTION",
    "SCALE", "POOLING", "CAST",
)

NAMES: dict[str, str] = {
    "__version__": INDEX,
    # logging: a subclass of ILogger collects TensorRT's own error lines
    "ILogger": LOGGER,
    "ILogger.log": LOGGER,
    "ILogger.Severity": LOGGER,
    "ILogger.Severity.INTERNAL_ERROR": LOGGER,
    "ILogger.Severity.ERROR": LOGGER,
    "ILogger.Severity.WARNING": LOGGER,
    # network creation and parsing
    "Builder": BUILDER,
    "Builder.create_network": BUILDER,
    "Builder.create_builder_config": BUILDER,
    "Builder.build_serialized_network": BUILDER,
    "NetworkDefinitionCreationFlag": BUILDER,
    "NetworkDefinitionCreationFlag.STRONGLY_TYPED": BUILDER,
    "OnnxParser": ONNX_PARSER,
    "OnnxParser.parse": ONNX_PARSER,
    "OnnxParser.parse_from_file": ONNX_PARSER,  # models over 2 GB, weights in external files
    "OnnxParser.num_errors": ONNX_PARSER,
    "OnnxParser.get_error": ONNX_PARSER,
    "ParserError": ONNX_PARSER,  # str(error) is TensorRT's full message
    "INetworkDefinition": NETWORK,
    "INetworkDefinition.num_layers": NETWORK,
    "INetworkDefinition.get_layer": NETWORK,
    "INetworkDefinition.num_outputs": NETWORK,
    "INetworkDefinition.get_flag": NETWORK,
    "INetworkDefinition.num_inputs": NETWORK,
    "INetworkDefinition.get_input": NETWORK,
    # dynamic input dimensions: one optimization profile from the samples' shapes
    "Builder.create_optimization_profile": BUILDER,
    "IOptimizationProfile": PROFILE,
    "IOptimizationProfile.set_shape": PROFILE,
    "IBuilderConfig.add_optimization_profile": CONFIG,
    # layers and tensors
    "ILayer": LAYER_BASE,
    "ILayer.name": LAYER_BASE,
    "ILayer.metadata": LAYER_BASE,  # "[ONNX Layer: <node name>]" (onnx-tensorrt processMetadata)
    "ILayer.type": LAYER_BASE,
    "ILayer.num_inputs": LAYER_BASE,
    "ILayer.num_outputs": LAYER_BASE,
    "ILayer.get_input": LAYER_BASE,
    "ILayer.get_output": LAYER_BASE,
    "ILayer.precision": LAYER_BASE,
    "ILayer.set_output_type": LAYER_BASE,
    "ITensor": LAYER_BASE,
    "ITensor.name": LAYER_BASE,
    "ITensor.dtype": LAYER_BASE,
    "ITensor.shape": LAYER_BASE,
    "LayerType": LAYER_BASE,
    **{f"LayerType.{member}": LAYER_BASE for member in _LAYER_TYPES},
    "DataType": DATA_TYPE,
    "DataType.FLOAT": DATA_TYPE,
    "DataType.HALF": DATA_TYPE,
    "DataType.BF16": DATA_TYPE,
    "DataType.INT32": DATA_TYPE,
    "DataType.INT64": DATA_TYPE,
    "DataType.BOOL": DATA_TYPE,
    "float32": DATA_TYPE,
    "nptype": DATA_TYPE,
    "IHostMemory": HOST_MEMORY,  # read with bytes(...) (buffer protocol)
    # build configuration
    "IBuilderConfig": CONFIG,
    "IBuilderConfig.set_flag": CONFIG,
    "IBuilderConfig.builder_optimization_level": CONFIG,
    "IBuilderConfig.create_timing_cache": CONFIG,
    "IBuilderConfig.set_timing_cache": CONFIG,
    "IBuilderConfig.profiling_verbosity": CONFIG,  # DETAILED: the inspector reports each layer's tensor types
    "ProfilingVerbosity": INSPECTOR,
    "ProfilingVerbosity.DETAILED": INSPECTOR,
    "BuilderFlag": CONFIG,
    "BuilderFlag.FP16": CONFIG,
    "BuilderFlag.BF16": CONFIG,  # --precision bf16 --typing weak (10.x); engine.build asks for it by name
    "BuilderFlag.OBEY_PRECISION_CONSTRAINTS": CONFIG,
    "ITimingCache": TIMING_CACHE,
    "ITimingCache.serialize": TIMING_CACHE,
    # running an engine (name-based I/O)
    "Runtime": RUNTIME,
    "Runtime.deserialize_cuda_engine": RUNTIME,
    "ICudaEngine": ENGINE,
    "ICudaEngine.num_io_tensors": ENGINE,
    "ICudaEngine.get_tensor_name": ENGINE,
    "ICudaEngine.get_tensor_mode": ENGINE,
    "ICudaEngine.get_tensor_dtype": ENGINE,
    "ICudaEngine.create_execution_context": ENGINE,
    # reading what the engine runs (weakly typed builds: did TensorRT keep the FP32 pins?)
    "ICudaEngine.create_engine_inspector": ENGINE,
    "EngineInspector": INSPECTOR,  # the Python name of IEngineInspector
    "EngineInspector.get_engine_information": INSPECTOR,  # JSON: LAYER_INFORMATION
    "LayerInformationFormat": INSPECTOR,
    "LayerInformationFormat.JSON": INSPECTOR,
    "TensorIOMode": ENGINE,
    "TensorIOMode.INPUT": ENGINE,
    "TensorIOMode.OUTPUT": ENGINE,
    "IExecutionContext": CONTEXT,
    "IExecutionContext.set_input_shape": CONTEXT,
    "IExecutionContext.get_tensor_shape": CONTEXT,
    "IExecutionContext.set_tensor_address": CONTEXT,
    "IExecutionContext.execute_async_v3": CONTEXT,
    # --objective cost: per-layer times of an engine (called once per layer after each execute_async_v3)
    "IExecutionContext.profiler": CONTEXT,
    "IProfiler": PROFILER,
    "IProfiler.report_layer_time": PROFILER,
}

# Only in TensorRT 10.x (weak typing). TensorRT 11 and TensorRT-RTX have none of these.
WEAK_TYPING = frozenset(
    {
        "ILayer.precision",
        "ILayer.set_output_type",
        "BuilderFlag.FP16",
        "BuilderFlag.BF16",
        "BuilderFlag.OBEY_PRECISION_CONSTRAINTS",
    }
)

# Other libraries the TensorRT backend calls, with their documentation.
OTHER: dict[str, str] = {
    "polygraphy.cuda.DeviceArray": "https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/polygraphy/cuda/toc.html",
    "polygraphy.cuda.Stream": "https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/polygraphy/cuda/toc.html",
    "cuda.bindings.runtime.cudaGetDeviceCount": "https://nvidia.github.io/cuda-python/cuda-bindings/latest/module/runtime.html",
    "onnx-tensorrt getNodeName / processMetadata": "https://github.com/onnx/onnx-tensorrt/blob/main/importerUtils.cpp",
    "engine layer information JSON (Engine Inspector)": LAYER_INFORMATION,
    "engine layer information JSON, TensorRT 11 changes": LAYER_INFORMATION_11,
    "NetworkDefinitionCreationFlag::kSTRONGLY_TYPED in TensorRT 9.0":
        "https://github.com/NVIDIA/TensorRT/blob/release/9.0/include/NvInfer.h",
    "strongly typed parsing fixes (9.2, 10.7) and weak-typing deprecation":
        "https://github.com/NVIDIA/TensorRT/blob/main/CHANGELOG.md",
}
