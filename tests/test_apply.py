"""``fp16bisect apply`` as a user meets it: the file it writes, --verify, exit codes, one-line errors."""

import hashlib
import json

import onnx
import pytest
from conftest import LN, LN_IN, SAMPLES, one_line_error, run, shape_model
from onnx import TensorProto

from fp16bisect.model.weights import inline
from fp16bisect.cli.main import main
from fp16bisect.model.graph import Graph


@pytest.fixture(scope="module")
def overrides(tmp_path_factory):
    path = tmp_path_factory.mktemp("search") / "o.json"
    assert main(["search", str(LN), "--inputs", str(LN_IN), "-o", str(path), "-q"]) == 0
    return path


def test_apply_writes_a_checked_mixed_model_with_the_pins_in_fp32(overrides, tmp_path, capsys):
    out = tmp_path / "mixed.onnx"
    code, stdout, _ = run(capsys, "apply", overrides, LN, "-o", out)
    assert code == 0
    assert "2 pinned in FP32 (ln1_square, ln1_var)" in stdout and "passes onnx.checker" in stdout
    model = onnx.load(out)
    onnx.checker.check_model(inline(model), full_check=True)
    types = Graph(model).dtypes
    graph = Graph.load(LN)
    for pinned in ("ln1_square", "ln1_var"):
        assert types[graph.by_id[pinned].outputs[0]] == TensorProto.FLOAT
    assert all(v.type.tensor_type.elem_type == TensorProto.FLOAT for v in [*model.graph.input, *model.graph.output])
    assert sum(t == TensorProto.FLOAT16 for t in types.values()) > 20


def test_verify_passes_and_shows_the_all_fp16_contrast(overrides, tmp_path, capsys):
    code, stdout, _ = run(capsys, "apply", overrides, LN, "-o", tmp_path / "m.onnx", "--verify", "--inputs", LN_IN)
    assert code == 0
    assert "verified: the written model meets the tolerance on every sample; all-FP16 does not" in stdout
    assert "with overrides (FP16 storage)" in stdout and "all FP16 (FP16 storage)" in stdout


def test_verify_strict_adds_the_onnx_reference_bound(overrides, tmp_path, capsys):
    code, stdout, _ = run(capsys, "apply", overrides, LN, "-o", tmp_path / "m.onnx", "--verify", "strict",
                          "--inputs", LN_IN)
    assert code == 0
    assert "onnx.reference FP16 math" in stdout


def test_verify_fails_with_exit_1_when_the_overrides_do_not_suffice(overrides, tmp_path, capsys):
    data = json.loads(overrides.read_text())
    data["fp32_nodes"] = data["fp32_nodes"][:1]  # drop ln1_var: LayerNorm's variance overflows again
    weak = tmp_path / "weak.json"
    weak.write_text(json.dumps(data))
    out = tmp_path / "m.onnx"
    code, stdout, _ = run(capsys, "apply", weak, LN, "-o", out, "--verify", "--inputs", LN_IN)
    assert code == 1
    assert "NOT verified" in stdout and out.exists()


def test_tolerance_comes_from_the_override_file_unless_given(overrides, tmp_path, capsys):
    code, stdout, _ = run(capsys, "apply", overrides, LN, "-o", tmp_path / "m.onnx", "--verify", "--inputs", LN_IN)
    assert "(atol 0.01, rtol 0.01)" in stdout
    code, stdout, _ = run(capsys, "apply", overrides, LN, "-o", tmp_path / "m.onnx", "--verify", "--inputs", LN_IN,
                          "--atol", "1e-9", "--rtol", "0")
    assert code == 1 and "(atol 1e-09, rtol 0)" in stdout


def test_an_override_file_for_another_version_is_refused_unless_forced(overrides, tmp_path, capsys):
    retrained = onnx.load(LN)  # same nodes, other weights: another version of the model
    retrained.graph.initializer[0].raw_data = bytes(len(retrained.graph.initializer[0].raw_data))
    other = tmp_path / "retrained.onnx"
    onnx.save(retrained, other)
    code, _, err = run(capsys, "apply", overrides, other, "-o", tmp_path / "m.onnx")
    assert code == 2
    assert "was made for another model" in one_line_error(err) and "--force" in err
    code, _, err = run(capsys, "apply", overrides, other, "-o", tmp_path / "m.onnx", "--force")
    assert code == 0 and (tmp_path / "m.onnx").exists(), err


