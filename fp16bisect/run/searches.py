"""The FP32 set's search over one plan space, on the judge's view of it: from the emulator's set when there is a
prior, by blocks when the space has them (``--group-by``), else flat from the FP32 profile's suspects; then
``--minimum``'s smallest (or cheapest) passing set, certified like any start set. Each is a function of the view
(``evaluation/space.py``), so ``--accumulate fp16``'s first stage (``two_states.py``) runs whichever applies.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Iterable, Sequence

from fp16bisect.algorithm.progress import Phase
from fp16bisect.algorithm.search import Hooks, SearchResult, Step, search
from fp16bisect.errors import ToleranceUnreachable, UsageError
from fp16bisect.evaluation.oracle import Evaluation
from fp16bisect.evaluation.space import View
from fp16bisect.model.graph import Graph
from fp16bisect.model.profile import Profile
from fp16bisect.run.outcome import Listener, stepper
from fp16bisect.strategy import blocks, hitting_solver, improve, ranking, rounding
from fp16bisect.strategy import minimum as minima
from fp16bisect.strategy.agreement import agreement
from fp16bisect.strategy.alternatives import Alternatives
from fp16bisect.strategy.blocks import Chosen
from fp16bisect.strategy.prior import LABEL, Prior
from fp16bisect.strategy.ranking import EffectRanking
from fp16bisect.tolerance import Tolerance


def fp32_set(graph: Graph, judge: View, listener: Listener, prof: Profile, prior: Prior | None,
             minimum: minima.Wanted | None,
             diagnosis: rounding.Diagnosis | None = None
             ) -> tuple[SearchResult, minima.Least | improve.Improvement | None, Chosen | None]:
    """The search's result over ``judge.space`` (``prof``: its FP32 profile, ranked over its candidates), the
    smallest set's search with ``minimum``, and the blocks the block search kept (with blocks); an all-FP32 plan
    that fails or cannot be evaluated is an error said here. ``diagnosis`` follows the search's steps and its
    ranking (``strategy/rounding.py``: said when all-FP16 fails by rounding)."""
    ids = list(judge.space.candidates)
    if minimum is not None:  # said before the search, not after it
        hitting_solver.require_solver(len(ids))
    least: minima.Least | improve.Improvement | None = None
    picked, suspects = None, frozenset(prof.order[:prof.suspects])
    reorder = ranking.reorder_by_effect(graph, judge.backend, judge, prof, listener, diagnosis)
    if prior is not None:  # --minimum's search, else the default step, on the emulator: the judge certifies its set
        least = _least_on_prior(ids, prior, minimum, improve.Evidence(prior.order, suspects, prior.measured),
                                judge.backend.name, listener)
        result = _from_prior(graph, judge, listener, prior, tuple(least.fp32) if least else prior.fp32, diagnosis)
    elif judge.space.blocks:
        result, picked = _grouped(judge, listener, prof, reorder, diagnosis)
    else:
        result = _flat(judge, listener, prof, reorder, diagnosis)
    if prior is None and result.status == "found":  # --minimum's search, else the default step (improve.py)
        evidence = improve.Evidence(reorder.order if reorder is not None and reorder.order else prof.order, suspects,
                                    reorder.measured if reorder is not None else None)
        result, least = _least(ids, judge, prof.order, result, minimum, evidence, listener)
    said = {frozenset(): "the all-FP16 plan", **({frozenset(prior.fp32): "the emulator's set"} if prior else {})}
    for plan, what in said.items():
        evaluation = judge.known(plan)
        if evaluation is not None and evaluation.reason is not None:
            listener.stage(f"{what} could not be evaluated on the {judge.backend.name} backend "
                           f"({evaluation.reason.kind}: {evaluation.error.splitlines()[0]}); the search went on "
                           "around it, not counting it")
    if result.status == "fp32_fails":
        refuse_fp32_fails(ids, judge)
    return result, least, picked


def _recheck(judge: View) -> Callable[[frozenset], bool | None] | None:
    """A judge whose verdicts vary (engine builds): the final set evaluated once more, afresh."""
    return None if judge.backend.deterministic else lambda plan: judge.evaluate(plan, 1).verdict


def _many(judge: View) -> Callable[[list], list[bool | None]] | None:
    return judge.test_many if judge.width > 1 else None


def _watched(judge: View, listener: Listener,
             diagnosis: rounding.Diagnosis | None) -> Callable[[Step, dict], None]:
    """The progress line of each evaluation, the diagnosis (if any) told of each first."""
    step = stepper(judge, listener)
    return diagnosis.watch(step) if diagnosis is not None else step


def _from_prior(graph: Graph, judge: View, listener: Listener, prior: Prior, start: Sequence[str],
                diagnosis: rounding.Diagnosis | None = None) -> SearchResult:
    """On an expensive judge: the emulator's set (or ``--minimum``'s on the emulator, ``start``) certified, or the
    search continued from it, the emulator's alternatives offered when it fails."""
    name = judge.backend.name
    listener.stage(f"on the {name} backend: evaluating the emulator's {len(start)} node(s), then "
                   "certifying each (or continuing from them if they fail)")
    result = search(list(judge.space.candidates), judge, order=prior.order, start=start, hooks=Hooks(
        alternatives=Alternatives(graph, prior, judge, listener), recheck=_recheck(judge),
        on_step=_watched(judge, listener, diagnosis)), test_many=_many(judge), width=judge.width)
    listener.stage(agreement(result, name))
    return result


