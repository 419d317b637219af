"""What to do with a search's answer: the commands that apply, verify and build it (console and HTML report)."""

from __future__ import annotations

import shlex


def next_steps(data: dict, output: str, inputs: list[str], references: list[str] | None = None) -> list[tuple]:
    """(what, command) pairs for the override JSON ``data`` written to ``output``, searched on ``inputs``: the
    mixed-precision model written and verified on those samples, its strongly typed build (TensorRT 10 with
    --stronglyTyped, 11, RTX), and the weakly typed trtexec line of TensorRT 10 (the JSON's exports)."""
    model = data["model"]["path"]
    if not data["fp32_nodes"]:
        return [("nothing needs FP32: build the model in FP16", shlex.join(["trtexec", f"--onnx={model}", "--fp16"]))]
    exports = data["exports"]
    strong = exports["strongly_typed"]["trtexec"]
    mixed = next(a.split("=", 1)[1] for a in shlex.split(strong) if a.startswith("--onnx="))
    samples = [x for i in inputs for x in ("--inputs", i)] + [x for r in references or () for x in ("--reference", r)]
    return [
        ("write the mixed-precision model and verify it on the samples",
         shlex.join(["fp16bisect", "apply", model, output, "-o", mixed, "--verify", *samples])),
        ("build it strongly typed (TensorRT 10 and 11, TensorRT-RTX)", strong),
        ("or build the original weakly typed (TensorRT 10; the flags are in the JSON's exports.trtexec)",
         exports["trtexec"]["command"]),
    ]
