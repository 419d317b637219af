"""Engines through Polygraphy's loaders: parse -> (pin) -> configure -> build, a build with its verbose log, and a
run through ``TrtRunner``.

Polygraphy does each step (``NetworkFromOnnxPath``/``NetworkFromOnnxBytes``, ``CreateConfig``/``CreateConfigRTX``,
``EngineBytesFromNetwork``, ``EngineFromBytes``, ``TrtRunner``); ours are the sample shapes of dynamic inputs, the
layer pins (``pin.py``), TensorRT's messages kept for the errors (``polygraphy``), the per-layer profiler and
``build_logged`` (docs/backends/tensorrt.md says why each). Importing this module imports neither TensorRT nor
Polygraphy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from fp16bisect.errors import UsageError
from fp16bisect.backends.tensorrt.load import TensorRT, load
from fp16bisect.backends.tensorrt.pin import STRONGLY_TYPED, NodeRef, pin_layers, resolve

PROFILED_RUNS = 10  # runs whose layer times are averaged (``Engine.layer_times``), after one warm-up run


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


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.getMessage()))

    def errors(self) -> list[str]:
        """The errors, without Polygraphy's closing "critical" line when TensorRT said more."""
        found = [(level, text) for level, text in self.records if level >= logging.ERROR]
        return [text for level, text in found if level < logging.CRITICAL] or [text for _level, text in found]


@contextlib.contextmanager
def polygraphy(failure: type[TensorRTError] | None, what: str = "", verbose: bool = False):
    """Polygraphy's logger, with the TensorRT messages it forwards, into ``_Lines`` for the block: nothing printed;
    a ``PolygraphyException`` raised in it becomes ``failure(what, TensorRT's errors)`` (is dropped: None).
    ``verbose``: every message, TensorRT's verbose ones included, each opening with its severity as Polygraphy prints
    it (else errors only, bare); each block hears every warning (Polygraphy says a repeated one once per
    process)."""
    from polygraphy.exception import PolygraphyException
    from polygraphy.logger import G_LOGGER

    from polygraphy.backend.trt import util

    if util.TRT_LOGGER is None:  # Polygraphy makes one on first use (and again when pointed at another TensorRT)
        util.TRT_LOGGER = _forwarding(util.trt)
    python_logger, lines = logging.getLogger("Polygraphy"), _Lines()
    saved = (G_LOGGER.module_severity, G_LOGGER.use_python_logging_system, G_LOGGER.letter, G_LOGGER.colors,
             G_LOGGER.once_logged, python_logger.propagate, python_logger.level)
    G_LOGGER.module_severity = G_LOGGER.EXTRA_VERBOSE if verbose else G_LOGGER.ERROR
    G_LOGGER.use_python_logging_system, G_LOGGER.letter, G_LOGGER.colors, G_LOGGER.once_logged = True, verbose, False, set()
    python_logger.addHandler(lines)
    python_logger.propagate = False
    python_logger.setLevel(1)
    util.TRT_LOGGER.keep = G_LOGGER.module_severity.get()
    try:
        with warnings.catch_warnings():  # CreateConfig sets a timing cache, a deprecated no-op on TensorRT-RTX
            warnings.filterwarnings("ignore", ".*Timing cache operations are no-ops", DeprecationWarning)
            yield lines
    except PolygraphyException:
        if failure is not None:
            raise failure(what, lines.errors()) from None
    finally:
        util.TRT_LOGGER.keep = None
        python_logger.removeHandler(lines)
        (G_LOGGER.module_severity, G_LOGGER.use_python_logging_system, G_LOGGER.letter, G_LOGGER.colors, once,
         python_logger.propagate, level) = saved
        python_logger.setLevel(level)
        G_LOGGER.once_logged = once | G_LOGGER.once_logged


