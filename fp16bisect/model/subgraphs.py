"""The subgraphs of control-flow nodes (If branches, Loop and Scan bodies): listing them, counting their nodes,
the tensors they read from the enclosing graph."""

from __future__ import annotations

import onnx


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The bodies of a control-flow node (If branches, Loop and Scan bodies)."""
    found = []
    for attr in node.attribute:
        found += [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
    return found


def nested_nodes(node: onnx.NodeProto) -> int:
    """How many nodes the subgraphs of a node hold, theirs included."""
    return sum(1 + nested_nodes(n) for sub in subgraphs(node) for n in sub.node)


def outer_reads(node: onnx.NodeProto) -> tuple:
    """Tensors a node's subgraphs read from the enclosing graph."""
    reads: list[str] = []
    for sub in subgraphs(node):
        local = {v.name for v in sub.input} | {t.name for t in sub.initializer}
        local |= {t for n in sub.node for t in n.output}
        for n in sub.node:
            reads += [t for t in n.input if t and t not in local]
            reads += [t for t in outer_reads(n) if t not in local]
        reads += [v.name for v in sub.output if v.name not in local]
    return tuple(dict.fromkeys(reads))
