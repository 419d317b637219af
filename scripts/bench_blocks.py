#!/usr/bin/env python
"""The flat search against ``--group-by scope:DEPTH`` (blocks first, then the nodes inside) on a transformer export.

    nice python scripts/bench_blocks.py [MODEL.onnx INPUTS.npz] [--depth 3] [--layer 5] [--atol 0.1] [--rtol 0.05]
    nice python scripts/bench_blocks.py --no-plant --atol 0.003 --rtol 0    # FP16 rounding alone: no suspect

Default model: BERT-base as scripts/export_hf.py exports it (~/.cache/fp16bisect/exports/bert_base.onnx and
bert_base.npz; node names such as /inner/encoder/layer.5/attention/output/Add, so scope:3 cuts at the layers).
A known FP16 overflow is planted inside one layer, in that layer's scope: the residual sum
``/inner/encoder/layer.N/attention/output/Add``'s output t is read as (t * 2^15) * 2^-15 by two Mul nodes named
``.../attention/output/planted_up`` and ``planted_down``; exact in FP32 (powers of two), inf in FP16 (the script
checks that max |t| * 2^15 > 65504), so with a tolerance the all-FP16 export meets the answer is those two nodes.
``--no-plant``: the export as it is, with a tolerance its all-FP16 plan misses by rounding (no answer known).
Both searches run on the emulator, without a prior, same tolerance and samples; the table gives the evaluations,
the seconds (the whole search: loading, profiling, searching) and the set each found.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import fp16bisect  # noqa: E402

EXPORTS = Path.home() / ".cache" / "fp16bisect" / "exports"
SCALE = 15  # 2^15: exact in FP16, and 2^-15 an exact FP16 subnormal


def plant(src: str, inputs: str, dst: str, layer: int) -> list[str]:
    """Write ``src`` with the overflow planted in ``layer`` to ``dst``; returns the two planted node names."""
    import onnxruntime as ort

    model = onnx.load(src)
    scope = next(n.name.rsplit("/", 1)[0] for n in model.graph.node
                 if n.name.endswith(f"/layer.{layer}/attention/output/Add"))
    tensor = f"{scope}/Add_output_0"
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = dict(np.load(inputs))
    peak = float(np.abs(session.run([tensor], feed)[0]).max())
    if peak * 2 ** SCALE <= 65504:
        raise SystemExit(f"{tensor}: max |t| {peak:.3g} * 2^{SCALE} does not overflow FP16: choose another layer")
    g = model.graph
    g.initializer.extend([numpy_helper.from_array(np.array(2.0 ** SCALE, np.float32), "planted_scale_up"),
                          numpy_helper.from_array(np.array(2.0 ** -SCALE, np.float32), "planted_scale_down")])
    for n in g.node:
        n.input[:] = [f"{scope}/planted_down_output_0" if i == tensor else i for i in n.input]
    at = next(i for i, n in enumerate(g.node) if tensor in n.output) + 1
    up, down = f"{scope}/planted_up", f"{scope}/planted_down"
    g.node.insert(at, helper.make_node("Mul", [f"{up}_output_0", "planted_scale_down"], [f"{down}_output_0"],
                                       name=down))
    g.node.insert(at, helper.make_node("Mul", [tensor, "planted_scale_up"], [f"{up}_output_0"], name=up))
    onnx.save(model, dst)
    print(f"planted: {tensor} max |t| {peak:.3g} * 2^{SCALE} = {peak * 2 ** SCALE:.3g} > 65504; known answer "
          f"{{{up}, {down}}}", flush=True)
    return [up, down]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(EXPORTS / "bert_base.onnx"))
    parser.add_argument("inputs", nargs="?", default=str(EXPORTS / "bert_base.npz"))
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--layer", type=int, default=5)
    parser.add_argument("--atol", type=float, default=0.1)
    parser.add_argument("--rtol", type=float, default=0.05)
    parser.add_argument("--no-plant", action="store_true", help="search the export as it is")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        planted = str(Path(tmp) / "planted.onnx")
        known = None
        if args.no_plant:
            planted = args.model
        else:
            known = plant(args.model, args.inputs, planted, args.layer)
        rows = []
        for label, group_by in (("flat", None), (f"--group-by scope:{args.depth}", f"scope:{args.depth}")):
            start = time.perf_counter()
            result = fp16bisect.search(planted, args.inputs, tolerance={"atol": args.atol, "rtol": args.rtol},
                                       judge="emulate", strategy={"prior": "none"}, space={"group_by": group_by})
            seconds = time.perf_counter() - start
            found = sorted(n.name for n in result.fp32_nodes)
            right = "-" if known is None else "yes" if found == sorted(known) else "no"
            rows.append((label, result.outcome.result.evaluations, seconds, len(found), right))
            print(f"{label}: {result.outcome.result.evaluations} evaluations, {seconds:.1f} s, {found}", flush=True)
    where = "as exported" if known is None else f"planted in layer.{args.layer}"
    print(f"\n{Path(args.model).name}, {where}, atol {args.atol:g} rtol {args.rtol:g}, emulate")
    print(f"| {'search':<22} | evaluations | seconds | FP32 nodes | the known answer |")
    print(f"|{'-' * 24}|-------------|---------|------------|------------------|")
    for label, evaluations, seconds, size, right in rows:
        print(f"| {label:<22} | {evaluations:>11} | {seconds:>7.1f} | {size:>10} | {right:<16} |")


if __name__ == "__main__":
    main()