def _forwarding(trt: ModuleType) -> Any:  # a trt.ILogger (TensorRT ships no annotations)
    """Polygraphy's TensorRT logger (``polygraphy/backend/trt/util.py``: each message to its logger, warnings once),
    with a first test that drops, inside ``polygraphy()``, a message below the severity kept: a build logs thousands,
    and Polygraphy's costs a dict and five lookups each (an eighth of a small model's build)."""
    from polygraphy.logger import G_LOGGER, LogMode

    levels = {trt.Logger.INTERNAL_ERROR: G_LOGGER.ERROR, trt.Logger.ERROR: G_LOGGER.ERROR,
              trt.Logger.WARNING: G_LOGGER.WARNING, trt.Logger.INFO: G_LOGGER.VERBOSE,
              trt.Logger.VERBOSE: G_LOGGER.EXTRA_VERBOSE}
    logger: Any = trt.ILogger  # the class of the TensorRT imported (tensorrt or tensorrt_rtx): no annotations

    class Forwarding(logger):
        keep: int | None = None  # inside polygraphy(): the lowest severity kept

        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity, msg) -> None:
            level = levels.get(severity, G_LOGGER.SUPER_VERBOSE)
            if self.keep is None or level >= self.keep:
                try:
                    G_LOGGER.log(msg, level, mode=LogMode.ONCE if level == G_LOGGER.WARNING else LogMode.EACH)
                except KeyboardInterrupt:  # TensorRT calls log() from C++, which cannot take an exception
                    os.kill(os.getpid(), signal.SIGTERM)

    return Forwarding()


