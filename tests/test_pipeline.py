"""The search end to end on the sample models, checked against the oracle directly."""

import pytest
from conftest import SAMPLES

from fp16bisect.pipeline import search_model
from fp16bisect.tolerance import Tolerance

ONE_SITE = ["transformer_block", "cnn_batchnorm", "attention_unscaled", "log_underflow"]


def searched(name, known):
    spec = known[name]
    return search_model(
        str(SAMPLES / f"{name}.onnx"),
        [str(SAMPLES / f"{name}.npz")],
        tolerance=Tolerance(atol=spec["atol"], rtol=spec["rtol"]),
    )


@pytest.mark.parametrize("name", ONE_SITE + ["two_branches", "accumulation"])
def test_found_set_passes_and_every_removal_fails_when_evaluated(name, known):
    outcome = searched(name, known)
    found = frozenset(outcome.result.fp32)
    assert found
    assert outcome.oracle.evaluate(found).passed
    for member in found:
        assert not outcome.oracle.evaluate(found - {member}).passed, f"{member} is not needed"


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
    for node in spec["branches"]:
        assert outcome.oracle.evaluate(everything - {node}).passed  # no single node fails alone
    assert len(outcome.result.fp32) == spec["minimal_size"]
    assert set(outcome.result.fp32) <= set(spec["branches"])


class FailingBuilds:
    """The emulate backend, except that plans for which ``bad(plan)`` holds fail to build (as TensorRT's can)."""

    def __init__(self, graph, bad):
        from fp16bisect.backends.emulate import EmulateBackend

        self.inner = EmulateBackend(graph)
        self.name, self.bad = "emulate", bad

    def versions(self):
        return self.inner.versions()

    def run(self, plan, inputs, repeat=0):
        from fp16bisect.errors import BuildFailed

        if self.bad(plan):
            raise BuildFailed(f"Error Code 1: Myelin (cannot compile a plan of {len(plan)} FP32 node(s))")
        return self.inner.run(plan, inputs)


def test_a_plan_that_fails_to_build_counts_as_failing_and_is_reported(known, monkeypatch):
    import fp16bisect.pipeline as pipeline

    monkeypatch.setattr(pipeline, "make_backend", lambda name, graph, **_: FailingBuilds(graph, lambda p: not p))
    outcome = searched("transformer_block", known)  # the all-FP16 engine cannot be built
    assert sorted(outcome.result.fp32) == ["ln1_square", "ln1_var"]
    assert outcome.data["search"]["build_failures"] == [
        {"fp32": [], "error": "Error Code 1: Myelin (cannot compile a plan of 0 FP32 node(s))"}]


def test_an_all_fp32_plan_that_fails_to_build_is_a_clear_error(known, monkeypatch):
    import fp16bisect.pipeline as pipeline
    from fp16bisect.errors import UsageError

    monkeypatch.setattr(pipeline, "make_backend", lambda name, graph, **_: FailingBuilds(graph, lambda p: "ln1_var" in p))
    with pytest.raises(UsageError, match="all-FP32 plan could not be built on the emulate backend: Error Code 1"):
        searched("transformer_block", known)
