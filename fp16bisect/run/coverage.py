"""Coverage of the samples in a search: their order, the nodes ``--headroom`` forces, and what the JSON says of both.

The oracle tries the samples most stressing first (the FP32 profile's ``sample_order``, which the search's view of
it carries) and stops a failing plan at its first failing sample; this module says that order, fixes the forced
nodes in the plan space, puts them into the answer, and writes the override JSON's ``samples`` (which samples
decided the answer) and ``headroom`` sections.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Sequence

from fp16bisect.algorithm.search import SearchResult
from fp16bisect.evaluation.oracle import Oracle
from fp16bisect.evaluation.space import PlanSpace
from fp16bisect.model.graph import Graph
from fp16bisect.model.headroom import (Forced, accumulator_reason, accumulators_json, fp16_accumulators,
                                       fp16_tensors, forced_nodes, forced_sums, headroom_json)
from fp16bisect.model.plan_states import MARK, accumulating, is_mark
from fp16bisect.model.profile import Profile
from fp16bisect.model.samples import Sample

ORDER_SHOWN = 10  # the JSON lists the first samples of the order tried; "decided" lists every deciding sample


def sample_order(samples: Sequence[Sample], prof: Profile, say: Callable[[str], None]) -> tuple[int, ...]:
    """The samples' order, most stressing first (the FP32 profile's); said when there are several."""
    if len(samples) > 1 and prof.sample_order:
        say(f"{len(samples)} samples, most stressing first ({samples[prof.sample_order[0]].source}); a failing "
            "plan stops at its first failing sample")
    return tuple(prof.sample_order)


def forcing(graph: Graph, space: PlanSpace, prof: Profile, factor: float | None, samples: Sequence[Sample],
            say: Callable[[str], None]) -> tuple[PlanSpace, list[Forced]]:
    """The nodes ``--headroom factor`` forces to FP32, said, and ``space`` with them in every plan (not searched)."""
    forced = forced_nodes(graph, prof, factor)
    pinned = {f.node for f in forced}  # the same rule for a sum: its node in FP32 accumulation (if not in FP32)
    sums = [a for a in forced_sums(prof, factor, graph.precision) if a.node not in pinned]
    sources = [s.source for s in samples]
    if forced:
        say(f"--headroom {factor:g}: {len(forced)} node(s) forced to FP32 in every plan")
        for f in forced:
            say(f"  {f.node}: {f.reason(sources)}")
    if sums:
        say(f"--headroom {factor:g}: {len(sums)} summing node(s) forced to FP32 accumulation in every plan")
        for a in sums:
            say(f"  {a.node}: {accumulator_reason(a, sources, graph.precision, factor)}")
    return space.fixing([*(f.node for f in forced), *(accumulating(a.node) for a in sums)]), forced


def with_forced(result: SearchResult, forced: list[Forced], members: frozenset = frozenset()) -> SearchResult:
    """The answer with the forced nodes first, then the FP32-accumulation marks of the forced sums (the marks
    among ``members``, the oracle's forced members); the search minimised the rest."""
    fp32 = {f.node for f in forced} | {n for n in result.fp32 if not is_mark(n)}
    ids = [f.node for f in forced] + sorted(m for m in members if is_mark(m) and m[len(MARK):] not in fp32)
    if not ids:
        return result
    if result.status == "fp16_passes":  # the forced nodes alone pass: they are the answer
        return replace(result, status="found", fp32=tuple(ids), minimal=True,
                       minimality=f"the {len(ids)} node(s) forced by --headroom alone pass; nothing else was needed")
    how = f"{result.minimality}; {len(ids)} node(s) forced by --headroom, not searched"
    return replace(result, fp32=tuple(ids) + tuple(n for n in result.fp32 if n not in set(ids)), minimality=how)


def samples_json(oracle: Oracle, stress: Sequence[int]) -> dict:
    """Which samples decided the answer: the order tried, and each sample that failed a plan (how many plans it
    decided, i.e. failed first); every passing plan ran every sample."""
    sources = [s.source for s in oracle.samples]
    decided: dict[int, int] = {}
    runs = 0
    for evaluation in oracle.history:
        runs += len(evaluation.samples) if evaluation.samples else 0
        if evaluation.failed_on is not None:
            decided[evaluation.failed_on] = decided.get(evaluation.failed_on, 0) + 1
    order = list(stress) or list(range(len(sources)))
    return {"count": len(sources), "order": [{"index": i, "source": sources[i]} for i in order[:ORDER_SHOWN]],
            **({"order_total": len(order)} if len(order) > ORDER_SHOWN else {}),
            "runs": runs, "stop_early": oracle.stop_early,
            "decided": [{"index": i, "source": sources[i], "failed_plans": n}
                        for i, n in sorted(decided.items(), key=lambda kv: (-kv[1], kv[0]))]}


def answer_headroom(graph: Graph, prof: Profile, fp32: Iterable[str], sources: list[str], factor: float | None,
                    forced: list[Forced]) -> dict:
    """The ``headroom`` section for the answer ``fp32``."""
    return headroom_json(fp16_tensors(graph, prof, fp32), sources, factor, forced, graph.precision)


def answer_accumulators(graph: Graph, prof: Profile, plan: Iterable[str], sources: list[str]) -> list[dict]:
    """The ``accumulators`` section for the answer ``plan``: the summing nodes it leaves in the low precision."""
    return accumulators_json(fp16_accumulators(prof, plan), sources, graph.precision)
