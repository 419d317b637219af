"""The override set as build arguments: the strongly typed route, trtexec's weak-typing flags, ModelOpt AutoCast.

The strongly typed route comes first: TensorRT must honour the types of a mixed-precision model, while 10.x
weak-typing pins can be ignored where layers are fused (NVIDIA/TensorRT#3889).

Each export names the graph's low precision (``Graph.precision``): ``--fp16`` or ``--bf16`` for trtexec,
``--low_precision_type fp16`` or ``bf16`` for AutoCast; the strongly typed route needs no flag (the file's types say it).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from fp16bisect.model.graph import Graph, Node


def trtexec_layer_name(node: Node) -> str:
    """The name TensorRT's ONNX parser gives a node's first layer (onnx-tensorrt ``getNodeName``)."""
    return node.name if node.name else f"node_of_{node.outputs[0]}"


def not_expressed(accumulating: Sequence[Node], how: str) -> list[str]:
    """The warning of an export that cannot express FP32 accumulation (FP16 storage, FP32 arithmetic)."""
    if not accumulating:
        return []
    names = ", ".join(repr(n.id) for n in accumulating)
    return [f"{how} cannot express FP32 accumulation: node(s) {names} stay in FP16 here (FP16 arithmetic where the "
            "engine chooses it); only the mixed-precision file (exports.strongly_typed) carries that state"]


def trtexec_export(graph: Graph, nodes: list[Node], accumulating: Sequence[Node] = ()) -> dict:
    """TensorRT 10 trtexec flags that keep these nodes' layers in FP32 (weak typing: prefer the strongly typed
    export, since TensorRT can ignore these pins where it fuses layers). Nodes in FP32 accumulation are left in
    FP16 (a layer precision names one type, not a storage type and an accumulator type) and a warning says so."""
    warnings = not_expressed(list(accumulating), "trtexec --layerPrecisions (weak typing)")
    names = []
    for node in nodes:
        layer = trtexec_layer_name(node)
        if "," in layer or "'" in layer:
            warnings.append(
                f"node {node.id!r}: trtexec cannot express a layer name containing ',' or \"'\"; "
                "pin it through the TensorRT API instead"
            )
            continue
        if node.name in graph.duplicate_names:
            warnings.append(
                f"node {node.id!r}: its name {node.name!r} is shared by several nodes, so TensorRT renames "
                "all but one layer; rename the nodes in the model, or pin through the TensorRT API"
            )
        names.append(layer)
    if nodes:
        warnings.append(
            "trtexec names only the first layer of each node; a node TensorRT imports as several layers "
            "has more (named <node>_<n>), which these flags do not pin"
        )
    precisions = ",".join(f"{n}:fp32" for n in names)
    args = [graph.precision.trtexec_flag, "--precisionConstraints=obey"]
    if names:
        args += [f"--layerPrecisions={precisions}", f"--layerOutputTypes={precisions}"]
    model = graph.shown
    return {
        "tensorrt": "10.x weakly typed (deprecated since 10.12, removed in 11); TensorRT may ignore these pins "
                    "where it fuses layers (NVIDIA/TensorRT#3889): prefer exports.strongly_typed",
        "args": args,
        "command": shlex.join(["trtexec", f"--onnx={model}", *args]),
        "warnings": warnings,
    }


LAYERNORM_PARTS = {"ReduceMean", "Pow", "Sqrt", "Div", "Sub", "Reciprocal"}


def autocast_export(graph: Graph, nodes: list[Node], accumulating: Sequence[Node] = ()) -> dict:
    """ModelOpt AutoCast arguments for TensorRT 11 strongly typed builds. ``nodes_to_exclude`` keeps a node wholly
    in FP32: nodes in FP32 accumulation are left in FP16 and a warning says so."""
    warnings = not_expressed(list(accumulating), "ModelOpt AutoCast nodes_to_exclude")
    patterns = []
    for node in nodes:
        if not node.name:
            warnings.append(
                f"node {node.id!r} has no name in the model: AutoCast names such nodes itself "
                "(<OpType>_<N>), so no pattern can select it; give the model's nodes names first"
            )
            continue
        if node.name in graph.duplicate_names:
            warnings.append(
                f"node {node.id!r}: its name {node.name!r} is shared by several nodes, so the pattern keeps "
                "all of them in FP32; give the model's nodes unique names to pin only this one"
            )
        pattern = f"^{re.escape(node.name)}$"
        if pattern not in patterns:
            patterns.append(pattern)
    if any(n.op_type in LAYERNORM_PARTS for n in nodes):
        warnings.append(
            "AutoCast may fuse a decomposed LayerNorm into one new node with a new name; if a pinned node "
            "is part of one, also pass --op_types_to_exclude LayerNormalization"
        )
    model = graph.shown
    output = re.sub(r"\.onnx$", "", model) + f".{graph.precision.name}.onnx"
    args = [
        "--low_precision_type", graph.precision.name,
        "--keep_io_types",
        "--data_max", "inf",
        "--init_max", "inf",
    ]
    if patterns:
        args += ["--nodes_to_exclude", *patterns]
    return {
        "nodes_to_exclude": patterns,
        "args": args,
        "command": shlex.join(
            ["python", "-m", "modelopt.onnx.autocast", "--onnx_path", model, "--output_path", output, *args]
        ),
        "warnings": warnings,
    }


def strongly_typed_export(graph: Graph, overrides_path: str | None) -> dict:
    """The mixed-precision model ``apply`` writes, built strongly typed: TensorRT 10.x (the flag exists since 9.0;
    trtexec --stronglyTyped), 11.x and TensorRT-RTX (always strongly typed)."""
    model = graph.shown
    mixed = (model[:-5] if model.endswith(".onnx") else model) + ".mixed.onnx"
    return {
        "tensorrt": "10.x with --stronglyTyped (recommended; mixed-precision BatchNormalization needs 10.7+), "
                    "11.x and TensorRT-RTX (always strongly typed)",
        "command": shlex.join(["fp16bisect", "apply", model, overrides_path or "overrides.json", "-o", mixed]),
        "trtexec": shlex.join(["trtexec", f"--onnx={mixed}", "--stronglyTyped"]),
    }


def exports_json(graph: Graph, nodes: list[Node], overrides_path: str | None,
                 accumulating: Sequence[Node] = ()) -> dict:
    """The override file's ``exports``: the strongly typed route first (the one TensorRT must honour, 10.x
    included, and the only one that carries FP32 accumulation), then trtexec's weak-typing flags and ModelOpt
    AutoCast's arguments (which leave ``accumulating`` nodes in FP16 and warn)."""
    return {
        "strongly_typed": strongly_typed_export(graph, overrides_path),
        "trtexec": trtexec_export(graph, nodes, accumulating),
        "modelopt_autocast": autocast_export(graph, nodes, accumulating),
    }
