#!/usr/bin/env python
"""Export small Hugging Face transformers to ONNX, with inputs (dev only).

Needs torch and transformers (plus onnx and numpy), which are NOT
dependencies of fp16bisect: run it from a separate virtual environment, e.g.

    python3 -m venv ~/hfvenv
    ~/hfvenv/bin/pip install torch==2.13.0          # the CPU wheel
    ~/hfvenv/bin/pip install transformers onnx onnxscript numpy
    ~/hfvenv/bin/python scripts/export_hf.py                 # writes build/hf/
    ~/hfvenv/bin/python scripts/export_hf.py OUT_DIR         # writes OUT_DIR/
    ~/hfvenv/bin/python scripts/export_hf.py --models bert_tiny gpt2_tiny

No weights are downloaded: every model is built from a config with random
initialisation (``torch.manual_seed(0)``, ``.eval()``). Each model ``NAME``
gets ``NAME.onnx`` (opset 17, IR version at most 9, all weights inside the
file, fixed input shapes) and ``NAME.npz`` (one array per ONNX graph input,
keyed by the input name, with the dtype the ONNX model declares: int64
``input_ids`` and ``attention_mask``). PyTorch's own outputs on those
inputs go to ``reference/NAME.npz`` (keyed by ONNX output name).

    bert_tiny   BertModel, 2 layers, hidden 128, 2 heads, vocab 1000;
                batch 2x16, row 1 right-padded (mask 0 on its last 6 positions)
    gpt2_tiny   GPT2Model, 2 layers, n_embd 128, 2 heads, vocab 1000;
                batch 2x16, row 1 left-padded (mask 0 on its first 6 positions)
    bert_base   BertModel, default BertConfig (12 layers, 768, vocab 30522);
                batch 1x32, last 8 positions padded
    gpt2_small  GPT2Model, default GPT2Config (12 layers, 768);
                batch 1x32, first 8 positions padded (left padding)

The exporter is the classic TorchScript one (``torch.onnx.export(...,
dynamo=False)``). Attention uses ``attn_implementation="eager"`` by default,
so the padding mask becomes the additive ``Where(mask, 0, finfo(float32).min)``
that is added to the attention scores; ``--attn-implementation sdpa`` exports
transformers' default SDPA path instead. GPT-2's position ids are the
default ``0..n-1`` (not derived from the left padding).

For each model it prints the path, file size, node count, whether the graph
holds a float constant at or below -1e38 (the float32 mask value) and which
nodes read it, and the mask subgraph: the nodes between ``attention_mask``
and the Adds that feed a Softmax.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "build" / "hf"
OPSET = 17
MAX_IR = 9
MASK_LIMIT = -1e38


def _bert(tiny: bool):
    from transformers import BertConfig

    if tiny:
        return BertConfig(
            vocab_size=1000,
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=512,
            max_position_embeddings=128,
        )
    return BertConfig(vocab_size=30522)


def _gpt2(tiny: bool):
    from transformers import GPT2Config

    if tiny:
        return GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=2, n_positions=128)
    return GPT2Config()


# name -> (family, tiny config?, batch, sequence length, padded positions, left padding?)
MODELS = {
    "bert_tiny": ("bert", True, 2, 16, 6, False),
    "gpt2_tiny": ("gpt2", True, 2, 16, 6, True),
    "bert_base": ("bert", False, 1, 32, 8, False),
    "gpt2_small": ("gpt2", False, 1, 32, 8, True),
}


def make_inputs(vocab: int, batch: int, seq: int, pad: int, left: bool):
    """Random ids and a mask whose last row is padded (left or right)."""
    import torch

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen, dtype=torch.int64)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if left:
        mask[-1, :pad] = 0
    else:
        mask[-1, seq - pad :] = 0
    ids[mask == 0] = 0  # pad token id
    return ids, mask


def build(name: str, attn: str):
    """Return (torch wrapper module, (input_ids, attention_mask), output names)."""
    import torch
    from transformers import BertModel, GPT2Model

    family, tiny, batch, seq, pad, left = MODELS[name]
    torch.manual_seed(0)
    if family == "bert":
        config = _bert(tiny)
        config._attn_implementation = attn
        model = BertModel(config).eval()
        outputs = ["last_hidden_state", "pooler_output"]
    else:
        config = _gpt2(tiny)
        config._attn_implementation = attn
        model = GPT2Model(config).eval()
        outputs = ["last_hidden_state"]

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "return_dict": True}
            if family == "gpt2":
                kwargs["use_cache"] = False
            out = self.inner(**kwargs)
            if family == "bert":
                return out.last_hidden_state, out.pooler_output
            return out.last_hidden_state

    inputs = make_inputs(config.vocab_size, batch, seq, pad, left)
    return Wrapper(model).eval(), inputs, outputs


def export(name: str, out_dir: Path, attn: str) -> Path:
    import torch

    module, (ids, mask), outputs = build(name, attn)
    path = out_dir / f"{name}.onnx"
    with torch.no_grad():
        reference = module(ids, mask)
        torch.onnx.export(
            module,
            (ids, mask),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=outputs,
            opset_version=OPSET,
            dynamo=False,
            do_constant_folding=True,
        )
    model = onnx.load(str(path))
    if model.ir_version > MAX_IR:
        model.ir_version = MAX_IR
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path), save_as_external_data=False)

    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    arrays = {}
    for inp in model.graph.input:
        dtype = helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
        arrays[inp.name] = np.ascontiguousarray(feeds[inp.name].astype(dtype))
    np.savez(out_dir / f"{name}.npz", **arrays)
    if not isinstance(reference, tuple):
        reference = (reference,)
    (out_dir / "reference").mkdir(exist_ok=True)
    np.savez(out_dir / "reference" / f"{name}.npz", **{k: v.numpy() for k, v in zip(outputs, reference)})
    return path


# ---------------------------------------------------------------- inspection


def _constants(graph) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _fmt_value(a: np.ndarray) -> str:
    if a.size == 1:
        v = a.reshape(-1)[0]
        return f"{v:.4g}" if np.issubdtype(a.dtype, np.floating) else str(v)
    return f"<{a.dtype}{list(a.shape)}>"


def mask_constants(model) -> list[str]:
    """Lines naming each float constant <= -1e38 and the nodes that read it."""
    graph = model.graph
    consumers: dict[str, list] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    found = []
    for tname, a in _constants(graph).items():
        if np.issubdtype(a.dtype, np.floating) and a.size and a.min() <= MASK_LIMIT:
            found.append((tname, float(a.min()), consumers.get(tname, [])))
    for node in graph.node:
        if node.op_type == "ConstantOfShape":
            for attr in node.attribute:
                a = numpy_helper.to_array(attr.t)
                if np.issubdtype(a.dtype, np.floating) and a.min() <= MASK_LIMIT:
                    found.append((f"ConstantOfShape {node.name}", float(a.min()), consumers.get(node.output[0], [])))
    lines = []
    for tname, v, readers in found:
        who = ", ".join(f"{n.op_type} {n.name}" for n in readers) or "(no reader)"
        lines.append(f"{tname} = {v:.5g} read by {who}")
    return lines


def _downstream_of_mask(graph) -> tuple[set[str], list]:
    """The tensors computed from attention_mask, up to the Adds feeding a Softmax (the attention Adds: the second
    value)."""
    softmax_in = {n.input[0] for n in graph.node if n.op_type == "Softmax"}
    down = {"attention_mask"}
    targets = []
    for node in graph.node:  # topological order; stop at the attention Adds
        if any(i in down for i in node.input):
            if node.op_type == "Add" and node.output[0] in softmax_in:
                targets.append(node)
            else:
                down.update(node.output)
    return down, targets


def _node_line(node, consts: dict, producer: dict, down: set[str]) -> str:
    """``Op(args)  [name]``: a constant input by its value, the mask by name, an input computed from the mask by its
    producer's op type, any other input as ``~Op``; a ConstantOfShape's value and a Cast's type after it."""
    args = []
    for i in node.input:
        if i in consts:
            args.append(_fmt_value(consts[i]))
        elif i == "attention_mask":
            args.append("attention_mask")
        else:
            p = producer.get(i)
            # "~Op": an input not computed from attention_mask
            args.append(p.op_type if i in down else f"~{p.op_type}" if p is not None else i)
    extra = ""
    if node.op_type == "ConstantOfShape":
        extra = " value=" + ",".join(_fmt_value(numpy_helper.to_array(a.t)) for a in node.attribute)
    if node.op_type == "Cast":
        extra = " to=" + ",".join(helper.tensor_dtype_to_np_dtype(a.i).name for a in node.attribute)
    return f"{node.op_type}({', '.join(args)}){extra}  [{node.name}]"


