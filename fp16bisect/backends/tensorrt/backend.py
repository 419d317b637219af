"""Real TensorRT engine builds: a plan (candidate ids kept in FP32) -> model outputs.

Strongly typed (the default): the plan's mixed-precision ONNX (``artifacts/mixed.py``) is built with the types it
carries. Weakly typed (``typing="weak"``, 10.x only, and the fallback on a TensorRT without
``NetworkDefinitionCreationFlag.STRONGLY_TYPED``): the original model with the plan's nodes pinned (``pin.py``);
TensorRT may ignore such pins where it fuses layers, so every such engine is inspected and a plan whose pins did not
take effect is not evidence (``PinsIgnored``, counted like a failed build). Builds are slow and not deterministic:
one timing cache for every build, saved after each; engines memoised by plan (the oracle memoises each plan's
verdict, so no plan runs a sample twice); ``noise()`` measures how much two builds of one plan differ.
docs/backends/tensorrt.md has the reasons.
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np

from fp16bisect import errors
from fp16bisect.backends.tensorrt import device as trt_device
from fp16bisect.backends.tensorrt import engine as trt_engine
from fp16bisect.backends.tensorrt import inspection as trt_inspection
from fp16bisect.backends.tensorrt import load as trt_load
from fp16bisect.backends.tensorrt import pin as trt_pin
from fp16bisect.errors import UsageError
from fp16bisect.backends.base import Backend, Typing
from fp16bisect.backends.host import host
from fp16bisect.model.graph import Graph
from fp16bisect.artifacts.files import write_atomic
from fp16bisect.model.runtime import external_copy, too_big
from fp16bisect.model.weights import in_work_directory, is_external

STRONG_BATCHNORM = "10.7"  # TensorRT's parser reads mixed-precision BatchNormalization strongly typed from here on


class BuildFailed(errors.BuildFailed):
    """TensorRT could not build (or parse) the engine of one plan; carries TensorRT's message."""

    def __init__(self, plan, message: str, failed: str = "TensorRT build failed for the plan with {count} node(s) "
                                                          "in FP32{nodes}: {message}"):
        self.plan = frozenset(plan)
        self.message = message
        nodes = ", ".join(sorted(self.plan)[:5]) + (", ..." if len(self.plan) > 5 else "")
        super().__init__(failed.format(count=len(self.plan), nodes=f" ({nodes})" if nodes else "", message=message))


class PinsIgnored(BuildFailed):
    """A weakly typed engine does not run every pinned node in FP32: its outputs say nothing about the plan."""

    kind = "pins_ignored"

    def __init__(self, plan, check: trt_inspection.PinCheck):
        self.check = check
        self.pins = tuple((pin.node, pin.layer) for pin in check.ignored)
        super().__init__(plan, check.message(), "the plan with {count} node(s) in FP32{nodes} is not evidence: {message}")


class IgnoredPinWarning(UserWarning):
    """TensorRT ignored an FP32 pin of a weakly typed build (said once per node and layer)."""


class TypingFallbackWarning(UserWarning):
    """This TensorRT cannot build strongly typed networks: the search builds weakly typed."""


def _source(model):
    """What the parser reads: the bytes of a model that holds its weights (a file over 2 GB), else a file
    (``parse_from_file``): a skeleton in the work directory that refers to the weights there, or, where it
    cannot, a self-contained copy (weights streamed into ``model.onnx.data`` over 2 GB, inline under)."""
    if not any(is_external(t) for t in model.graph.initializer):
        return external_copy(model) if too_big(model) else model.SerializeToString()
    global _files
    _files += 1
    found = in_work_directory(model, f"tensorrt-{os.getpid()}-{_files}.onnx")  # its weights where they are
    return found if found is not None else external_copy(model)


_files = 0


