"""Builds the override JSON (schema ``fp16bisect.overrides/1``), the one builder of that file, from plain values.

A search's result file (``run/outcome.py`` turns its ``Outcome`` into these values) and the file the
command backend writes for each plan it judges (``{overrides}``) are both built here, so a judge reads a plan
as a pipeline reads a result. ``overrides.schema.json`` beside this module declares the file; the sections are
written in the order of ``SECTIONS``; the result is the file's one type, ``overrides.Overrides``.
"""

from __future__ import annotations

from typing import Mapping

from fp16bisect.artifacts.exports import exports_json
from fp16bisect.artifacts.overrides import SCHEMA, SECTIONS, Overrides, problems
from fp16bisect.model.graph import Graph, Node, notes
from fp16bisect.model.plan_states import accumulating as accumulating_mark, states

__all__ = ["SECTIONS", "graph_sections", "node_entry", "overrides_file"]


def node_entry(node: Node, fp32_profile: str = "", forced: bool = False) -> dict:
    """fp32_profile: what the FP32 run saw at this node (why it was suspected, not proof it is needed); forced:
    kept in FP32 by ``--headroom``, not searched (the key is written only then)."""
    entry = {"name": node.id, "op_type": node.op_type, "outputs": list(node.outputs), "fp32_profile": fp32_profile}
    return {**entry, "forced": True} if forced else entry


def graph_sections(graph: Graph, fp32) -> dict:
    """A search's result only: the precision searched for, the nodes not searched, notes on the model, and what the all-FP16 plan's file
    and the answer's file convert beyond rounding (constants FP16 cannot hold), and by which rule."""
    from fp16bisect.artifacts.mixed import conversions
    from fp16bisect.model.fp16 import rule

    return {"precision": graph.precision.name, "skipped_nodes": graph.skipped, "notes": notes(graph),
            "conversions": {"rule": rule(graph.precision), "all_fp16": [c.to_json() for c in conversions(graph, ())],
                            "with_overrides": [c.to_json() for c in conversions(graph, fp32)]}}


def overrides_file(graph: Graph, fp32: Mapping[str, str], *, backend: dict, tolerance: dict, search: dict,
                   metrics: dict, output: str | None = None, more: Mapping | None = None) -> Overrides:
    """The whole file. ``fp32``: each node kept in FP32 (its id) with what the FP32 profile saw there ('' for
    nothing), in the file's order; ``backend``, ``tolerance``, ``search``, ``metrics``: those sections as they
    are written; ``output``: where the file goes (named in the strongly typed export's command); ``more``: the
    sections a search's result adds (``prior``, ``samples``, ``headroom``, and ``graph_sections``), each put in its
    place. The nodes ``headroom.forced`` names (kept in FP32 by ``--headroom``) are marked ``forced``.
    ``fp32`` may hold FP32-accumulation marks (``plan_states.accumulating``): those nodes go to
    ``fp32_accumulate_nodes``, written when there are some or the file is a search's result (``more`` says its
    ``accumulate``)."""
    pinned, marked = states(fp32)
    nodes = [graph.by_id[i] for i in fp32 if i in pinned]
    accumulating = [n for n in graph.nodes if n.id in marked]
    listed = bool(marked) or "accumulate" in (more or {})
    forced = {f["node"] for f in ((more or {}).get("headroom") or {}).get("forced", [])}
    sections = {
        "schema": SCHEMA,
        "model": {"path": graph.shown, "sha256": graph.sha256},
        "backend": backend,
        "tolerance": tolerance,
        "fp32_nodes": [node_entry(n, fp32[n.id], n.id in forced) for n in nodes],
        **({"fp32_accumulate_nodes": [node_entry(n, fp32.get(accumulating_mark(n.id), "")) for n in accumulating]} if listed else {}),
        "search": search,
        "metrics": metrics,
        "exports": exports_json(graph, nodes, output, accumulating),
        **(more or {}),
    }
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"not a section of the override file: {', '.join(sorted(unknown))}")
    data = {key: sections[key] for key in SECTIONS if key in sections}
    problem = problems(data)
    if problem:  # fp16bisect's bug, not the user's input (exit 4, not 2)
        raise RuntimeError(f"the override file fp16bisect built {problem}")
    return Overrides(data)
