"""Small ONNX graph edits the mixed-precision writer (``artifacts/mixed.py``) makes: fresh names, renaming a
tensor (into control-flow subgraphs too), an operator's schema and its formal parameters."""

from __future__ import annotations

import onnx

from fp16bisect.model.graph import DEFAULT_DOMAINS, Node
from fp16bisect.model.subgraphs import subgraphs


class Fresh:
    """Unique names: the base if free, else base_1, base_2, ..."""

    def __init__(self, taken: set):
        self.taken = set(taken)

    def __call__(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name


def schema(node: Node, opset: int):
    if node.domain not in DEFAULT_DOMAINS:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None


def formal(formals, i: int):
    if i < len(formals):
        return formals[i]
    if formals and formals[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return formals[-1]
    return None


def rename(node: onnx.NodeProto, old: str, new: str) -> None:
    for i, t in enumerate(node.input):
        if t == old:
            node.input[i] = new
    for i, t in enumerate(node.output):
        if t == old:
            node.output[i] = new
    rename_reads(node, old, new)


def rename_reads(node: onnx.NodeProto, old: str, new: str) -> None:
    """Point a control-flow node's subgraphs at another outer tensor."""
    for sub in subgraphs(node):
        for n in sub.node:
            for i, t in enumerate(n.input):
                if t == old:
                    n.input[i] = new
            rename_reads(n, old, new)
        for v in sub.output:
            if v.name == old:
                v.name = new
