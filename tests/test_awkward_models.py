"""Models that are not sample models: dynamic dimensions, several inputs and outputs, integer and boolean
tensors, every opset from 11, custom domains, FP16 already inside, weights kept outside the file."""

import json

import numpy as np
import onnx
import pytest
from conftest import F
from onnx import TensorProto, helper, numpy_helper

from fp16bisect.model import weights
from fp16bisect.model.weights import inline
from fp16bisect.cli.main import main
from fp16bisect.model.graph import Graph
from fp16bisect.artifacts.mixed import convert

H = TensorProto.FLOAT16


def save(model, tmp_path, name="m", **arrays):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    npz = tmp_path / f"{name}.npz"
    np.savez(npz, **arrays)
    return str(path), str(npz)


def searched(tmp_path, capsys, model, npz, *extra):
    out = tmp_path / "o.json"
    code = main(["search", model, "--inputs", npz, *map(str, extra), "-o", str(out), "-q"])
    err = capsys.readouterr().err
    assert code == 0, err
    return json.loads(out.read_text())


def overflow_chain(x, name, opset=17):
    """x -> *300 (big) -> square (overflows FP16) -> sqrt -> /300: fine in FP32, inf in FP16."""
    c = lambda v, n: helper.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, np.float32), n))  # noqa: E731
    return [
        c(300.0, f"{name}_k"), c(1 / 300.0, f"{name}_inv"),
        helper.make_node("Mul", [x, f"{name}_k"], [f"{name}_big"], name=f"{name}_scale"),
        helper.make_node("Mul", [f"{name}_big", f"{name}_big"], [f"{name}_sq"], name=f"{name}_square"),
        helper.make_node("Sqrt", [f"{name}_sq"], [f"{name}_root"], name=f"{name}_sqrt"),
        helper.make_node("Mul", [f"{name}_root", f"{name}_inv"], [f"{name}_out"], name=f"{name}_unscale"),
    ]


def model_of(nodes, inputs, outputs, opset=17, domains=()):
    graph = helper.make_graph(nodes, "awkward", inputs, outputs)
    opsets = [helper.make_opsetid("", opset), *[helper.make_opsetid(d, 1) for d in domains]]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    return model


def test_dynamic_dimensions_take_their_shapes_from_the_samples(tmp_path, capsys):
    nodes = overflow_chain("x", "a") + [helper.make_node("Relu", ["a_out"], ["y"], name="relu")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, ["batch", 8])],
                     [helper.make_tensor_value_info("y", F, ["batch", 8])])
    path, npz = save(model, tmp_path, x=np.full((3, 8), 1.0, np.float32))
    other = tmp_path / "other.npz"
    np.savez(other, x=np.full((5, 8), 0.9, np.float32))
    out = tmp_path / "o.json"
    assert main(["search", path, "--inputs", npz, "--inputs", str(other), "-o", str(out), "-q"]) == 0
    data = json.loads(out.read_text())
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["a_sqrt", "a_square"]


def test_several_inputs_and_outputs_with_integer_and_boolean_tensors(tmp_path, capsys):
    nodes = overflow_chain("x", "a") + [
        helper.make_node("Gather", ["a_out", "idx"], ["picked"], name="gather", axis=1),
        helper.make_node("Where", ["mask", "picked", "zero"], ["y1"], name="where"),
        helper.make_node("ArgMax", ["a_out"], ["best"], name="argmax", axis=1, keepdims=0),
        helper.make_node("Sigmoid", ["z"], ["y2"], name="sigmoid"),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0.0, np.float32), "zero")),
    ]
    model = model_of(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 8]), helper.make_tensor_value_info("idx", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 3]), helper.make_tensor_value_info("z", F, [4])],
        [helper.make_tensor_value_info("y1", F, [2, 3]), helper.make_tensor_value_info("best", TensorProto.INT64, [2]),
         helper.make_tensor_value_info("y2", F, [4])],
    )
    path, npz = save(model, tmp_path, x=np.linspace(0.5, 1.0, 16, dtype=np.float32).reshape(2, 8),
                     idx=np.array([0, 3, 7]), mask=np.array([[True, False, True], [True, True, False]]),
                     z=np.ones(4, np.float32))
    data = searched(tmp_path, capsys, path, npz)
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["a_sqrt", "a_square"]
    assert set(data["metrics"]["with_overrides"]) == {"y1", "y2", "best"}  # the integer output: exactly
    assert data["metrics"]["with_overrides"]["best"]["rule"] == "exact"
    onnx.checker.check_model(inline(convert(Graph.load(path), ["a_square", "a_sqrt"]).model), full_check=True)


