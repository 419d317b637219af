"""Build and run TensorRT engines: parse -> (pin) -> build, and a runner for the engine.

Thin on purpose: each step is one TensorRT call sequence, and every failure
carries TensorRT's own messages (a collecting ``ILogger`` plus the parser's
errors). Importing this module does not import TensorRT; ``load.py`` loads it
and ``pin.py`` finds the layers of nodes. Every ``trt.<name>`` used here is listed
in ``fp16bisect/backends/tensorrt/api.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fp16bisect.errors import UsageError
from fp16bisect.backends.tensorrt.load import TensorRT
from fp16bisect.backends.tensorrt.pin import STRONGLY_TYPED, NodeRef, PinnedLayer, pin_layers, resolve

PROFILED_RUNS = 10  # runs whose layer times are averaged (``Engine.layer_times``), after one warm-up run


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


def timing_profiler(trt):
    """An ``IProfiler`` summing, per engine layer, the milliseconds TensorRT reports (``report_layer_time``, called
    once per layer after each run of an execution context it is set on)."""

    class Timing(trt.IProfiler):
        def __init__(self):
            trt.IProfiler.__init__(self)
            self.times: dict[str, float] = {}

        def report_layer_time(self, layer_name, ms):
            self.times[str(layer_name)] = self.times.get(str(layer_name), 0.0) + float(ms)

    return Timing()


@dataclass
class Built:
    engine: bytes
    timing_cache: bytes | None  # serialized after the build; None when not used (TensorRT-RTX)
    pinned: list[PinnedLayer] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    strongly_typed: bool = False  # built from a strongly typed network (types from the ONNX model)


@dataclass
class EngineBuilder:
    """Parse -> (pin) -> build, sharing one logger. ``strongly_typed`` builds (the default wherever
    ``NetworkDefinitionCreationFlag.STRONGLY_TYPED`` exists; always on TensorRT 11 / RTX) take every type
    from the ONNX model: build a mixed-precision model. Weakly typed TensorRT 10.x builds enable FP16,
    obey precision constraints, pin ``fp32`` layers and keep detailed layer information, so the engine
    can be checked (``inspection.verify_pins``)."""

    tensorrt: TensorRT
    logger: Any = None  # collecting_logger's ILogger, a class made when TensorRT is loaded

    def __post_init__(self):
        if self.logger is None:
            self.logger = collecting_logger(self.tensorrt.module)

    def parse(self, onnx_bytes, *, strongly_typed: bool = False):
        """(builder, network, parser); ParseError with TensorRT's messages when it fails.

        ``onnx_bytes``: the model's bytes, or a ``Path`` to a model file (over 2 GB: with external weights).
        ``strongly_typed``: on TensorRT 10.x, create the network with ``NetworkDefinitionCreationFlag.
        STRONGLY_TYPED``; 11.x and RTX networks are strongly typed whatever the flags say (the flag is
        deprecated there), so they get none."""
        trt = self.tensorrt.module
        builder = trt.Builder(self.logger)
        flags = 0
        if strongly_typed and self.tensorrt.weakly_typed:
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        with self.logger.capture() as logged:
            ok = parser.parse_from_file(str(onnx_bytes)) if isinstance(onnx_bytes, Path) else parser.parse(onnx_bytes)
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
        strongly_typed: bool | None = None,
        low: str = "FP16",
    ) -> Built:
        """Build an engine. ``fp32``: nodes to pin (weakly typed TensorRT 10.x only). ``timing_cache``: the
        bytes of the shared cache (b"" or None for a new one); the result carries the updated cache to save.
        ``shapes``: input name -> (min, opt, max) shapes, for the optimization profile that inputs with
        dynamic dimensions need. ``strongly_typed``: None builds weakly typed on 10.x (``fp32`` pins) and
        strongly typed elsewhere; True builds strongly typed wherever TensorRT can. ``low``: the BuilderFlag
        of the low precision a weakly typed build enables, ``FP16`` or ``BF16`` (``Precision.label``)."""
        trt = self.tensorrt.module
        strong = not self.tensorrt.weakly_typed or bool(strongly_typed)
        builder, network, _parser = self.parse(onnx_bytes, strongly_typed=strong)
        fp32 = list(fp32)
        pinned: list[PinnedLayer] = []
        missing: list[str] = []
        config = builder.create_builder_config()
        if not strong:
            found, lost = resolve(network, fp32)
            pinned = pin_layers(network, found, trt)
            missing = [r.label for r in lost]
            flag = getattr(trt.BuilderFlag, low, None)
            if flag is None:
                raise UsageError(f"{self.tensorrt} has no BuilderFlag.{low}, so it cannot build {low} weakly typed: "
                                 "drop --typing weak (strongly typed builds take the types from the file)")
            config.set_flag(flag)
            config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
        elif fp32:
            why = f"{self.tensorrt} is strongly typed" if not self.tensorrt.weakly_typed else \
                "the network was created with NetworkDefinitionCreationFlag.STRONGLY_TYPED"
            raise UsageError(STRONGLY_TYPED.format(why=why))
        # layer types and ONNX node names, for verify_pins and for the profiler's times per node
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
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
        return Built(bytes(serialized), new_cache, pinned, missing, strong)

    def layers(self, engine_bytes: bytes) -> str:
        """The engine's layer information (JSON; ``EngineInspector``): deserializes it, so needs the GPU."""
        trt = self.tensorrt.module
        _runtime, engine = deserialize(self.tensorrt, engine_bytes, self.logger)
        return engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)


def deserialize(tensorrt: TensorRT, engine_bytes: bytes, logger=None):
    """(runtime, ``ICudaEngine``) from an engine's bytes (keep the runtime while using the engine);
    RunError with TensorRT's messages when it cannot be loaded."""
    logger = logger if logger is not None else collecting_logger(tensorrt.module)
    runtime = tensorrt.module.Runtime(logger)
    with logger.capture() as logged:
        engine = runtime.deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise RunError("TensorRT could not load the engine", logged)
    return runtime, engine


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
        self.stream: Any = None  # a Polygraphy cuda.Stream while entered

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

    def layer_times(self, inputs: Mapping[str, np.ndarray], runs: int = PROFILED_RUNS) -> dict[str, float]:
        """Per engine layer, its mean milliseconds over ``runs`` runs of ``inputs`` after one unprofiled warm-up
        run, from TensorRT's profiler (``IExecutionContext.profiler``; profiling slows each run a little)."""
        self.infer(inputs)
        profiler = timing_profiler(self.tensorrt.module)
        self.context.profiler = profiler
        for _ in range(runs):
            self.infer(inputs)
        return {name: total / runs for name, total in profiler.times.items()}

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
