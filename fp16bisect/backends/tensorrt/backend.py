"""Real TensorRT engine builds: a plan (candidate ids kept in FP32) -> model outputs.

Strongly typed (the default): the plan's mixed-precision ONNX (``artifacts/mixed.py``) is built with the types it
carries. Weakly typed (``typing="weak"``, 10.x only, and the fallback on a TensorRT without
``NetworkDefinitionCreationFlag.STRONGLY_TYPED``): the original model with the plan's nodes pinned (``pin.py``);
TensorRT may ignore such pins where it fuses layers, so every such engine is inspected and a plan whose pins did not
take effect is not evidence (``PinsIgnored``, counted like a failed build). Builds are slow and not deterministic:
one timing cache for every build, saved after each; engines memoised by plan and results by plan and inputs;
``noise()`` measures how much two builds of one plan differ. docs/backends/tensorrt.md has the reasons.
"""

from __future__ import annotations

import os
import hashlib
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
from fp16bisect.model.samples import update_digest


class BuildFailed(errors.BuildFailed):
    """TensorRT could not build (or parse) the engine of one plan; carries TensorRT's message."""

    def __init__(self, plan, message: str):
        self.plan = frozenset(plan)
        self.message = message
        nodes = ", ".join(sorted(self.plan)[:5]) + (", ..." if len(self.plan) > 5 else "")
        super().__init__(
            f"TensorRT build failed for the plan with {len(self.plan)} node(s) in FP32"
            f"{f' ({nodes})' if nodes else ''}: {message}"
        )


class PinsIgnored(BuildFailed):
    """A weakly typed engine does not run every pinned node in FP32: its outputs say nothing about the plan."""

    kind = "pins_ignored"

    def __init__(self, plan, check: trt_inspection.PinCheck):
        self.plan = frozenset(plan)
        self.check = check
        self.pins = tuple((pin.node, pin.layer) for pin in check.ignored)
        self.message = check.message()
        nodes = ", ".join(sorted(self.plan)[:5]) + (", ..." if len(self.plan) > 5 else "")
        errors.BuildFailed.__init__(
            self, f"the plan with {len(self.plan)} node(s) in FP32 ({nodes}) is not evidence: {self.message}"
        )


class IgnoredPinWarning(UserWarning):
    """TensorRT ignored an FP32 pin of a weakly typed build (said once per node and layer)."""


class TypingFallbackWarning(UserWarning):
    """This TensorRT cannot build strongly typed networks: the search builds weakly typed."""


TYPINGS = ("strong", "weak")


def plan_key(plan) -> str:
    return hashlib.sha256("\n".join(sorted(plan)).encode("utf-8")).hexdigest()


