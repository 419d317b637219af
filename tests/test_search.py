"""Property tests for the pure-Python minimal-set search (fp16bisect.algorithm.search).

Every oracle here is wrapped by ``Recorder``, which counts the calls the search
makes, so the tests can check the memo (no plan evaluated twice), the reported
evaluation count and which plans were actually looked at.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp16bisect.algorithm.search import Hooks, SearchError, group_testing_bound, quickxplain_bound, search

PHASES = {"precondition", "suspects", "grow", "reduce", "verify", "minimality"}


class Recorder:
    """Wraps an oracle; remembers every plan it was asked about, in order."""

    def __init__(self, oracle):
        self.oracle = oracle
        self.calls: list[frozenset] = []
        self.answers: dict[frozenset, bool | None] = {}

    def __call__(self, plan):
        assert isinstance(plan, frozenset)
        self.calls.append(plan)
        passed = self.oracle(plan)
        passed = None if passed is None else bool(passed)  # None: could not be evaluated
        self.answers[plan] = passed
        return passed

    def check_bookkeeping(self, result):
        """Memo: each plan at most once; evaluations and trace match the calls."""
        assert len(self.calls) == len(set(self.calls)), "a plan was passed to test twice"
        assert result.evaluations == len(self.calls)
        assert [s.plan for s in result.trace] == self.calls
        assert [s.passed for s in result.trace] == [self.answers[p] for p in self.calls]
        assert [s.index for s in result.trace] == list(range(1, len(self.calls) + 1))


def shuffled(rng: random.Random, n: int) -> list[int]:
    order = list(range(n))
    rng.shuffle(order)
    return order


def assert_one_minimal(found: frozenset, oracle):
    assert oracle(found), "the returned set does not pass"
    for member in found:
        assert not oracle(found - {member}), f"removing {member!r} still passes"


# --------------------------------------------------------------------------
# 1. Planted culprit sets (conjunctive oracle)


@st.composite
def planted(draw, max_n=5000, max_k=12):
    n = draw(st.integers(1, max_n))
    k = draw(st.integers(1, min(n, max_k)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    candidates = shuffled(rng, n)
    order = shuffled(rng, n)
    culprits = frozenset(rng.sample(range(n), k))
    return n, k, candidates, order, culprits


@settings(max_examples=150, deadline=None)
@given(planted())
def test_planted_culprits_are_found_exactly_within_the_budget(case):
    n, k, candidates, order, culprits = case
    rec = Recorder(lambda plan: culprits <= plan)
    result = search(candidates, rec, order=order)

    assert result.status == "found"
    assert set(result.fp32) == culprits
    assert len(result.fp32) == k
    assert result.passed and result.minimal
    assert not result.contradictions
    # reported in suspicion order
    assert list(result.fp32) == sorted(culprits, key=order.index)
    rec.check_bookkeeping(result)

    if k == 1:  # one culprit, no useful order: QuickXplain's descent, at most two questions a level
        assert result.evaluations <= 2 * math.ceil(math.log2(n)) + 2
    if k * k <= n:
        assert result.evaluations <= quickxplain_bound(n, k) + 3
    # + k where members are dense: every removal of the answer is evaluated directly (no witness trusted)
    assert result.evaluations <= quickxplain_bound(n, k) + math.ceil(math.log2(n)) + 3 + k


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 64), st.data())
def test_dense_culprit_sets_including_everything(n, data):
    """k close to n (worst case for bisection): still exact and within budget."""
    k = data.draw(st.integers(max(1, n - 3), n))
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    order = shuffled(rng, n)
    culprits = frozenset(rng.sample(range(n), k))
    rec = Recorder(lambda plan: culprits <= plan)
    result = search(list(range(n)), rec, order=order)
    assert result.status == "found"
    assert set(result.fp32) == culprits and result.minimal
    rec.check_bookkeeping(result)
    # + k: every removal of the answer is evaluated directly (QuickXplain's witnesses rest on monotonicity)
    assert result.evaluations <= quickxplain_bound(n, k) + math.ceil(math.log2(max(n, 2))) + 3 + k


@pytest.mark.parametrize("block", range(4))
def test_planted_sweep_large_n(block):
    """Seeded sweep so large n and all k up to 12 are covered every run."""
    rng = random.Random(1000 + block)
    total, lower = 0, 0.0
    for _ in range(40):
        n = rng.randint(500, 5000)
        k = rng.randint(1, 12)
        order = shuffled(rng, n)
        culprits = frozenset(rng.sample(range(n), k))
        rec = Recorder(lambda plan: culprits <= plan)
        result = search(list(range(n)), rec, order=order)
        assert result.status == "found" and set(result.fp32) == culprits and result.minimal
        rec.check_bookkeeping(result)
        assert result.evaluations <= quickxplain_bound(n, k) + 3  # k*k <= n here
        total += result.evaluations
        lower += group_testing_bound(n, k) + k + 2
    # sparse sets, no useful order: on average within 1.5x of the group-testing bound plus what no search
    # avoids (the two preconditions, and each member's removal evaluated); measured 1.32x to 1.36x
    assert total <= 1.5 * lower


def test_non_integer_ids_work():
    names = [f"/model/layer{i}/MatMul" for i in range(200)]
    culprits = {names[17], names[150]}
    result = search(names, lambda plan: culprits <= plan)
    assert result.status == "found" and set(result.fp32) == culprits and result.minimal


# --------------------------------------------------------------------------
# 2. Interactions: monotone oracles that are not one conjunction


def small_set(rng: random.Random, n: int, lo: int = 1, hi: int = 4) -> frozenset:
    return frozenset(rng.sample(range(n), rng.randint(lo, min(hi, n))))


def check_monotone_case(n, order, oracle):
    rec = Recorder(oracle)
    result = search(list(range(n)), rec, order=order)
    assert result.status == "found"
    found = frozenset(result.fp32)
    assert_one_minimal(found, oracle)
    assert result.minimal and result.passed
    assert not result.contradictions
    rec.check_bookkeeping(result)
    return found


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 300), st.integers(0, 2**32 - 1))
def test_two_alternative_culprit_sets(n, seed):
    rng = random.Random(seed)
    a, b = small_set(rng, n), small_set(rng, n)
    found = check_monotone_case(n, shuffled(rng, n), lambda plan: a <= plan or b <= plan)
    # a 1-minimal set under "contains A or B" is A or B itself
    assert found in (a, b)
    if a < b:
        assert found == a


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2**32 - 1))
def test_accumulation_at_least_m_of_a_planted_set(n, seed):
    rng = random.Random(seed)
    planted_set = small_set(rng, n, 1, 10)
    m = rng.randint(1, len(planted_set))
    found = check_monotone_case(n, shuffled(rng, n), lambda plan: len(planted_set & plan) >= m)
    assert len(found) == m and found <= planted_set


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_dnf_of_random_small_sets(n, terms_count, seed):
    rng = random.Random(seed)
    terms = [small_set(rng, n) for _ in range(terms_count)]
    found = check_monotone_case(n, shuffled(rng, n), lambda plan: any(t <= plan for t in terms))
    # 1-minimal under a DNF means: one of the terms, and no term strictly inside it
    assert found in terms
    assert not any(t < found for t in terms)


# --------------------------------------------------------------------------
# 3. Suspicion order


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(3, 40), st.integers(0, 2**32 - 1))
def test_correct_suspects_make_the_search_cheap(k, suspects, seed):
    n = 1000
    rng = random.Random(seed)
    order = shuffled(rng, n)
    start = rng.randrange(n - k + 1)
    chain = list(range(start, start + k))  # consecutive nodes of a chain
    rest = [c for c in order if c not in chain]
    order = chain + rest
    rec = Recorder(lambda plan: set(chain) <= plan)
    result = search(list(range(n)), rec, order=order, suspects=suspects)
    assert result.status == "found" and list(result.fp32) == chain and result.minimal
    rec.check_bookkeeping(result)
    assert result.evaluations <= 2 * k + 6
    assert any(s.phase == "suspects" for s in result.trace)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(1, 60), st.integers(0, 2**32 - 1))
def test_wrong_suspects_do_not_change_the_answer(k, suspects, seed):
    n = 1000
    rng = random.Random(seed)
    order = shuffled(rng, n)
    culprits = frozenset(order[-k:])  # adversarial: at the very end of the order
    rec = Recorder(lambda plan: culprits <= plan)
    result = search(list(range(n)), rec, order=order, suspects=suspects)
    assert result.status == "found"
    assert set(result.fp32) == culprits and result.minimal
    rec.check_bookkeeping(result)
    # a wrong order costs at most the suspect probes on top of the plain budget
    probes = math.ceil(math.log2(suspects)) + 1
    assert result.evaluations <= quickxplain_bound(n, k) + math.ceil(math.log2(n)) + 3 + probes


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**32 - 1))
def test_half_right_suspects(k, seed):
    """Some culprits flagged, some far away in the order: still exact."""
    n = 500
    rng = random.Random(seed)
    order = shuffled(rng, n)
    culprits = frozenset(order[: k // 2] + order[-(k - k // 2):])
    result = search(list(range(n)), lambda plan: culprits <= plan, order=order, suspects=10)
    assert set(result.fp32) == culprits and result.minimal


# --------------------------------------------------------------------------
# 4. Preconditions


@pytest.mark.parametrize("n", [1, 2, 50])
def test_all_fp32_failing(n):
    rec = Recorder(lambda plan: False)
    result = search(list(range(n)), rec, order=list(reversed(range(n))), suspects=3)
    assert result.status == "fp32_fails"
    assert result.fp32 == () and not result.passed and not result.minimal
    # all-FP16 first, then the suspect prefixes (1, 2, 3), then all-FP32 once nothing smaller passed
    assert rec.calls[0] == frozenset() and rec.calls[-1] == frozenset(range(n))
    assert result.evaluations == len(set(rec.calls)) <= 2 + min(n, 3)
    assert "all-FP32" in str(result)


def test_all_fp32_failing_with_a_passing_subset_is_still_fp32_fails():
    result = search(list(range(10)), lambda plan: plan == frozenset({3}))
    assert result.status == "fp32_fails" and result.fp32 == ()


@pytest.mark.parametrize("n", [1, 2, 50])
def test_empty_plan_passing(n):
    rec = Recorder(lambda plan: True)
    result = search(list(range(n)), rec, suspects=5)
    assert result.status == "fp16_passes"
    assert result.fp32 == ()
    assert result.evaluations == 1  # all-FP32 is not needed: a passing all-FP16 settles it
    assert rec.calls == [frozenset()]


# --------------------------------------------------------------------------
# 5. Non-monotone oracles


def noisy_oracle(seed: int, p: float, n: int):
    """A fixed random table (deterministic per plan); all-FP32 passes, empty fails."""
    everything = frozenset(range(n))

    def oracle(plan):
        if plan == everything:
            return True
        if not plan:
            return False
        return random.Random(f"{seed}:{sorted(plan)}").random() < p

    return oracle


def check_non_monotone(n, oracle, order, suspects):
    rec = Recorder(oracle)
    result = search(list(range(n)), rec, order=order, suspects=suspects)
    rec.check_bookkeeping(result)
    if result.status != "found":
        return result
    found = frozenset(result.fp32)
    assert result.passed
    assert rec.answers.get(found) is True, "returned a set that test did not pass"
    if not result.minimal:
        assert result.minimality.startswith("not minimal")
        # falls back to the smallest plan actually seen to pass
        assert len(found) == min(len(plan) for plan, ok in rec.answers.items() if ok)
    else:
        # every removal was evaluated: it really is 1-minimal under the oracle, contradictions or not
        assert result.minimality.startswith("each removal evaluated and failed")
        assert ("contradicted monotonicity" in result.minimality) == bool(result.contradictions)
        assert_one_minimal(found, oracle)
    return result


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 80),
    st.floats(0.05, 0.95),
    st.integers(0, 2**32 - 1),
    st.integers(0, 10),
)
def test_noisy_oracle_never_breaks_the_search(n, p, seed, suspects):
    rng = random.Random(seed)
    check_non_monotone(n, noisy_oracle(seed, p, n), shuffled(rng, n), suspects)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 120), st.integers(0, 2**32 - 1), st.integers(0, 10))
def test_parity_oracle_never_breaks_the_search(n, seed, suspects):
    rng = random.Random(seed)
    culprit = rng.randrange(n)

    def oracle(plan):
        return culprit in plan and len(plan) % 2 == 0

    check_non_monotone(n, oracle, shuffled(rng, n), suspects)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 80), st.floats(0.05, 0.95), st.integers(0, 2**32 - 1), st.integers(0, 10))
def test_a_minimal_claim_holds_for_any_oracle(n, p, seed, suspects):
    """A 'minimal' claim never relies on monotonicity: every removal was evaluated on the oracle."""
    rng = random.Random(seed)
    oracle = noisy_oracle(seed, p, n)
    result = check_non_monotone(n, oracle, shuffled(rng, n), suspects)
    if result.status == "found" and result.minimal:
        assert_one_minimal(frozenset(result.fp32), oracle)


def test_observed_contradiction_is_reported_and_the_answer_is_still_checked_directly():
    """Node 3 in FP32 breaks a plan that passes without it: {0, 1, 2} passes,
    {0, 1, 2, 3} fails. The suspect probes see both, so the result must list
    the contradiction; {2} is still 1-minimal, by evaluating its removal."""
    everything = frozenset(range(5))

    def oracle(plan):
        return plan == everything or (2 in plan and 3 not in plan)

    rec = Recorder(oracle)
    result = search(list(range(5)), rec, order=list(range(5)), suspects=4)
    rec.check_bookkeeping(result)
    assert result.status == "found" and result.passed
    assert result.fp32 == (2,)
    assert result.minimal and rec.answers[frozenset()] is False
    assert result.minimality.startswith("each removal evaluated and failed; the oracle contradicted monotonicity")
    assert result.contradictions
    for small, big in result.contradictions:
        assert small < big and rec.answers[small] and not rec.answers[big]
    assert "1-minimal" in str(result)


# --------------------------------------------------------------------------
# 6. every removal evaluated


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 400), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_every_removal_of_the_answer_is_evaluated(n, k, seed):
    k = min(k, n)
    rng = random.Random(seed)
    order = shuffled(rng, n)
    culprits = frozenset(rng.sample(range(n), k))
    rec = Recorder(lambda plan: culprits <= plan)
    result = search(list(range(n)), rec, order=order)
    rec.check_bookkeeping(result)
    assert set(result.fp32) == culprits and result.minimal
    assert result.minimality == "each removal evaluated and failed"
    called = set(rec.calls)
    for member in culprits:
        assert culprits - {member} in called
        assert rec.answers[culprits - {member}] is False


def test_a_removal_that_monotonicity_would_imply_is_evaluated_and_dropped():
    """Passes iff node 2 is in FP32 and nodes 0, 1 are not (or everything). QuickXplain keeps 3 because
    {0, 1, 2} failed, which "implies" that {2} fails only under monotonicity. The final reduction evaluates
    {2}, sees it pass, drops 3 and checks {2}'s own removal: the answer is {2}, 1-minimal."""
    everything = frozenset(range(4))

    def oracle(plan):
        return plan == everything or (2 in plan and not plan & {0, 1})

    rec = Recorder(oracle)
    checked = search(list(range(4)), rec, order=[0, 1, 2, 3])
    rec.check_bookkeeping(checked)
    assert [s.plan for s in checked.trace if s.phase == "reduce"][-2:] == [frozenset({0, 1, 3}), frozenset({2, 3})]
    assert rec.answers[frozenset({0, 1, 2})] is False and rec.answers[frozenset({2})] is True
    assert checked.fp32 == (2,) and checked.minimal and checked.passed
    assert checked.minimality.startswith("each removal evaluated and failed")
    assert checked.contradictions  # {2} passed, its superset {0, 1, 2} failed: said
    assert_one_minimal(frozenset(checked.fp32), oracle)


