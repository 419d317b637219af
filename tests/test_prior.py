"""The emulator as a prior: the search certifies or continues from another oracle's set (search(start=...)),
the pipeline runs the emulator first on an expensive backend, and the measured-effect ranking."""

from __future__ import annotations

import hashlib
import json
import random
from types import SimpleNamespace

import pytest
from conftest import SAMPLES, journal_of, run
from hypothesis import given, settings
from hypothesis import strategies as st

import fp16bisect.run.pipeline as pipeline
import fp16bisect.strategy.prior as priors
import fp16bisect.strategy.prior_choice as prior_choice
from fp16bisect.strategy import ranking
from fp16bisect.strategy.alternatives import hops, neighbours
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.algorithm.search import Hooks, search
from fp16bisect.tolerance import Tolerance

# --------------------------------------------------------------------------- search(start=...) on synthetic oracles


class Counted:
    def __init__(self, oracle):
        self.oracle, self.plans = oracle, []

    def __call__(self, plan):
        self.plans.append(plan)
        return bool(self.oracle(plan))


def assert_passes_and_one_minimal(result, oracle):
    found = frozenset(result.fp32)
    assert result.status == "found" and result.minimal
    assert oracle(found), "the result does not pass on the judging oracle"
    for member in found:
        assert not oracle(found - {member}), f"removing {member!r} still passes on the judging oracle"


@st.composite
def prior_and_judge(draw):
    """An emulator's planted set S and a judging oracle's planted set T = S with culprits added and removed."""
    n = draw(st.integers(1, 300))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    ids = list(range(n))
    emulated = frozenset(rng.sample(ids, rng.randint(1, min(n, 8))))
    removed = frozenset(rng.sample(sorted(emulated), draw(st.integers(0, len(emulated)))))
    added = frozenset(rng.sample(ids, draw(st.integers(0, min(n, 4))))) - emulated
    judged = (emulated - removed) | added
    order = sorted(emulated) + [c for c in rng.sample(ids, n) if c not in emulated]
    return ids, order, emulated, judged


@settings(max_examples=300, deadline=None)
@given(prior_and_judge())
def test_from_a_prior_the_result_passes_and_is_one_minimal_on_the_judging_oracle(case):
    ids, order, emulated, judged = case
    test = Counted(lambda plan: judged <= plan)
    result = search(ids, test, order=order, start=emulated)
    assert len(test.plans) == len(set(test.plans)) == result.evaluations
    if not judged:
        assert result.status == "fp16_passes" and not result.fp32
        return
    assert_passes_and_one_minimal(result, lambda plan: judged <= plan)
    assert set(result.fp32) == judged  # a conjunctive oracle has exactly one 1-minimal set
    assert set(result.added) == judged - emulated and set(result.dropped) == emulated - judged
    assert result.agreed is (judged == emulated)
    assert test.plans[0] == frozenset()  # all-FP16 first, on the judge: no other verdict implies it there
    if judged == emulated:
        # all-FP16, S, then S - {m} for each member (for one member that is all-FP16 again): nothing else
        assert result.evaluations == len(emulated) + 2 - (len(emulated) == 1)
        assert frozenset(ids) not in test.plans or len(emulated) == len(ids)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**32 - 1), st.floats(0.2, 0.8))
def test_on_a_non_monotone_judge_the_result_still_passes_and_every_removal_fails(n, seed, p):
    """A judge whose verdicts are arbitrary (a real engine need not be monotone): whatever the search returns
    as found passes there, and every single removal was evaluated there and failed."""
    def judge(plan):
        digest = hashlib.sha256(f"{seed}:{sorted(plan)}".encode()).digest()
        return len(plan) == n or digest[0] < 256 * p  # all-FP32 passes

    rng = random.Random(seed)
    start = frozenset(rng.sample(range(n), rng.randint(0, n)))
    test = Counted(judge)
    result = search(list(range(n)), test, order=list(range(n)), start=start)
    seen = dict(zip(test.plans, map(judge, test.plans)))
    if result.status == "fp16_passes":
        assert seen[frozenset()]
        return
    found = frozenset(result.fp32)
    assert result.status == "found" and seen[found]
    if not result.minimal:  # it gave up after CERTIFY_ROUNDS rounds, and says so
        assert "far from monotone" in result.minimality and "not minimal" in result.minimality
        return
    assert all(found - {m} in seen and not seen[found - {m}] for m in found)  # evaluated there, failed
    if result.contradictions:
        assert "contradicted monotonicity" in result.minimality


