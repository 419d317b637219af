"""The search end to end on the sample models, checked against the oracle directly: the answer's verdicts are
evaluated afresh on an oracle built for the check (``conftest.fresh_oracle``), not read back from the memo of the
oracle the search used, which would only repeat the search's own verdicts."""

import json

import pytest
from conftest import SAMPLES, fresh_oracle, journal_of
from doubles import Fake

from fp16bisect.run.options import Journaling, Judge, SearchOptions
from fp16bisect.run.pipeline import search_model
from fp16bisect.tolerance import Tolerance

ONE_SITE = ["transformer_block", "cnn_batchnorm", "attention_unscaled", "log_underflow"]


def tolerance_of(name, known):
    return Tolerance(atol=known[name]["atol"], rtol=known[name]["rtol"])


def searched(name, known):
    return search_model(
        str(SAMPLES / f"{name}.onnx"),
        [str(SAMPLES / f"{name}.npz")],
        options=SearchOptions(tolerance_of(name, known)),
    )


def oracle_for(name, known):
    """A new oracle for the sample model: every plan it is asked is run (its memo starts empty)."""
    return fresh_oracle(SAMPLES / f"{name}.onnx", [SAMPLES / f"{name}.npz"], tolerance_of(name, known))


@pytest.mark.parametrize("name", ONE_SITE + ["two_branches", "accumulation"])
def test_found_set_passes_and_every_removal_fails_when_evaluated(name, known):
    outcome = searched(name, known)
    found = frozenset(outcome.result.fp32)
    assert found
    oracle = oracle_for(name, known)
    assert oracle.evaluate(found).passed
    for member in found:
        assert not oracle.evaluate(found - {member}).passed, f"{member} is not needed"
    assert oracle.runs == len(found) + 1  # each verdict was run here, none replayed


@pytest.mark.parametrize("name", ONE_SITE)
def test_one_overflow_site_costs_at_most_2k_plus_6_evaluations(name, known):
    outcome = searched(name, known)
    k = len(outcome.result.fp32)
    assert outcome.result.evaluations <= 2 * k + 6
    # the suspicion order put the culprits first
    assert set(outcome.profile.order[:k]) == set(outcome.result.fp32)


def test_accumulation_has_no_single_failing_node_yet_needs_a_minimal_set(known):
    outcome = searched("accumulation", known)
    spec = known["accumulation"]
    everything = frozenset(n.id for n in outcome.graph.candidates)
    oracle = oracle_for("accumulation", known)
    for node in spec["branches"]:
        assert oracle.evaluate(everything - {node}).passed  # no single node fails alone
    assert len(outcome.result.fp32) == spec["minimal_size"]
    assert set(outcome.result.fp32) <= set(spec["branches"])


def myelin(bad):
    """Build errors as TensorRT gives them, for the plans for which ``bad(plan)`` holds (``Fake.fails``)."""
    return lambda plan: f"Error Code 1: Myelin (cannot compile a plan of {len(plan)} FP32 node(s))" if bad(plan) \
        else None


def test_a_plan_that_fails_to_build_counts_as_failing_and_is_reported(known, fake_backend):
    fake_backend(fails=myelin(lambda p: not p))
    outcome = searched("transformer_block", known)  # the all-FP16 engine cannot be built
    assert sorted(outcome.result.fp32) == ["ln1_square", "ln1_var"]
    assert outcome.overrides.search["build_failures"] == [
        {"fp32": [], "error": "Error Code 1: Myelin (cannot compile a plan of 0 FP32 node(s))"}]


def test_an_all_fp32_plan_that_fails_to_build_is_a_clear_error(known, fake_backend):
    from fp16bisect.errors import UsageError

    fake_backend(fails=myelin(lambda p: "ln1_var" in p))
    with pytest.raises(UsageError, match="all-FP32 plan could not be built on the emulate backend: Error Code 1"):
        searched("transformer_block", known)


def test_the_override_file_keeps_contradictions_and_failures_short(known, monkeypatch, fake_backend, tmp_path):
    """Contradictions become a count and the first few as node-id differences (not two full plans); lists of
    failed plans keep their first entries and their total; a large plan is a count. The journal keeps all."""
    import fp16bisect.run.outcome as override_json

    big = frozenset(f"n{i}" for i in range(300))
    found = [(big - {f"n{i}", f"n{i + 1}"}, big) for i in range(25)] + [(big, big)]
    written = override_json.contradictions_json(found)
    assert written["count"] == 26 and len(written["examples"]) == override_json.EXAMPLES
    assert written["examples"][0] == {"passed_ids": 298, "failed_adding": ["n0", "n1"],
                                      "same_plan_failed_again": False}
    assert len(str(written)) < 2000  # two full plans of 300 ids each, 26 times, were ~200 KB

    spec = known["transformer_block"]
    fake_backend(fails=myelin(lambda plan: 0 < len(plan) < 30))
    monkeypatch.setattr(override_json, "PLAN_IDS", 3)
    out = tmp_path / "o.json"
    outcome = search_model(str(SAMPLES / "transformer_block.onnx"), [str(SAMPLES / "transformer_block.npz")],
                           options=SearchOptions(Tolerance(atol=spec["atol"], rtol=spec["rtol"]), output=str(out),
                                                 journal=Journaling(keep_journal=True)))
    failures = outcome.oracle.build_failures
    search = outcome.overrides.search
    assert len(failures) > override_json.EXAMPLES and search["build_failures_total"] == len(failures)
    assert len(search["build_failures"]) == override_json.EXAMPLES
    for entry, failed in zip(search["build_failures"], failures):
        assert entry["fp32"] == (sorted(failed.plan) if len(failed.plan) <= 3 else
                                 {"ids": len(failed.plan), "listed_in": "the journal"})
    assert search["journal"] == str(journal_of(out))
    journaled = journal_of(out).read_text()
    assert all(f'"plan": {json.dumps(sorted(e.plan))}' in journaled for e in failures)  # in full there


def test_the_backend_lives_for_the_search_and_is_closed_after_it_even_on_an_error(known, monkeypatch):
    """``with backend:``: what a backend holds (engines, sessions, plan files) is freed when the search ends."""
    import fp16bisect.run.pipeline as pipeline
    from fp16bisect.errors import UsageError

    made = []

    def make(name, graph, *_):
        made.append(Fake(fails=myelin(bad)).backend(graph))
        return made[-1]

    monkeypatch.setattr(pipeline, "make_backend", make)
    bad = lambda plan: False  # noqa: E731
    searched("transformer_block", known)
    bad = lambda plan: "ln1_var" in plan  # noqa: E731  (all-FP32 cannot be built: the search stops, exit 2)
    with pytest.raises(UsageError):
        searched("transformer_block", known)
    assert [b.closed for b in made] == [1, 1]


def test_the_timing_cache_goes_beside_the_output_unless_a_path_was_given_even_the_default_name(tmp_path):
    from fp16bisect.backends.base import Options

    out = str(tmp_path / "o.json")
    beside = SearchOptions(output=out).backend_options.tensorrt.timing_cache
    asked = SearchOptions(output=out, judge=Judge(timing_cache="fp16bisect.timing.cache"))
    assert beside == str(tmp_path / "o.timing.cache")
    assert asked.backend_options.tensorrt.timing_cache == "fp16bisect.timing.cache"
    assert Options().tensorrt.timing_cache_file == "fp16bisect.timing.cache"  # no -o: the working directory
