"""A search that stops before its end: a budget (``--max-evaluations``, ``--time-limit``) or Ctrl-C.

The judge's view (``evaluation/space.py``) asks the budget before each evaluation it runs, whichever phase asks
(the search, its certification, ``--minimum``, the accumulators of ``--accumulate fp16``), so every phase stops the
same way and ends here: with the smallest plan the judge evaluated and saw pass (never seen to fail), labelled
"passing, not minimal: budget reached" (or "interrupted"); when none has passed yet, the all-FP32 plan, evaluated
then beyond the budget.
What it claims comes from the verdicts alone (``algorithm.search.ended``). The journal keeps every evaluation, so
the same command run again replays them at no cost and goes on (a new budget counts that run's evaluations).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, Iterable, Sequence, cast

from fp16bisect.algorithm.budget import INTERRUPT, Budget, Stop, Stopped
from fp16bisect.algorithm.memo import Step
from fp16bisect.algorithm.progress import Phase
from fp16bisect.algorithm.search import SearchResult, ended
from fp16bisect.evaluation.space import View
from fp16bisect.model.plan_states import states
from fp16bisect.run.options import Strategy
from fp16bisect.run.searches import refuse_fp32_fails

__all__ = ["STOPS", "budget_of", "stopped"]

STOPS = (Stopped, KeyboardInterrupt)  # what ends a search early, caught where the pipeline searches


def budget_of(strategy: Strategy) -> Budget | None:
    """The budget of a search starting now (None: no limit): the evaluations it may run on the judge (those a
    journal replays cost nothing) and its time from now."""
    if strategy.max_evaluations is None and strategy.time_limit is None:
        return None
    return Budget(strategy.max_evaluations, strategy.time_limit)


def stopped(judge: View, stop: BaseException, order: Sequence, say: Callable[[str], None]) -> SearchResult:
    """The answer of a search over ``judge`` that ``stop`` ended (``Stopped``: the budget; ``KeyboardInterrupt``:
    Ctrl-C): the smallest plan the judge saw pass, its members in ``order``; the all-FP32 plan when none did,
    evaluated first (beyond the budget; a second Ctrl-C ends the run with no answer). An all-FP32 plan that fails
    is the error a finished search raises too (exit 3)."""
    budget = judge.budget if isinstance(judge.budget, Budget) else None
    cause, said = (stop.cause, str(stop)) if isinstance(stop, Stopped) else (INTERRUPT, "Ctrl-C")
    why = budget.stop(cause, said) if budget is not None else Stop(cause, said)
    name = judge.backend.name
    result = ended(_trace(judge), why, order, size=_size)
    if result is None:
        say(f"{why.said}; no plan has passed on the {name} backend yet: evaluating the all-FP32 plan (beyond the "
            "budget) to answer with")
        with budget.lifted() if budget is not None else nullcontext():
            judge.evaluate(frozenset(judge.space.candidates))
        result = ended(_trace(judge), why, order, size=_size)
        if result is None:
            refuse_fp32_fails(list(judge.space.candidates), judge)
            raise AssertionError("refuse_fp32_fails returns only when the all-FP32 plan passes")
    if result.stopped is not None:
        say(f"{why.said}: the answer is the smallest set seen to pass on the {name} backend, "
            f"{len(states(result.fp32)[0])} node(s) in FP32 ({result.stopped.label})")
    return result


def _size(plan: Iterable[str]) -> tuple[int, int]:
    """How large a plan is: its FP32 nodes, then its FP32-accumulation marks (``--accumulate fp16``)."""
    fp32, accumulating = states(plan)
    return len(fp32), len(accumulating)


def _trace(judge: View) -> list[Step]:
    """Every evaluation the judge made (the journal's replayed ones first, then this run's; then the rechecks), as
    the search over ``judge`` saw them: plans without its fixed members, each in the phase that asked it first (an
    evaluation no search step said, e.g. of ``--minimum``'s loop, in the phase of the one before)."""
    oracle = judge.oracle
    steps: list[Step] = []
    phase = "precondition"
    for index, evaluation in enumerate(oracle.history, 1):
        phase = oracle.phases.get(evaluation.plan, phase)
        steps.append(Step(index, judge.space.chosen(evaluation.plan), evaluation.verdict, cast(Phase, phase), index))
    for (plan, _), evaluation in oracle.rechecks.items():
        index = len(steps) + 1
        steps.append(Step(index, judge.space.chosen(plan), evaluation.verdict, "recheck", index))
    return steps