def test_agreement_costs_k_plus_2_evaluations_in_one_round_when_batched():
    culprits = frozenset({3, 17, 42, 99})
    batches = []

    def test_many(plans):
        batches.append(len(plans))
        return [culprits <= p for p in plans]

    result = search(range(100), lambda p: culprits <= p, order=sorted(culprits) + [i for i in range(100) if i not in
                    culprits], start=culprits, test_many=test_many, width=8)
    assert result.agreed and set(result.fp32) == culprits
    # all-FP16, S and S's four removals: the answers the search expects, speculated together
    assert result.evaluations == 6 and result.rounds == 1 and batches == [6]


def test_a_start_set_of_unknown_ids_is_refused():
    from fp16bisect.algorithm.search import SearchError

    with pytest.raises(SearchError, match="not candidates"):
        search([1, 2, 3], lambda p: True, start={4})


def test_when_all_fp32_fails_on_the_judge_the_search_says_so():
    result = search(range(10), lambda p: False, start={1, 2})
    assert result.status == "fp32_fails" and result.agreed is False


def test_a_pin_the_judge_ignores_costs_one_evaluation_when_the_emulator_offers_the_alternative():
    """The emulator passes with {1, 2, 3}, or with 40 and 41 standing in for 1; the judge ignores the pin on 1
    (a fused layer, no FP32 kernel). The prior's alternatives (one per member: 2 and 3 have none) hold
    {2, 3, 40, 41}: S fails, the alternative passes, its four removals fail: 6 evaluations, where searching for
    additions on top of S takes more (all-FP16 first: 7)."""
    def emulator(plan):
        return {1, 2, 3} <= plan or {2, 3, 40, 41} <= plan

    def judge(plan):
        return emulator(plan - {1})

    order = [1, 2, 3] + [c for c in range(100) if c not in (1, 2, 3)]
    test = Counted(judge)
    result = search(range(100), test, order=order, start={1, 2, 3},
                    hooks=Hooks(alternatives=lambda failed: [{2, 3, 40, 41}]))
    assert set(result.fp32) == {2, 3, 40, 41} and result.added == (40, 41) and result.dropped == (1,)
    assert_passes_and_one_minimal(result, judge)
    assert test.plans[:3] == [frozenset(), {1, 2, 3}, {2, 3, 40, 41}] and result.evaluations == 7
    assert [s.phase for s in result.trace[:3]] == ["precondition", "start", "alternative"]
    without = search(range(100), Counted(judge), order=order, start={1, 2, 3})
    assert set(without.fp32) == {2, 3, 40, 41} and without.evaluations > 7 + 3


def test_alternatives_are_asked_only_when_the_start_set_fails():
    asked = []
    result = search(range(10), lambda p: {1, 2} <= p, start={1, 2},
                    hooks=Hooks(alternatives=lambda failed: asked.append(1) or [{3}]))
    assert result.agreed and asked == []


@st.composite
def judge_with_alternatives(draw):
    """A judge that passes with any of a few planted sets, a start set and alternatives drawn at random."""
    n = draw(st.integers(2, 60))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    ways = [frozenset(rng.sample(range(n), rng.randint(1, min(n, 6)))) for _ in range(rng.randint(1, 3))]
    start = frozenset(rng.sample(range(n), rng.randint(0, min(n, 8))))
    options = [frozenset(rng.sample(range(n), rng.randint(0, min(n, 10)))) for _ in range(rng.randint(0, 6))]
    options += [w | frozenset(rng.sample(range(n), rng.randint(0, min(n, 3)))) for w in ways if rng.random() < 0.5]
    return n, ways, start, options


