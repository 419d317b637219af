"""Backends turn a plan (the candidate ids kept in FP32) into outputs: `make_backend` picks one by name (only here);
`emulate` (ONNX Runtime CPU), `tensorrt/` (real engines), `command` (any user command judges); callers ask what
one can do (``base.Backend``'s capabilities; ``declared(name)`` for a name read back from a file)."""

from __future__ import annotations

from dataclasses import dataclass
from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph
from fp16bisect.backends.base import (Backend, BackendName, CommandOptions, Options, PlanJudge, SampleRunner,
                                      TensorRTOptions, Verdict)

__all__ = ["Backend", "BackendName", "CommandOptions", "FLAGS", "KEYWORDS", "NAMES", "Options", "PlanJudge", "SampleRunner",
           "Spelling", "TensorRTOptions", "Verdict", "check_options", "declared", "make_backend", "tensorrt_usable"]

NAMES = ("auto", "emulate", "tensorrt", "command")
DEFAULT_PLANS_DIR = "fp16bisect.plans"  # the command backend's plan files when no output says where


@dataclass(frozen=True)
class Spelling:
    """How a message names the backend and its options: the command line's flags or the API's keywords."""

    backend: str  # with {} for the name
    check: str
    keep_plans: str
    typing: str  # with {} for the value
    opt_level: str  # with {} for the value


FLAGS = Spelling("--backend {}", "--check", "--keep-plans", "--typing {}", "--opt-level {}")
KEYWORDS = Spelling("backend={!r}", "check=", "keep_plans", "typing={!r}", "opt_level={!r}")


def check_options(name: str, options: Options, said: Spelling = FLAGS) -> None:
    """The rules of a backend's options, written once: the command line, manifests and the API reach them (and
    ``make_backend``, again, for a backend ``auto`` chose). A ``UsageError`` names the option as ``said``."""
    if name not in NAMES:
        raise UsageError(f"unknown backend {name!r}: use one of {', '.join(map(repr, NAMES))}")
    own, trt = options.command, options.tensorrt
    commanded = declared(name).runs_a_command  # --check and --keep-plans belong to it
    if commanded and not own.command:
        raise UsageError(f"{said.backend.format('command')} needs the command that judges a plan: add "
                         f"{said.check} 'CMD' (e.g. {said.check} 'python judge.py {{model}} {{inputs}} {{outputs}}')")
    if own.command and not commanded:
        raise UsageError(f"{said.check} is the command of {said.backend.format('command')}, not of "
                         f"{said.backend.format(name)}: add {said.backend.format('command')}, or drop {said.check}")
    if own.keep_plans and not commanded:
        raise UsageError(f"{said.keep_plans} keeps the plan files of {said.backend.format('command')}: add "
                         f"{said.backend.format('command')} {said.check} 'CMD', or drop {said.keep_plans}")
    if trt.typing not in (None, "strong", "weak"):
        raise UsageError(f"{said.typing.format(trt.typing)}: use 'strong' or 'weak'")
    if trt.opt_level is not None and (isinstance(trt.opt_level, bool) or trt.opt_level not in range(6)):
        raise UsageError(f"{said.opt_level.format(trt.opt_level)}: give a TensorRT builder optimisation level "
                         "from 0 to 5")
    if trt.typing == "weak" and name not in ("tensorrt", "auto"):
        raise UsageError(f"{said.typing.format('weak')} builds TensorRT 10.x engines with layer precisions: it "
                         f"needs {said.backend.format('tensorrt')} (TensorRT 10.x and a GPU); drop it for "
                         f"{said.backend.format(name)}")


def tensorrt_usable() -> bool:
    """TensorRT (or TensorRT-RTX) imports, Polygraphy is there, and CUDA sees a GPU."""
    from fp16bisect.backends.tensorrt import device, load

    try:
        load.load()
    except UsageError:
        return False
    return device.gpu_count() > 0


def declared(name: str) -> type[Backend]:
    """The class of the backend called ``name`` (as a file records it), whose capabilities say what it can do,
    without making one; ``Backend`` (a new backend's defaults) for a name that is none of ours."""
    if name == "emulate":
        from fp16bisect.backends.emulate import EmulateBackend

        return EmulateBackend
    if name == "tensorrt":
        from fp16bisect.backends.tensorrt.backend import TensorRTBackend

        return TensorRTBackend
    if name == "command":
        from fp16bisect.backends.command import CommandBackend

        return CommandBackend
    return Backend


def make_backend(name: str, graph: Graph, options: Options | None = None,
                 device: str | None = None) -> Backend:
    """The backend called ``name``, made with ``options`` (each backend reads its own part and what is shared).
    ``tensorrt`` needs TensorRT (or TensorRT-RTX), Polygraphy and an NVIDIA GPU: asking for it without them is a
    usage error, never a silent fallback; ``auto`` picks it when all of that is present, else ``emulate``.
    ``device``: made in a worker process so labelled, with what that worker needs of its own
    (``Backend.for_worker``)."""
    options = options or Options()
    check_options(name, options)
    if name == "auto":
        name = "tensorrt" if tensorrt_usable() else "emulate"
        check_options(name, options)
    if device is not None:
        options = declared(name).for_worker(options, device)
    if name == "command":
        from fp16bisect.backends.command import CommandBackend

        own = options.command
        return CommandBackend(graph, own.command, plans_dir=own.plans_dir or DEFAULT_PLANS_DIR,
                              keep_plans=own.keep_plans,
                              progress=options.progress, tolerance=options.tolerance)
    if name == "tensorrt":
        from fp16bisect.backends.tensorrt.backend import TensorRTBackend

        trt = options.tensorrt
        chosen: dict = {"timing_cache": trt.timing_cache_file, "opt_level": trt.opt_level, "typing": trt.typing,
                        "input_shapes": options.input_shapes, "notify": options.notify}
        return TensorRTBackend(graph, **{k: v for k, v in chosen.items() if v is not None})
    from fp16bisect.backends.emulate import EmulateBackend

    return EmulateBackend(graph, progress=options.progress, accumulate=options.accumulate, notify=options.notify)