def _flat(judge: View, listener: Listener, prof: Profile, reorder: EffectRanking | None,
          diagnosis: rounding.Diagnosis | None = None) -> SearchResult:
    """The search from the FP32 profile's suspects, ranking by measured effect (``reorder``) when none explains a
    failure."""
    listener.stage(f"searching on the {judge.backend.name} backend ({prof.suspects} suspect(s) first)")
    return search(list(judge.space.candidates), judge, order=prof.order, suspects=prof.suspects,
                  hooks=Hooks(reorder=reorder, recheck=_recheck(judge), on_step=_watched(judge, listener, diagnosis)),
                  test_many=_many(judge), width=judge.width)


def _grouped(judge: View, listener: Listener, prof: Profile, reorder: EffectRanking | None,
             diagnosis: rounding.Diagnosis | None = None) -> tuple[SearchResult, Chosen | None]:
    """``--group-by``: the blocks to keep in FP32, then the nodes inside them (``strategy/blocks.py``)."""
    return blocks.search_blocks(judge, prof.order, prof.suspects, _watched(judge, listener, diagnosis),
                                reorder=reorder)


def _least_on_prior(ids: list[str], prior: Prior, minimum: minima.Wanted | None, evidence: improve.Evidence,
                    judge: str, listener: Listener) -> minima.Least | improve.Improvement | None:
    """On an expensive judge: ``--minimum``'s search on the emulator's oracle, its set the start set the judge
    certifies (else the default step's, which ran with the prior: ``pipeline._prior``)."""
    if minimum is None:
        return improve.Improvement.from_json(prior.improvement, judge) if prior.improvement else None
    if prior.oracle is None or prior.status != "found":
        if prior.oracle is None:
            listener.stage("--minimum: the emulator's evaluations were read back, not kept (resuming): the judge "
                           "certifies the emulator's 1-minimal set; rerun with --restart to search the minimum")
        return None
    listener.stage(f"--minimum: searching the {_what(minimum)} passing set on the emulator (up to "
                   f"{minima.budget(minimum.setting, prior.evaluations)} evaluation(s))")
    return minima.least(ids, prior.oracle, prior.fp32, minimum, evidence, on=(LABEL, judge),
                        evaluations=prior.evaluations, say=listener.stage)


def _what(minimum: minima.Wanted) -> str:
    return "cheapest (estimated cost)" if minimum.costs else "smallest"