def timing_profiler(trt: ModuleType) -> Any:  # a trt.IProfiler with ``times``
    """An ``IProfiler`` summing, per engine layer, the milliseconds TensorRT reports (``report_layer_time``, called
    once per layer after each run of an execution context it is set on)."""

    profiler: Any = trt.IProfiler  # the class of the TensorRT imported: no annotations

    class Timing(profiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.times: dict[str, float] = {}

        def report_layer_time(self, layer_name, ms):
            self.times[str(layer_name)] = self.times.get(str(layer_name), 0.0) + float(ms)

    return Timing()


# --------------------------------------------------------------------------- building


@dataclass(frozen=True)
class Settings:
    """How every engine of a search is built."""

    opt_level: int | None = None  # the builder optimisation level (None: TensorRT's default)
    shapes: Mapping[str, tuple] = field(default_factory=dict)  # input -> (min, opt, max): dynamic inputs' profile
    strongly_typed: bool = True  # on TensorRT 10.x, False: the original model, weakly typed, with pins
    low: str = "FP16"  # the BuilderFlag of the low precision a weakly typed build enables (FP16 or BF16)
    compute_capability: tuple[int, int] | None = None  # TensorRT-RTX: the GPU built for (None: RTX's default)


@dataclass(frozen=True)
class Built:
    engine: bytes
    timing_cache: bytes | None  # serialized after the build; None when not used (TensorRT-RTX)
    missing: tuple[str, ...] = ()  # nodes to pin that have no layer (weak typing)


def parse(tensorrt: TensorRT, source: bytes | Path, *, strongly_typed: bool = False):
    """(builder, network, parser) of an ONNX model's bytes, or of a file (parsed from the file, so weights in external
    files are found). ``strongly_typed`` sets ``NetworkDefinitionCreationFlag.STRONGLY_TYPED`` on TensorRT 10.x;
    11.x and RTX networks are strongly typed whatever the flags say (the flag is deprecated there)."""
    from polygraphy.backend.trt import NetworkFromOnnxBytes, NetworkFromOnnxPath

    flag = strongly_typed and tensorrt.weakly_typed
    loader = (NetworkFromOnnxPath(str(source), strongly_typed=flag) if isinstance(source, Path)
              else NetworkFromOnnxBytes(source, strongly_typed=flag))
    with polygraphy(ParseError, "TensorRT's ONNX parser rejected the model"):
        builder, network, parser = loader()
    if network.num_layers == 0 or network.num_outputs == 0:  # RTX accepts garbage and returns an empty network
        raise ParseError("TensorRT's ONNX parser produced an empty network", ["not an ONNX model?"])
    return builder, network, parser


def _profiles(network, shapes: Mapping[str, tuple]) -> list:
    """The optimization profile of the dynamic inputs, from the samples' shapes (none when no input is dynamic); a
    dynamic input without them is an error (Polygraphy would build it for a made-up shape)."""
    from polygraphy.backend.trt import Profile

    dynamic = [t.name for t in (network.get_input(i) for i in range(network.num_inputs)) if any(d < 0 for d in t.shape)]
    unknown = [name for name in dynamic if name not in shapes]
    if unknown:
        raise BuildError("the model has dynamic input dimensions", [
            f"no sample shape for input(s) {', '.join(unknown)}: pass samples for every input"])
    profile = Profile()
    for name in dynamic:
        profile.add(name, *shapes[name])
    return [profile] if dynamic else []


def _config(tensorrt: TensorRT, network, settings: Settings, cache, weak: bool):
    """Polygraphy's config loader: strongly typed (types from the file) or weakly typed with the low precision and
    obeyed pins; DETAILED profiling verbosity (engine layers name their ONNX nodes); TF32 as TensorRT's default;
    ``cache``: an open file holding the timing cache (TensorRT 10.x; TensorRT-RTX has none)."""
    from polygraphy.backend.trt import CreateConfig

    trt = tensorrt.module
    detailed = trt.ProfilingVerbosity.DETAILED
    if tensorrt.rtx:
        from polygraphy.backend.tensorrt_rtx import CreateConfigRTX

        wanted = [settings.compute_capability] if settings.compute_capability else None
        return CreateConfigRTX(compute_capabilities=wanted, profiles=_profiles(network, settings.shapes),
                               builder_optimization_level=settings.opt_level, profiling_verbosity=detailed)
    return CreateConfig(tf32=True, fp16=weak and settings.low == "FP16", bf16=weak and settings.low == "BF16",
                        precision_constraints="obey" if weak else None, profiles=_profiles(network, settings.shapes),
                        load_timing_cache=cache, builder_optimization_level=settings.opt_level,
                        profiling_verbosity=detailed)


def build(tensorrt: TensorRT, source: bytes | Path, settings: Settings, *, fp32: Iterable[NodeRef] = (),
          timing_cache: bytes | None = None) -> Built:
    """Build an engine. ``fp32``: nodes to pin (weakly typed TensorRT 10.x only). ``timing_cache``: the bytes of the
    shared cache (None for a new one); the result carries the updated cache to save (none on TensorRT-RTX)."""
    trt = tensorrt.module
    strong = not tensorrt.weakly_typed or settings.strongly_typed
    builder, network, parser = parse(tensorrt, source, strongly_typed=strong)
    fp32, lost = list(fp32), []
    if not strong:
        if not hasattr(trt.BuilderFlag, settings.low):
            raise UsageError(f"{tensorrt} has no BuilderFlag.{settings.low}, so it cannot build {settings.low} weakly "
                             "typed: drop --typing weak (strongly typed builds take the types from the file)")
        found, lost = resolve(network, fp32)
        pin_layers(network, found, trt)
    elif fp32:
        why = f"{tensorrt} is strongly typed" if not tensorrt.weakly_typed else \
            "the network was created with NetworkDefinitionCreationFlag.STRONGLY_TYPED"
        raise UsageError(STRONGLY_TYPED.format(why=why))
    missing = tuple(r.label for r in lost)
    if tensorrt.rtx:  # no timing cache: its calls are deprecated no-ops there
        return Built(_engine((builder, network, parser), _config(tensorrt, network, settings, None, False)), None,
                     missing)
    with tempfile.TemporaryFile() as cache, tempfile.TemporaryFile() as saved:  # Polygraphy takes the cache as files
        cache.write(timing_cache or b"")
        config = _config(tensorrt, network, settings, cache, weak=not strong)
        engine = _engine((builder, network, parser), config, saved)
        saved.seek(0)
        return Built(engine, saved.read() or None, missing)


def _engine(parsed: tuple, config, saved=None) -> bytes:
    """Polygraphy's ``EngineBytesFromNetwork``: the serialized engine; the timing cache saved into ``saved``."""
    from polygraphy.backend.trt import EngineBytesFromNetwork

    with polygraphy(BuildError, "TensorRT could not build the engine"):
        engine = bytes(EngineBytesFromNetwork(parsed, config=config, save_timing_cache=saved)())
    return engine


@dataclass(frozen=True)
class BuildLog:
    """A build and what TensorRT said while it built."""

    engine: bytes | None  # the serialized engine; None when the build failed
    # every message logged while building, in order, as Polygraphy's logger prints it: opening with its severity
    # ([E], [W], [I]; [V] for TensorRT's INFO, [X] for its VERBOSE), a message's further lines indented
    lines: tuple[str, ...]


def build_logged(path: str | Path, *, shapes: Mapping[str, tuple] | None = None,
                 compute_capability: tuple[int, int] | None = None) -> BuildLog:
    """Build the ONNX file at ``path`` strongly typed, with ``ProfilingVerbosity.DETAILED`` and every message kept:
    at the end of a build TensorRT prints the engine's layers (``Layers:``, one line per kernel with its tensors'
    types), the one view of a TensorRT-RTX engine on a machine without a GPU. ``shapes``: input -> (min, opt, max),
    for dynamic inputs. A model TensorRT cannot parse is a ``ParseError``."""
    from polygraphy.backend.trt import EngineBytesFromNetwork

    tensorrt = load()
    builder, network, parser = parse(tensorrt, Path(path), strongly_typed=True)
    config = _config(tensorrt, network, Settings(shapes=dict(shapes or {}), compute_capability=compute_capability),
                     None, weak=False)
    engine: bytes | None = None
    with polygraphy(None, verbose=True) as lines:
        engine = bytes(EngineBytesFromNetwork((builder, network, parser), config=config)())
    return BuildLog(engine, tuple(text for _level, text in lines.records))


# --------------------------------------------------------------------------- running


class Engine:
    """A built engine on the GPU, deserialized by Polygraphy's ``EngineFromBytes`` and run by its ``TrtRunner``
    (device buffers, shapes, ``execute_async_v3``). Use as a context manager::

        with Engine(tensorrt, engine_bytes) as engine:
            outputs = engine.infer({"x": x})
    """

    def __init__(self, tensorrt: TensorRT, engine_bytes: bytes):
        from polygraphy.backend.trt import EngineFromBytes, TrtRunner

        self.tensorrt = tensorrt
        self.runner = TrtRunner(EngineFromBytes(engine_bytes))

    def __enter__(self) -> "Engine":
        with polygraphy(RunError, "TensorRT could not load the engine"):
            self.runner.activate()
        return self

    def __exit__(self, *exc) -> None:
        if self.runner.is_active:
            self.runner.deactivate()

    def infer(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        expected = self.runner.get_input_metadata(use_numpy_dtypes=False)
        missing = [n for n in expected if n not in inputs]
        if missing:
            raise UsageError(f"no value for engine input(s) {', '.join(missing)}: pass every model input")
        feed = {n: np.ascontiguousarray(inputs[n], dtype=expected[n].dtype.numpy()) for n in expected}
        with polygraphy(RunError, "TensorRT could not run the engine"):
            outputs = self.runner.infer(feed)
        return {name: np.array(value) for name, value in outputs.items()}  # the runner reuses its buffers

    def layer_times(self, inputs: Mapping[str, np.ndarray], runs: int = PROFILED_RUNS) -> dict[str, float]:
        """Per engine layer, its mean milliseconds over ``runs`` runs of ``inputs`` after one unprofiled warm-up
        run, from TensorRT's profiler (``IExecutionContext.profiler``; profiling slows each run a little)."""
        self.infer(inputs)
        profiler = timing_profiler(self.tensorrt.module)
        self.runner.context.profiler = profiler
        for _ in range(runs):
            self.infer(inputs)
        return {name: total / runs for name, total in profiler.times.items()}
