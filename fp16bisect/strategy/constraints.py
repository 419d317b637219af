"""What a person decides before the search: ``--keep-fp32 PATTERN`` and ``--keep-fp16 PATTERN``.

A pattern is a Python regular expression matched whole (``re.fullmatch``) against a candidate's node id, so a plain
node id is a pattern matching itself (as ``apply --keep-fp32 NODE`` takes it); ``op:TYPE`` matches the candidates
whose op type matches ``TYPE`` whole (``op:LayerNormalization``, ``op:(Softmax|ReduceMean)``). ``--keep-fp32``
nodes are in FP32 in every plan (fixed in the plan space, as ``--headroom``'s forced nodes are) and not searched;
``--keep-fp16`` nodes are never in FP32: they leave the candidates the search may pin, so its all-FP32 plan is every
free node in FP32 (under ``--accumulate fp16`` they may still be in FP32 accumulation). The search minimises over
the free nodes: the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from fp16bisect.algorithm.search import SearchResult
from fp16bisect.errors import UsageError
from fp16bisect.evaluation.space import PlanSpace

OP = "op:"  # a pattern on op types, not node ids


def patterns(values, flag: str) -> tuple[str, ...]:
    """``values`` (one pattern, or several) as a tuple of patterns that compile; a bad one is a ``UsageError``."""
    given = (values,) if isinstance(values, str) else tuple(values or ())
    for value in given:
        if not isinstance(value, str) or not value:
            raise UsageError(f"{flag} {value!r}: give a node id, a regular expression over node ids, or op:TYPE")
        try:
            re.compile(value[len(OP):] if value.startswith(OP) else value)
        except re.error as e:
            raise UsageError(f"{flag} {value!r} is not a regular expression ({e}): escape it, e.g. with "
                             "backslashes before . ( ) [ ] +") from None
    return given


def matches(pattern: str, node) -> bool:
    """Whether ``pattern`` matches ``node`` (a ``model.graph.Node``) whole: its id, or with ``op:`` its op type."""
    if pattern.startswith(OP):
        return re.fullmatch(pattern[len(OP):], node.op_type) is not None
    return re.fullmatch(pattern, node.id) is not None


@dataclass(frozen=True)
class Constraints:
    """Each pattern with the candidates it matched, in graph order (``{}``: none given)."""

    keep_fp32: dict = field(default_factory=dict)  # pattern -> tuple of node ids
    keep_fp16: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.keep_fp32 or self.keep_fp16)

    @property
    def fp32(self) -> tuple:
        return tuple(dict.fromkeys(n for nodes in self.keep_fp32.values() for n in nodes))

    @property
    def fp16(self) -> frozenset:
        return frozenset(n for nodes in self.keep_fp16.values() for n in nodes)

    def named(self) -> str:
        """The constraints as given: ``--keep-fp32 'a' --keep-fp16 'op:Softmax'``."""
        return " ".join(f"{flag} {p!r}" for flag, given in (("--keep-fp32", self.keep_fp32),
                                                            ("--keep-fp16", self.keep_fp16)) for p in given)

    def reason(self, node: str) -> str:
        """Why ``node`` is in FP32 by the constraints ("" if it is not)."""
        pattern = next((p for p, nodes in self.keep_fp32.items() if node in nodes), None)
        return "" if pattern is None else f"kept in FP32 by --keep-fp32 {pattern!r} (not searched)"

    def to_json(self, candidates: int) -> dict:
        """The override JSON's ``constraints``: each pattern with the nodes it matched, and the free nodes the
        search minimised over."""
        return {"keep_fp32": [{"pattern": p, "nodes": list(n)} for p, n in self.keep_fp32.items()],
                "keep_fp16": [{"pattern": p, "nodes": list(n)} for p, n in self.keep_fp16.items()],
                "free": candidates - len(self.fp32) - len(self.fp16 - set(self.fp32)),
                "minimality": "over the free nodes: the --keep-fp32 nodes are in every plan, the --keep-fp16 "
                              "nodes in none"}


def resolve(graph, keep_fp32=(), keep_fp16=()) -> Constraints:
    """The candidates each pattern matches; a pattern matching none, or a node both kept in FP32 and in FP16, is a
    ``UsageError`` naming it."""
    found = []
    for flag, given in (("--keep-fp32", keep_fp32), ("--keep-fp16", keep_fp16)):
        matched = {}
        for pattern in given:
            nodes = tuple(n.id for n in graph.candidates if matches(pattern, n))
            if not nodes:
                raise UsageError(f"{flag} {pattern!r} matches no candidate node: {_examples(graph)}")
            matched[pattern] = nodes
        found.append(matched)
    constraints = Constraints(*found)
    both = sorted(set(constraints.fp32) & constraints.fp16)
    if both:
        raise UsageError(f"{len(both)} node(s) are both --keep-fp32 and --keep-fp16, e.g. {both[0]!r}: "
                         "make the patterns disjoint")
    return constraints


def _examples(graph) -> str:
    ids = [n.id for n in graph.candidates[:3]]
    ops = sorted({n.op_type for n in graph.candidates})
    more = f" and {len(ops) - 6} more" if len(ops) > 6 else ""
    return (f"give a regular expression matching whole node ids (such as {', '.join(map(repr, ids))}) or "
            f"op:TYPE (op types here: {', '.join(ops[:6])}{more})")


def constrained(result: SearchResult, constraints: Constraints) -> SearchResult:
    """The answer with the ``--keep-fp32`` nodes first (the search minimised over the free nodes)."""
    ids = constraints.fp32
    if not constraints:
        return result
    free = "over the free nodes (--keep-fp32 nodes in every plan, --keep-fp16 nodes in none)"
    if not ids or result.status == "fp32_fails":
        return replace(result, minimality=f"{result.minimality}; {free}" if result.minimality else free)
    if result.status == "fp16_passes":  # the kept nodes alone pass: they are the answer
        return replace(result, status="found", fp32=ids, minimal=True,
                       minimality=f"the {len(ids)} node(s) kept by --keep-fp32 alone pass; no free node was needed")
    return replace(result, fp32=ids + tuple(n for n in result.fp32 if n not in set(ids)),
                   minimality=f"{result.minimality}; {free}")


def steered(space: PlanSpace, constraints: Constraints, say) -> PlanSpace:
    """``space`` with the ``--keep-fp32`` nodes in every plan and the ``--keep-fp16`` nodes in none (neither
    searched); says both."""
    if not constraints:
        return space
    kept, never = constraints.fp32, constraints.fp16
    say(f"constraints: {len(kept)} node(s) kept in FP32 in every plan, {len(never)} never in FP32 "
        f"({constraints.named()}); the search minimises over the other nodes")
    return space.fixing(kept).without(never)


def unreachable(constraints: Constraints, error: Exception) -> Exception:
    """``error`` (the all-FP32 plan fails) as the constraints' doing when ``--keep-fp16`` left nodes out of it."""
    if not constraints.fp16:
        return error
    why = str(error).partition(": ")[2].rpartition("; ")[0] or str(error)
    return type(error)(f"the constraints {constraints.named()} leave no passing plan: with their "
                       f"{len(constraints.fp16)} --keep-fp16 node(s) in FP16, even every other node in FP32 fails "
                       f"({why}); drop or narrow a --keep-fp16 pattern")