# --------------------------------------------------------------------------
# 7. on_step progress


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 2000), st.integers(1, 6), st.integers(0, 30), st.integers(0, 2**32 - 1))
def test_on_step_called_once_per_evaluation(n, k, suspects, seed):
    k = min(k, n)
    rng = random.Random(seed)
    order = shuffled(rng, n)
    culprits = frozenset(rng.sample(range(n), k))
    events = []
    rec = Recorder(lambda plan: culprits <= plan)
    result = search(
        list(range(n)),
        rec,
        order=order,
        suspects=suspects,
        hooks=Hooks(on_step=lambda step, progress: events.append((step, dict(progress)))),
    )
    rec.check_bookkeeping(result)
    assert len(events) == result.evaluations == len(rec.calls)
    for i, (step, progress) in enumerate(events, start=1):
        assert {"evaluations", "phase", "searching", "found", "estimate_left"} <= set(progress)
        assert progress["evaluations"] == i == step.index
        assert step == result.trace[i - 1]
        assert step.plan == rec.calls[i - 1]
        assert progress["phase"] == step.phase and progress["phase"] in PHASES
        assert isinstance(progress["estimate_left"], int) and progress["estimate_left"] >= 0
        assert 0 <= progress["searching"] <= n
        assert 0 <= progress["found"] <= k
    assert events[0][1]["phase"] == "precondition"


