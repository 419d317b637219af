"""The emulate backend implements ARCHITECTURE.md's FP16 semantics, in one session per model."""

import numpy as np
import pytest
from conftest import F, make_model
from emulated_plans import run_plan_model
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.backends.emulate.selftest import self_test
from fp16bisect.model.graph import Graph

BIG = np.array([70000.0, 1e-8, 2049.0, 1.0], dtype=np.float32)


def chain():
    """x -> Reshape (transparent) -> Relu 'a' -> Mul 'b' (by 1) -> y"""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["xr"], name="reshape"),
        helper.make_node("Relu", ["xr"], ["a"], name="a"),
        helper.make_node("Mul", ["a", "one"], ["y"], name="b"),
    ]
    inits = {"shape": np.array([4], dtype=np.int64), "one": np.array(1.0, dtype=np.float32)}
    return Graph(make_model(nodes, [("x", F, [4])], [("y", F, [4])], inits))


def test_self_test_passes_on_this_machine(monkeypatch):
    import fp16bisect.backends.emulate.selftest as emulate

    # it runs once per process: by now an earlier backend has run it, and a second call would return at once
    monkeypatch.setattr(emulate, "_SELF_TEST_DONE", False)
    self_test()  # raises if ONNX Runtime folded the Cast pair
    assert emulate._SELF_TEST_DONE


def test_fp16_candidate_rounds_inputs_and_outputs():
    graph = chain()
    backend = EmulateBackend(graph)
    assert [n.id for n in graph.candidates] == ["a", "b"]
    y = backend.run(frozenset(), {"x": BIG})["y"]
    assert np.isinf(y[0]) and y[1] == 0.0 and y[2] == 2048.0 and y[3] == 1.0


def test_fp32_everywhere_is_exact():
    backend = EmulateBackend(chain())
    y = backend.run(frozenset({"a", "b"}), {"x": BIG})["y"]
    np.testing.assert_array_equal(y, BIG)


def test_fp32_producer_then_fp16_consumer_rounds_at_the_consumer():
    # 'a' keeps 70000 in FP32, but 'b' in FP16 reads it rounded: inf, as a TensorRT reformat would.
    backend = EmulateBackend(chain())
    assert np.isinf(backend.run(frozenset({"a"}), {"x": BIG})["y"][0])
    # 'a' in FP16 already overflows; pinning only 'b' cannot help.
    assert np.isinf(backend.run(frozenset({"b"}), {"x": BIG})["y"][0])


def test_transparent_ops_never_round():
    nodes = [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0], name="t")]
    graph = Graph(make_model(nodes, [("x", F, [1, 4])], [("y", F, [4, 1])]))
    assert graph.candidates == []


@st.composite
def plans(draw):
    ids = ["m1", "s1", "e1", "m2", "add", "red"]
    return frozenset(draw(st.sets(st.sampled_from(ids))))


def mixed_graph():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m1"], name="m1"),
        helper.make_node("Softmax", ["m1"], ["s1"], name="s1", axis=-1),
        helper.make_node("Exp", ["s1"], ["e1"], name="e1"),
        helper.make_node("MatMul", ["e1", "w"], ["m2"], name="m2"),
        helper.make_node("Add", ["m2", "x"], ["add"], name="add"),
        helper.make_node("ReduceSum", ["add", "axes"], ["red"], name="red", keepdims=1),
    ]
    rng = np.random.default_rng(0)
    inits = {"w": rng.normal(size=(8, 8)).astype(np.float32) * 3, "axes": np.array([1], dtype=np.int64)}
    return Graph(make_model(nodes, [("x", F, [3, 8])], [("red", F, [3, 1]), ("add", F, [3, 8])], inits))


GRAPH = mixed_graph()
BACKEND = EmulateBackend(GRAPH)
X = (np.random.default_rng(1).normal(size=(3, 8)) * 50).astype(np.float32)


@settings(max_examples=25, deadline=None)
@given(plans())
def test_one_session_matches_a_fresh_session_per_plan(plan):
    """The mask-driven session equals the plan baked into the graph, bit for bit."""
    got = BACKEND.run(plan, {"x": X})
    want = run_plan_model(GRAPH, plan, {"x": X})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_unknown_node_in_plan_is_an_error():
    with pytest.raises(KeyError):
        BACKEND.run(frozenset({"nope"}), {"x": X})


def test_self_test_refuses_a_runtime_that_folds_cast_pairs(monkeypatch):
    """If ONNX Runtime ever removed the rounding, the backend must refuse to start, not emulate nothing."""
    import fp16bisect.backends.emulate.selftest as emulate

    class Folding:
        def __init__(self, model, what):
            pass

        def run(self, names, feed):
            return [feed["x"]]  # the Cast pair optimised away: 70000 stays 70000

    monkeypatch.setattr(emulate, "_SELF_TEST_DONE", False)
    monkeypatch.setattr(emulate, "session", Folding)
    with pytest.raises(RuntimeError, match="self-test failed"):
        emulate.self_test()
    assert not emulate._SELF_TEST_DONE  # a failed self-test is not remembered as passed: the next backend asks again
