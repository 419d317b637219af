"""Node identity, candidates and loading errors."""

import numpy as np
import onnx
import pytest
from conftest import F, make_model
from onnx import TensorProto, helper

from fp16bisect.errors import UsageError
from fp16bisect.model import weights
from fp16bisect.model.graph import Graph
from fp16bisect.model.runtime import session


def test_unnamed_and_duplicate_nodes_get_stable_unique_ids():
    nodes = [
        helper.make_node("Relu", ["x"], ["r1"], name="act"),
        helper.make_node("Relu", ["r1"], ["r2"], name="act"),  # duplicate name
        helper.make_node("Exp", ["r2"], ["e"]),  # unnamed
        helper.make_node("Neg", ["e"], ["y"], name="neg"),
    ]
    graph = Graph(make_model(nodes, [("x", F, [2])], [("y", F, [2])]))
    assert [n.id for n in graph.candidates] == ["r1", "r2", "e", "neg"]
    assert graph.duplicate_names == {"act"}


def test_topological_order_even_when_the_file_is_not_sorted():
    nodes = [
        helper.make_node("Neg", ["a"], ["y"], name="second"),
        helper.make_node("Relu", ["x"], ["a"], name="first"),
    ]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])])
    assert [n.id for n in Graph(model).nodes] == ["first", "second"]


def test_cycle_is_a_usage_error():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="p"),
        helper.make_node("Relu", ["a"], ["b"], name="q"),
    ]
    model = make_model(nodes, [("x", F, [2])], [("a", F, [2])])
    with pytest.raises(UsageError, match="cycle"):
        Graph(model)


def test_shape_and_integer_nodes_are_not_candidates():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Add", ["s", "one"], ["s1"], name="int_add"),
        helper.make_node("Reshape", ["x", "s1m"], ["xr"], name="reshape"),
        helper.make_node("Cast", ["xr"], ["xc"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Sigmoid", ["xc"], ["y"], name="sig"),
        helper.make_node("Custom", ["y"], ["z"], name="mine", domain="com.example"),
    ]
    inits = {"one": np.array([0, 0], dtype=np.int64), "s1m": np.array([2, 2], dtype=np.int64)}
    model = make_model(nodes, [("x", F, [2, 2])], [("y", F, [2, 2]), ("z", F, [2, 2])], inits)
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    graph = Graph(model)
    assert [n.id for n in graph.candidates] == ["sig"]
    assert "mine" in graph.skipped


def test_external_data_is_read_in_place(tmp_path):
    w = np.arange(4096, dtype=np.float32).reshape(64, 64)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    model = make_model(nodes, [("x", F, [1, 64])], [("y", F, [1, 64])], {"w": w})
    path = tmp_path / "m.onnx"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
                    size_threshold=0)
    assert (tmp_path / "m.data").exists()
    graph = Graph.load(path)
    np.testing.assert_array_equal(graph.constant_value("w"), w)
    assert weights.reference(graph.model.graph.initializer[0])[0] == str((tmp_path / "m.data").resolve())
    sess = session(graph.runnable_copy())
    np.testing.assert_array_equal(sess.run(None, {"x": np.ones((1, 64), np.float32)})[0], w.sum(0, keepdims=True))
    (tmp_path / "m.data").write_bytes(b"\0" * 100)
    with pytest.raises(UsageError, match="truncated"):
        Graph.load(path)
    (tmp_path / "m.data").unlink()
    with pytest.raises(UsageError, match="external data"):
        Graph.load(path)


def test_inline_weights_are_read_where_they_are_in_the_model_file(tmp_path):
    """No copy of an inline model's weights: each refers to its own bytes in the .onnx file."""
    w = np.arange(4096, dtype=np.float32).reshape(64, 64)
    b = np.linspace(-1, 1, 64, dtype=np.float32)  # 256 bytes, under EXTERNAL_MIN: stays inline
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y0"], name="mm"),
             helper.make_node("Add", ["y0", "b"], ["y"], name="add")]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, [("x", F, [1, 64])], [("y", F, [1, 64])], {"w": w, "b": b}), path)
    graph = Graph.load(path)
    by_name = {t.name: t for t in graph.model.graph.initializer}
    assert weights.reference(by_name["w"])[0] == str(path.resolve())
    assert not weights.is_external(by_name["b"])
    assert graph.model.ByteSize() < 2048  # the skeleton: no weight inside
    np.testing.assert_array_equal(graph.constant_value("w"), w)
    x = np.linspace(0, 1, 64, dtype=np.float32).reshape(1, 64)
    np.testing.assert_allclose(session(graph.runnable_copy()).run(None, {"x": x})[0], x @ w + b, rtol=1e-6)


def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffnot a protobuf at all" * 10)
    with pytest.raises(UsageError, match="not an ONNX model"):
        Graph.load(bad)
    with pytest.raises(UsageError, match="not found"):
        Graph.load(tmp_path / "missing.onnx")


def test_control_flow_node_is_one_candidate_and_its_subgraph_is_counted():
    then = helper.make_graph([helper.make_node("Exp", ["x"], ["t"], name="inner_exp")], "then", [],
                             [helper.make_tensor_value_info("t", F, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="inner_neg")], "else", [],
                              [helper.make_tensor_value_info("e", F, [2])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
        helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other),
    ]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])], {"zero": np.array(0.0, np.float32)})
    graph = Graph(model)
    assert [n.id for n in graph.candidates] == ["sum", "branch"]
    assert graph.nested == {"branch": 2}
    assert graph.by_id["branch"].implicit == ("x",)


def test_large_activations_are_found_by_shape_inference():
    """Sessions of a model with an activation of 4M elements or more run without ONNX Runtime's arena."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    assert Graph(make_model(nodes, [("x", F, [4, 1024, 1024])], [("y", F, [4, 1024, 1024])])).large_activations
    assert not Graph(make_model(nodes, [("x", F, [1, 1024])], [("y", F, [1, 1024])])).large_activations
    assert not Graph(make_model(nodes, [("x", F, ["n", 1024])], [("y", F, ["n", 1024])])).large_activations


def test_a_weight_store_shared_by_threads_gives_every_tensor_its_own_bytes(tmp_path):
    """The command backend's threads write plans at once through one store (found by the README tests: with
    --jobs 2 plans were written with one weight's bytes at another's offset)."""
    from concurrent.futures import ThreadPoolExecutor

    from fp16bisect.model import weights

    store = weights.Store(tmp_path)
    values = {f"w{i}": np.full(1000 + 37 * i, i, np.float16) for i in range(64)}

    def write(name):
        derived = store.derived(f"half/{name}", name, lambda: values[name])  # each key computed once
        again = store.derived(f"half/{name}", f"{name}_again", lambda: np.zeros(1, np.float16))
        return name, weights.array(derived), weights.array(again)

    try:
        with ThreadPoolExecutor(8) as pool:
            for name, got, again in pool.map(write, list(values) * 3):
                assert np.array_equal(got, values[name]) and np.array_equal(again, values[name]), name
    finally:
        store.close()
