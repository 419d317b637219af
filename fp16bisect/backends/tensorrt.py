"""Real TensorRT engine builds: a plan (candidate ids kept in FP32) -> model outputs.

TensorRT 10.x (weakly typed): the original model is built with FP16 enabled,
precision constraints obeyed, and the plan's nodes pinned to FP32 through
layer metadata (``fp16bisect.tensorrt.pin``). TensorRT 11 and TensorRT-RTX
(strongly typed): the plan's mixed-precision ONNX (``fp16bisect.mixed``) is
built as it is.

Builds are slow and not deterministic (tactic timing), so: one timing cache
for every build of a search, saved after each build; engines memoised by plan
(a bounded number in memory) and results by plan and inputs, so a plan is
built once; ``noise()`` measures how much two builds of the same all-FP16 plan
differ, which the search should know before trusting small differences.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np

from .. import tensorrt as trt_support
from ..errors import UsageError
from ..graph import Graph


class BuildFailed(Exception):
    """TensorRT could not build (or parse) the engine of one plan; carries TensorRT's message."""

    def __init__(self, plan, message: str):
        self.plan = frozenset(plan)
        self.message = message
        nodes = ", ".join(sorted(self.plan)[:5]) + (", ..." if len(self.plan) > 5 else "")
        super().__init__(
            f"TensorRT build failed for the plan with {len(self.plan)} node(s) in FP32"
            f"{f' ({nodes})' if nodes else ''}: {message}"
        )


class NoisyBuilds(UsageError):
    """Two builds of the same plan disagree about whether an output is finite."""


def plan_key(plan) -> str:
    return hashlib.sha256("\n".join(sorted(plan)).encode("utf-8")).hexdigest()


def inputs_key(inputs: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(inputs):
        array = np.ascontiguousarray(inputs[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode("utf-8"))
        digest.update(array.tobytes())
    return digest.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """A reader sees the old file or the whole new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class TensorRTBackend:
    """Builds and runs one engine per plan. Use ``close()`` (or ``with``) to free the live engine."""

    name = "tensorrt"

    def __init__(
        self,
        graph: Graph,
        *,
        timing_cache: Path,
        opt_level: int | None = None,
        noise_ok: bool = False,
        max_engines: int = 4,
        max_results: int = 256,
    ):
        self.tensorrt = trt_support.load()
        if not trt_support.gpu_available():
            raise UsageError(
                f"{self.tensorrt.flavour} {self.tensorrt.version} is installed but CUDA sees no GPU "
                "(cudaGetDeviceCount): run on a machine with an NVIDIA GPU and driver, or use --backend emulate"
            )
        self.graph = graph
        self.timing_cache_path = Path(timing_cache)
        self.opt_level = opt_level
        self.noise_ok = noise_ok
        self.max_engines = max_engines
        self.max_results = max_results
        self.builder = trt_support.EngineBuilder(self.tensorrt)
        self.engines: OrderedDict[str, bytes] = OrderedDict()  # plan key -> serialized engine
        self.results: OrderedDict[tuple, dict] = OrderedDict()  # (plan key, inputs key) -> outputs
        self.builds = 0
        self.warned_missing: set = set()
        self._live: tuple[str, trt_support.Engine] | None = None
        self._cache = self._read_cache()
        model = graph.runnable_copy()  # nodes sharing a name get unique ones, so metadata tells them apart
        self._onnx = model.SerializeToString()
        self._refs = {
            node.id: trt_support.NodeRef.of(
                model.graph.node[node.index].name or f"node_of_{node.outputs[0]}", node.outputs
            )
            for node in graph.candidates
        }

    # -- public

    def versions(self) -> dict:
        import onnx

        found = {self.tensorrt.flavour: self.tensorrt.version, "onnx": onnx.__version__}
        try:
            import polygraphy

            found["polygraphy"] = polygraphy.__version__
        except ImportError:
            pass
        return found

    def run(self, plan, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        plan = frozenset(plan)
        key = (plan_key(plan), inputs_key(inputs))
        if key in self.results:
            self.results.move_to_end(key)
            return self.results[key]
        outputs = self._execute(key[0], self._engine(plan, key[0]), inputs)
        self.results[key] = outputs
        while len(self.results) > self.max_results:
            self.results.popitem(last=False)
        return outputs

    def noise(self, inputs: dict[str, np.ndarray]) -> dict[str, float]:
        """Max abs difference per output between two fresh builds of the all-FP16 plan (memo bypassed).

        inf when one build gives a non-finite value where the other does not; then, unless
        ``noise_ok``, raises NoisyBuilds: the search's pass/fail verdicts could flip from build to build.
        """
        first = self._execute("noise-1", self._build(frozenset()), inputs)
        second = self._execute("noise-2", self._build(frozenset()), inputs)
        diffs = {}
        for name, a in first.items():
            b = second[name]
            a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            same_nonfinite = (~np.isfinite(a64)) & (~np.isfinite(b64)) & ((a64 == b64) | (np.isnan(a64) & np.isnan(b64)))
            finite = np.isfinite(a64) & np.isfinite(b64)
            if np.any(~(finite | same_nonfinite)):
                diffs[name] = float("inf")
            else:
                diffs[name] = float(np.max(np.abs(a64[finite] - b64[finite]), initial=0.0))
        unstable = [n for n, d in diffs.items() if d == float("inf")]
        if unstable and not self.noise_ok:
            raise NoisyBuilds(
                f"two builds of the same all-FP16 engine disagree on which values of output(s) "
                f"{', '.join(unstable)} are finite: TensorRT picks different kernels per build, so the "
                "search's verdicts could flip; pass --noise-ok to search anyway"
            )
        return diffs

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

    def _model_bytes(self, plan: frozenset) -> bytes:
        if self.tensorrt.weakly_typed:
            return self._onnx
        from .. import mixed

        return mixed.mixed_model(self.graph, sorted(plan)).SerializeToString()

    def _build(self, plan: frozenset) -> bytes:
        unknown = sorted(plan - set(self._refs))
        if unknown:
            raise UsageError(f"plan names node(s) that are not candidates of this model: {', '.join(unknown[:5])}")
        fp32 = [self._refs[n] for n in sorted(plan)] if self.tensorrt.weakly_typed else []
        try:
            built = self.builder.build(
                self._model_bytes(plan), fp32=fp32, opt_level=self.opt_level, timing_cache=self._cache
            )
        except trt_support.TensorRTError as exc:
            raise BuildFailed(plan, str(exc)) from None
        self.builds += 1
        new_missing = [m for m in built.missing if m not in self.warned_missing]
        if new_missing:
            self.warned_missing.update(new_missing)
            warnings.warn(
                f"no TensorRT layer carries node(s) {', '.join(new_missing)} (folded into constants by the "
                "parser?): keeping them in FP32 changes nothing in this engine",
                trt_support.MissingNodesWarning,
                stacklevel=3,
            )
        if built.timing_cache is not None:
            self._cache = built.timing_cache
            self._save_cache()
        return built.engine

    def _execute(self, key: str, engine: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run an engine; the last one stays loaded, so the samples of one plan load it once."""
        if self._live is None or self._live[0] != key:
            self.close()
            live = trt_support.Engine(self.tensorrt, engine, self.builder.logger)
            live.__enter__()
            self._live = (key, live)
        outputs = self._live[1].infer(inputs)
        names = [o.name for o in self.graph.outputs]
        return {name: outputs[name] for name in names if name in outputs}

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
        except OSError as exc:
            raise UsageError(
                f"cannot write the timing cache {str(self.timing_cache_path)!r} ({exc.strerror}): "
                "choose another path"
            ) from None