def test_an_override_file_for_another_model_is_refused_even_forced(overrides, tmp_path, capsys):
    other = SAMPLES / "attention_unscaled.onnx"  # shares nodes with transformer_block, none the file names
    for force in ((), ("--force",)):
        code, _, err = run(capsys, "apply", overrides, other, "-o", tmp_path / "m.onnx", *force)
        assert code == 2
        assert "none of which is in attention_unscaled.onnx: it was made for another model" in one_line_error(err)


def test_bad_input_exits_2_with_one_line(overrides, tmp_path, capsys):
    cases = [
        (("apply", overrides, LN, "-o", tmp_path / "m.onnx", "--verify"), "--verify needs samples"),
        (("apply", tmp_path / "missing.json", LN, "-o", tmp_path / "m.onnx"), "not found"),
        (("apply", overrides, LN, "-o", tmp_path / "m.json"), "give a path ending in .onnx"),
        (("apply", overrides, LN), "required: -o"),
        (("apply", overrides, LN, "-o", tmp_path), "is a directory"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, *argv)
        assert code == 2, argv
        assert message in one_line_error(err), (argv, err)
    data = json.loads(overrides.read_text())
    model = tmp_path / "shape.onnx"
    onnx.save(shape_model(), model)
    data["model"]["sha256"] = hashlib.sha256(model.read_bytes()).hexdigest()
    data["fp32_nodes"] = [{"name": "shape", "op_type": "Shape", "outputs": ["s"]}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, _, err = run(capsys, "apply", bad, model, "-o", tmp_path / "m.onnx")
    assert code == 2 and "'shape' (Shape) has no float output" in one_line_error(err)


def test_keep_fp32_adds_nodes_to_the_plan_and_to_the_contrast(overrides, tmp_path, capsys):
    code, stdout, _ = run(capsys, "apply", overrides, LN, "-o", tmp_path / "m.onnx", "--keep-fp32", "fc1_matmul",
                          "--verify", "--inputs", LN_IN)
    assert code == 0
    assert "3 pinned in FP32" in stdout and "fc1_matmul" in stdout
    types = Graph(onnx.load(tmp_path / "m.onnx")).dtypes
    assert types[Graph.load(LN).by_id["fc1_matmul"].outputs[0]] == TensorProto.FLOAT
    code, _, err = run(capsys, "apply", overrides, LN, "-o", tmp_path / "m.onnx", "--keep-fp32", "nope")
    assert code == 2 and "'nope' is not in the model" in one_line_error(err)


def test_fp16_io_writes_fp16_inputs_and_outputs_and_still_verifies(overrides, tmp_path, capsys):
    out = tmp_path / "m.onnx"
    code, stdout, _ = run(capsys, "apply", overrides, LN, "-o", out, "--fp16-io", "--verify", "--inputs", LN_IN)
    assert code == 0 and "verified" in stdout
    model = onnx.load(out)
    assert [v.type.tensor_type.elem_type for v in [*model.graph.input, *model.graph.output]] == [
        TensorProto.FLOAT16, TensorProto.FLOAT16]


def test_flags_stand_in_for_a_missing_tolerance_in_the_override_file(overrides, tmp_path, capsys):
    data = json.loads(overrides.read_text())
    data["tolerance"] = {}
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    code, _, err = run(capsys, "apply", bare, LN, "-o", tmp_path / "m.onnx", "--verify", "--inputs", LN_IN)
    assert code == 2 and "has no valid 'tolerance'" in one_line_error(err)
    code, stdout, _ = run(capsys, "apply", bare, LN, "-o", tmp_path / "m.onnx", "--verify", "--inputs", LN_IN,
                          "--atol", "0.01", "--rtol", "0.01")
    assert code == 0 and "verified" in stdout
