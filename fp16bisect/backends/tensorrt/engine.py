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

from fp16bisect.backends.tensorrt.load import TensorRT, load
from fp16bisect.backends.tensorrt.pin import NodeRef, pin

PROFILED_RUNS = 10  # runs whose layer times are averaged (``Engine.layer_times``), after one warm-up run


class TensorRTError(Exception):
    """TensorRT refused: the message carries TensorRT's own words."""

    def __init__(self, what: str, messages: Sequence[str]):
        self.messages = list(dict.fromkeys(messages))  # the parser's errors are also logged
        detail = " | ".join(m.strip().replace("\n", " ") for m in self.messages) or "no message from TensorRT"
        super().__init__(f"{what}: {detail}")


class ParseError(TensorRTError):
    pass


class BuildError(TensorRTError):
    pass


class RunError(TensorRTError):
    pass


@contextlib.contextmanager
def polygraphy(failure: type[TensorRTError], what: str, verbose: bool = False):
    """Polygraphy's messages in the block, TensorRT's that it forwards among them, kept in a list of (severity,
    text) and never printed (its ``G_LOGGER.log`` is ours for the block); a ``PolygraphyException`` raised in it
    becomes ``failure(what, the errors)``, without Polygraphy's closing "critical" line when TensorRT said more. ``verbose``: every message, TensorRT's verbose ones included (else errors only); each block
    hears every warning (Polygraphy says a repeated one once per process)."""
    from polygraphy.exception import PolygraphyException
    from polygraphy.logger import G_LOGGER

    from polygraphy.backend.trt import util

    if util.TRT_LOGGER is None:  # Polygraphy makes one on first use (and again when pointed at another TensorRT)
        util.TRT_LOGGER = _forwarding(util.trt)
    lowest = G_LOGGER.EXTRA_VERBOSE if verbose else G_LOGGER.ERROR
    lines: list[tuple[int, str]] = []

    def log(message, severity, *_args, **_kwargs) -> None:
        if severity >= lowest:
            lines.append((severity, str(message() if callable(message) else message)))

    G_LOGGER.log, util.TRT_LOGGER.lowest = log, lowest
    try:
        # CreateConfig sets a timing cache, a deprecated no-op on TensorRT-RTX
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*Timing cache operations are no-ops", DeprecationWarning)
            yield lines
    except PolygraphyException:
        errors = [(level, text) for level, text in lines if level >= G_LOGGER.ERROR]
        raise failure(what, [text for level, text in errors if level < G_LOGGER.CRITICAL]
                      or [text for _level, text in errors]) from None
    finally:
        del G_LOGGER.log  # Polygraphy's own again
        util.TRT_LOGGER.lowest = None


def _forwarding(trt: ModuleType) -> Any:  # a trt.ILogger (TensorRT ships no annotations)
    """Polygraphy's TensorRT logger (``polygraphy/backend/trt/util.py``: each message to its logger, warnings once),
    without the dict it builds and the five lookups it makes for each message, and, inside ``polygraphy()``, a
    message below the severity kept dropped at once: a build logs thousands, and those cost an eighth of a small
    model's build."""
    from polygraphy.logger import G_LOGGER, LogMode

    levels = {trt.Logger.INTERNAL_ERROR: G_LOGGER.ERROR, trt.Logger.ERROR: G_LOGGER.ERROR,
              trt.Logger.WARNING: G_LOGGER.WARNING, trt.Logger.INFO: G_LOGGER.VERBOSE,
              trt.Logger.VERBOSE: G_LOGGER.EXTRA_VERBOSE}
    modes = {level: LogMode.ONCE if level == G_LOGGER.WARNING else LogMode.EACH for level in levels.values()}
    logger: Any = trt.ILogger  # the class of the TensorRT imported (tensorrt or tensorrt_rtx): no annotations

    class Forwarding(logger):
        lowest: int | None = None  # inside polygraphy(): the lowest severity kept

        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity, msg) -> None:
            level = levels.get(severity, G_LOGGER.SUPER_VERBOSE)
            if self.lowest is None or level >= self.lowest:
                try:
                    G_LOGGER.log(msg, level, mode=modes.get(level, LogMode.EACH))
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
    """A build and what came of it."""

    engine: bytes  # the serialized engine
    timing_cache: bytes | None = None  # serialized after the build; None when not used (TensorRT-RTX) or refused
    missing: tuple[str, ...] = ()  # nodes to pin that have no layer (weak typing)
    # verbose: every message logged while building, in order, as Polygraphy's logger prints it: opening with its
    # severity ([E], [W], [I]; [V] for TensorRT's INFO, [X] for its VERBOSE), a message's further lines indented
    lines: tuple[str, ...] = ()


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


