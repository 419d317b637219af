#!/usr/bin/env python3
"""A judge that disagrees with fp16bisect's emulator on purpose, for ``--backend command`` benchmarks and tests.

    fp16bisect search MODEL.onnx --inputs X.npz --backend command \\
        --check 'python scripts/judge_emulate_variant.py {original} {overrides} {inputs} {outputs} --fewer'

It runs the plan (the ``fp32_nodes`` of ``{overrides}``) with the emulate arithmetic, but with another rounding
set, as a real runtime differs from the emulation:

* ``--fewer``: rounds fewer tensors: elementwise epilogues (Add, Mul, BatchNormalization, activations) that
  directly follow a Conv, ConvTranspose, MatMul or Gemm never round, whatever the plan, as a fused kernel keeps
  them in registers;
* ``--more NODE[,NODE...]``: rounds more: these candidates always run in FP16, whatever the plan (a runtime
  with no FP32 kernel for them, or that ignores the pin);
* neither: the emulator's own arithmetic (a runtime that agrees).

Writes ``sample_<i>.npz`` (one array per model output) into ``{outputs}`` for fp16bisect to compare; exit 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

FUSED_INTO = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
EPILOGUES = {"Add", "Mul", "BatchNormalization", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish",
             "LeakyRelu", "Tanh", "PRelu", "Elu"}


def fused_epilogues(graph) -> frozenset:
    """Candidates a fusing runtime would compute inside the kernel of the Conv/MatMul/Gemm they follow."""
    producer = {t: n for n in graph.nodes for t in n.outputs}
    return frozenset(
        node.id for node in graph.candidates
        if node.op_type in EPILOGUES and node.inputs and node.inputs[0] in producer
        and producer[node.inputs[0]].op_type in FUSED_INTO
    )


def variant_plan(plan, fused=frozenset(), forced=frozenset()) -> frozenset:
    """What such a runtime keeps in FP32 when asked for ``plan``."""
    return (frozenset(plan) | frozenset(fused)) - frozenset(forced)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("original", help="the FP32 model ({original})")
    p.add_argument("overrides", help="the plan's override JSON ({overrides})")
    p.add_argument("inputs", help="the directory of sample_<i>.npz ({inputs})")
    p.add_argument("outputs", help="where to write sample_<i>.npz ({outputs})")
    p.add_argument("--fewer", action="store_true", help="fused epilogues never round")
    p.add_argument("--more", default="", metavar="NODE,...", help="these candidates always round")
    args = p.parse_args(argv)

    from fp16bisect.backends.emulate import EmulateBackend
    from fp16bisect.model.graph import Graph

    graph = Graph.load(args.original)
    plan = {entry["name"] for entry in json.loads(Path(args.overrides).read_text())["fp32_nodes"]}
    fused = fused_epilogues(graph) if args.fewer else frozenset()
    forced = frozenset(filter(None, args.more.split(",")))
    backend = EmulateBackend(graph)
    chosen = variant_plan(plan, fused, forced)
    samples = sorted(Path(args.inputs).glob("sample_*.npz"), key=lambda f: int(f.stem.split("_")[1]))
    for path in samples:
        with np.load(path) as npz:
            feed = {name: npz[name] for name in npz.files}
        got = backend.run(chosen, feed)
        np.savez(Path(args.outputs) / path.name, **{o.name: got[o.name] for o in graph.outputs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
