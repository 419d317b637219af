"""An FP16 BatchNormalization whose statistics FP16 cannot hold is written folded, as TensorRT builds it."""

import json

import numpy as np
import onnx
import pytest
from conftest import BN_CHANNELS as C
from conftest import conv_bn_relu, one_line_error, run
from onnx import TensorProto
from real_models import PP_OCRV4_DET, real_model

from fp16bisect.model import weights
from fp16bisect.model.weights import inline
from fp16bisect.artifacts.mixed import convert
from fp16bisect.artifacts.verify import storage_emulation
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.model.graph import Graph
from fp16bisect.model.runtime import session

H = TensorProto.FLOAT16


def test_apply_writes_a_bn_with_a_1e8_variance_as_its_folded_scale_and_shift(tmp_path, capsys):
    model = conv_bn_relu()
    path, inputs, overrides, out = (tmp_path / n for n in ("m.onnx", "x.npz", "o.json", "mixed.onnx"))
    onnx.save(model, path)
    x = np.random.default_rng(1).normal(size=(1, 3, 8, 8)).astype(np.float32)
    np.savez(inputs, x=x)
    assert run(capsys, "search", path, "--inputs", inputs, "-o", overrides, "-q")[0] == 0  # all FP16 passes
    code, stdout, err = run(capsys, "apply", overrides, path, "-o", out, "--verify", "--inputs", inputs)
    assert code == 0, err
    assert ("BatchNormalization bn written as its folded FP32-computed scale and shift in FP16 "
            "(its running variance 1e+08 does not fit FP16; TensorRT folds it the same way)") in " ".join(stdout.split())
    assert "verified" in stdout
    mixed = onnx.load(out)
    onnx.checker.check_model(inline(mixed), full_check=True)
    assert [n.op_type for n in mixed.graph.node if n.op_type not in ("Cast",)] == ["Conv", "Mul", "Add", "Relu"]
    assert [o.name for o in mixed.graph.output] == ["y"]
    add = next(n for n in mixed.graph.node if n.op_type == "Add")
    assert (add.name, list(add.output)) == ("bn", ["bn_out"])  # the BN's own name and output tensor
    assert Graph(mixed).dtypes["bn_out"] == H
    assert {t.name for t in mixed.graph.initializer} == {"w", "bn/folded_scale", "bn/folded_shift"}  # no dead stats
    expected = session(model).run(None, {"x": x})[0]
    got = session(mixed).run(None, {"x": x})[0]  # FP32 ONNX Runtime, FP16 inside
    assert np.abs(expected).max() > 1  # the BN does not wipe the signal out
    np.testing.assert_allclose(got, expected, atol=2e-2, rtol=2e-2)


def test_a_bn_whose_statistics_fit_fp16_stays_a_bn_node():
    mixed = convert(Graph(conv_bn_relu(var=1.0, gamma=1.0)), [])
    bn = [n for n in mixed.model.graph.node if n.op_type == "BatchNormalization"]
    assert [n.name for n in bn] == ["bn"] and mixed.notes == []
    assert {t.name: t.data_type for t in mixed.model.graph.initializer if t.name in ("var", "gamma")} == {
        "var": H, "gamma": H}


def test_a_bn_whose_variance_would_flush_to_zero_in_fp16_is_folded_too():
    mixed = convert(Graph(conv_bn_relu(var=1e-9, gamma=1.0)), [])
    assert "BatchNormalization" not in {n.op_type for n in mixed.model.graph.node}
    assert mixed.notes == ["BatchNormalization bn written as its folded FP32-computed scale and shift in FP16 "
                           "(its running variance 1e-09 is below FP16's smallest subnormal; TensorRT folds it the same way)"]


def test_a_bn_in_training_mode_is_not_folded_and_its_statistics_saturate():
    """Not foldable (training mode): written as it is, its variance 1e8 stored as 65504 by the constant rule."""
    mixed = convert(Graph(conv_bn_relu(opset=12, training=True)), [])
    stored = {t.name: weights.array(t) for t in mixed.model.graph.initializer}
    assert stored["var"].dtype == np.float16 and set(stored["var"].tolist()) == {65504.0}
    assert [(c.constant, c.saturated, c.readers) for c in mixed.conversions] == [("var", C, ("bn",))]


def test_at_opset_14_only_scale_and_bias_are_stored_in_fp16():
    """Opset 14 types scale and bias like X, mean and variance by U: a variance of 1e8 stays FP32, unfolded."""
    mixed = convert(Graph(conv_bn_relu(opset=14)), [])
    assert "BatchNormalization" in {n.op_type for n in mixed.model.graph.node} and mixed.conversions == []
    stored = {t.name: weights.array(t) for t in mixed.model.graph.initializer}
    assert stored["gamma"].dtype == np.float16 and stored["var"].dtype == np.float32


