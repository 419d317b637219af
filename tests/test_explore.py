"""The search for smaller passing sets beyond the 1-minimal one (fp16bisect.algorithm.explore), on predicates whose
verdicts are not monotone by construction: output errors that cancel. A plan keeps its members in FP32 and the
others add their errors; it passes when the sum's magnitude is within the tolerance, so a node whose error cancels
another's is harmful alone and helpful in company."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from fp16bisect.algorithm.explore import Explore, explore
from fp16bisect.algorithm.search import Hooks, search


def cancelling(errors: list[int], tolerance: int = 1):
    """plan -> passes: the errors of the candidates left in FP16 sum to at most ``tolerance`` in magnitude."""
    return lambda plan: abs(sum(e for i, e in enumerate(errors) if i not in plan)) <= tolerance


def by_harm(errors: list[int]) -> list[int]:
    """The ranking the pipeline measures: each candidate alone in FP16, the largest error first."""
    return sorted(range(len(errors)), key=lambda i: -abs(errors[i]))


def descent(errors: list[int], passes) -> tuple:
    """The 1-minimal search as the pipeline runs it on a rounding-limited model (no suspects: the candidates ranked
    by harm, then doubling prefixes of that ranking, reduced): its result and the verdicts it saw."""
    seen: dict = {}
    n = len(errors)
    first = search(range(n), lambda p: seen.setdefault(p, passes(p)), hooks=Hooks(reorder=lambda: by_harm(errors)))
    return first, seen


def test_a_node_whose_error_cancels_is_kept_by_the_descent_and_replaced_by_one_smaller_set():
    # errors 4, -3, -3, 2, 1, 1 sum to 2: keeping node 3 (error 2) alone in FP32 leaves 0. Along the ranking the
    # descent keeps {0, 1}: node 0 alone in FP32 leaves -2, and 1 cancels it; neither can go
    errors = [4, -3, -3, 2, 1, 1]
    passes = cancelling(errors)
    first, seen = descent(errors, passes)
    assert set(first.fp32) == {0, 1} and first.minimal
    asked: list = []
    found = explore(lambda p: asked.append(p) or passes(p), first.fp32,
                    Explore(range(6), budget=10, order=by_harm(errors), known=seen))
    assert found.fp32 == frozenset({3}) and found.gained == 1
    assert asked == [frozenset({2}), frozenset({3})]  # {0} and {1} are known: not asked again
    assert found.evaluations == 2


def test_how_far_each_removal_fails_puts_the_most_needed_members_first():
    # from {0, 1, 2}, each removal failed; without 2 the plan fails the most: the sets of two nodes keep 2 first
    known = {frozenset({0, 1, 2}): True, frozenset({0, 1}): False, frozenset({0, 2}): False,
             frozenset({1, 2}): False}
    far = {frozenset({0, 1}): 9.0, frozenset({0, 2}): 1.5, frozenset({1, 2}): 3.0}
    for excess, first in ((far.get, frozenset({2, 3})), (None, frozenset({0, 3}))):
        asked: list = []
        explore(lambda p: asked.append(p) or False, {0, 1, 2},
                Explore(range(5), budget=1, order=[0, 1, 2, 3, 4], known=known, excess=excess))
        # the line: 2, 0, 1 by need (0, 1, 2 by suspicion without numbers), then 3 and 4; its first two pairs are
        # known to fail, the next is the most needed member with the most harmful other candidate
        assert asked == [first]


@st.composite
def errors_and_order(draw):
    n = draw(st.integers(2, 9))
    errors = draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))
    return errors, by_harm(errors)


@settings(max_examples=200, deadline=None)
@given(errors_and_order(), st.integers(0, 60))
def test_what_it_returns_passed_every_plan_is_asked_once_and_the_budget_holds(case, budget):
    errors, order = case
    passes = cancelling(errors)
    n = len(errors)
    if passes(frozenset()) or not passes(frozenset(range(n))):
        return
    first, seen = descent(errors, passes)
    asked: list = []
    found = explore(lambda p: asked.append(p) or passes(p), first.fp32,
                    Explore(range(n), budget=budget, order=order, known=dict(seen)))
    assert passes(found.fp32) and len(found.fp32) <= len(first.fp32)
    assert len(asked) == len(set(asked)) == found.evaluations <= budget
    assert not set(asked) & set(seen)
    if found.gained and found.evaluations < budget:  # the set it moved to was reduced: each removal failed
        assert all(found.results.get(found.fp32 - {m}) is False for m in found.fp32)
    smaller = [frozenset(s) for s in combinations(range(n), len(first.fp32) - 1) if passes(frozenset(s))]
    if budget >= 2 ** n and smaller:  # every set one node smaller is reached in the end
        assert found.gained


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.integers(0, 2**32 - 1), st.integers(0, 40))
def test_on_any_verdicts_it_never_returns_a_plan_that_did_not_pass(n, seed, budget):
    import random

    rng = random.Random(seed)
    table = {frozenset(s): rng.random() < 0.3 for k in range(n + 1) for s in combinations(range(n), k)}
    table[frozenset(range(n))] = True
    start = frozenset(range(n))
    found = explore(table.__getitem__, start, Explore(range(n), budget=budget))
    assert table[found.fp32] and len(found.fp32) <= n and found.evaluations <= budget
