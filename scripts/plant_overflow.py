#!/usr/bin/env python
"""Plant one known FP16 overflow in an ONNX model, so that a search has a known answer (dev only).

    python scripts/plant_overflow.py MODEL.onnx INPUTS.npz OUT.onnx [--tensor NAME] [--margin 4]
    python scripts/plant_overflow.py build/zoo/sd15_unet.onnx build/zoo/sd15_unet.npz build/zoo/sd15_unet_planted.onnx

The tensor ``t``: ``--tensor NAME``, or else the float output of a compute node (Conv, MatMul, Gemm, Add,
...; not a graph input or initializer, and depending on the values of the graph inputs, not only on their
shapes) nearest to a third of the way through the graph (node order) that fits: FP32 max |t| on the given
inputs finite, at least 2 and at most 65504, and s <= 15 below. The maxima come from onnxruntime on CPU,
candidates added as extra graph outputs a few at a time (``--batch`` tensors, ``--batch-mb`` MB of them).
Every node reading ``t`` reads instead

    planted_down(planted_up(t, planted_scale_up = 2^s), planted_scale_down = 2^-s)      (two Mul nodes)

with ``s`` the smallest integer such that max|t| * 2^s >= MARGIN * 65504 (``--margin``, default 4), and
s <= 15 (2^15 is still an FP16 normal number and 2^-15 an exact FP16 subnormal; a tensor that would need
s > 15 is passed over, so with the default margin max |t| must in effect be at least 7.996). Multiplying by
powers of two is exact, so the FP32 results do not change; in FP16 ``planted_up``'s output overflows to
inf, so the known culprits are exactly {planted_up, planted_down} (given the original model runs clean in
FP16). The inputs of the original model serve unchanged.

A model with external data is edited without loading its weights (``onnx.load(...,
load_external_data=False)``) and OUT must then be in the same directory as MODEL, so that the relative
``location`` of the data still resolves: the weights are shared, not copied. After saving, the script runs
both models in FP32 (default session options) on the inputs and checks the outputs agree (``np.allclose``,
rtol 1e-5).

On the random-weight models of scripts/export_zoo.py most activations stay below 8, so with the default
margin the SD VAE decoder's plant lands near its end (node 460 of 510) and the SD 1.5 UNet's on
``/inner/time_proj/Mul`` (timestep x frequencies, node 212 of 2979, which is FP16-sensitive by itself);
``--margin 2`` puts both at about a third.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import external_data_helper, helper, numpy_helper

FP16_MAX = 65504.0
MAX_SHIFT = 15
MIN_ABS = 2.0
COMPUTE_OPS = {
    "Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Relu",
    "Sigmoid", "Tanh", "Erf", "Gelu", "Softmax", "LayerNormalization", "InstanceNormalization",
    "BatchNormalization", "GroupNormalization", "ReduceMean", "ReduceSum", "Resize", "Sin", "Cos",
}  # fmt: skip
SHAPE_OPS = {"Shape", "Size"}  # their outputs do not depend on the values of their inputs
NAMES = ("planted_up", "planted_down", "planted_scale_up", "planted_scale_down")


def has_external_data(model: onnx.ModelProto) -> bool:
    return any(external_data_helper.uses_external_data(t) for t in external_data_helper._get_all_tensors(model))


def shift_for(max_abs: float, margin: float) -> int:
    """The smallest integer s with max_abs * 2^s >= margin * 65504."""
    target = margin * FP16_MAX
    s = math.ceil(math.log2(target / max_abs))
    while max_abs * 2.0 ** (s - 1) >= target:
        s -= 1
    while max_abs * 2.0**s < target:
        s += 1
    return s


def unsuitable(max_abs: float, margin: float) -> str | None:
    """Why a tensor with this max |t| cannot be planted, or None."""
    if not math.isfinite(max_abs):
        return "not finite"
    if max_abs < MIN_ABS:
        return f"max |t| {max_abs:.4g} < {MIN_ABS:g}"
    if max_abs > FP16_MAX:
        return f"max |t| {max_abs:.4g} already overflows FP16"
    s = shift_for(max_abs, margin)
    if s > MAX_SHIFT:
        return f"max |t| {max_abs:.4g} needs s = {s} > {MAX_SHIFT}"
    return None


def candidates(model: onnx.ModelProto) -> list[tuple[int, str, int | None]]:
    """(node index, tensor, bytes if known) for the float outputs of compute nodes that depend on the
    values of the graph inputs (not only on their shapes), nearest to a third of the way in first."""
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model)
    sizes: dict[str, int | None] = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = v.type.tensor_type
        if t.elem_type == onnx.TensorProto.FLOAT:
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            known = t.HasField("shape") and None not in dims
            sizes[v.name] = 4 * math.prod(dims) if known else None
    del inferred
    outputs = {o.name for o in graph.output}
    read = {i for n in graph.node for i in n.input}
    initializers = {t.name for t in graph.initializer}
    dynamic = {i.name for i in graph.input if i.name not in initializers}
    found = []
    for index, node in enumerate(graph.node):
        if node.op_type in SHAPE_OPS or not any(i in dynamic for i in node.input):
            continue
        dynamic.update(node.output)
        t = node.output[0]
        if node.op_type in COMPUTE_OPS and t in sizes and t in read and t not in outputs:
            found.append((index, t, sizes[t]))
    third = len(graph.node) / 3
    found.sort(key=lambda it: abs(it[0] - third))
    return found


def batches(found, count: int, budget: int):
    """Consecutive runs of ``found``: at most ``count`` tensors and ``budget`` bytes of them (at least one)."""
    chunk, used = [], 0
    for item in found:
        size = item[2] if item[2] is not None else budget // count
        if chunk and (len(chunk) == count or used + size > budget):
            yield chunk
            chunk, used = [], 0
        chunk.append(item)
        used += size
    if chunk:
        yield chunk


def session(model: onnx.ModelProto, src: Path) -> ort.InferenceSession:
    """A CPU session on ``model``; a model with external data is written next to ``src`` first."""
    if not has_external_data(model):
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    tmp = src.with_name(f".{src.stem}.plant_search.onnx")
    onnx.save(model, str(tmp))
    try:
        return ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    finally:
        tmp.unlink()


def max_abs_of(model: onnx.ModelProto, src: Path, names: list[str], feeds) -> dict[str, float]:
    """FP32 max |t| of each tensor in ``names`` (added for the run as extra graph outputs)."""
    graph = model.graph
    for name in names:
        graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    try:
        sess = session(model, src)
    finally:
        del graph.output[len(graph.output) - len(names) :]
    values = sess.run(names, feeds)
    del sess
    return {n: float(np.abs(v).max()) if v.size else 0.0 for n, v in zip(names, values)}


def choose(model: onnx.ModelProto, src: Path, feeds, args) -> tuple[str, float]:
    if args.tensor is not None:
        producers = {o for n in model.graph.node for o in n.output}
        if args.tensor not in producers:
            sys.exit(f"--tensor {args.tensor}: not the output of a node in the graph")
        max_abs = max_abs_of(model, src, [args.tensor], feeds)[args.tensor]
        why = unsuitable(max_abs, args.margin)
        if why:
            sys.exit(f"--tensor {args.tensor}: {why}")
        return args.tensor, max_abs
    found = candidates(model)
    print(f"  {len(found)} candidate tensors; searching outwards from node {len(model.graph.node) // 3}")
    for chunk in batches(found, args.batch, args.batch_mb * 2**20):
        maxima = max_abs_of(model, src, [t for _, t, _ in chunk], feeds)
        for _, name, _ in chunk:
            if unsuitable(maxima[name], args.margin) is None:
                return name, maxima[name]
        finite = {k: v for k, v in maxima.items() if v <= FP16_MAX}
        top = max(finite, key=finite.get) if finite else None
        where = f"nodes {min(i for i, _, _ in chunk)}..{max(i for i, _, _ in chunk)}"
        best = f"; largest FP16-finite max |t| {finite[top]:.4g} ({top})" if top else ""
        print(f"  none of {len(chunk)} tensors at {where} fits{best}")
    sys.exit("no suitable tensor found")


def plant(model: onnx.ModelProto, tensor: str, s: int) -> None:
    graph = model.graph
    taken = {n.name for n in graph.node} | {o for n in graph.node for o in n.output}
    taken |= {t.name for t in graph.initializer} | {i.name for i in graph.input}
    clash = [n for n in NAMES + ("planted_up_output", "planted_down_output") if n in taken]
    if clash:
        sys.exit(f"the model already has {', '.join(clash)}: planted before?")

    def rename_reads(g: onnx.GraphProto) -> None:
        for node in g.node:
            for k, name in enumerate(node.input):
                if name == tensor:
                    node.input[k] = "planted_down_output"
            for attr in node.attribute:  # subgraphs may read outer-scope tensors
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    rename_reads(sub)

    rename_reads(graph)
    index = next(i for i, n in enumerate(graph.node) if tensor in n.output)
    up = helper.make_node("Mul", [tensor, "planted_scale_up"], ["planted_up_output"], name="planted_up")
    down = helper.make_node("Mul", ["planted_up_output", "planted_scale_down"], ["planted_down_output"],
                            name="planted_down")  # fmt: skip
    graph.node.insert(index + 1, down)
    graph.node.insert(index + 1, up)
    graph.initializer.append(numpy_helper.from_array(np.array(2.0**s, np.float32), "planted_scale_up"))
    graph.initializer.append(numpy_helper.from_array(np.array(2.0**-s, np.float32), "planted_scale_down"))


def run(path: Path, feeds) -> tuple[list[str], list[np.ndarray]]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(names, feeds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("inputs", type=Path, help="npz with one array per graph input")
    parser.add_argument("out", type=Path)
    parser.add_argument("--tensor", help="plant at this tensor (default: search about a third of the way in)")
    parser.add_argument(
        "--margin", type=float, default=4.0,
        help="s is the smallest integer with max|t| * 2^s >= MARGIN * 65504 (default 4, at least 1.01)",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=32, help="at most this many candidates per run (default 32)")
    parser.add_argument("--batch-mb", type=int, default=256, help="and at most this many MB of them (default 256)")
    args = parser.parse_args(argv)
    if args.margin < 1.01:
        parser.error("--margin must be at least 1.01 (FP16 rounds values below 65520 to 65504, not to inf)")

    src, out = args.model, args.out
    if src.resolve() == out.resolve():
        sys.exit("OUT must differ from MODEL")
    model = onnx.load(str(src), load_external_data=False)  # inline weights are loaded all the same
    external = has_external_data(model)
    if external and out.resolve().parent != src.resolve().parent:
        sys.exit(
            f"{src} keeps its weights in external data, referenced relative to its directory; "
            f"write OUT into that same directory ({src.resolve().parent}), not {out.resolve().parent}"
        )
    with np.load(args.inputs) as npz:
        feeds = {k: npz[k] for k in npz.files}

    tensor, max_abs = choose(model, src, feeds, args)
    s = shift_for(max_abs, args.margin)
    producer_index, producer = next((i, n) for i, n in enumerate(model.graph.node) if tensor in n.output)
    nodes = len(model.graph.node)
    plant(model, tensor, s)
    onnx.save(model, str(out))
    del model
    gc.collect()

    print(f"{out}{' (external data shared with ' + src.name + ')' if external else ''}")
    print(f"  tensor {tensor} (output of {producer.op_type} {producer.name}, node {producer_index} of {nodes})")
    print(f"  max |t| = {max_abs:.6g}; s = {s}: max |t| * 2^s = {max_abs * 2.0**s:.6g} >= {args.margin:g} * 65504")
    print("  known culprits: planted_up, planted_down")

    names, before = run(src, feeds)
    gc.collect()
    names_after, after = run(out, feeds)
    if names != names_after:
        sys.exit(f"output names differ: {names} vs {names_after}")
    ok = True
    for name, a, b in zip(names, before, after):
        same = np.allclose(b, a, rtol=1e-5)
        ok &= bool(same)
        diff = float(np.abs(a.astype(np.float64) - b).max()) if a.size else 0.0
        print(f"  FP32 check {name}: allclose(rtol=1e-5) {same}, max |diff| {diff:.3g}, bitwise equal "
              f"{np.array_equal(a, b)}")  # fmt: skip
    print(f"  FP32 outputs {'match' if ok else 'DIFFER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
