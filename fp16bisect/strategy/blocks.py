"""``--group-by scope[:DEPTH]|function``: search blocks first, then the nodes inside the blocks chosen.

A block is the candidates under one node-name scope (``/encoder/layer.3/`` of ``/encoder/layer.3/attention/MatMul``,
cut at DEPTH path components; without DEPTH, the node's whole scope); a node with no scope in its name is a block of
its own. The blocks are part of the plan space (``grouped``: ``evaluation/space.py``), so they compose with what
else it holds (the fixed nodes, ``--accumulate fp16``'s marks). The first search runs over block ids, a block's plan
being all its candidate nodes in FP32 (``algorithm/search.py`` sees plain sets); the second over the nodes of the
blocks it chose, every other block in FP16. The answer is 1-minimal over nodes all the same: each of its single
removals was seen to fail, so ``--minimum`` can start from it as from any 1-minimal set.
``--group-by function``: a block is the nodes inlined from one call of an ONNX local function in the model's graph
(a nested call belongs to its outermost call; ``model/functions.py``), a node outside any call a block of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from fp16bisect.algorithm.search import Hooks, SearchResult, search
from fp16bisect.errors import UsageError
from fp16bisect.evaluation.space import PlanSpace, View

SCOPE, FUNCTION = "scope", "function"


@dataclass(frozen=True)
class Grouping:
    """How nodes form blocks: ``kind`` scope (``depth`` path components, None: the whole scope) or function."""

    kind: str
    depth: int | None = None

    def __str__(self) -> str:
        return self.kind + (f":{self.depth}" if self.depth is not None else "")


def grouping(value: str | Grouping | None) -> Grouping | None:
    """``--group-by``'s text as a ``Grouping`` (None: the flat search); bad text is a ``UsageError``."""
    if value is None or isinstance(value, Grouping):
        return value
    kind, _, depth = str(value).partition(":")
    if kind == FUNCTION and not depth:
        return Grouping(FUNCTION)
    if kind == SCOPE and (not depth or depth.isdigit() and int(depth) >= 1):
        return Grouping(SCOPE, int(depth) if depth else None)
    raise UsageError(f"--group-by {value!r}: use scope, scope:DEPTH (DEPTH 1 or more path components of the node "
                     "names, e.g. scope:3 for /bert/encoder/layer.3/) or function")


def scope(name: str, depth: int | None) -> str | None:
    """The block of a node named ``name``: its scope cut at ``depth`` (``/a/b/``), or None when it has none."""
    parts = [p for p in name.split("/")[:-1] if p]
    if not parts:
        return None
    return "/" + "/".join(parts[:depth]) + "/"


def blocks(graph, ids, how: Grouping) -> dict[str, tuple]:
    """The blocks of the candidates ``ids``, in graph order: block name -> its node ids."""
    if how.kind == FUNCTION and not graph.calls:
        raise UsageError("--group-by function: the model has no ONNX local functions (its export inlined "
                         "them): use --group-by scope[:DEPTH] on its node names")
    found: dict[str, list] = {}
    for node_id in ids:
        node = graph.by_id[node_id]
        if how.kind == FUNCTION:  # the outermost call of the model's graph; a node outside any: its own block
            found.setdefault(graph.calls[node_id][1] if node_id in graph.calls else node_id, []).append(node_id)
        else:
            found.setdefault(scope(node.name or node.id, how.depth) or node.id, []).append(node_id)
    return {name: tuple(nodes) for name, nodes in found.items()}


@dataclass(frozen=True)
class Chosen:
    """The blocks the first search kept in FP32 (name -> all its candidate nodes), of ``total`` blocks, and the
    evaluations the block search took."""

    blocks: dict
    total: int
    evaluations: int
    unscoped: int  # blocks of one node with no scope in its name

    def to_json(self, fp32) -> list[dict]:
        """The override JSON's ``blocks``: each chosen block, its node count and the nodes pinned inside."""
        kept = set(fp32)
        return [{"name": name, "nodes": len(nodes), "fp32_nodes": [n for n in nodes if n in kept]}
                for name, nodes in self.blocks.items()]


