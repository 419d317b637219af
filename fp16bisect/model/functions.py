"""ONNX local functions inlined when a model is read, so every node inside one is a candidate like any other.

``onnx.inliner`` does the inlining (formal inputs and outputs bound, internal tensors renamed, ``ref_attr_name``
resolved from the call, its opsets merged; the function's default attributes are added to each call first, which
the inliner does not do); its node names
(``square__1``) do not say which call a node came from, so each call is first given its own copy of the function
whose nodes carry their fp16bisect id, ``<call id>/<name in the function, or its first output>`` (a nested call
nests the prefix: ``<call>/<inner call>/<node>``), and the inlined nodes are named by it. Internal tensors keep the
inliner's unique names (``s__3``); calls inside a control-flow node's subgraphs are inlined with onnx's names.
"""

from __future__ import annotations

from collections import Counter

import onnx
import onnx.inliner

ID, CALL = "fp16bisect.inlined_id", "fp16bisect.inlined_call"


def inline(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, tuple[str, str]]]:
    """``model`` with its local functions inlined (itself when it has none), and each inlined node's call: node id
    -> (function name, id of the outermost call in the model's graph)."""
    if not model.functions:
        return model, {}
    functions = {(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}
    copies: list[onnx.FunctionProto] = []
    calling = onnx.ModelProto()
    calling.CopyFrom(model)
    for call_id, node in zip(_ids(calling.graph.node), calling.graph.node):
        key = (node.domain, node.op_type, getattr(node, "overload", ""))
        if key in functions:
            _defaults(node, functions[key])
            node.op_type = _specialize(functions, functions[key], call_id, (functions[key].name, call_id), copies)
    calling.functions.extend(copies)  # the originals kept: calls inside subgraphs are inlined with onnx's names
    inlined = onnx.inliner.inline_local_functions(calling)
    calls: dict[str, tuple[str, str]] = {}
    for node in inlined.graph.node:
        tags = {p.key: p.value for p in node.metadata_props}
        if ID in tags:
            node.name = tags[ID]
            function, _, call = tags[CALL].partition("\n")
            calls[node.name] = (function, call)
            kept = [p for p in node.metadata_props if p.key not in (ID, CALL)]
            del node.metadata_props[:]
            node.metadata_props.extend(kept)
    gone = {f.domain for f in model.functions} - {n.domain for n in inlined.graph.node}  # only functions'
    kept_opsets = [o for o in inlined.opset_import if o.domain not in gone]
    del inlined.opset_import[:]
    inlined.opset_import.extend(kept_opsets)
    return inlined, calls


def _specialize(functions: dict, function: onnx.FunctionProto, prefix: str, call: tuple[str, str],
                copies: list) -> str:
    """The name of a copy of ``function`` for the call ``prefix`` (appended to ``copies``), its nodes tagged with
    their ids and ``call``; its own calls of local functions get copies of their own."""
    copy = onnx.FunctionProto()
    copy.CopyFrom(function)
    copy.name = f"{function.name}@{len(copies)}"
    copies.append(copy)
    for inner, node in zip(_ids(copy.node), copy.node):
        node_id = f"{prefix}/{inner}"
        key = (node.domain, node.op_type, getattr(node, "overload", ""))
        if key in functions:
            _defaults(node, functions[key])
            node.op_type = _specialize(functions, functions[key], node_id, call, copies)
            continue
        for name, value in ((ID, node_id), (CALL, "\n".join(call))):
            prop = node.metadata_props.add()
            prop.key, prop.value = name, value
    return copy.name


def _defaults(call: onnx.NodeProto, function: onnx.FunctionProto) -> None:
    """The function's default attributes the call does not set, added to the call (``onnx.inliner`` leaves an
    attribute reference to one of them unresolved)."""
    given = {a.name for a in call.attribute}
    call.attribute.extend(a for a in function.attribute_proto if a.name not in given)


def _ids(nodes) -> list[str]:
    """The nodes' ids by ``Graph``'s rule: the name when non-empty and unique, else the first output, else ``#i``."""
    names = Counter(n.name for n in nodes if n.name)
    return [n.name if n.name and names[n.name] == 1 else n.output[0] if n.output and n.output[0] else f"#{i}"
            for i, n in enumerate(nodes)]