@pytest.mark.parametrize("opset", range(11, onnx.defs.onnx_opset_version() + 1))
def test_every_opset_from_11_to_the_newest(opset, tmp_path, capsys):
    nodes = overflow_chain("x", "a", opset) + [helper.make_node("Softmax", ["a_out"], ["y"], name="softmax", axis=1)]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, [2, 8])],
                     [helper.make_tensor_value_info("y", F, [2, 8])], opset=opset)
    onnx.checker.check_model(inline(model), full_check=True)
    path, npz = save(model, tmp_path, x=np.linspace(0.5, 1.0, 16, dtype=np.float32).reshape(2, 8))
    try:
        import onnxruntime as ort

        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # newer than the installed ONNX Runtime runs: a clear refusal, not a crash
        code = main(["search", path, "--inputs", npz, "-o", str(tmp_path / "o.json"), "-q"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "ONNX Runtime cannot load the model" in err
        assert "opset" in err.lower() or "ir version" in err.lower()
        return
    data = searched(tmp_path, capsys, path, npz)
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["a_sqrt", "a_square"]
    mixed = convert(Graph.load(path), ["a_square", "a_sqrt"]).model
    onnx.checker.check_model(inline(mixed), full_check=True)


def test_custom_domain_nodes_are_not_candidates_and_are_named(tmp_path, capsys):
    nodes = overflow_chain("x", "a") + [helper.make_node("Gelu", ["a_out"], ["y"], name="ms_gelu",
                                                         domain="com.microsoft")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, [2, 8])],
                     [helper.make_tensor_value_info("y", F, [2, 8])], domains=("com.microsoft",))
    path, npz = save(model, tmp_path, x=np.linspace(0.5, 1.0, 16, dtype=np.float32).reshape(2, 8))
    data = searched(tmp_path, capsys, path, npz)
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["a_sqrt", "a_square"]
    assert "ms_gelu" in data["skipped_nodes"] and any("ms_gelu" in note for note in data["notes"])


def test_a_model_that_already_holds_fp16_tensors(tmp_path, capsys):
    nodes = [
        helper.make_node("Cast", ["x"], ["xh"], name="to_half", to=H),
        helper.make_node("Relu", ["xh"], ["rh"], name="relu_half"),
        helper.make_node("Cast", ["rh"], ["r"], name="to_float", to=F),
        *overflow_chain("r", "a"),
        helper.make_node("Identity", ["a_out"], ["y"], name="ident"),
    ]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, [2, 8])],
                     [helper.make_tensor_value_info("y", F, [2, 8])])
    path, npz = save(model, tmp_path, x=np.linspace(0.5, 1.0, 16, dtype=np.float32).reshape(2, 8))
    data = searched(tmp_path, capsys, path, npz)
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["a_sqrt", "a_square"]
    graph = Graph.load(path)
    assert "relu_half" not in {n.id for n in graph.candidates}  # already FP16: nothing to decide
    onnx.checker.check_model(inline(convert(graph, ["a_square", "a_sqrt"]).model), full_check=True)


def test_weights_kept_outside_the_model_file(tmp_path, capsys):
    nodes = overflow_chain("x", "a") + [helper.make_node("MatMul", ["a_out", "w"], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "external", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 8])],
                              [numpy_helper.from_array(np.eye(8, dtype=np.float32) * 0.5, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
                    size_threshold=0)
    npz = tmp_path / "ext.npz"
    np.savez(npz, x=np.linspace(0.5, 1.0, 16, dtype=np.float32).reshape(2, 8))
    data = searched(tmp_path, capsys, str(path), str(npz))
    assert sorted(n["name"] for n in data["fp32_nodes"]) == ["a_sqrt", "a_square"]


def test_a_model_over_the_protobuf_limit_runs_from_files_with_external_weights(tmp_path, capsys, monkeypatch):
    """Over 2 GB a model cannot be one protobuf message: sessions, the checker and apply's output use
    external weights. The limit is lowered here so that a small model takes that path."""
    import fp16bisect.model.runtime as runtime
    from conftest import SAMPLES

    monkeypatch.setattr(weights, "PROTOBUF_LIMIT", 50_000)
    model, npz = SAMPLES / "transformer_block.onnx", SAMPLES / "transformer_block.npz"
    assert runtime.too_big(onnx.load(model))
    out = tmp_path / "o.json"
    assert main(["search", str(model), "--inputs", str(npz), "-o", str(out), "-q"]) == 0
    found = sorted(n["name"] for n in json.loads(out.read_text())["fp32_nodes"])
    assert found == ["ln1_square", "ln1_var"]
    mixed = tmp_path / "mixed.onnx"
    assert main(["apply", str(out), str(model), "-o", str(mixed), "--verify", "--inputs", str(npz)]) == 0
    assert "verified" in capsys.readouterr().out
    assert (tmp_path / "mixed.onnx.data").stat().st_size > 50_000
    loaded = onnx.load(mixed)  # with its weights, from beside it
    onnx.checker.check_model(str(mixed), full_check=True)
    assert {t.data_type for t in loaded.graph.initializer} >= {TensorProto.FLOAT16}


def test_a_model_with_external_data_is_searched_in_place_and_applied_with_external_data(tmp_path, capsys):
    """A model that keeps its weights in a file of their own (every model over 2 GB does) is read where it is
    and gets its mixed-precision model the same way: ``<name>.data`` beside it, whatever the size."""
    from conftest import SAMPLES

    model = onnx.load(SAMPLES / "transformer_block.onnx")
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="m.weights",
                    size_threshold=1024)
    npz = SAMPLES / "transformer_block.npz"
    out = tmp_path / "o.json"
    assert main(["search", str(path), "--inputs", str(npz), "-o", str(out), "-q"]) == 0
    assert sorted(n["name"] for n in json.loads(out.read_text())["fp32_nodes"]) == ["ln1_square", "ln1_var"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.onnx", "m.weights"]  # nothing written there
    mixed = tmp_path / "mixed.onnx"
    assert main(["apply", str(out), str(path), "-o", str(mixed), "--verify", "--inputs", str(npz), "-q"]) == 0
    assert "verified" in capsys.readouterr().out
    assert mixed.stat().st_size < 20_000 and (tmp_path / "mixed.onnx.data").stat().st_size > 20_000
    onnx.checker.check_model(str(mixed), full_check=True)
    assert TensorProto.FLOAT16 in {t.data_type for t in onnx.load(mixed).graph.initializer}
