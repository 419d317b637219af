"""``--accumulate fp16``'s search: the FP32 set first (every other accumulator in FP32 accumulation), then the
accumulators that need FP32 accumulation, the FP32 set pinned; the answer checked as a whole on the judge. Each stage
is a plan space (``evaluation/space.py``): the marks (``model/plan_states.py``) fixed in the first (``stored``), the
FP32 set fixed and the marks the candidates in the second (``summed``), so the algorithm sees plain sets and the
first stage can be any search of the FP32 set (from the emulator's set, by blocks, then ``--minimum``'s).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from fp16bisect.algorithm.progress import Phase
from fp16bisect.algorithm.search import Hooks, SearchResult, Step, search
from fp16bisect.evaluation.space import PlanSpace, View
from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import accumulates, accumulating
from fp16bisect.model.profile import Profile
from fp16bisect.run.outcome import Listener, stepper


def stored(graph: Graph, space: PlanSpace, say: Callable[[str], None]) -> PlanSpace:
    """The first stage's plan space: ``space`` with every accumulator not fixed in FP32 accumulation in every
    plan, so that each member of the FP32 set found over it is 1-minimal against its removal to FP32 accumulation."""
    accumulators = _accumulators(graph, space)
    say(f"--accumulate fp16: first the FP32 set with the {len(accumulators)} accumulating node(s) adding in FP32 "
        "(FP32 accumulation), then the accumulators that need it")
    return space.fixing(accumulating(a) for a in accumulators)


def summed(graph: Graph, judge: View, first: SearchResult, listener: Listener, prof: Profile) -> SearchResult:
    """``--accumulate fp16``'s answer from ``first`` (the FP32 set S, searched over ``stored``'s space): S pinned,
    the 1-minimal set T of the other accumulators to keep in FP32 accumulation (``judge``: the oracle over the plan
    space without the marks), every plan judged with FP16 sums elsewhere. The answer is S and T's marks: the plan
    the second search saw pass (or S alone, when S passes with FP16 sums), each FP32 node then checked in it
    (``_certified``)."""
    accumulators = _accumulators(graph, judge.space)
    kept = frozenset(first.fp32)
    marks = [accumulating(a) for a in sorted(accumulators, key=_rank(prof)) if a not in kept]
    if not marks:  # every accumulator in FP32: the FP32 set, judged once without marks as the answer is
        judge.evaluate(kept)
        return first
    listener.stage(f"searching which of {len(marks)} accumulator(s) need FP32 accumulation, the "
                   f"{len(kept)} FP32 node(s) pinned")
    sums = judge.over(PlanSpace(tuple(marks), judge.space.fixed | kept))
    step = stepper(sums, listener, after=first.evaluations)  # numbered after the first stage's
    recheck = None if sums.backend.deterministic else lambda plan: sums.evaluate(plan, 1).verdict
    second = search(marks, sums, hooks=Hooks(recheck=recheck, on_step=step),
                    test_many=sums.test_many if sums.width > 1 else None, width=sums.width)
    result = _composed(first, second)
    if first.fp32:  # the all-FP16 plan with FP16 sums, the baseline the result shows (the searches never ran it)
        judge.evaluate(frozenset())
        result = _certified(result, kept, frozenset(accumulators), judge, stepper(judge, listener))
    return result


def _accumulators(graph: Graph, space: PlanSpace) -> list[str]:
    """The summing candidates not fixed in ``space`` (a ``--keep-fp16`` node among them: it may still add in FP32),
    in FP32 or in FP32 accumulation (a sum ``--headroom`` forces there stays so, not searched)."""
    return [n.id for n in graph.candidates if accumulates(n.op_type, n.domain) and n.id not in space.fixed
            and accumulating(n.id) not in space.fixed]


def _certified(result: SearchResult, kept: frozenset, accumulators: frozenset, judge: View,
               step: Callable[[Step, dict], None]) -> SearchResult:
    """``summed``'s answer with each FP32 node checked in the answer itself, on the judge: removed (to FP16,
    its sums in FP16) and, for an accumulator, demoted to FP32 accumulation, the rest of the answer as it is. The
    first search saw each removal fail with every other accumulator adding in FP32, which implies these only for
    a monotone judge. A check that passes makes the answer not minimal; one that cannot be evaluated leaves its
    member unverified. Evaluations are counted (the all-FP16 baseline run before included)."""
    answer = frozenset(result.fp32)
    checks = [(m, answer - {m}) for m in sorted(kept)]
    checks += [(m, (answer - {m}) | {accumulating(m)}) for m in sorted(kept & accumulators)]
    before, trace, passing, unknown = len(judge.history), list(result.trace), [], []
    for member, plan in checks:
        verdict = judge(plan)
        passing += [member] if verdict else []
        unknown += [member] if verdict is None else []
    for evaluation in judge.history[before - 1:]:  # the baseline, then the checks the memo did not hold
        plan = judge.space.chosen(evaluation.plan)
        phase: Phase = "precondition" if not plan else "minimality"
        trace.append(Step(len(trace) + 1, plan, evaluation.verdict, phase, len(trace) + 1))
        step(trace[-1], {"searching": len(answer), "found": len(answer), "estimate_left": 0})
    said = (f"; in the answer itself, with FP16 sums, {len(checks)} check(s) of its FP32 nodes (each removed, each "
            f"accumulator also demoted to FP32 accumulation)")
    if passing:
        said += f": NOT minimal, {', '.join(sorted(set(passing)))} can go (the judge is not monotone here)"
    elif unknown:
        said += f": {', '.join(sorted(set(unknown)))} could not be evaluated (unverified)"
    else:
        said += ": each failed"
    return replace(result, trace=trace, evaluations=result.evaluations + len(trace) - len(result.trace),
                   rounds=result.rounds + len(trace) - len(result.trace), minimality=result.minimality + said,
                   minimal=result.minimal and not passing and not unknown,
                   unverified=tuple(result.unverified) + tuple(m for m in kept if m in unknown))


def _rank(prof: Profile) -> Callable[[str], int]:
    order = {node: i for i, node in enumerate(prof.order)}
    return lambda node: order.get(node, len(order))


def _composed(first: SearchResult, second: SearchResult) -> SearchResult:
    """One result of the two searches of ``summed``: the FP32 set, then the accumulators' marks."""
    found = first.status == "found" or second.status == "found"
    stored = ("none needed (every node in FP16 storage, the accumulators adding in FP32, passed: evaluation 1)"
              if first.status == "fp16_passes" else
              f"{first.minimality}, every summing node outside the set in FP32 accumulation (evaluations "
              f"1-{first.evaluations})")
    how = (f"FP32 set ({len(first.fp32)}): {stored}; FP32 accumulation set ({len(second.fp32)}): "
           f"{second.minimality}, with the FP32 set pinned and FP16 sums elsewhere (evaluations "
           f"{first.evaluations + 1}-{first.evaluations + second.evaluations})")
    return replace(first, status="found" if found else "fp16_passes", fp32=tuple(first.fp32) + tuple(second.fp32),
                   passed=first.passed and second.passed, minimal=first.minimal and second.minimal, minimality=how,
                   evaluations=first.evaluations + second.evaluations, rounds=first.rounds + second.rounds,
                   trace=first.trace + second.trace, contradictions=first.contradictions + second.contradictions,
                   unverified=first.unverified + second.unverified,
                   unevaluable=first.unevaluable + second.unevaluable)
