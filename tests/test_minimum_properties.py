"""Property tests of the implicit hitting-set loop behind ``search --minimum`` (fp16bisect.algorithm.hitting).

Monotone predicates are built from a family of minimal passing sets (a plan passes when it holds one of them:
upward closed), so the true minimum is known by brute force; non-monotone ones are random verdicts. Whatever the
predicate, ``proven`` means every smaller set was evaluated and failed (``test_minimum_claims.py``): the loop
never assumes monotone verdicts to claim.
"""

from __future__ import annotations

import random
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from fp16bisect.algorithm.hitting import Minimum, Weights, exact_hitting_set, minimum, weight
from fp16bisect.algorithm.search import search
from fp16bisect.strategy.hitting_solver import hitting_set


class Counted:
    def __init__(self, verdict):
        self.verdict = verdict
        self.calls: list[frozenset] = []

    def __call__(self, plan):
        assert isinstance(plan, frozenset)
        self.calls.append(plan)
        return self.verdict(plan)


def every_set(n: int):
    return (frozenset(s) for k in range(n + 1) for s in combinations(range(n), k))


def lightest_passing(n, verdict, weights=None):
    weights = weights or {}
    passing = [s for s in every_set(n) if verdict(s)]
    return min(sum(weights.get(c, 1) for c in s) for s in passing) if passing else None


@st.composite
def monotone(draw, max_n=12):
    n = draw(st.integers(1, max_n))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    family = [frozenset(rng.sample(range(n), rng.randint(1, min(n, 5)))) for _ in range(rng.randint(1, 5))]
    order = list(range(n))
    rng.shuffle(order)
    return n, family, order, rng


@settings(max_examples=200, deadline=None)
@given(monotone())
def test_monotone_predicates_get_their_true_minimum_proven_with_every_evaluation_counted(case):
    n, family, order, _ = case
    verdict = Counted(lambda plan: any(f <= plan for f in family))
    result = minimum(verdict, Minimum(list(range(n)), exact_hitting_set, budget=10_000, order=order))
    assert result.evaluations == len(verdict.calls) == len(set(verdict.calls))
    assert result.fp32 is not None and len(result.fp32) == min(map(len, family))
    assert verdict.verdict(result.fp32)
    assert result.estimate == len(result.fp32) and result.estimate_met and not result.contradicted
    # an ample budget buys the proof: every smaller set evaluated (it failed)
    assert result.proven and result.lower_bound == len(result.fp32) == result.smaller_failed + 1
    asked = set(verdict.calls)
    assert all(s in asked for s in every_set(n) if len(s) < len(result.fp32))


@settings(max_examples=100, deadline=None)
@given(monotone(max_n=9), st.sampled_from([exact_hitting_set, hitting_set]))
def test_weights_with_shared_pairs_get_the_lightest_passing_set_by_their_true_weight(case, solver):
    # the cost objective: adjacent pins share a Cast, so a set weighs its members less each pair's share; a set
    # with more members can then be the lightest, and both solvers must find it
    n, family, order, rng = case
    per = {c: rng.uniform(1, 3) for c in range(n)}
    shared = {frozenset({c, c + 1}): rng.uniform(0, min(per[c], per[c + 1])) for c in range(n - 1) if rng.random() < 0.6}
    weights = Weights(per, shared)
    verdict = Counted(lambda plan: any(f <= plan for f in family))
    result = minimum(verdict, Minimum(list(range(n)), solver, budget=10_000, weights=weights, order=order))
    true = min(weight(s, weights) for s in every_set(n) if verdict.verdict(s))
    assert result.fp32 is not None and weight(result.fp32, weights) == pytest.approx(true)
    assert result.estimate == pytest.approx(true) and result.estimate_met and result.lower_bound <= true + 1e-9
    asked = set(verdict.calls)
    if result.proven:  # only when every lighter set was evaluated (never by enumeration with shared weights)
        assert all(s in asked for s in every_set(n) if weight(s, weights) < true - 1e-9)


@settings(max_examples=100, deadline=None)
@given(monotone(max_n=10))
def test_seeded_with_the_1_minimal_search_the_loop_costs_less_and_still_finds_the_minimum(case):
    n, family, order, _ = case
    verdict = Counted(lambda plan: any(f <= plan for f in family))
    first = search(list(range(n)), verdict, order=order)
    known = {p: verdict.verdict(p) for p in verdict.calls}
    before = len(verdict.calls)
    result = minimum(verdict, Minimum(list(range(n)), exact_hitting_set, budget=10_000, known=known, order=order))
    assert len(result.fp32) == min(map(len, family)) <= len(first.fp32)
    assert result.proven and result.evaluations == len(verdict.calls) - before
    assert result.evaluations - result.explored <= 10_000  # the loop's share, then enumeration bought the proof
    assert not set(verdict.calls[before:]) & set(known)  # a known plan is never evaluated again


