"""Control flow (If, Loop): the whole node is one candidate and its subgraphs follow its precision."""

import numpy as np
import pytest
from conftest import F, make_model
from emulated_plans import run_plan_model
from onnx import TensorProto, helper

from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.model.graph import Graph
from fp16bisect.model.graph import notes

X = np.array([300.0, -2.0, 0.5, 250.0], dtype=np.float32)  # 300^2 = 90000 > 65504


def _info(name, shape=None, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def if_model():
    """y = If(sum(x) > 0) then (x*x)/x_abs... : the then-branch squares x (overflows in FP16) and divides it
    back into range; the else-branch negates x. Only the If and a Relu after it are candidates outside."""
    then = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "x"], ["sq"], name="inner_square"),
            helper.make_node("Div", ["sq", "hundred"], ["t"], name="inner_div"),
        ],
        "then", [], [_info("t", [4])],
    )
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="inner_neg")], "else", [], [_info("e", [4])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
        helper.make_node("If", ["c"], ["b"], name="branch", then_branch=then, else_branch=other),
        helper.make_node("Relu", ["b"], ["y"], name="relu"),
    ]
    inits = {"zero": np.array(0.0, np.float32), "hundred": np.array(100.0, np.float32)}
    return Graph(make_model(nodes, [("x", F, [4])], [("y", F, [4])], inits))


def loop_model():
    """Three iterations of h = (h*h) / 300 + 1 - h/300 ... kept simple: h = Div(Mul(h, h), h_abs_max) with the
    square past 65504 on the first iteration, then back in range."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["h_in", "h_in"], ["sq"], name="body_square"),
            helper.make_node("Div", ["sq", "scale"], ["h_out"], name="body_div"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [_info("iter", [], TensorProto.INT64), _info("cond_in", [], TensorProto.BOOL), _info("h_in", [4])],
        [_info("cond_out", [], TensorProto.BOOL), _info("h_out", [4])],
    )
    nodes = [
        helper.make_node("Loop", ["trips", "", "x"], ["h"], name="loop", body=body),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    inits = {"trips": np.array(2, np.int64), "scale": np.array(300.0, np.float32)}
    return Graph(make_model(nodes, [("x", F, [4])], [("y", F, [4])], inits))


def expected_if(x):
    return np.maximum(x * x / 100, 0)


def expected_loop(x):
    h = x.astype(np.float64)
    for _ in range(2):
        h = h * h / 300
    return np.maximum(h, 0).astype(np.float32)


@pytest.mark.parametrize("make, expected, node", [(if_model, expected_if, "branch"), (loop_model, expected_loop, "loop")])
def test_subgraph_follows_its_node(make, expected, node):
    graph = make()
    assert node in {n.id for n in graph.candidates}
    backend = EmulateBackend(graph)
    want = expected(X)
    fp16 = backend.run(frozenset(), {"x": X})["y"]
    assert np.isinf(fp16[0]), "in FP16 the square inside the subgraph overflows"
    pinned = backend.run(frozenset({node}), {"x": X})["y"]
    np.testing.assert_allclose(pinned, want, rtol=1e-2, atol=1e-6)  # the relu after it may stay in FP16
    everything = frozenset(n.id for n in graph.candidates)
    np.testing.assert_allclose(backend.run(everything, {"x": X})["y"], want, rtol=1e-6)
    # pinning everything except the control-flow node does not help: its subgraph still rounds
    assert np.isinf(backend.run(everything - {node}, {"x": X})["y"][0])


@pytest.mark.parametrize("make", [if_model, loop_model])
def test_one_session_matches_the_baked_plan_with_subgraphs(make):
    graph = make()
    backend = EmulateBackend(graph)
    ids = [n.id for n in graph.candidates]
    xs = [X, np.array([3.0, 1e-8, 2049.0, -0.5], np.float32), -X]
    for r in range(1 << len(ids)):
        plan = frozenset(i for b, i in enumerate(ids) if r >> b & 1)
        for x in xs:
            got, want = backend.run(plan, {"x": x})["y"], run_plan_model(graph, plan, {"x": x})["y"]
            np.testing.assert_array_equal(got, want)


def test_nested_if_inside_a_loop_is_rounded_too():
    inner_then = helper.make_graph([helper.make_node("Mul", ["h_in", "h_in"], ["t"], name="deep_square")],
                                   "then", [], [_info("t", [4])])
    inner_else = helper.make_graph([helper.make_node("Neg", ["h_in"], ["e"], name="deep_neg")],
                                   "else", [], [_info("e", [4])])
    body = helper.make_graph(
        [
            helper.make_node("If", ["cond_in"], ["sq"], name="body_if", then_branch=inner_then, else_branch=inner_else),
            helper.make_node("Div", ["sq", "scale"], ["h_out"], name="body_div"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [_info("iter", [], TensorProto.INT64), _info("cond_in", [], TensorProto.BOOL), _info("h_in", [4])],
        [_info("cond_out", [], TensorProto.BOOL), _info("h_out", [4])],
    )
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body)]
    inits = {"trips": np.array(1, np.int64), "scale": np.array(300.0, np.float32)}
    graph = Graph(make_model(nodes, [("x", F, [4])], [("y", F, [4])], inits))
    backend = EmulateBackend(graph)
    assert np.isinf(backend.run(frozenset(), {"x": X})["y"][0])
    np.testing.assert_allclose(backend.run(frozenset({"loop"}), {"x": X})["y"], X * X / 300, rtol=1e-6)
    for plan in (frozenset(), frozenset({"loop"})):
        np.testing.assert_array_equal(backend.run(plan, {"x": X})["y"], run_plan_model(graph, plan, {"x": X})["y"])


def test_notes_say_the_subgraphs_follow_their_node():
    (line,) = notes(if_model())
    assert "rounded with" in line and "branch" in line