def _config(tensorrt: TensorRT, network, settings: Settings, cache=None, weak: bool = False):
    """Polygraphy's config loader: strongly typed (types from the file) or weakly typed with the low precision and
    obeyed pins; TF32 as TensorRT's default; ``ProfilingVerbosity.DETAILED`` (Polygraphy's default: engine layers
    name their ONNX nodes); ``cache``: an open file holding the timing cache (TensorRT 10.x; TensorRT-RTX has none).
    The optimization profile spans the samples' shapes of the dynamic inputs (none when no input is dynamic); a
    dynamic input without them is an error (Polygraphy would build it for a made-up shape)."""
    from polygraphy.backend.trt import CreateConfig, Profile

    dynamic = [t.name for t in (network.get_input(i) for i in range(network.num_inputs)) if any(d < 0 for d in t.shape)]
    unknown = [name for name in dynamic if name not in settings.shapes]
    if unknown:
        raise BuildError("the model has dynamic input dimensions", [
            f"no sample shape for input(s) {', '.join(unknown)}: pass samples for every input"])
    profile = Profile()
    for name in dynamic:
        profile.add(name, *settings.shapes[name])
    profiles = [profile] if dynamic else []
    if tensorrt.rtx:
        from polygraphy.backend.tensorrt_rtx import CreateConfigRTX

        wanted = [settings.compute_capability] if settings.compute_capability else None
        return CreateConfigRTX(compute_capabilities=wanted, profiles=profiles,
                               builder_optimization_level=settings.opt_level)
    return CreateConfig(tf32=True, fp16=weak and settings.low == "FP16", bf16=weak and settings.low == "BF16",
                        precision_constraints="obey" if weak else None, profiles=profiles, load_timing_cache=cache,
                        builder_optimization_level=settings.opt_level)


def build(tensorrt: TensorRT, source: bytes | Path, settings: Settings, *, fp32: Iterable[NodeRef] = (),
          timing_cache: bytes | None = None, verbose: bool = False) -> Built:
    """Build an engine. ``fp32``: nodes to pin (weakly typed TensorRT 10.x only). ``timing_cache``: the bytes of the
    shared cache (None for a new one); the result carries the updated cache to save (none on TensorRT-RTX).
    ``verbose``: with every message logged while building."""
    from polygraphy.backend.trt import EngineBytesFromNetwork
    from polygraphy.logger import G_LOGGER

    strong = not tensorrt.weakly_typed or settings.strongly_typed
    parsed = parse(tensorrt, source, strongly_typed=strong)
    fp32 = list(fp32)
    missing = tuple(r.label for r in pin(parsed[1], fp32)[1]) if fp32 else ()
    with contextlib.ExitStack() as files:
        cache = saved = None
        if not tensorrt.rtx:  # TensorRT-RTX has no timing cache (its calls are deprecated no-ops there)
            cache, saved = (files.enter_context(tempfile.TemporaryFile()) for _ in range(2))  # Polygraphy takes files
            cache.write(timing_cache or b"")
        config = _config(tensorrt, parsed[1], settings, cache, weak=not strong)
        with polygraphy(BuildError, "TensorRT could not build the engine", verbose) as lines:
            engine = bytes(EngineBytesFromNetwork(parsed, config=config, save_timing_cache=saved)())
        logged = tuple(f"{G_LOGGER.SEVERITY_LETTER_MAPPING[level]} " + text.replace("\n", "\n    ")
                       for level, text in lines) if verbose else ()
        if saved is None:
            return Built(engine, None, missing, logged)
        saved.seek(0)
        return Built(engine, saved.read() or None, missing, logged)


def build_logged(path: str | Path, *, shapes: Mapping[str, tuple] | None = None,
                 compute_capability: tuple[int, int] | None = None) -> Built:
    """Build the ONNX file at ``path`` strongly typed, with ``ProfilingVerbosity.DETAILED`` and every message kept
    (``lines``): at the end of a build TensorRT prints the engine's layers (``Layers:``, one line per kernel with its
    tensors' types), the one view of a TensorRT-RTX engine on a machine without a GPU (the kernel plan's build).
    ``shapes``: input -> (min, opt, max), for dynamic inputs. A model TensorRT cannot parse is a ``ParseError``, one
    it cannot build a ``BuildError``."""
    settings = Settings(shapes=dict(shapes or {}), compute_capability=compute_capability)
    return build(load(), Path(path), settings, verbose=True)


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
        """The outputs of one run; ``inputs`` (every model input, as the samples give them: checked when read) in the
        engine's types."""
        expected = self.runner.get_input_metadata(use_numpy_dtypes=False)
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