def _least(ids: list[str], judge: View, order: Sequence[str], first: SearchResult, minimum: minima.Wanted | None,
           evidence: improve.Evidence, listener: Listener) -> tuple[SearchResult, minima.Least | improve.Improvement | None]:
    """``--minimum`` on the judge itself: its search on the judge's oracle, seeded with the search's evaluations
    (else the default step, ``improve.py``); a smaller set is certified (``_certify``: each single removal
    evaluated). The result counts every evaluation."""
    before, name = len(judge.history), judge.backend.name
    phase: Phase = "minimum" if minimum is not None else "improve"
    least: minima.Least | improve.Improvement | None
    if minimum is None:
        least = improve.step(ids, judge, first.fp32, evidence, evaluations=first.evaluations, on=(name, name),
                             say=listener.stage)
    else:
        listener.stage(f"--minimum: searching the {_what(minimum)} passing set (up to "
                       f"{minima.budget(minimum.setting, first.evaluations)} evaluation(s))")
        least = minima.least(ids, judge, first.fp32, minimum, evidence, on=(name, name),
                             evaluations=first.evaluations, say=listener.stage)
    result, phases, looped = first, {}, len(judge.history) - before
    if least is not None and least.fp32 != frozenset(first.fp32):
        again = _certify(ids, judge, order, least.fp32, listener)
        least = least.certified(again.fp32)  # a removal passing refutes the loop's proof
        phases = {s.plan: s.phase for s in again.trace}
        result = replace(again, contradictions=first.contradictions + again.contradictions, agreed=None, added=(),
                         dropped=())
    steps = [Step(len(first.trace) + i, judge.space.chosen(e.plan), e.verdict, phase if i <= looped else
                  phases.get(judge.space.chosen(e.plan), "minimality"), first.rounds + i)
             for i, e in enumerate(judge.history[before:], 1)]  # the loop's and the certification's, in order
    return replace(result, trace=first.trace + steps, evaluations=first.evaluations + len(steps),
                   rounds=first.rounds + len(steps)), least


def _certify(ids: list[str], judge: View, order: Sequence[str], start: Iterable[str],
             listener: Listener) -> SearchResult:
    """The search from ``start`` (each single removal evaluated); the steps already evaluated are not said again."""
    seen, step = set(judge.memo), stepper(judge, listener)

    def said(s: Step, progress: dict) -> None:
        if judge.space.plan(s.plan) not in seen:
            step(s, progress)

    return search(ids, judge, order=order, start=start, hooks=Hooks(recheck=_recheck(judge), on_step=said),
                  test_many=_many(judge), width=judge.width)


def refuse_fp32_fails(ids: list[str], judge: View) -> None:
    """The all-FP32 plan (of the searched ``ids``) failed: bad input (it could not be evaluated), or a tolerance
    even FP32 misses."""
    everything = judge.known(frozenset(ids))
    assert everything is not None  # the search evaluated it to end so
    name = judge.backend.name
    if everything.reason is not None:
        raise UsageError(f"the all-FP32 plan could not be {judge.backend.evaluation_word} on the {name} backend: "
                         f"{everything.error}")
    if not everything.metrics:  # judged by a command's exit code: no numbers, only what it said
        raise ToleranceUnreachable(
            f"the command judged even the all-FP32 plan failing ({everything.detail}): check the command "
            "(fp16bisect search --keep-plans keeps each plan's files, stdout.txt and stderr.txt to run it by hand)"
        )
    raise ToleranceUnreachable(unreachable(name, everything, judge.tolerance))


def unreachable(backend: str, everything: Evaluation, tolerance: Tolerance) -> str:
    """What a search and a check say when the all-FP32 plan (``everything``, with metrics) misses the tolerance."""
    worst = max((m for m in everything.metrics if not m.passed), key=lambda m: m.excess)
    fix = (
        "check --reference and the inputs"
        if worst.nonfinite or worst.excess <= 1  # NaN/inf, or a cosine/mismatch rule failed
        else "give --atol above 0 or check --reference" if math.isinf(worst.excess)  # FP32 differs where it is 0
        else f"loosen --atol/--rtol by at least {worst.excess:.3g}x or check --reference"
    )
    return f"the tolerance is unreachable even in FP32 on the {backend} backend: {worst.why(tolerance)}; {fix}"