def grouped(graph, space: PlanSpace, how: Grouping, say) -> PlanSpace:
    """``space`` searched by the blocks of its candidates (``blocks``) first; says how many."""
    found = blocks(graph, space.candidates, how)
    lone = sum(1 for b, nodes in found.items() if nodes == (b,))
    say(f"--group-by {how}: {len(space.candidates)} candidate(s) in {len(found)} block(s)"
        + (f" ({lone} node(s) {'outside any function call' if how.kind == FUNCTION else 'with no scope'}, "
           "each its own block)" if lone else "")
        + "; searching the blocks to keep in FP32, then the nodes inside them")
    return space.grouped(found)


def search_blocks(judge: View, order, suspects: int, step, reorder=None) -> tuple[SearchResult, Chosen | None]:
    """The block search over ``judge.space.blocks``, then the node search inside the blocks it chose: one result
    over nodes (evaluations, rounds and trace of both; the block steps' plans as their nodes). ``judge``: the
    oracle's view over the plan space; ``order``: the nodes, most suspicious first, the first ``suspects`` flagged
    (a block ranks as its most suspicious node, and is a suspect when it holds one); ``step(step, progress)``: each
    step said; ``reorder()``: the nodes ranked by measured effect, asked once when no suspect explains a failure
    (blocks then rank as their best-ranked node)."""
    grouped = judge.space.blocks
    rank = {node: i for i, node in enumerate(order)}
    names = sorted(grouped, key=lambda b: min(rank.get(n, len(rank)) for n in grouped[b]))
    flagged = set(order[:suspects])
    nodes_of = lambda plan: frozenset(n for b in plan for n in grouped[b])  # noqa: E731
    ranked = _once(reorder)
    many = judge.test_many if judge.width > 1 else None
    first = search(list(grouped), lambda plan: judge(nodes_of(plan)), order=names,
                   suspects=sum(1 for b in names if flagged & set(grouped[b])), hooks=Hooks(
        reorder=(lambda: _blocks_by(ranked(), grouped)) if ranked else None,
        on_step=lambda s, progress: step(replace(s, plan=nodes_of(s.plan)), progress)),
        test_many=(lambda plans: many([nodes_of(p) for p in plans])) if many else None, width=judge.width)
    first = replace(first, trace=[replace(s, plan=nodes_of(s.plan)) for s in first.trace])
    unscoped = sum(1 for b, nodes in grouped.items() if len(nodes) == 1 and nodes[0] == b)
    if first.status != "found":
        return replace(first, fp32=tuple(nodes_of(first.fp32))), None
    chosen = Chosen({b: grouped[b] for b in names if b in set(first.fp32)}, len(grouped), first.evaluations,
                    unscoped)
    inside = [n for n in order if n in nodes_of(first.fp32)]
    seen, new = {s.plan for s in first.trace}, []  # the second search's plans the first did not evaluate

    def said(s, progress) -> None:
        if s.plan not in seen:
            new.append(s.plan)
            seen.add(s.plan)
            step(replace(s, index=first.evaluations + len(new)), progress)

    second = search(inside, judge, order=inside, suspects=len(flagged & set(inside)), hooks=Hooks(
        reorder=(lambda: [n for n in ranked() if n in set(inside)]) if ranked else None, on_step=said),
        test_many=many, width=judge.width)
    trace = [replace(s, index=first.evaluations + new.index(s.plan) + 1) for s in second.trace if s.plan in new]
    how = (f"{second.minimality}, over the nodes of the {len(chosen.blocks)} block(s) chosen (of {len(grouped)}: "
           f"1-minimal over blocks, evaluations 1-{first.evaluations}), every other block in FP16")
    return replace(second, minimality=how, evaluations=first.evaluations + len(new),
                   rounds=first.rounds + len(new), trace=first.trace + trace,
                   contradictions=first.contradictions + second.contradictions,
                   unevaluable=first.unevaluable + second.unevaluable), chosen


def _once(reorder):
    """``reorder`` asked at most once (it measures every candidate), or None."""
    if reorder is None:
        return None
    kept: list = []

    def ranked() -> list:
        if not kept:
            kept.append(list(reorder()))
        return kept[0]

    return ranked


def _blocks_by(nodes: list, grouped: Mapping[str, tuple]) -> list:
    rank = {node: i for i, node in enumerate(nodes)}
    return sorted(grouped, key=lambda b: min(rank.get(n, len(rank)) for n in grouped[b]))
