"""``migrate``: TensorRT 10 weak-typing pins -> the override file of the ONNX nodes they pin.

TensorRT 11 removed weak typing (``--fp16``, ``--layerPrecisions``, ``--precisionConstraints``,
``BuilderFlag.FP16``): a build that pinned layers to FP32 must now build a strongly typed mixed-precision ONNX.
This reads the pins (trtexec's ``--layerPrecisions``/``--layerOutputTypes``, or a ``name:precision`` list as
Polygraphy's ``--layer-precisions`` takes it), maps each TensorRT layer name back to the ONNX node the parser
named it after (onnx-tensorrt names a node's layer after the node, ``node_of_<first output>`` when it has no
name, and further layers of one node ``<name>_<n>``), and builds the override file of those nodes; ``apply``
then writes the mixed-precision model from it, the only route on TensorRT 11.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from fp16bisect.artifacts.override_json import overrides_file
from fp16bisect.errors import UsageError, shown
from fp16bisect.model.graph import Graph

# Spellings of FP32 in trtexec (fp32) and Polygraphy / TensorRT's DataType (float32, float)
FP32 = {"fp32", "float32", "float"}
PRECISION = re.compile(r"^(?P<layer>.+):(?P<precision>[A-Za-z0-9_.]+)$")


@dataclass(frozen=True)
class Pins:
    """The layers a TensorRT 10 build pinned, as given: to FP32, and to other precisions (not migrated: every
    node the file does not keep in FP32 computes in the low precision)."""

    source: str  # where they came from, for the override file
    fp32: tuple[str, ...]
    other: tuple[tuple[str, str], ...] = ()
    low_precision: bool = True  # trtexec args without --fp16 (or --best) built nothing in FP16


@dataclass
class Mapping:
    """Each FP32 layer's node: ``nodes`` (candidate ids, graph order), what no node answers to, and the nodes
    that are not candidates (data movement: they take their producer's precision, so pinning them means nothing)."""

    nodes: list[str] = field(default_factory=list)
    layers: dict[str, str] = field(default_factory=dict)  # layer -> node id
    unmapped: list[str] = field(default_factory=list)
    not_candidates: dict[str, str] = field(default_factory=dict)  # layer -> node id


def _entry(text: str, where: str) -> tuple[str, str]:
    found = PRECISION.match(text.strip())
    if not found:
        raise UsageError(f"{where}: {shown(text)} is not LAYER:PRECISION (e.g. 'ln1_var:fp32')")
    return found["layer"].strip(), found["precision"].lower()


def _pins(entries: list[tuple[str, str]], source: str, low_precision: bool = True) -> Pins:
    fp32 = tuple(dict.fromkeys(layer for layer, precision in entries if precision in FP32))
    other = tuple((layer, p) for layer, p in entries if p not in FP32 and layer not in fp32)
    if "*" in fp32:
        raise UsageError(f"{source} pins every layer ('*') to FP32: nothing computes in the low precision, so "
                         "there is nothing to migrate: build the FP32 model as it is")
    return Pins(source, fp32, other, low_precision)


def pins_from_trtexec(args: str) -> Pins:
    """The pins in a trtexec command line (or just its arguments)."""
    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise UsageError(f"--trtexec-args cannot be split like a shell line ({exc}): quote it as one "
                         "argument") from None
    entries = []
    for i, word in enumerate(words):
        flag, _, value = word.partition("=")
        if flag in ("--layerPrecisions", "--layerOutputTypes"):
            value = value or (words[i + 1] if i + 1 < len(words) else "")
            entries += [_entry(part, flag) for part in value.split(",") if part.strip()]  # trtexec: no quoting
    if not entries:
        raise UsageError("--trtexec-args holds no --layerPrecisions=LAYER:fp32,... : pass the trtexec arguments "
                         "of the TensorRT 10 build that pinned layers")
    low = any(w in ("--fp16", "--best", "--bf16") for w in words)
    return _pins(entries, "trtexec " + " ".join(words), low)


def pins_from_list(text: str, source: str) -> Pins:
    """``name:precision`` entries, one a line or several a line separated by blanks (Polygraphy's
    ``--layer-precisions``); ``#`` starts a comment."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()  # several entries, unless the line is one name holding blanks
        parts = words if all(PRECISION.match(w) for w in words) else [line]
        entries += [_entry(part, f"{source}, line {number}") for part in parts]
    if not entries:
        raise UsageError(f"{source} holds no LAYER:PRECISION entry: write one a line, e.g. 'ln1_var:fp32'")
    return _pins(entries, source)


def _layer_names(graph: Graph) -> dict[str, str]:
    """Every name a TensorRT 10 layer of this model can carry for its node -> the node's id."""
    names: dict[str, str] = {}
    for node in graph.nodes:
        for name in (node.id, node.name, f"node_of_{node.outputs[0]}" if node.outputs else ""):
            if name:
                names.setdefault(name, node.id)
    return names


def map_layers(graph: Graph, layers) -> Mapping:
    """Each layer's node (``Mapping``): by name, then without a ``_<n>`` suffix (a node's further layers)."""
    names = _layer_names(graph)
    candidates = {n.id for n in graph.candidates}
    found = Mapping()
    for layer in layers:
        node = names.get(layer)
        base = re.match(r"^(.*)_\d+$", layer)
        if node is None and base:
            node = names.get(base[1])
        if node is None:
            found.unmapped.append(layer)
        elif node in candidates:
            found.layers[layer] = node
        else:
            found.not_candidates[layer] = node
    chosen = set(found.layers.values())
    found.nodes = [n.id for n in graph.candidates if n.id in chosen]
    return found


def migration(graph: Graph, pins: Pins, mapping: Mapping, tolerance: dict, output: str | None = None) -> dict:
    """The override file of the mapped nodes: what ``apply`` turns into the strongly typed model."""
    if not mapping.nodes:
        some = ", ".join(map(shown, (mapping.unmapped or list(mapping.not_candidates))[:3]))
        raise UsageError(
            f"none of the {len(pins.fp32)} FP32 layer(s) maps to a node of {graph.path.name if graph.path else 'the model'} "
            f"that computes (e.g. {some}): TensorRT names layers after the ONNX node names; pass the model the "
            "pins were made for")
    from fp16bisect import __version__

    return overrides_file(
        graph, {node: "" for node in mapping.nodes},
        backend={"name": "migrate", "versions": {"fp16bisect": __version__}},
        tolerance=tolerance,
        search={"status": "migrated", "evaluations": 0, "minimal": False,
                "minimality": "not searched: the nodes of TensorRT 10 FP32 pins; 'fp16bisect search' finds the "
                              "smallest set",
                "migrated_from": {"source": pins.source, "fp32_layers": list(pins.fp32), "mapped": mapping.layers,
                                  "unmapped": mapping.unmapped, "not_candidates": mapping.not_candidates,
                                  "other_precisions": [f"{layer}:{p}" for layer, p in pins.other]}},
        metrics={}, output=output).to_json()
