"""Backends turn a plan (the candidate ids kept in FP32) into model outputs: `make_backend` picks one by name;
`emulate` (FP16 storage emulated on ONNX Runtime CPU) works everywhere, `tensorrt/` builds real engines,
`command` runs any user command on the plan's mixed-precision model (its exit code or its outputs judge)."""

from __future__ import annotations

from ..errors import UsageError
from ..model.graph import Graph

NAMES = ("auto", "emulate", "tensorrt", "command")
TENSORRT_OPTIONS = ("timing_cache", "opt_level", "input_shapes", "typing", "notify")
COMMAND_OPTIONS = ("plans_dir", "keep_plans", "progress", "tolerance")


def tensorrt_usable() -> bool:
    """TensorRT (or TensorRT-RTX) imports, Polygraphy imports, and CUDA sees a GPU."""
    from .tensorrt import pins as trt_support

    try:
        trt_support.load()
        import polygraphy.cuda  # noqa: F401
    except (UsageError, ImportError):
        return False
    return trt_support.gpu_available()


def make_backend(name: str, graph: Graph, **options):
    """The backend called ``name``. ``tensorrt`` needs TensorRT (or TensorRT-RTX), Polygraphy and an NVIDIA GPU:
    asking for it without them is a usage error, never a silent fallback; ``auto`` picks it when all of that is
    present, else ``emulate``. ``options``: for tensorrt, ``timing_cache`` (path), ``opt_level``, ``input_shapes``,
    ``typing`` (strong|weak), ``notify`` (one-line notices); for command, ``command`` (the shell command with placeholders; required), ``plans_dir``, ``keep_plans``,
    ``progress`` (a callable told which command runs on which plan), ``tolerance`` (written into each plan's
    override file); emulate takes none. Options meant for another backend are ignored."""
    if name not in NAMES:
        raise UsageError(f"unknown backend {name!r}: use one of {', '.join(NAMES)}")
    if name == "auto":
        name = "tensorrt" if tensorrt_usable() else "emulate"
    if options.get("typing") == "weak" and name != "tensorrt":
        raise UsageError("--typing weak builds TensorRT 10.x engines with layer precisions: it needs --backend "
                         f"tensorrt (TensorRT 10.x and a GPU); drop it for --backend {name}")
    if name == "command":
        from .command import CommandBackend

        if not options.get("command"):
            raise UsageError("--backend command needs the command that judges a plan: add --check 'CMD' "
                             "(e.g. --check 'python judge.py {model} {inputs} {outputs}')")
        chosen = {k: v for k, v in options.items() if k in COMMAND_OPTIONS and v is not None}
        return CommandBackend(graph, options["command"], **chosen)
    if name == "tensorrt":
        from .tensorrt.backend import TensorRTBackend

        chosen = {k: v for k, v in options.items() if k in TENSORRT_OPTIONS and v is not None}
        chosen.setdefault("timing_cache", "fp16bisect.timing.cache")
        return TensorRTBackend(graph, **chosen)
    from .emulate import EmulateBackend

    return EmulateBackend(graph, progress=options.get("progress"))