def test_on_step_for_preconditions_only():
    events = []
    search([1, 2, 3], lambda plan: True, hooks=Hooks(on_step=lambda s, p: events.append(p)))
    assert [p["evaluations"] for p in events] == [1]
    assert all(p["phase"] == "precondition" for p in events)


# --------------------------------------------------------------------------
# 8. Invalid arguments


def _never_called(plan):
    raise AssertionError("test must not be evaluated for invalid arguments")


@pytest.mark.parametrize(
    "candidates, order",
    [
        ([1, 2, 2], None),  # duplicate candidates
        (["a", "b", "a"], ["a", "b"]),  # duplicate candidates with an order
        ([1, 2, 3], [1, 2]),  # order too short
        ([1, 2, 3], [1, 2, 3, 4]),  # order too long
        ([1, 2, 3], [1, 2, 2]),  # duplicate in order
        ([1, 2, 3], [1, 2, 4]),  # unknown id in order
        ([1, 2, 3], [3, 2, 1, 1]),  # duplicate making it too long
        (["1", "2"], [1, 2]),  # different types, same str()
    ],
)
def test_invalid_arguments_raise_search_error(candidates, order):
    with pytest.raises(SearchError):
        search(candidates, _never_called, order=order)


def progress_rows(n: int, k: int, seed: int, suspects: int = 0, ordered: bool = False):
    """A search for k planted culprits among n (a monotone judge): its result and, per evaluation, (index,
    estimate left, bound left) as the progress said them. ``ordered``: the shuffled ids are also the order."""
    rng = random.Random(seed)
    ids = list(range(n))
    culprits = frozenset(rng.sample(ids, k))
    rng.shuffle(ids)
    rows = []
    result = search(ids, lambda plan: culprits <= plan, suspects=suspects, order=ids if ordered else None,
                    hooks=Hooks(on_step=lambda step, p: rows.append((step.index, p["estimate_left"],
                                                                     p["bound_left"]))))
    return result, rows