def mask_subgraph(model) -> list[str]:
    """Nodes downstream of attention_mask and upstream of the Adds feeding a Softmax.

    One line per node, ``Op(args)``: a constant input is shown by its value
    (or dtype and shape), an input computed from the mask by its producer's
    op type, any other input as ``~Op``.
    """
    graph = model.graph
    consts = _constants(graph)
    producer = {o: n for n in graph.node for o in n.output}
    down, targets = _downstream_of_mask(graph)
    up: set[int] = set()
    stack = [i for t in targets for i in t.input]
    while stack:
        tname = stack.pop()
        node = producer.get(tname)
        if node is None or id(node) in up or not any(o in down for o in node.output):
            continue
        up.add(id(node))
        stack.extend(node.input)
    lines = [_node_line(node, consts, producer, down) for node in graph.node if id(node) in up]
    if targets:
        lines.append(f"-> read by {len(targets)} attention Add(s), e.g. {targets[0].name}")
    else:
        lines.append("-> no attention Add reads the mask")
    return lines


def report(path: Path) -> None:
    model = onnx.load(str(path))
    size = path.stat().st_size
    print(f"{path}")
    nodes = len(model.graph.node)
    print(f"  size {size} bytes ({size / 2**20:.1f} MiB), {nodes} nodes, IR {model.ir_version}, opset {OPSET}")
    dtypes = [(i.name, helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name) for i in model.graph.input]
    print("  inputs: " + ", ".join(f"{n}:{d}" for n, d in dtypes))
    found = mask_constants(model)
    print(f"  float constant <= -1e38: {'yes' if found else 'no'}")
    for line in found:
        print(f"    {line}")
    print("  mask subgraph:")
    for line in mask_subgraph(model):
        print(f"    {line}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out", nargs="?", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--attn-implementation", choices=["eager", "sdpa"], default="eager")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        report(export(name, args.out, args.attn_implementation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
