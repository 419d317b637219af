"""Models with ONNX local functions: inlined when read (``model/functions.py``), every node inside a candidate named
``<call>/<node>``, and ``--group-by function`` searching the calls first, on a model whose answer is known."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import run
from onnx import TensorProto, helper

from fp16bisect.artifacts.overrides import problems
from fp16bisect.model.functions import inline
from fp16bisect.model.graph import Graph

F = TensorProto.FLOAT
ANSWER = ["/blk1/mean", "/blk1/plus_eps", "/blk1/root", "/blk1/square/mul"]


def ln_block() -> onnx.FunctionProto:
    """y = x * rsqrt(mean(x^2) + eps) (an RMS norm), ``eps`` an attribute with a default; it holds a nested call of
    ``sq`` (x^2) so ids nest."""
    eps = helper.make_node("Constant", [], ["eps"], name="eps", value_float=0.0)
    eps.attribute[0].ref_attr_name = "epsilon"
    return helper.make_function(
        "local", "ln_block", ["x"], ["y"],
        [helper.make_node("sq", ["x"], ["s"], name="square", domain="local"),
         helper.make_node("ReduceMean", ["s"], ["m"], name="mean", keepdims=1, axes=[-1]),
         eps,
         helper.make_node("Add", ["m", "eps"], ["me"], name="plus_eps"),
         helper.make_node("Sqrt", ["me"], ["r"], name="root"),
         helper.make_node("Div", ["x", "r"], ["y"], name="divide")],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        attributes=["epsilon"])


def functions_model() -> onnx.ModelProto:
    """a in 1..4: /blk0 is harmless; /scale multiplies by 1000, so in /blk1 the squares (up to 1.6e7), their mean
    (7.5e6) and the mean plus eps overflow FP16, while the root (2739) and the division do not: the answer is
    {/blk1/square/mul, /blk1/mean, /blk1/plus_eps, /blk1/root}. /scale is outside any call, a block of its own."""
    sq = helper.make_function("local", "sq", ["x"], ["y"], [helper.make_node("Mul", ["x", "x"], ["y"], name="mul")],
                              [helper.make_opsetid("", 17)])
    eps_default = helper.make_attribute("epsilon", 1e-6)
    block = ln_block()
    del block.attribute[:]
    block.attribute_proto.append(eps_default)
    graph = helper.make_graph(
        [helper.make_node("ln_block", ["a"], ["b"], name="/blk0", domain="local"),
         helper.make_node("Mul", ["b", "k"], ["c"], name="/scale"),
         helper.make_node("ln_block", ["c"], ["d"], name="/blk1", domain="local", epsilon=1e-5)],
        "g", [helper.make_tensor_value_info("a", F, [1, 4])], [helper.make_tensor_value_info("d", F, [1, 4])],
        [helper.make_tensor("k", F, [], [1000.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[sq, block])
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def functions(tmp_path):
    onnx.save(functions_model(), tmp_path / "f.onnx")
    np.savez(tmp_path / "a.npz", a=np.array([[1, 2, 3, 4]], np.float32))
    return ["search", tmp_path / "f.onnx", "--inputs", tmp_path / "a.npz", "-o", tmp_path / "o.json"]


def test_inlined_nodes_are_named_by_their_call_and_the_model_still_computes_the_same():
    model = functions_model()
    inlined, calls = inline(model)
    ids = [n.name for n in inlined.graph.node]
    assert ids == ["/blk0/square/mul", "/blk0/mean", "/blk0/eps", "/blk0/plus_eps", "/blk0/root", "/blk0/divide",
                   "/scale", "/blk1/square/mul", "/blk1/mean", "/blk1/eps", "/blk1/plus_eps", "/blk1/root",
                   "/blk1/divide"]
    assert calls["/blk1/square/mul"] == ("ln_block", "/blk1") and "/scale" not in calls
    eps = {n.name: n.attribute[0].f for n in inlined.graph.node if n.op_type == "Constant"}
    assert eps == pytest.approx({"/blk0/eps": 1e-6, "/blk1/eps": 1e-5})  # the default, and the call's attribute
    assert not inlined.functions and [o.domain for o in inlined.opset_import] == [""]
    a = np.array([[1, 2, 3, 4]], np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"a": a})[0]
    got = ort.InferenceSession(inlined.SerializeToString()).run(None, {"a": a})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "/blk1/mean" in {n.id for n in Graph(model).candidates}


def test_search_finds_the_inlined_nodes_of_the_overflowing_call_and_apply_verifies(functions, tmp_path, capsys):
    code, out, err = run(capsys, *functions, "-q")
    assert code == 0
    data = json.loads((tmp_path / "o.json").read_text())
    assert problems(data) == ""
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ANSWER
    assert any("local functions were inlined" in note and "/blk0, /blk1" in note for note in data["notes"])
    code, out, err = run(capsys, "apply", functions[1], tmp_path / "o.json", "-o", tmp_path / "m.onnx", "--verify",
                         "--inputs", functions[3])
    assert code == 0, out + err
    kept = {n.name: n.op_type for n in onnx.load(tmp_path / "m.onnx").graph.node}
    assert kept["/blk1/mean"] == "ReduceMean" and not onnx.load(tmp_path / "m.onnx").functions


def test_group_by_function_finds_the_call_then_the_nodes_inside(functions, tmp_path, capsys):
    code, out, err = run(capsys, *functions, "--group-by", "function")
    assert code == 0
    data = json.loads((tmp_path / "o.json").read_text())
    assert problems(data) == ""
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ANSWER
    assert data["blocks"] == [{"name": "/blk1", "nodes": 5,
                               "fp32_nodes": ["/blk1/square/mul", "/blk1/mean", "/blk1/plus_eps", "/blk1/root"]}]
    assert "--group-by function: 11 candidate(s) in 3 block(s) (1 node(s) outside any function call" in err