def test_the_bound_left_holds_on_monotone_judges():
    for n, k, suspects in [(13, 5, 6), (300, 90, 0), (200, 40, 10), (1000, 10, 0), (50, 1, 3), (8, 8, 0)]:
        for seed in range(3):
            result, rows = progress_rows(n, k, seed, suspects, ordered=True)
            for i, estimate, bound in rows:
                assert 0 <= estimate <= bound and bound >= result.evaluations - i, (n, k, seed, i)
            assert rows[0][1] > 0 or result.evaluations == 1


@pytest.mark.parametrize("n,k,share", [(300, 90, 0.9), (200, 40, 0.9), (1000, 10, 0.7)])
def test_the_progress_estimate_of_evaluations_left_is_within_3x_once_the_search_is_under_way(n, k, share):
    """The estimate a person watches: after the first third of the search, mostly within 3x of the truth."""
    for seed in range(5):
        result, rows = progress_rows(n, k, seed)
        ratios = [est / (result.evaluations - i) for i, est, _ in rows if result.evaluations > i]
        late = ratios[len(ratios) // 3:]
        assert sum(1 / 3 <= r <= 3 for r in late) >= share * len(late), (seed, n, k)


def test_all_fp32_is_not_evaluated_when_a_suspect_prefix_passes():
    """A passing plan implies all-FP32 passes (monotonicity): on a GPU that is one engine build saved."""
    rec = Recorder(lambda plan: {0, 1} <= plan)
    result = search(list(range(40)), rec, order=list(range(40)), suspects=2)
    assert result.fp32 == (0, 1) and result.minimal
    assert frozenset(range(40)) not in rec.calls
    assert result.evaluations == 4  # all-FP16, {0}, {0, 1}, {1}


def test_a_final_set_that_fails_when_evaluated_again_is_not_returned_as_minimal():
    """A noisy oracle (engine builds): {0, 1} passes once, then fails its re-evaluation."""
    result = search(list(range(10)), lambda plan: {0, 1} <= plan, order=list(range(10)), suspects=2,
                    hooks=Hooks(recheck=lambda plan: plan != frozenset({0, 1})))
    assert not result.minimal and "failed when evaluated again" in result.minimality
    assert "{0, 1} passed, then failed when evaluated again" in result.minimality
    assert set(result.fp32) == set(range(10))  # the smallest plan seen to pass and never to fail: all-FP32
    assert (frozenset({0, 1}), frozenset({0, 1})) in result.contradictions
    assert [s.phase for s in result.trace][-2:] == ["recheck", "fallback"]


def test_a_recheck_that_agrees_costs_one_evaluation_and_keeps_the_answer():
    result = search(list(range(10)), lambda plan: {0, 1} <= plan, order=list(range(10)), suspects=2,
                    hooks=Hooks(recheck=lambda plan: {0, 1} <= plan))
    assert result.fp32 == (0, 1) and result.minimal and result.evaluations == 5


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 300), k=st.integers(1, 8), width=st.integers(2, 8), seed=st.integers(0, 10**6))
def test_batched_minimality_checks_give_the_same_set_in_fewer_rounds(n, k, width, seed):
    rng = random.Random(seed)
    culprits = frozenset(rng.sample(range(n), min(k, n)))
    oracle = lambda plan: culprits <= plan  # noqa: E731
    batches = []

    def test_many(plans):
        batches.append(len(plans))
        assert len(plans) <= width
        return [oracle(p) for p in plans]

    one = search(range(n), oracle)
    many = search(range(n), oracle, test_many=test_many, width=width)
    assert many.fp32 == one.fp32 and set(many.fp32) == culprits and many.minimal
    assert one.rounds == one.evaluations and many.rounds <= one.rounds
    assert max(s.round for s in many.trace) == many.rounds
    if one.evaluations > 1:  # all-FP16 goes out with the plan the search asks next if it fails, at least
        assert many.rounds < one.rounds


