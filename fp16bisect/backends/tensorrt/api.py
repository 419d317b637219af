"""The TensorRT Python API names fp16bisect's own code uses, each with the page that documents it.

Polygraphy's loaders and runner make every other TensorRT call (parse, configure, build, deserialise, run).
``fp16bisect/backends/tensorrt/*.py`` may use a ``trt.<name>`` only if it is listed here, and the test double
``tests/fake_tensorrt.py`` exposes exactly these names plus those Polygraphy calls (tests check both). Names were
checked against NVIDIA/TensorRT's binding docstrings (``python/docstrings/infer/pyCoreDoc.h``, ``pyGraphDoc.h``,
``pyFoundationalTypesDoc.h``) on ``release/10.16`` and against a real TensorRT-RTX 1.7 install; the history of strong
and weak typing, with sources, is in docs/backends/tensorrt.md.
"""

from __future__ import annotations

_PY = "https://docs.nvidia.com/deeplearning/tensorrt/api/python_api"
CONFIG = f"{_PY}/infer/Core/BuilderConfig.html"
ENGINE = f"{_PY}/infer/Core/Engine.html"
INSPECTOR = f"{_PY}/infer/Core/EngineInspector.html"
LAYER_BASE = f"{_PY}/infer/Graph/LayerBase.html"
NETWORK = f"{_PY}/infer/Graph/Network.html"
# The JSON an engine inspector returns with ProfilingVerbosity.DETAILED: {"Layers": [{"Name", "LayerType",
# "Inputs": [{"Name", "Location", "Dimensions", "Format/Datatype"}], "Outputs": [...], ..., "Metadata"}],
# "Bindings": [...]}; TensorRT 11 also writes "Datatype" per tensor and "I/O Tensors" instead of "Bindings".
LAYER_INFORMATION = "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/engine-tools.html"
STRONG_BATCHNORM = (10, 7)  # the parser reads mixed-precision BatchNormalization in strongly typed mode

_PAGES = {
    _PY: "__version__",
    # engine.py's TensorRT logger for Polygraphy (Polygraphy's own maps these same severities)
    f"{_PY}/infer/Core/Logger.html": "ILogger Logger Logger.INTERNAL_ERROR Logger.ERROR Logger.WARNING Logger.INFO "
                                     "Logger.VERBOSE",
    f"{_PY}/infer/Core/Builder.html": "NetworkDefinitionCreationFlag NetworkDefinitionCreationFlag.STRONGLY_TYPED",
    NETWORK: "INetworkDefinition INetworkDefinition.num_layers INetworkDefinition.get_layer INetworkDefinition.get_flag "
             "INetworkDefinition.num_inputs INetworkDefinition.get_input INetworkDefinition.num_outputs",
    # "[ONNX Layer: <node name>]" in ILayer.metadata (onnx-tensorrt processMetadata)
    LAYER_BASE: "ILayer ILayer.name ILayer.metadata ILayer.type ILayer.num_inputs ILayer.num_outputs ILayer.get_input "
                "ILayer.get_output ILayer.set_output_type ITensor ITensor.name ITensor.dtype ITensor.shape LayerType "
                + " ".join(f"LayerType.{member}" for member in ("CONSTANT", "SHUFFLE", "IDENTITY", "SLICE",
                                                                "CONCATENATION", "GATHER", "SQUEEZE", "UNSQUEEZE")),
    f"{_PY}/infer/FoundationalTypes/DataType.html": "DataType DataType.FLOAT DataType.HALF float32",
    CONFIG: "IBuilderConfig IBuilderConfig.set_flag IBuilderConfig.profiling_verbosity BuilderFlag BuilderFlag.FP16 "
            "BuilderFlag.BF16 BuilderFlag.OBEY_PRECISION_CONSTRAINTS",
    INSPECTOR: "ProfilingVerbosity ProfilingVerbosity.DETAILED EngineInspector EngineInspector.get_engine_information "
               "LayerInformationFormat LayerInformationFormat.JSON",
    ENGINE: "ICudaEngine ICudaEngine.create_engine_inspector",
    # --objective cost: per-layer times of an engine (called once per layer after each run)
    f"{_PY}/infer/Core/ExecutionContext.html": "IExecutionContext IExecutionContext.profiler",
    f"{_PY}/infer/Core/Profiler.html": "IProfiler IProfiler.report_layer_time",
}
NAMES: dict[str, str] = {name: page for page, names in _PAGES.items() for name in names.split()}

# Only in TensorRT 10.x (weak typing). TensorRT 11 and TensorRT-RTX have none of these.
WEAK_TYPING = frozenset({"ILayer.set_output_type", "BuilderFlag.FP16", "BuilderFlag.BF16",
                         "BuilderFlag.OBEY_PRECISION_CONSTRAINTS"})

# Other libraries the TensorRT backend calls, with their source (Polygraphy: the package installed here is the same).
_POLYGRAPHY = "https://github.com/NVIDIA/TensorRT/blob/main/tools/Polygraphy/polygraphy"
_LOADERS = ("NetworkFromOnnxPath NetworkFromOnnxBytes EngineBytesFromNetwork EngineFromBytes SetLayerPrecisions").split()
OTHER: dict[str, str] = {
    **{f"polygraphy.backend.trt.{name}": f"{_POLYGRAPHY}/backend/trt/loader.py" for name in _LOADERS},
    "polygraphy.backend.trt.CreateConfig": f"{_POLYGRAPHY}/backend/trt/config.py",
    "polygraphy.backend.trt.Profile": f"{_POLYGRAPHY}/backend/trt/profile.py",
    "polygraphy.backend.trt.TrtRunner": f"{_POLYGRAPHY}/backend/trt/runner.py",
    "polygraphy.backend.tensorrt_rtx.CreateConfigRTX": f"{_POLYGRAPHY}/backend/tensorrt_rtx/config.py",
    "polygraphy.config.USE_TENSORRT_RTX (POLYGRAPHY_USE_TENSORRT_RTX)": f"{_POLYGRAPHY}/config.py",
    "polygraphy.logger.G_LOGGER": f"{_POLYGRAPHY}/logger/logger.py",
    "cuda.bindings.runtime.cudaGetDeviceCount": "https://nvidia.github.io/cuda-python/cuda-bindings/latest/module/runtime.html",
    "onnx-tensorrt getNodeName / processMetadata": "https://github.com/onnx/onnx-tensorrt/blob/main/importerUtils.cpp",
    "engine layer information JSON (Engine Inspector)": LAYER_INFORMATION,
    "engine layer information JSON, TensorRT 11 changes": "https://docs.nvidia.com/deeplearning/tensorrt/11.3.0/api/"
                                                          "migration/tensorrt-10x-to-11x-IEngineInspector.html",
}
