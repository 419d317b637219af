"""What ``search --minimum`` may claim on a judge whose verdicts are not monotone (issue 41 item 1).

Keeping more nodes in FP32 can turn a passing plan failing (FP16 rounding errors cancel). A hitting-set bound
assumes the opposite, so it is an estimate; "the minimum", "proven" and "at least N" are said only when every
smaller set was evaluated and failed. The predicates here pass on a lone small set whose supersets fail (the
cancelling case), below the bound the monotone model gives.
"""

from __future__ import annotations

import json
import random
from itertools import combinations

from conftest import run
from hypothesis import given, settings
from hypothesis import strategies as st

from fp16bisect.algorithm.hitting import Minimum, exact_hitting_set, minimum
from fp16bisect.algorithm.search import search
from fp16bisect.artifacts.overrides import problems
from fp16bisect.strategy.minimum import Least

CORE = frozenset({0, 1, 2})
LONE = frozenset({5})  # passes alone; any superset of it without CORE fails


def cancelling(plan: frozenset) -> bool:
    return CORE <= plan or plan == LONE


def seeded(n: int = 8):
    """The 1-minimal search's verdicts on ``cancelling`` (the seeds of the loop), in the candidates' order."""
    seen: dict = {}
    first = search(list(range(n)), lambda p: seen.setdefault(p, cancelling(p)), order=list(range(n)))
    assert frozenset(first.fp32) == CORE and first.minimal
    return seen


def test_a_lone_passing_set_below_the_monotone_bound_gets_no_proof_and_no_at_least():
    # every failing plan the search saw holds node 5, so under monotone verdicts {5} fails too: the hitting-set loop
    # meets its bound of 3 on CORE in 6 evaluations, and it used to call CORE proven while {5} passes; the 4 left
    # of a budget of 10 do not afford every 1-node set (7 not yet evaluated), the only proof
    known = seeded()
    assert LONE not in known
    result = minimum(cancelling, Minimum(list(range(8)), exact_hitting_set, budget=10, known=known,
                                         order=list(range(8))))
    assert result.fp32 == CORE and not result.proven and result.evaluations == 6
    assert result.lower_bound == 1  # proven: the all-FP16 plan was evaluated and failed; nothing more
    assert result.estimate == 3 and result.estimate_met and result.contradictions == 0
    least = Least(CORE, result, "emulate", "emulate", 3, 10)
    line = least.line(CORE)
    assert line.startswith("3 node(s): no smaller set found; a bound of 3 holds only if keeping more nodes in FP32 "
                           "never hurts, an assumption no verdict here contradicts, not a proof; the 1-minimal "
                           "search kept 3; 6 more evaluation(s)")
    assert "the minimum" not in line and "at least" not in line and "proven" not in line
    data = least.to_json()
    assert data["proven"] is False and data["lower_bound"] == 1 and data["estimate"] == 3
    assert data["assumes_monotone"] is False  # no claim rests on the assumption


def test_with_a_budget_the_lone_set_is_found_and_proven_by_the_evaluated_verdicts():
    known = seeded()
    calls: list = []
    result = minimum(lambda p: calls.append(p) or cancelling(p),
                     Minimum(list(range(8)), exact_hitting_set, budget=60, known=known, order=list(range(8))))
    assert result.fp32 == LONE and result.proven and result.lower_bound == 1  # the all-FP16 plan fails
    assert len(calls) == len(set(calls)) == result.evaluations <= 60
    line = Least(LONE, result, "emulate", "emulate", 3, 60).line(LONE)
    assert line.startswith("1 node: the minimum (the all-FP16 plan fails)")


def every_set(n: int):
    return (frozenset(s) for k in range(n + 1) for s in combinations(range(n), k))


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 8), st.integers(0, 2**32 - 1), st.integers(0, 80))
def test_on_random_verdicts_every_claim_follows_from_the_verdicts_evaluated(n, seed, budget):
    rng = random.Random(seed)
    table = {s: rng.random() < 0.3 for s in every_set(n)}
    table[frozenset()] = False
    table[frozenset(range(n))] = True
    asked: dict = {}

    def verdict(plan):
        asked[plan] = table[plan]
        return table[plan]

    known = {frozenset(): False, frozenset(range(n)): True}
    result = minimum(verdict, Minimum(list(range(n)), exact_hitting_set, budget=budget, known=known))
    seen = {**known, **asked}
    assert table[result.fp32] and result.evaluations == len(asked) <= budget
    smaller = [s for s in every_set(n) if len(s) < len(result.fp32)]
    assert result.proven == all(seen.get(s) is False for s in smaller)  # proven exactly when every one failed
    assert all(seen.get(s) is False for s in every_set(n) if len(s) < result.lower_bound)
    assert result.contradictions == sum(1 for p in seen for q in seen if seen[p] and seen[q] is False and p < q)
    line = Least(result.fp32, result, "emulate", "emulate", n, budget).line(result.fp32)
    assert ("the minimum" in line) == result.proven
    assert "at least" not in line or f"at least {int(result.lower_bound)}" in line


def model_files(tmp_path):
    from test_minimum import X, two_paths
    import numpy as np
    import onnx

    onnx.save(two_paths(), tmp_path / "two_paths.onnx")
    np.savez(tmp_path / "x.npz", **X)
    return ["search", tmp_path / "two_paths.onnx", "--inputs", tmp_path / "x.npz"]


def test_console_and_json_say_the_same_on_a_judge_whose_verdicts_are_not_monotone(fake_backend, tmp_path, capsys):
    # two_paths' candidates P, Q1, Q2, M; this judge passes {Q1, Q2, M} and its supersets, and {P} alone
    fake_backend(name="jury", deterministic=True, capabilities={"emulator_prior": False},
                 verdict=lambda plan: {"Q1", "Q2", "M"} <= plan or plan == frozenset({"P"}))
    out_path = tmp_path / "o.json"
    code, out, _ = run(capsys, *model_files(tmp_path), "--backend", "emulate", "-o", out_path, "--minimum", "0")
    assert code == 0
    data = json.loads(out_path.read_text())
    minimum = data["search"]["minimum"]
    assert problems(data) == ""
    assert minimum["proven"] is False and minimum["assumes_monotone"] is False
    line = next(s for s in out.splitlines() if s.startswith("--minimum:"))
    assert "no smaller set found" in line and "the minimum" not in line and "at least" not in line
    assert f"a bound of {minimum['estimate']} holds only if keeping more nodes in FP32 never hurts" in line
    code, out, _ = run(capsys, *model_files(tmp_path), "-o", out_path, "--minimum", "--restart")
    data = json.loads(out_path.read_text())
    assert code == 0 and sorted(n["name"] for n in data["fp32_nodes"]) == ["P"]
    assert data["search"]["minimum"]["proven"] is True
    assert "--minimum: 1 node: the minimum (the all-FP16 plan fails)" in out