def inputs_key(inputs: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    update_digest(digest, inputs)
    return digest.hexdigest()


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
    max_engines = 4  # serialized engines kept in memory, by plan (the oldest go first)
    max_results = 256  # outputs kept in memory, by plan and inputs

    @classmethod
    def for_worker(cls, options, device: str):
        """One timing cache file per worker (``<cache>.<device>``): no write races."""
        own = options.tensorrt
        return replace(options, tensorrt=replace(own, timing_cache=f"{own.timing_cache_file}.{device}"))

    def __init__(
        self,
        graph: Graph,
        *,
        timing_cache: Path,
        opt_level: int | None = None,
        input_shapes: dict | None = None,
        typing: str = "strong",
        notify=None,
    ):
        """``notify``: called with one line for what the user must know (an ignored pin, the typing fallback);
        without it, a Python warning (``IgnoredPinWarning``, ``TypingFallbackWarning``)."""
        self.notify = notify
        self.tensorrt = trt_load.load()
        self.typing = self._typing(typing)
        if not trt_load.gpu_available():
            raise UsageError(
                f"{self.tensorrt.flavour} {self.tensorrt.version} is installed but CUDA sees no GPU "
                "(cudaGetDeviceCount): run on a machine with an NVIDIA GPU and driver, or use --backend emulate"
            )
        try:
            import polygraphy.cuda  # noqa: F401  (device buffers for inference)
        except ImportError:
            raise UsageError(
                "Polygraphy is not installed, and the tensorrt backend builds and runs engines through it: "
                "pip install 'fp16bisect[tensorrt]'"
            ) from None
        self.graph = graph
        self.timing_cache_path = Path(timing_cache)
        self.opt_level = opt_level
        self.settings = trt_engine.Settings(opt_level, dict(input_shapes or {}), self.strongly_typed,
                                            graph.precision.label, self._compute_capability())
        self.engines: OrderedDict[str, bytes] = OrderedDict()  # plan key -> serialized engine
        self.results: OrderedDict[tuple, dict] = OrderedDict()  # (plan key, inputs key) -> outputs
        self.builds = 0
        self.warned_missing: set = set()
        self.warned_ignored: set = set()
        self._live: tuple[str, trt_engine.Engine] | None = None
        self._cache = self._read_cache()
        model = graph.runnable_copy()  # nodes sharing a name get unique ones, so metadata tells them apart
        self._onnx = _source(model)
        self._refs = {
            node.id: trt_pin.NodeRef.of(
                model.graph.node[node.index].name or f"node_of_{node.outputs[0]}", node.outputs
            )
            for node in graph.candidates
        }

    def _typing(self, typing: str) -> Typing:
        """The typing this TensorRT can do for the one asked: a UsageError for weak typing where it is gone,
        a one-line warning (and weak typing) for strong typing where it does not exist yet."""
        loaded = self.tensorrt
        if typing not in TYPINGS:
            raise UsageError(f"--typing {typing!r}: use strong (default) or weak")
        if typing == "weak" and not loaded.weakly_typed:
            raise UsageError(
                f"--typing weak needs TensorRT 10.x, and {loaded.flavour} {loaded.version} is always strongly typed "
                "(no layer precisions): drop --typing weak"
            )
        if typing == "strong" and not loaded.can_strongly_type:
            self._say(
                f"{loaded.flavour} {loaded.version} has no NetworkDefinitionCreationFlag.STRONGLY_TYPED (TensorRT 9.0+): "
                "building weakly typed with layer precisions, each engine checked for ignored pins",
                TypingFallbackWarning,
            )
            return "weak"
        return "weak" if typing == "weak" else "strong"  # one of TYPINGS, as checked above

    @property
    def strongly_typed(self) -> bool:
        return self.typing == "strong"

    def _compute_capability(self) -> tuple[int, int] | None:
        """TensorRT-RTX builds for this GPU's compute capability (when CUDA tells it)."""
        found = trt_device.device()["compute_capability"] if self.tensorrt.rtx else trt_device.UNKNOWN
        return None if found == trt_device.UNKNOWN else (int(found.split(".")[0]), int(found.split(".")[1]))

    @property
    def journal_name(self) -> str:
        """The journal's backend: the typing and the optimisation level change the engines, so the verdicts."""
        level = f", opt level {self.opt_level}" if self.opt_level is not None else ""
        return f"tensorrt ({self.typing} typing{level})"

    # -- public

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

    deterministic = False  # kernels are chosen by timing: two builds of one plan may compute differently

    def run(self, plan, inputs: dict[str, np.ndarray], repeat: int = 0) -> dict[str, np.ndarray]:
        """``repeat`` k > 0 builds the plan's engine afresh (its own memo entry): --repeats and rechecks."""
        plan = frozenset(plan)
        key = (plan_key(plan) + (f"#{repeat}" if repeat else ""), inputs_key(inputs))
        if key in self.results:
            self.results.move_to_end(key)
            return self.results[key]
        outputs = self._execute(key[0], self._engine(plan, key[0]), inputs)
        self.results[key] = outputs
        while len(self.results) > self.max_results:
            self.results.popitem(last=False)
        return outputs

    times_layers = True

    def layer_times(self, plan, inputs: dict[str, np.ndarray]) -> dict[str, float]:
        """Per candidate node, the milliseconds of the layers computing it in this plan's engine, timed by TensorRT's
        profiler (``Engine.layer_times``; ``inspection.node_times`` maps layers to nodes by their metadata)."""
        plan = frozenset(plan)
        engine = self._engine(plan, plan_key(plan))
        layers = trt_inspection.engine_layers(trt_inspection.information(engine))
        return trt_inspection.node_times(layers, self._profile(engine, inputs), self._refs)

    def noise(self, inputs: dict[str, np.ndarray], plan=frozenset()) -> tuple[dict, dict]:
        """The outputs of two fresh builds of one plan (all-FP16 unless told): how much builds differ.

        TensorRT picks kernels by timing, so two builds of one plan can compute differently; the
        pipeline compares the two runs with the tolerance before trusting any verdict. The first engine
        is kept as the plan's own, so the search's evaluation of that plan builds nothing more (with a
        prior, the pipeline measures on the prior's set: the first plan the search evaluates anyway).
        """
        plan = frozenset(plan)
        key = plan_key(plan)
        first_engine = self._build(plan)
        first = self._execute("noise-1", first_engine, inputs)
        second = self._execute("noise-2", self._build(plan), inputs)
        self.engines[key] = first_engine
        while len(self.engines) > self.max_engines:
            self.engines.popitem(last=False)
        return first, second

    def close(self) -> None:
        if self._live is not None:
            self._live[1].__exit__(None, None, None)
            self._live = None

    def __enter__(self) -> "TensorRTBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- steps (each small and replaceable in tests)

    def _engine(self, plan: frozenset, key: str) -> bytes:
        engine = self.engines.get(key)
        if engine is None:
            engine = self._build(plan)
            self.engines[key] = engine
            while len(self.engines) > self.max_engines:
                self.engines.popitem(last=False)
        else:
            self.engines.move_to_end(key)
        return engine

    def _model(self, plan: frozenset):
        """What the parser reads: the original model (weak typing) or the plan's mixed-precision model."""
        if not self.strongly_typed:
            return self._onnx.model if isinstance(self._onnx, external_copy) else self._onnx
        from fp16bisect.artifacts import mixed

        source = _source(mixed.mixed_model(self.graph, sorted(plan)))
        self._last_source = source  # an external copy lives until the next build
        return source.model if isinstance(source, external_copy) else source

    def _build(self, plan: frozenset) -> bytes:
        unknown = sorted(plan - set(self._refs))
        if unknown:
            raise UsageError(f"plan names node(s) that are not candidates of this model: {', '.join(unknown[:5])}")
        fp32 = [] if self.strongly_typed else [self._refs[n] for n in sorted(plan)]
        try:
            built = trt_engine.build(self.tensorrt, self._model(plan), self.settings, fp32=fp32,
                                     timing_cache=self._cache)
        except trt_engine.TensorRTError as exc:
            raise BuildFailed(plan, str(exc) + self._hint()) from None
        self.builds += 1
        new_missing = [m for m in built.missing if m not in self.warned_missing]
        if new_missing:
            self.warned_missing.update(new_missing)
            warnings.warn(
                f"no TensorRT layer carries node(s) {', '.join(new_missing)} (folded into constants by the "
                "parser?): keeping them in FP32 changes nothing in this engine",
                trt_pin.MissingNodesWarning,
                stacklevel=3,
            )
        if built.timing_cache is not None:
            self._cache = built.timing_cache
            self._save_cache()
        elif not self.tensorrt.rtx:  # TensorRT refused the cache (another GPU or version): the next build starts anew
            self._cache = None
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
        if check.ok:
            return
        for pin in check.ignored:
            if (pin.node, pin.layer) not in self.warned_ignored:
                self.warned_ignored.add((pin.node, pin.layer))
                self._say(f"{pin}; {trt_inspection.IGNORED_ADVICE}", IgnoredPinWarning)
        raise PinsIgnored(plan, check)

    def _say(self, text: str, category) -> None:
        if self.notify is not None:
            self.notify(text)
        else:
            warnings.warn(text, category, stacklevel=4)

    def _hint(self) -> str:
        """TensorRT 10.0-10.6 parse strongly typed models but not mixed-precision BatchNormalization."""
        from fp16bisect.backends.tensorrt.api import STRONG_BATCHNORM

        if (self.strongly_typed and self.tensorrt.weakly_typed and self.tensorrt.version_tuple < STRONG_BATCHNORM
                and any(n.op_type == "BatchNormalization" for n in self.graph.candidates)):
            return (" (TensorRT parses mixed-precision BatchNormalization in strongly typed mode from 10.7 on: "
                    "upgrade TensorRT, or pass --typing weak)")
        return ""

    def _execute(self, key: str, engine: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run an engine; the last one stays loaded, so the samples of one plan load it once."""
        if self._live is None or self._live[0] != key:
            self.close()
            live = trt_engine.Engine(self.tensorrt, engine)
            live.__enter__()
            self._live = (key, live)
        outputs = self._live[1].infer(inputs)
        names = [o.name for o in self.graph.outputs]
        return {name: outputs[name] for name in names if name in outputs}

    def _profile(self, engine: bytes, inputs: dict[str, np.ndarray]) -> dict[str, float]:
        """Per engine layer, its milliseconds (the live engine is freed first: one engine on the GPU at a time)."""
        self.close()
        with trt_engine.Engine(self.tensorrt, engine) as live:
            return live.layer_times(inputs)

    def _read_cache(self) -> bytes | None:
        try:
            return self.timing_cache_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise UsageError(
                f"cannot read the timing cache {str(self.timing_cache_path)!r} ({exc.strerror}): "
                "delete it or choose another path"
            ) from None

    def _save_cache(self) -> None:
        try:
            write_atomic(self.timing_cache_path, self._cache)
        except OSError as exc:  # write_atomic says itself when the folder cannot be written
            raise UsageError(
                f"cannot write the timing cache {str(self.timing_cache_path)!r} ({exc.strerror}): "
                "choose another path"
            ) from None