def test_a_folded_scale_beyond_fp16_saturates_and_is_reported():
    mixed = convert(Graph(conv_bn_relu(var=1e8, gamma=1e10)), [])
    scale = weights.array(next(t for t in mixed.model.graph.initializer if t.name == "bn/folded_scale"))
    assert set(scale.ravel().tolist()) == {65504.0}  # 1e10 / 1e4 = 1e6, saturated by the constant rule
    assert [(c.constant, c.saturated) for c in mixed.conversions] == [("bn/folded_scale", C), ("bn/folded_shift", C)]
    assert convert(Graph(conv_bn_relu(var=1e8, gamma=1e10)), ["bn"]).notes == []  # pinned: nothing to fold


@pytest.mark.parametrize("opset", [12, 14, 15])
def test_an_fp16_bn_is_written_at_every_opset(opset):
    for var, gamma in ((1e8, 1e4), (1.0, 1.0), (1e-9, 1.0)):
        mixed = convert(Graph(conv_bn_relu(var=var, gamma=gamma, opset=opset)), [])
        onnx.checker.check_model(inline(mixed.model), full_check=True)
        session(mixed.model)  # ONNX Runtime loads it


def test_pp_ocrv4_det_all_fp16_is_written_and_verifies(tmp_path, capsys):
    """PP-OCRv4 det (opset 12): p2o.BatchNormalization.1's running variance 9.79e7 refused every plan before."""
    model = real_model(PP_OCRV4_DET)
    inputs, overrides, out = tmp_path / "x.npz", tmp_path / "o.json", tmp_path / "mixed.onnx"
    np.savez(inputs, x=np.random.default_rng(0).normal(size=(1, 3, 64, 64)).astype(np.float32))
    assert run(capsys, "search", model, "--inputs", inputs, "--atol", "0.05", "-o", overrides, "-q")[0] == 0
    code, stdout, err = run(capsys, "apply", overrides, model, "-o", out, "--verify", "--inputs", inputs)
    assert code == 0, one_line_error(err)
    assert "0 pinned in FP32" in stdout and "verified" in stdout
    assert "BatchNormalization p2o.BatchNormalization.1 written as its folded" in " ".join(stdout.split())
    mixed = onnx.load(out)
    assert "p2o.BatchNormalization.1" not in {n.name for n in mixed.graph.node if n.op_type == "BatchNormalization"}
    assert [o.name for o in mixed.graph.output] == [o.name for o in onnx.load(model).graph.output]


def test_a_bn_whose_input_rank_shape_inference_does_not_know_is_folded_too(tmp_path, capsys):
    """Its rank unknown (a Reshape with a computed shape, as in Paddle exports), a BN with a 1e8 running variance
    was written as it is, its variance saturated to 65504, and pinned in FP32; X viewed as (N, C, -1), the fold
    needs no rank: all FP16 passes and the file computes the BN in FP16 from FP32-folded statistics."""
    model = conv_bn_relu(unknown_rank=True)
    assert Graph(model).ranks.get("reshaped") is None
    path, inputs, overrides, out = (tmp_path / n for n in ("m.onnx", "x.npz", "o.json", "mixed.onnx"))
    onnx.save(model, path)
    x = np.random.default_rng(1).normal(size=(1, 3, 8, 8)).astype(np.float32)
    np.savez(inputs, x=x)
    assert run(capsys, "search", path, "--inputs", inputs, "-o", overrides, "-q")[0] == 0
    assert json.loads(overrides.read_text())["fp32_nodes"] == []  # was [bn]
    code, stdout, err = run(capsys, "apply", overrides, path, "-o", out, "--verify", "--inputs", inputs)
    assert code == 0, err
    assert "BatchNormalization bn written as its folded FP32-computed scale and shift" in " ".join(stdout.split())
    assert "verified" in stdout
    mixed = onnx.load(out)
    onnx.checker.check_model(inline(mixed), full_check=True)
    assert "BatchNormalization" not in {n.op_type for n in mixed.graph.node}
    stored = {t.name: weights.array(t) for t in mixed.graph.initializer}
    assert not {"gamma", "beta", "mean", "var"} & set(stored)  # no statistic saturated into FP16
    assert stored["bn/folded_scale"].dtype == np.float16 and stored["bn/folded_scale"].shape == (C, 1)
    expected = session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(session(mixed).run(None, {"x": x})[0], expected, atol=2e-2, rtol=2e-2)


def test_a_bn_of_unknown_rank_is_folded_into_the_values_of_the_known_rank_fold():
    """The flat fold and the (C, 1, 1) fold are one plan: bit for bit the same outputs, written and emulated."""
    x = {"x": np.random.default_rng(2).normal(size=(1, 3, 8, 8)).astype(np.float32)}
    known, unknown = (Graph(conv_bn_relu(unknown_rank=flag)) for flag in (False, True))
    assert unknown.batchnorm_fold(unknown.by_id["bn"]) is not None  # was None: written unfolded, saturated
    written = [session(storage_emulation(convert(g, []).model)).run(None, x)[0] for g in (known, unknown)]
    emulated = [EmulateBackend(g).run(frozenset(), x)["y"] for g in (known, unknown)]
    assert np.array_equal(*written) and np.array_equal(*emulated)
