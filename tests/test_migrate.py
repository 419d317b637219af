"""``migrate``: TensorRT 10 FP32 layer pins -> the override file and strongly typed model TensorRT 11 builds."""

import json

import onnx
import pytest
from conftest import LN, LN_IN, F, make_model, one_line_error, run
from onnx import helper

from fp16bisect.artifacts.migrate import map_layers, pins_from_list, pins_from_trtexec
from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph

CULPRITS = ["ln1_square", "ln1_var"]  # transformer_block's known set (sample_models/README.md)


def pinned(mixed_path) -> set:
    """The nodes the written model computes in FP32: those whose float outputs stay FLOAT."""
    model = onnx.load(mixed_path)
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    return {n.name for n in model.graph.node if n.output and types.get(n.output[0]) == onnx.TensorProto.FLOAT
            and n.op_type != "Cast" and n.name}


def test_trtexec_pins_become_the_override_file_and_model_that_apply_verify_accepts(tmp_path, capsys):
    mixed, overrides = tmp_path / "m.onnx", tmp_path / "m.overrides.json"
    code, out, err = run(capsys, "migrate", LN, "--trtexec-args",
                         "trtexec --onnx=x.onnx --fp16 --precisionConstraints=obey "
                         "--layerPrecisions=ln1_square:fp32,ln1_var:fp32,gone:fp32 --layerOutputTypes=ln1_var:fp32",
                         "-o", mixed, "--verify", "--inputs", LN_IN)
    assert code == 0, err
    data = json.loads(overrides.read_text())
    assert [n["name"] for n in data["fp32_nodes"]] == CULPRITS
    assert data["search"]["status"] == "migrated" and data["search"]["minimal"] is False
    assert data["search"]["migrated_from"]["unmapped"] == ["gone"]
    assert "not mapped: layer 'gone'" in out and "verified: the written model meets the tolerance" in out
    code, out, err = run(capsys, "apply", overrides, LN, "-o", tmp_path / "again.onnx", "--verify", "--inputs", LN_IN)
    assert code == 0 and "verified" in out, err


def test_a_polygraphy_list_or_one_pin_a_line_gives_the_same_nodes(tmp_path, capsys):
    listed = tmp_path / "pins.txt"
    listed.write_text("# from polygraphy --layer-precisions\nln1_square:float32 ln1_var:float32 ln1_mean:float16\n")
    lines = tmp_path / "lines.txt"
    lines.write_text("ln1_square:fp32\n\nln1_var:fp32  # the variance\n")
    for source in (listed, lines):
        out = tmp_path / f"{source.stem}.onnx"
        code, _, err = run(capsys, "migrate", LN, "--layer-precisions", source, "-o", out)
        assert code == 0, err
        assert [n["name"] for n in json.loads(out.with_suffix(".overrides.json").read_text())["fp32_nodes"]] \
            == CULPRITS
    assert pins_from_list(listed.read_text(), "pins.txt").other == (("ln1_mean", "float16"),)


def test_layer_names_map_back_to_nodes_as_the_parser_made_them():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["s"]),  # no name: TensorRT calls its layer node_of_s
             helper.make_node("Reshape", ["s", "shape"], ["y"], name="flat")]
    import numpy as np
    graph = Graph(make_model(nodes, [("x", F, [2, 3])], [("y", F, [6])], {"shape": np.array([6], np.int64)}))
    found = map_layers(graph, ["relu_1", "node_of_s", "flat", "nothing"])
    assert found.nodes == ["relu", "s"] and found.layers == {"relu_1": "relu", "node_of_s": "s"}
    assert found.unmapped == ["nothing"] and found.not_candidates == {"flat": "flat"}


@pytest.mark.parametrize("args, says", [
    (["--trtexec-args", "--fp16 --layerPrecisions=nope:fp32,never:fp32"], "none of the 2 FP32 layer(s) maps"),
    (["--trtexec-args=--fp16"], "holds no --layerPrecisions"),
    (["--trtexec-args", "--fp16 --layerPrecisions=*:fp32"], "pins every layer"),
    (["--trtexec-args", "--fp16 --layerPrecisions=ln1_var"], "is not LAYER:PRECISION"),
    (["--layer-precisions", "missing.txt"], "cannot read --layer-precisions"),
])
def test_pins_that_map_to_nothing_or_cannot_be_read_exit_2_in_one_line(tmp_path, capsys, args, says):
    code, _, err = run(capsys, "migrate", LN, *args, "-o", tmp_path / "m.onnx")
    assert code == 2 and says in one_line_error(err)
    assert not (tmp_path / "m.onnx").exists()


def test_trtexec_flags_take_their_value_after_an_equals_sign_or_a_blank():
    pins = pins_from_trtexec("--best --layerPrecisions 'a b':fp32,c:fp16 --layerOutputTypes=d:fp32")
    assert pins.fp32 == ("a b", "d") and pins.other == (("c", "fp16"),) and pins.low_precision
    assert not pins_from_trtexec("--layerPrecisions=a:fp32").low_precision
    with pytest.raises(UsageError, match="cannot be split"):
        pins_from_trtexec("--layerPrecisions='a:fp32")


def test_a_verified_migration_records_where_it_was_verified_and_check_compares_it(tmp_path, capsys):
    import onnxruntime

    mixed, overrides = tmp_path / "m.onnx", tmp_path / "m.overrides.json"
    pins = "--fp16 --layerPrecisions=ln1_square:fp32,ln1_var:fp32"
    assert run(capsys, "migrate", LN, "--trtexec-args", pins, "-o", mixed, "-q")[0] == 0
    assert "environment" not in json.loads(overrides.read_text())  # nothing verified it
    assert run(capsys, "migrate", LN, "--trtexec-args", pins, "-o", mixed, "--verify", "--inputs", LN_IN, "-q")[0] == 0
    data = json.loads(overrides.read_text())
    assert data["environment"]["backend"] == "emulate"
    assert data["environment"]["onnxruntime"] == onnxruntime.__version__
    assert list(data).index("environment") == list(data).index("backend") + 1  # in the builder's order
    code, _, err = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", overrides, "--strict-environment", "-q")
    assert code == 0, err
