"""The kernel plan of an answer: its mixed-precision file and the all-FP16 file built with TensorRT, compared.

``kernel_plan_of`` writes both files of a plan (``artifacts/mixed.py``, what ``apply`` writes), builds each with
the tensorrt backend's ``build_logged`` (a file in, every message TensorRT logged out), reads the kernels from each
log (``build_log.py``) and compares them (``kernel_plan.py``). TensorRT-RTX builds on a machine without a GPU; it
cannot run the engines, and nothing here runs one. Importing this module does not import TensorRT.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import tempfile
from collections.abc import Callable, Mapping
from typing import ContextManager
from pathlib import Path

from fp16bisect.artifacts.apply import save
from fp16bisect.artifacts.mixed import Mixed, convert
from fp16bisect.backends.tensorrt.engine import BuildError, TensorRTError, build_logged
from fp16bisect.diagnose.build_log import NoLayerList, parse
from fp16bisect.diagnose.kernel_plan import ACCUMULATION, FP32, LIMITS, RTX_ONLY, Engine, KernelPlan, \
    Wiring, compare
from fp16bisect.backends.tensorrt.load import TensorRT, load
from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph

NEEDS_TENSORRT = ("the kernel plan builds engines with TensorRT, which is not installed: pip install "
                  "'fp16bisect[tensorrt]' on a machine with an NVIDIA GPU, or pip install tensorrt-rtx-cu13 for "
                  "TensorRT-RTX, which builds (not runs) engines on a CPU")
Stage = Callable[[str], ContextManager]  # a stage that takes time: a Listener's timed


def tensorrt() -> TensorRT:
    """TensorRT or TensorRT-RTX, loaded; a UsageError saying how to install one when neither is there."""
    if not any(importlib.util.find_spec(name) for name in ("tensorrt", "tensorrt_rtx")):
        raise UsageError(NEEDS_TENSORRT)
    return load()


def kernel_plan_of(graph: Graph, plan: frozenset[str], *, fp16_io: bool = False,
                   shapes: Mapping[str, tuple] | None = None, timed: Stage = lambda text: contextlib.nullcontext(),
                   model: str = "", overrides: str = "") -> KernelPlan:
    """The kernel plan of ``plan`` (FP32 ids and FP32-accumulation marks) on ``graph``'s model: its file and the
    all-FP16 file, as ``apply`` writes them, built with TensorRT and compared. ``timed(text)``: a context in
    which a stage that takes time runs (a ``Listener``'s ``timed``); ``model`` and ``overrides``: how the plan
    names them."""
    loaded = tensorrt()
    answer = convert(graph, plan, fp16_io=fp16_io)
    fp16 = convert(graph, (), fp16_io=fp16_io)
    engines = []
    with tempfile.TemporaryDirectory(prefix="fp16bisect-kernels-") as folder:
        for what, mixed in (("the answer's file", answer), ("the all-FP16 file", fp16)):
            engines.append(_engine(graph, mixed, Path(folder) / "model.onnx", what, loaded, shapes or {}, timed))
    nodes = {i: (graph.by_id[i].op_type, FP32) for i in answer.pinned}
    nodes.update({i: (graph.by_id[i].op_type, ACCUMULATION) for i in answer.accumulating})
    notes = (LIMITS, RTX_ONLY) if loaded.flavour == "tensorrt_rtx" else (LIMITS,)
    found = compare(engines[0], engines[1], nodes, model=model, overrides=overrides, runtime=str(loaded), notes=notes)
    return dataclasses.replace(found, shapes=dict(shapes or {}), sha256=graph.sha256)


def _engine(graph: Graph, mixed: Mixed, path: Path, what: str, loaded: TensorRT, shapes: Mapping[str, tuple],
            timed: Stage) -> Engine:
    save(mixed.model, path, external=graph.external_data)
    with timed(f"building {what} with {loaded}"):
        try:
            log = build_logged(path, shapes=shapes).lines
        except BuildError as exc:
            if any("no sample shape for input" in m for m in exc.messages):
                raise UsageError("the model has dynamic input dimensions and no shapes to build for: pass "
                                 "--opt-shapes (or --min-shapes/--max-shapes), e.g. x:1x3x224x224") from None
            raise UsageError(f"{loaded} could not build {what}: {exc}") from None
        except TensorRTError as exc:  # the parser refused the file
            raise UsageError(f"{loaded} could not build {what}: {exc}") from None
    try:
        return Engine(parse(log), Wiring.of(mixed.model, graph))
    except NoLayerList:
        raise UsageError(f"{loaded} printed no engine layer list ('Layers:') for {what}: the kernel plan reads "
                         "the list TensorRT-RTX prints; install tensorrt-rtx-cu13") from None