@settings(max_examples=100, deadline=None)
@given(monotone(max_n=10))
def test_a_budget_is_never_exceeded_and_an_unfinished_loop_reports_a_bound_not_a_proof(case):
    n, family, order, rng = case
    budget = rng.randint(0, 4)
    verdict = Counted(lambda plan: any(f <= plan for f in family))
    known = {frozenset(range(n)): True}
    result = minimum(verdict, Minimum(list(range(n)), exact_hitting_set, budget=budget, known=known, order=order))
    true = min(map(len, family))
    assert result.evaluations == len(verdict.calls) <= budget
    assert result.lower_bound <= true <= len(result.fp32) and result.estimate <= true
    seen = {frozenset(range(n)): True, **{p: verdict.verdict(p) for p in verdict.calls}}
    assert result.proven == all(seen.get(s) is False for s in every_set(n) if len(s) < len(result.fp32))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_non_monotone_predicates_never_get_a_false_proof_without_the_assumption(n, seed):
    rng = random.Random(seed)
    table = {s: rng.random() < 0.4 for s in every_set(n)}
    table[frozenset(range(n))] = True
    verdict = Counted(table.__getitem__)
    result = minimum(verdict, Minimum(list(range(n)), exact_hitting_set, budget=10_000))
    true = lightest_passing(n, table.__getitem__)
    assert table[result.fp32]
    assert result.proven and len(result.fp32) == true  # an ample budget enumerates every smaller set
    seen = set(verdict.calls)
    contradiction = sum(1 for a in seen for b in seen if table[a] and not table[b] and a < b)
    assert result.contradictions == contradiction


def test_a_contradiction_in_the_seeds_turns_the_proof_into_a_bound():
    # {0} passes, {0, 1} fails (a pin that breaks a fusion, say), {1, 2} passes: {0} is the smallest known, the
    # conflict of {0, 1} would bound the minimum at 1, but {0} passing refutes it: a failing plan holding a passing
    # one gives no conflict, so nothing known bounds the minimum (the all-FP16 plan was never evaluated)
    table = {frozenset({0}): True, frozenset({0, 1}): False, frozenset({1, 2}): True}
    result = minimum(lambda p: table.get(p, len(p) >= 2 and p != frozenset({0, 1})),
                     Minimum([0, 1, 2, 3, 4], exact_hitting_set, budget=0, known=table))
    assert result.fp32 == frozenset({0}) and result.contradicted and not result.proven
    assert result.lower_bound == 0 and result.conflicts == 0
    # with the all-FP16 plan known to fail, the bound is 1 again (that conflict rests on no contradicted verdict),
    # and {0} is proven without the monotonicity assumption: the one lighter set was evaluated and failed
    again = minimum(lambda p: table.get(p, len(p) >= 2 and p != frozenset({0, 1})),
                    Minimum([0, 1, 2, 3, 4], exact_hitting_set, budget=0, known={**table, frozenset(): False}))
    assert again.lower_bound == 1 and again.proven and again.smaller_failed == 0


def test_a_lighter_set_passing_below_a_false_bound_is_found_before_the_loop_closes():
    # non-monotone: a plan passes when it holds {0, 1}, except {0, 1, 3, 4}, which fails. The seeds' failing plans
    # give three disjoint conflicts {0, 3}, {1, 4}, {2, 5}: the bound is 3 and {0, 1, 2} weighs 3, so the loop
    # would close there; first it tries one node lighter, and {0, 1} passes: the bound was false (it rested on
    # {0, 1, 3, 4} failing), the loop goes on without that conflict and closes on {0, 1}; the budget left then
    # evaluates every 1-node set (they fail): {0, 1} is proven by those verdicts, not by the false bound
    def verdict(plan):
        calls.append(plan)
        return {0, 1} <= plan and plan != frozenset({0, 1, 3, 4})

    calls: list = []
    everything = frozenset(range(6))
    known = {frozenset(): False, frozenset({0, 1, 2}): True, **{everything - c: False for c in ({0, 3}, {1, 4}, {2, 5})}}
    result = minimum(verdict, Minimum(sorted(everything), exact_hitting_set, budget=50, known=known,
                                      order=[2, 0, 1, 3, 4, 5]))
    assert result.fp32 == frozenset({0, 1}) and result.contradicted and result.proven
    assert result.lower_bound == 2 and result.smaller_failed == 1 and frozenset({0, 1}) in calls
    assert len(calls) == len(set(calls)) == result.evaluations


def test_an_unevaluable_hitting_set_is_cut_and_never_counts_as_a_proof():
    # a plan holding 0 cannot be evaluated (but all-FP32); {1, 2} passes: the minimum found is {1, 2}, but {0}
    # might pass, so not proven; the plans that could not be evaluated while growing are no conflicts
    verdict = Counted(lambda plan: None if 0 in plan and len(plan) < 3 else {1, 2} <= plan)
    result = minimum(verdict, Minimum([0, 1, 2], exact_hitting_set, budget=100, order=[0, 1, 2]))
    assert frozenset({0}) in verdict.calls
    assert result.fp32 == frozenset({1, 2}) and not result.proven and result.lower_bound == 1


@settings(max_examples=100, deadline=None)
@given(monotone(max_n=10))
def test_weights_give_the_cheapest_passing_set_and_scipy_agrees_with_the_pure_solver(case):
    n, family, order, rng = case
    weights = {c: rng.choice([1, 1, 2, 5, 0.5]) for c in range(n)}
    verdict = lambda plan: any(f <= plan for f in family)  # noqa: E731
    given_ = dict(candidates=list(range(n)), budget=10_000, weights=weights, order=order)
    pure = minimum(verdict, Minimum(solve=exact_hitting_set, **given_))
    milp = minimum(verdict, Minimum(solve=hitting_set, **given_))
    cheapest = lightest_passing(n, verdict, weights)
    for result in (pure, milp):
        assert abs(sum(weights[c] for c in result.fp32) - cheapest) < 1e-9
        assert abs(result.estimate - cheapest) < 1e-9 and result.lower_bound <= cheapest + 1e-9


def test_an_all_fp32_plan_that_fails_gives_no_set():
    result = minimum(lambda plan: False, Minimum([0, 1], exact_hitting_set, budget=100))
    assert result.fp32 is None and not result.proven
