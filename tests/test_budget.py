"""A budget that returns a passing set (issue 41 item 5): --max-evaluations, --time-limit and Ctrl-C end the search
with the smallest set seen to pass, written and labelled, exit 5 (130 for Ctrl-C), and the journal resumes."""

from __future__ import annotations

from itertools import count

from fp16bisect.algorithm.budget import Budget, Stop, Stopped
from fp16bisect.algorithm.memo import Step
from fp16bisect.algorithm.search import Hooks, ended, search

LABEL = "passing, not minimal: budget reached"

# --------------------------------------------------------------------------- the algorithm, on synthetic predicates

NEEDED = frozenset({2, 5, 11, 17})  # a monotone judge: a plan passes when it keeps these four
IDS = list(range(24))
ORDER = IDS[::-1]


def budgeted(evaluations=None, seconds=None, clock=None):
    """The search on the synthetic judge, each evaluation asked of ``Budget(evaluations, seconds)`` first: the
    steps it made and why it stopped (None: it finished)."""
    budget, steps = Budget(evaluations, seconds, clock), []

    def test(plan):
        budget.take()
        return NEEDED <= plan

    try:
        search(IDS, test, order=ORDER, hooks=Hooks(on_step=lambda step, progress: steps.append(step)))
    except Stopped as stop:
        return steps, budget.stop(stop)
    return steps, None


def test_a_budget_ends_the_search_with_the_smallest_plan_seen_to_pass_and_claims_nothing_more():
    full = search(IDS, lambda plan: NEEDED <= plan, order=ORDER)
    assert full.minimal and set(full.fp32) == NEEDED and full.evaluations == 19
    steps, stop = budgeted(evaluations=12)
    assert stop is not None and stop.cause == "max_evaluations" and len(steps) == 12
    result = ended(steps, stop, ORDER)
    passing = [s.plan for s in steps if s.passed]
    assert frozenset(result.fp32) == min(passing, key=len) and len(result.fp32) == 15
    assert result.status == "found" and result.passed and not result.minimal and result.evaluations == 12
    assert result.stopped.label == LABEL and result.stopped.evaluations == 12
    assert result.minimality.startswith(LABEL + " (the 12 evaluation(s) of the budget are spent)")
    assert "1-minimal" not in result.minimality and "minimum" not in result.minimality
    assert list(result.fp32) == [c for c in ORDER if c in result.fp32]  # in the search's order
    assert "passing, not minimal: budget reached" in str(result)


def test_the_time_limit_stops_it_too_and_an_evaluation_under_way_finishes():
    ticks = count()  # a clock that moves one second each time it is read: no real time involved
    steps, stop = budgeted(seconds=6.5, clock=lambda: float(next(ticks)))
    assert stop.cause == "time_limit" and stop.seconds == 6.5 and len(steps) == 6
    assert "time limit of 6.5 s is reached" in stop.said
    assert ended(steps, stop).stopped.label == LABEL


def test_what_ended_answers_comes_from_the_verdicts_alone():
    stop = Stop("interrupt", "Ctrl-C")
    a, ab, abc = frozenset("a"), frozenset("ab"), frozenset("abc")
    assert ended([Step(1, frozenset(), False, "precondition"), Step(2, ab, False, "grow")], stop) is None
    # a plan that passed, then failed when evaluated again, is not an answer
    again = [Step(1, ab, True, "grow"), Step(2, abc, True, "grow"), Step(3, ab, False, "recheck")]
    result = ended(again, stop)
    assert set(result.fp32) == set(abc) and (ab, ab) in result.contradictions
    assert result.stopped.label == "passing, not minimal: interrupted"
    # every single removal of the smallest evaluated and failed: it is 1-minimal, and says that much only
    certified = [Step(1, ab, True, "grow"), Step(2, a, False, "minimality"), Step(3, frozenset("b"), False, "x")]
    result = ended(certified, stop)
    assert result.minimal and result.stopped.label == "passing, 1-minimal, search not finished: interrupted"
    # all-FP16 passing is the whole answer, whatever stopped the search
    assert ended([Step(1, frozenset(), True, "precondition")], stop).stopped is None