# 6. Three verdicts: plans that cannot be evaluated (None) are never evidence


def three_valued(seed: int, n: int, culprits: frozenset, p_none: float, monotone: bool):
    """Passes iff the culprits are kept (or a random table when not monotone); a random share of plans (never
    all-FP32) cannot be evaluated."""
    everything = frozenset(range(n))

    def oracle(plan):
        rng = random.Random(f"{seed}:{sorted(plan)}")
        if plan != everything and rng.random() < p_none:
            return None
        if monotone:
            return culprits <= plan
        return plan == everything or (bool(plan) and rng.random() < 0.5)

    return oracle


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 60), st.integers(0, 2**32 - 1), st.floats(0.0, 0.6), st.booleans(), st.integers(0, 8),
       st.booleans(), st.sampled_from([1, 1, 3, 8]))
def test_three_valued_oracles_never_count_unevaluable_plans_as_evidence(n, seed, p_none, monotone, suspects,
                                                                        with_start, width):
    rng = random.Random(seed)
    culprits = frozenset(rng.sample(range(n), rng.randint(1, min(n, 4))))
    oracle = three_valued(seed, n, culprits, p_none, monotone)
    rec = Recorder(oracle)
    start = frozenset(rng.sample(range(n), rng.randint(0, min(n, 4)))) if with_start else None
    ranked = shuffled(rng, n)
    result = search(list(range(n)), rec, order=shuffled(rng, n), suspects=suspects, start=start,
                    hooks=Hooks(reorder=lambda: ranked), test_many=lambda plans: [rec(p) for p in plans], width=width)
    rec.calls.sort(key=[s.plan for s in result.trace].index)  # a round's plans are recorded in the trace's order
    rec.check_bookkeeping(result)  # no plan asked twice
    assert frozenset() in rec.answers  # the all-FP16 verdict is known, on this judge, whatever the start
    assert result.unevaluable == sum(1 for v in rec.answers.values() if v is None)
    if result.status == "fp16_passes":
        assert rec.answers[frozenset()] is True
        return
    if result.status == "fp32_fails":
        assert rec.answers[frozenset(range(n))] is not True
        return
    found = frozenset(result.fp32)
    assert result.passed and rec.answers[found] is True  # the answer was seen to pass
    for member in found:
        verdict = rec.answers.get(found - {member}, "never asked")
        if member in result.unverified:
            assert verdict is None, "a member is unverified only when its removal could not be evaluated"
        elif result.minimal:
            assert verdict is False, "1-minimal: every removal was evaluated and failed"
    if result.minimal:
        assert not result.unverified
    if result.unverified:
        assert not result.minimal and "not verified" in result.minimality
    if not result.minimal and not result.unverified:  # the search gave up on 1-minimality, and says why
        assert "far from monotone" in result.minimality or "evaluated again" in result.minimality
    if monotone and result.minimal and not result.contradictions:
        assert found == culprits


def test_a_search_that_gives_up_names_long_sets_by_their_first_members_and_size():
    """When the search gives up on 1-minimality it names the contradictions it saw; sets too long to read are cut
    to their first members and their size, and a superset by what it adds, so the line stays readable (on a real
    classifier it printed every member of six 120-node sets: thousands of characters)."""
    from types import SimpleNamespace

    from fp16bisect.algorithm.search import _smallest_passing

    small = frozenset(range(100))
    big = small | {100, 101}
    ask = SimpleNamespace(passing=lambda: [small], memo=SimpleNamespace(contradictions=[(small, big), (big, big)]))
    why = _smallest_passing(ask, "far from monotone here").why_not_minimal
    assert "{0, 1, 10, 11, 12, 13, ... (100 in all)} passed but adding {100, 101} to it failed" in why, why
    assert "... (102 in all)} passed, then failed when evaluated again" in why and len(why) < 300, why