@settings(max_examples=300, deadline=None)
@given(judge_with_alternatives(), st.sampled_from([1, 4]))
def test_with_alternatives_the_result_passes_and_every_removal_fails_on_the_judge(case, width):
    n, ways, start, options = case

    def judge(plan):
        return any(w <= plan for w in ways)

    test = Counted(judge)
    calls = []

    def alternatives(failed):  # half the options first, the rest when those failed, then the same again
        assert failed[0] == start and not any(judge(plan) for plan in failed)
        calls.append(len(failed))
        return options[: len(options) // 2] if len(calls) == 1 else options

    result = search(range(n), test, start=start, hooks=Hooks(alternatives=alternatives),
                    test_many=lambda plans: [test(p) for p in plans], width=width)
    assert len(test.plans) == len(set(test.plans)) == result.evaluations  # each plan evaluated once
    if result.status == "fp16_passes":
        assert judge(frozenset())
        return
    found = frozenset(result.fp32)
    assert result.status == "found" and result.minimal and judge(found)
    assert all(found - {m} in test.plans and not judge(found - {m}) for m in found)
    tried = [s.plan for s in result.trace if s.phase == "alternative"]
    assert set(tried) <= set(options) and (not tried or not judge(start))


# --------------------------------------------------------------------------- the pipeline with an expensive double


@pytest.fixture
def engine(fake_backend):
    """An expensive backend: the emulator, except that ``fused`` candidates never round (a fused kernel keeps them
    in registers: it rounds fewer tensors) and ``forced`` candidates always round (no FP32 kernel: it rounds
    more). Lists the plans it runs; raises KeyboardInterrupt on run ``stop_at``."""
    return fake_backend(name="engine", deterministic=True, versions={"engine": "test double"})


LN = ["search", str(SAMPLES / "transformer_block.onnx"), "--inputs", str(SAMPLES / "transformer_block.npz")]
ACC = ["search", str(SAMPLES / "accumulation.onnx"), "--inputs", str(SAMPLES / "accumulation.npz"),
       "--atol", "0.4", "--rtol", "0"]


def read(out):
    return json.loads(out.read_text())


def test_when_the_engine_agrees_it_builds_k_plus_2_plans_all_fp16_first(engine, tmp_path, capsys):
    out = tmp_path / "o.json"
    code, stdout, err = run(capsys, *LN, "-o", out)
    assert code == 0
    data = read(out)
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["ln1_square", "ln1_var"]
    assert data["search"]["evaluations"] == 4 and len(engine.runs) == 4
    assert engine.runs[0] == frozenset()  # on a judge that is not monotone no other verdict implies it
    assert data["prior"]["agreed"] is True and data["prior"]["fp32"] == ["ln1_square", "ln1_var"]
    assert data["prior"]["added"] == [] == data["prior"]["dropped"] and data["prior"]["evaluations"] == 4
    assert data["metrics"]["fp16_backend"] == "engine" and not data["metrics"]["fp16"]["y"]["passed"]
    assert data["search"]["minimality"] == "each removal evaluated and failed"
    assert "on emulate (prior):" in err and "evaluation 1 on engine:" in err and "engine agrees" in err
    assert "the engine backend agreed" in stdout


def test_an_engine_that_rounds_fewer_tensors_drops_what_it_does_not_need(engine, tmp_path, capsys):
    engine.fused = frozenset({"ln1_var"})  # fused: its input arrives unrounded from an FP32 ln1_square
    out = tmp_path / "o.json"
    assert run(capsys, *LN, "-o", out, "-q")[0] == 0
    data = read(out)
    assert [n["name"] for n in data["fp32_nodes"]] == ["ln1_square"]
    assert data["prior"]["agreed"] is False and data["prior"]["dropped"] == ["ln1_var"]
    assert data["search"]["minimal"] is True and data["search"]["minimality"] == "each removal evaluated and failed"
    # all-FP16, S, then one removal at a time, least suspicious first: without ln1_var it passes, so ln1_var
    # goes at once; the removal of what is left is all-FP16, known: 3 builds
    assert engine.runs == [frozenset(), {"ln1_square", "ln1_var"}, {"ln1_square"}]


def test_an_engine_that_rounds_more_gets_a_set_that_passes_and_is_one_minimal_there(engine, tmp_path, capsys):
    engine.forced = frozenset({"branch0"})  # pinning branch0 has no effect there: another branch must stay
    out = tmp_path / "o.json"
    code, stdout, _ = run(capsys, *ACC, "-o", out, "-q")
    assert code == 0 and "7 alternative(s) made on the emulator, the answer comes from the 1st evaluated" in stdout
    data = read(out)
    found = frozenset(n["name"] for n in data["fp32_nodes"])
    prior = data["prior"]
    assert "branch0" in prior["fp32"] and prior["agreed"] is False
    assert len(found) == 7 and "branch0" not in found and found <= {f"branch{i}" for i in range(10)}
    assert prior["dropped"] == ["branch0"] and len(prior["added"]) == 1
    # all-FP16; the emulator's alternative for branch0 (S - {branch0} + another branch; S's first member, so the
    # first alternative of its size) was the first plan after S; then its 7 removals, one at a time: 10 builds
    assert prior["alternatives"]["used"] is True and prior["alternatives"]["evaluated"] == 1
    assert prior["alternatives"]["members"] == 7 and data["search"]["evaluations"] == 10 == len(engine.runs)
    judge = engine.backend(pipeline.Graph.load(SAMPLES / "accumulation.onnx"))
    oracle = pipeline.Oracle(judge, pipeline.load_samples(judge.inner.graph, [ACC[3]]), Tolerance(0.4, 0), ["y"])
    pipeline.add_fp32_references(judge.inner.graph, oracle.samples)
    assert oracle(found) and not any(oracle(found - {m}) for m in found)


def test_graph_hops_count_tensor_edges_either_way_from_the_nearest_source():
    node = lambda name, inputs, outputs: SimpleNamespace(id=name, inputs=inputs, outputs=outputs)  # noqa: E731
    graph = SimpleNamespace(nodes=[node("a", ["x"], ["t1"]), node("b", ["t1"], ["t2"]), node("c", ["t2"], ["y"]),
                                   node("d", ["x"], ["u"])])  # d reads the graph input only: no edge to a
    near = neighbours(graph)
    assert near == {"a": {"b"}, "b": {"a", "c"}, "c": {"b"}, "d": set()}
    assert hops(near, ["c"]) == {"c": 0, "b": 1, "a": 2}
    assert hops(near, ["a", "c"]) == {"a": 0, "c": 0, "b": 1}


def test_when_two_pins_have_no_effect_the_failed_plans_name_them(engine, tmp_path, capsys):
    """Pins on branch0 and branch1 both have no effect on the engine: each one-member alternative still holds
    the other, so all 7 fail. Every failed plan holds branch0 or branch1 (a hitting set of two), so the next
    round guesses both and the emulator's answer without them passes: all-FP16, S, 7 alternatives, the guess,
    its 7 removals."""
    engine.forced = frozenset({"branch0", "branch1"})
    out = tmp_path / "o.json"
    code, stdout, err = run(capsys, *ACC, "-o", out)
    assert code == 0 and "guessing the pins with no effect as branch0, branch1: 7 node(s)" in err
    data = read(out)
    found = {n["name"] for n in data["fp32_nodes"]}
    assert found == {f"branch{i}" for i in range(2, 9)} and data["prior"]["dropped"] == ["branch0", "branch1"]
    alternatives = data["prior"]["alternatives"]
    assert alternatives["rounds"] == 2 and alternatives["evaluated"] == 8 and alternatives["used"] is True
    assert data["search"]["evaluations"] == 1 + 1 + 7 + 1 + 7 == len(engine.runs)


def test_when_the_emulator_needs_nothing_one_engine_build_confirms_it(engine, tmp_path, capsys):
    out = tmp_path / "o.json"
    safe = ["search", str(SAMPLES / "fp16_safe.onnx"), "--inputs", str(SAMPLES / "fp16_safe.npz")]
    assert run(capsys, *safe, "-o", out, "-q")[0] == 0
    data = read(out)
    assert data["fp32_nodes"] == [] and data["search"]["status"] == "fp16_passes"
    assert engine.runs == [frozenset()] and data["prior"]["agreed"] is True
    assert data["metrics"]["fp16_backend"] == "engine"


def test_the_fused_epilogues_of_the_benchmark_judge():
    import sys

    sys.path.insert(0, str(SAMPLES.parent / "scripts"))
    from judge_emulate_variant import fused_epilogues, variant_plan

    graph = pipeline.Graph.load(SAMPLES / "cnn_batchnorm.onnx")
    assert fused_epilogues(graph) == {"bn1_out", "bn2_out"}  # each BatchNormalization follows a Conv
    assert variant_plan({"conv1_out"}, fused={"bn1_out"}, forced={"conv1_out"}) == {"bn1_out"}


def test_prior_none_and_prior_on_the_emulator(engine, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(capsys, *LN, "-o", out, "-q", "--prior", "none")[0] == 0
    assert read(out)["prior"] is None and frozenset() in engine.runs
    code, _, err = run(capsys, *LN, "-o", tmp_path / "e.json", "--prior", "bogus")
    assert code == 2 and "--prior" in err


def test_prior_emulate_on_the_emulator_is_a_usage_error(tmp_path, capsys):
    code, _, err = run(capsys, *LN, "-o", tmp_path / "o.json", "--backend", "emulate", "--prior", "emulate")
    assert code == 2 and "--prior emulate is for another backend" in err and "Traceback" not in err


def test_an_interrupted_engine_search_resumes_without_running_the_prior_again(engine, monkeypatch, tmp_path,
                                                                              capsys):
    engine.fused = frozenset({"ln1_var"})
    out = tmp_path / "o.json"
    engine.stop_at = 2  # the first engine evaluation finishes, the second is interrupted
    assert run(capsys, *LN, "-o", out, "-q")[0] == 130
    assert journal_of(out, prior=True).exists()
    lines = journal_of(out).read_text().splitlines()
    # the first evaluation started and done; the second started, then abandoned (Ctrl-C: no crash); then, nothing
    # having passed on the engine, the all-FP32 plan evaluated for the answer Ctrl-C writes
    assert [next(iter(json.loads(line))) for line in lines[1:]] == ["prior", "started", "plan", "started", "abandoned",
                                                                     "started", "plan"]
    assert read(out)["search"]["stopped"]["by"] == "interrupt" and len(read(out)["fp32_nodes"]) == 41

    def no_prior(*args, **kwargs):
        raise AssertionError("the prior ran again")

    monkeypatch.setattr(priors, "run", no_prior)
    monkeypatch.setattr(prior_choice, "emulator", no_prior)
    engine.stop_at = None
    code, _, err = run(capsys, *LN, "-o", out)
    assert code == 0 and "read from" in err and "not run again" in err
    data = read(out)
    assert [n["name"] for n in data["fp32_nodes"]] == ["ln1_square"]
    assert data["prior"]["replayed"] is True and data["search"]["evaluations_run"] == data["search"]["evaluations"] - 1
    assert len(engine.runs) == len(set(engine.runs))  # no engine evaluation repeated over the two runs
    # finished: its journal and the prior's are removed (no --keep-journal), and the file names neither
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"]
    assert data["search"]["journal"] is None and data["prior"]["journal"] == ""


# --------------------------------------------------------------------------- the measured-effect ranking


def test_accumulated_rounding_is_ordered_by_measured_effect_not_magnitude(known):
    """accumulation.onnx: every branch costs 0.125 alone in FP16 (0.3125 of atol 0.4), the Sum nothing."""
    graph = pipeline.Graph.load(SAMPLES / "accumulation.onnx")
    samples = pipeline.load_samples(graph, [str(SAMPLES / "accumulation.npz")])
    pipeline.add_fp32_references(graph, samples)
    ids = [n.id for n in graph.candidates]
    measured = ranking.effects(EmulateBackend(graph), samples, Tolerance(0.4, 0), ["y"], ids)
    branches = set(known["accumulation"]["branches"])
    assert all(measured[b] == pytest.approx(0.125 / 0.4) for b in branches)
    assert measured["sum"] == 0.0
    order = ranking.by_effect(list(reversed(ids)), measured)  # whatever the given order, the Sum goes last
    assert order[-1] == "sum" and set(order[:10]) == branches
    found = search(ids, lambda plan: len(plan & branches) >= 7, order=order)
    assert len(found.fp32) == 7 and set(found.fp32) <= branches and found.minimal


def test_a_judge_that_passes_all_fp16_gets_no_pins_whatever_the_prior_says():
    """Issue 20: a judge that keeps fused intermediates in FP32 passes all-FP16, and also the emulator's two
    pins, while each single removal fails there (not monotone). All-FP16 is asked first, so the answer is
    nothing to keep, after one evaluation, not the two pins."""
    start = frozenset({"scale_up", "scale_down"})
    test = Counted(lambda plan: plan in (frozenset(), start) or len(plan) > 2)
    result = search(["scale_up", "scale_down", "conv", "sigmoid"], test, start=start)
    assert result.status == "fp16_passes" and result.fp32 == () and test.plans == [frozenset()]


def test_a_resumed_search_treats_the_headroom_forced_nodes_as_a_fresh_one_does(engine, tmp_path, capsys):
    """--headroom 400 forces ``sum`` (its peak 204 > 65504/400) to FP32 in every plan; the engine ignores the pin on
    branch0, so the emulator's set fails there and its alternatives are searched, over the candidates without the
    forced node (the prior's order has none). Resumed, the prior is read back from the journal and a fresh emulator
    makes the alternatives: with the same forced nodes and sample order, it gives the same answer and JSON."""
    engine.forced = frozenset({"branch0"})
    out = tmp_path / "o.json"
    answers = []
    for _ in ("fresh", "resumed"):
        code, stdout, err = run(capsys, *ACC, "-o", out, "--headroom", "400", "-q", "--keep-journal")
        assert code == 0, err
        answers.append(read(out))
    fresh, resumed = answers
    found = [n["name"] for n in fresh["fp32_nodes"]]
    assert found[0] == "sum" and len(found) == 8 and "branch0" not in found  # sum forced, 7 branches searched
    assert fresh["search"]["minimal"] is True  # 1-minimal beyond sum: each branch's removal evaluated and failed
    assert [n["name"] for n in resumed["fp32_nodes"]] == found
    assert fresh["search"]["forced_by_headroom"] == resumed["search"]["forced_by_headroom"] == ["sum"]
    assert resumed["search"]["evaluations_run"] == 0 and resumed["prior"]["replayed"] is True
    same = lambda data: {**data, "search": {k: v for k, v in data["search"].items()  # noqa: E731
                                            if k not in ("seconds", "evaluations_run")},
                         "prior": {k: v for k, v in data["prior"].items() if k not in ("replayed", "alternatives")}}
    assert same(resumed) == same(fresh)