class TensorRTBackend(Backend):
    """Builds and runs one engine per plan. Use ``close()`` (or ``with``) to free the live engine."""

    name = "tensorrt"
    uses_device = True
    one_gpu_per_worker = True  # a worker builds and runs on its GPU only
    deterministic = False  # kernels are chosen by timing: two builds of one plan may compute differently
    times_layers = True
    max_engines = 4  # serialized engines kept in memory, by plan (the oldest go first)

    @classmethod
    def for_worker(cls, options, device: str):
        """One timing cache file per worker (``<cache>.<device>``): no write races."""
        own = options.tensorrt
        return replace(options, tensorrt=replace(own, timing_cache=f"{own.timing_cache_file}.{device}"))

    def __init__(self, graph: Graph, *, timing_cache: Path, opt_level: int | None = None,
                 input_shapes: dict | None = None, typing: str = "strong", notify=None):
        """``typing``: "strong" or "weak" (its record checks it). ``notify``: called with one line for what the user
        must know (an ignored pin, the typing fallback); without it, a Python warning (``IgnoredPinWarning``,
        ``TypingFallbackWarning``)."""
        self.notify = notify
        self.tensorrt = trt_load.load()
        self.typing = self._typing(typing, graph.precision.label)
        if not trt_device.gpu_count():
            raise UsageError(
                f"{self.tensorrt.flavour} {self.tensorrt.version} is installed but CUDA sees no GPU "
                "(cudaGetDeviceCount): run on a machine with an NVIDIA GPU and driver, or use --backend emulate"
            )
        self.graph = graph
        self.timing_cache_path = Path(timing_cache)
        found = trt_device.device()["compute_capability"].split(".") if self.tensorrt.rtx else []
        self.settings = trt_engine.Settings(opt_level, dict(input_shapes or {}), self.typing == "strong",
                                            graph.precision.label,  # TensorRT-RTX: for this GPU, when CUDA tells it
                                            (int(found[0]), int(found[1])) if len(found) == 2 else None)
        self.engines: OrderedDict[tuple, bytes] = OrderedDict()  # (plan, repeat) -> serialized engine
        self.builds = 0
        self.warned: set = set()  # the missing nodes and ignored pins said already
        self._live: tuple[object, trt_engine.Engine] | None = None
        self._cache: bytes | None = None
        try:
            self._cache = self.timing_cache_path.read_bytes()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise UsageError(f"cannot read the timing cache {str(timing_cache)!r} ({exc.strerror}): delete it or "
                             "choose another path") from None
        model = graph.runnable_copy()  # nodes sharing a name get unique ones, so metadata tells them apart
        self._onnx = _source(model)
        self._refs = {node.id: trt_pin.NodeRef.of(model.graph.node[node.index].name or f"node_of_{node.outputs[0]}",
                                                  node.outputs) for node in graph.candidates}

    def _typing(self, typing: str, low: str) -> Typing:
        """The typing this TensorRT can do for the one asked: a UsageError for weak typing where it is gone (or
        cannot build ``low``), a one-line warning (and weak typing) for strong typing where it does not exist yet."""
        loaded = self.tensorrt
        if typing != "weak" and loaded.can_strongly_type:
            return "strong"
        if typing == "weak" and not loaded.weakly_typed:
            raise UsageError(
                f"--typing weak needs TensorRT 10.x, and {loaded.flavour} {loaded.version} is always strongly typed "
                "(no layer precisions): drop --typing weak"
            )
        if typing != "weak":
            self._say(
                f"{loaded.flavour} {loaded.version} has no NetworkDefinitionCreationFlag.STRONGLY_TYPED (TensorRT 9.0+): "
                "building weakly typed with layer precisions, each engine checked for ignored pins",
                TypingFallbackWarning,
            )
        if not hasattr(loaded.module.BuilderFlag, low):
            raise UsageError(f"{loaded} has no BuilderFlag.{low}, so it cannot build {low} weakly typed: drop "
                             "--typing weak (strongly typed builds take the types from the file)")
        return "weak"

    @property
    def journal_name(self) -> str:
        """The journal's backend: the typing and the optimisation level change the engines, so the verdicts."""
        level = f", opt level {self.settings.opt_level}" if self.settings.opt_level is not None else ""
        return f"tensorrt ({self.typing} typing{level})"

    def versions(self) -> dict:
        import onnx

        import polygraphy

        return {self.tensorrt.flavour: self.tensorrt.version, "onnx": onnx.__version__,
                "polygraphy": polygraphy.__version__}

    def environment(self) -> dict:
        """TensorRT's flavour and version, the GPU and its compute capability, the CUDA driver and runtime
        (``device.py``), the other packages' versions and the machine."""
        others = {k: v for k, v in self.versions().items() if k != self.tensorrt.flavour}
        return {"backend": self.name, "tensorrt_flavour": self.tensorrt.flavour, "tensorrt": self.tensorrt.version,
                **trt_device.device(), **others, **host()}

    def run(self, plan, inputs: dict[str, np.ndarray], repeat: int = 0) -> dict[str, np.ndarray]:
        """``repeat`` k > 0 builds the plan's engine afresh (its own memo entry): --repeats and rechecks."""
        key = (frozenset(plan), repeat)
        return self._execute(key, self._engine(*key), inputs)

    def layer_times(self, plan, inputs: dict[str, np.ndarray]) -> dict[str, float]:
        """Per candidate node, the milliseconds of the layers computing it in this plan's engine, timed by TensorRT's
        profiler (``Engine.layer_times``; ``inspection.node_times`` maps layers to nodes by their metadata)."""
        engine = self._engine(frozenset(plan))
        layers = trt_inspection.engine_layers(trt_inspection.information(engine))
        self.close()  # one engine on the GPU at a time
        with trt_engine.Engine(self.tensorrt, engine) as live:
            return trt_inspection.node_times(layers, live.layer_times(inputs), self._refs)

    def noise(self, inputs: dict[str, np.ndarray], plan=frozenset()) -> tuple[dict, dict]:
        """The outputs of two fresh builds of one plan (all-FP16 unless told): how much builds differ.

        TensorRT picks kernels by timing, so two builds of one plan can compute differently; the
        pipeline compares the two runs with the tolerance before trusting any verdict. The first engine
        is kept as the plan's own, so the search's evaluation of that plan builds nothing more (with a
        prior, the pipeline measures on the prior's set: the first plan the search evaluates anyway).
        """
        plan = frozenset(plan)
        first = self._build(plan)
        outputs = self._execute("noise-1", first, inputs), self._execute("noise-2", self._build(plan), inputs)
        self._keep((plan, 0), first)
        return outputs

    def close(self) -> None:
        if self._live is not None:
            self._live[1].__exit__(None, None, None)
            self._live = None

    # -- steps (each small and replaceable in tests)

    def _engine(self, plan: frozenset, repeat: int = 0) -> bytes:
        engine = self.engines.get((plan, repeat))
        if engine is None:
            return self._keep((plan, repeat), self._build(plan))
        self.engines.move_to_end((plan, repeat))
        return engine

    def _keep(self, key: tuple, engine: bytes) -> bytes:
        self.engines[key] = engine
        while len(self.engines) > self.max_engines:
            self.engines.popitem(last=False)
        return engine

    def _model(self, plan: frozenset):
        """What the parser reads: the original model (weak typing) or the plan's mixed-precision model."""
        if self.typing == "weak":
            return self._onnx.model if isinstance(self._onnx, external_copy) else self._onnx
        from fp16bisect.artifacts import mixed

        source = _source(mixed.mixed_model(self.graph, sorted(plan)))
        self._last_source = source  # an external copy lives until the next build
        return source.model if isinstance(source, external_copy) else source

    def _build(self, plan: frozenset) -> bytes:
        unknown = sorted(plan - set(self._refs))
        if unknown:
            raise UsageError(f"plan names node(s) that are not candidates of this model: {', '.join(unknown[:5])}")
        fp32 = [self._refs[n] for n in sorted(plan)] if self.typing == "weak" else []
        try:
            built = trt_engine.build(self.tensorrt, self._model(plan), self.settings, fp32=fp32,
                                     timing_cache=self._cache)
        except trt_engine.TensorRTError as exc:
            raise BuildFailed(plan, str(exc) + self._hint()) from None
        self.builds += 1
        new_missing = [m for m in built.missing if m not in self.warned]
        if new_missing:
            self.warned.update(new_missing)
            warnings.warn(f"no TensorRT layer carries node(s) {', '.join(new_missing)} (folded into constants by the "
                          "parser?): keeping them in FP32 changes nothing in this engine", trt_pin.MissingNodesWarning,
                          stacklevel=3)
        if not self.tensorrt.rtx:  # None: TensorRT refused the cache (another GPU or version), the next build anew
            self._cache = built.timing_cache
        if built.timing_cache is not None:
            try:
                write_atomic(self.timing_cache_path, built.timing_cache)
            except OSError as exc:  # write_atomic says itself when the folder cannot be written
                raise UsageError(f"cannot write the timing cache {str(self.timing_cache_path)!r} ({exc.strerror}): "
                                 "choose another path") from None
        if fp32:
            self._check_pins(plan, built.engine, fp32)
        return built.engine

    def _check_pins(self, plan: frozenset, engine: bytes, fp32: list) -> None:
        """Weak typing: read the engine's layers; a pinned node whose engine layer is not all FP32 makes the
        plan no evidence (PinsIgnored, recorded by the oracle like a failed build)."""
        try:
            layers = trt_inspection.engine_layers(trt_inspection.information(engine))
        except trt_engine.TensorRTError as exc:
            raise BuildFailed(plan, f"could not read the engine's layers to check the FP32 pins: {exc}") from None
        check = trt_inspection.check_pins(layers, fp32)
        for pin in check.ignored:
            if (pin.node, pin.layer) not in self.warned:
                self.warned.add((pin.node, pin.layer))
                self._say(f"{pin}; {trt_inspection.IGNORED_ADVICE}", IgnoredPinWarning)
        if not check.ok:
            raise PinsIgnored(plan, check)

    def _say(self, text: str, category) -> None:
        if self.notify is not None:
            self.notify(text)
        else:
            warnings.warn(text, category, stacklevel=4)

    def _hint(self) -> str:
        """TensorRT 10.0-10.6 parse strongly typed models but not mixed-precision BatchNormalization."""
        from polygraphy.mod import version

        if (self.typing == "strong" and self.tensorrt.weakly_typed
                and version(self.tensorrt.version) < version(STRONG_BATCHNORM)
                and any(n.op_type == "BatchNormalization" for n in self.graph.candidates)):
            return (" (TensorRT parses mixed-precision BatchNormalization in strongly typed mode from 10.7 on: "
                    "upgrade TensorRT, or pass --typing weak)")
        return ""

    def _execute(self, key, engine: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run an engine; the last one stays loaded, so the samples of one plan load it once."""
        if self._live is None or self._live[0] != key:
            self.close()
            live = trt_engine.Engine(self.tensorrt, engine)
            live.__enter__()
            self._live = (key, live)
        outputs = self._live[1].infer(inputs)
        return {o.name: outputs[o.name] for o in self.graph.outputs if o.name in outputs}
