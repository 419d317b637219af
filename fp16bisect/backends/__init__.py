"""Backends turn a plan (the candidate ids kept in FP32) into outputs: `make_backend` picks one by name (only here);
`emulate` (ONNX Runtime CPU), `tensorrt/` (real engines), `command` (any user command judges); callers ask what
one can do (``base.Backend``'s capabilities; ``declared(name)`` for a name read back from a file)."""

from __future__ import annotations

from typing import Literal

from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph
from fp16bisect.backends.base import (Backend, BackendName, CommandOptions, Options, PlanJudge, SampleRunner,
                                      TensorRTOptions, Verdict)

__all__ = ["Backend", "CommandOptions", "NAMES", "Options", "PlanJudge", "SampleRunner", "TensorRTOptions", "Verdict",
           "declared", "make_backend", "tensorrt_usable"]

NAMES = ("auto", "emulate", "tensorrt", "command")


def tensorrt_usable() -> bool:
    """TensorRT (or TensorRT-RTX) imports, Polygraphy imports, and CUDA sees a GPU."""
    from fp16bisect.backends.tensorrt import load as trt_load

    try:
        trt_load.load()
        import polygraphy.cuda  # noqa: F401
    except (UsageError, ImportError):
        return False
    return trt_load.gpu_available()


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


def make_backend(name: BackendName | Literal["auto"], graph: Graph, options: Options | None = None,
                 device: str | None = None) -> Backend:
    """The backend called ``name``, made with ``options`` (each backend reads its own part and what is shared).
    ``tensorrt`` needs TensorRT (or TensorRT-RTX), Polygraphy and an NVIDIA GPU: asking for it without them is a
    usage error, never a silent fallback; ``auto`` picks it when all of that is present, else ``emulate``.
    ``device``: made in a worker process so labelled, with what that worker needs of its own
    (``Backend.for_worker``)."""
    options = options or Options()
    if name not in NAMES:
        raise UsageError(f"unknown backend {name!r}: use one of {', '.join(NAMES)}")
    if name == "auto":
        name = "tensorrt" if tensorrt_usable() else "emulate"
    if device is not None:
        options = declared(name).for_worker(options, device)
    if options.tensorrt.typing == "weak" and name != "tensorrt":
        raise UsageError("--typing weak builds TensorRT 10.x engines with layer precisions: it needs --backend "
                         f"tensorrt (TensorRT 10.x and a GPU); drop it for --backend {name}")
    if name == "command":
        from fp16bisect.backends.command import CommandBackend

        if not options.command.command:
            raise UsageError("--backend command needs the command that judges a plan: add --check 'CMD' "
                             "(e.g. --check 'python judge.py {model} {inputs} {outputs}')")
        own = options.command
        where = {"plans_dir": own.plans_dir} if own.plans_dir is not None else {}  # else its default
        return CommandBackend(graph, own.command, **where, keep_plans=own.keep_plans,
                              progress=options.progress, tolerance=options.tolerance)
    if name == "tensorrt":
        from fp16bisect.backends.tensorrt.backend import TensorRTBackend

        trt = options.tensorrt
        chosen: dict = {"timing_cache": trt.timing_cache_file, "opt_level": trt.opt_level, "typing": trt.typing,
                        "input_shapes": options.input_shapes, "notify": options.notify}
        return TensorRTBackend(graph, **{k: v for k, v in chosen.items() if v is not None})
    from fp16bisect.backends.emulate import EmulateBackend

    return EmulateBackend(graph, progress=options.progress)
