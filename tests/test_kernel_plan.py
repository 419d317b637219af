"""``fp16bisect kernels`` and ``fp16bisect.kernel_plan`` with a real TensorRT-RTX (builds on a CPU, runs nothing): the
answer's file and the all-FP16 file built, each pin and FP32-accumulation node placed in its engine kernel.

- the sample transformer's answer (its LayerNorm's x^2 and mean(x^2)): both in the one kernel of that LayerNorm,
  FP16 in and out, their outputs internal; TensorRT's LayerNorm warning names the other LayerNorms, not them;
- a cancelling ``x*4096/4096`` pair the all-FP16 engine removes: both pins moot;
- a pin on one of the three projections TensorRT fuses into one GEMM: the GEMM split, one more kernel;
- an FP32-accumulation MatMul: one GEMM kernel, FP16 in and out, its Casts inside;
- a model with a dynamic dimension builds for the shapes its override file records;
- without TensorRT: exit 2 saying how to install it.
"""

from __future__ import annotations

import doctest
import hashlib
import json

import numpy as np
import onnx
import pytest
from conftest import LN, LN_IN, SAMPLES, run
from test_kernel_plan_log import cancelling_pair

import fp16bisect

pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX is a test extra: pip install '.[test]'")

LN1 = {"o_proj_bias", "residual1_add", "ln1_mean", "ln1_sub", "ln1_square", "ln1_var", "ln1_add_eps", "ln1_sqrt",
       "ln1_div", "ln1_gamma", "ln1_beta"}  # the first residual add and LayerNorm: one generated kernel


@pytest.fixture(scope="module")
def answer(tmp_path_factory):
    """The sample transformer's override file (search on the emulator): ['ln1_square', 'ln1_var']."""
    path = tmp_path_factory.mktemp("answer") / "overrides.json"
    found = fp16bisect.search(LN, LN_IN, output=path)
    assert [n.name for n in found.fp32_nodes] == ["ln1_square", "ln1_var"]
    return path


def pinned(answer, tmp_path, names) -> str:
    """The answer's override file with ``names`` as its FP32 nodes instead."""
    data = json.loads(answer.read_text())
    data["fp32_nodes"] = [{"name": n} for n in names]
    path = tmp_path / "pinned.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_the_sample_answers_pins_land_in_their_layernorms_kernel_fp16_in_and_out_their_outputs_internal(
        answer, tmp_path, capsys):
    code, out, err = run(capsys, "kernels", LN, answer, "--json", tmp_path / "k.json", "--report", tmp_path / "k.html")
    assert code == 0, err
    plan = json.loads((tmp_path / "k.json").read_text())
    assert [(n["name"], n["state"], n["output"]) for n in plan["nodes"]] == [("ln1_square", "fp32", "internal"),
                                                                             ("ln1_var", "fp32", "internal")]
    for node in plan["nodes"]:
        (kernel,) = node["kernels"]
        assert kernel["layer_type"] == "kgen" and kernel["name"].startswith("__myl_")
        assert set(kernel["covers"]) == LN1 and kernel["casts"] >= 2  # our Casts to FP32 and back, inside it
        assert kernel["inputs"] == ["float16", "float16"] and kernel["outputs"] == ["float16"]
        assert not node["moot"] and node["split"] is None
        # the pinned square and mean between our Casts; all-FP16, that kernel squares and averages in FP16
        assert "SubCastMulMeanCast" in kernel["name"]
        assert [k["name"] for k in node["fp16_kernels"]] == [
            "__myl_AddAddMeanSubMulMeanAddSqrtCastDivCastMulCastMulAdd_myl0_7"]
    assert plan["kernels"] == plan["fp16_kernels"] == 11
    # TensorRT names the LayerNorm reductions it runs in FP16: the others, no longer ln1_var; it did all-FP16
    (warning,) = plan["warnings"]
    assert warning["text"] == "Detected layernorm nodes in FP16." and set(warning["nodes"]) == {"ln1_mean", "ln2_mean",
                                                                                              "ln2_var"}
    assert [n["warned_all_fp16"] for n in plan["nodes"]] == [False, True]
    assert "TensorRT's warning in the all-FP16 build names ln1_var; the answer's build does not" in out
    assert "ln1_square" in out and "FP16 -> FP16" in out and "internal" in out
    assert "chosen at JIT time on a GPU" in out and "TensorRT 10/11" in out  # the limits, said
    page = (tmp_path / "k.html").read_text()
    assert plan["model_sha256"] == hashlib.sha256(LN.read_bytes()).hexdigest() and plan["model_sha256"] in page
    assert 'id="kernel-plan"' in page and "ln1_square" in page and "Detected layernorm nodes in FP16" in page
    assert "building the answer&#x27;s file" not in page and "building the answer's file" in err


def test_a_cancelled_pair_the_all_fp16_engine_removes_is_reported_moot(tmp_path, capsys):
    graph = cancelling_pair()
    model, data = tmp_path / "pair.onnx", tmp_path / "x.npz"
    onnx.save(graph.model, model)
    np.savez(data, x=(np.random.default_rng(0).normal(size=(4, 64)) * 8).astype(np.float32))
    found = fp16bisect.search(model, data, output=tmp_path / "o.json")
    assert {n.name for n in found.fp32_nodes} == {"scale_up", "scale_down"}  # the emulator: x*4096 overflows
    plan = fp16bisect.kernel_plan(model, tmp_path / "o.json")
    assert {p.node for p in plan.moot} == {"scale_up", "scale_down"}
    assert all(p.computed for p in plan.placements)  # the pinned build keeps them
    code, out, err = run(capsys, "kernels", model, tmp_path / "o.json", "-q")
    assert code == 0 and not err
    assert "moot: scale_up: the all-FP16 engine's __myl_FcAddCast_myl0_2 names it but computes no Mul" in out


def test_a_pin_on_one_of_three_fused_projections_splits_their_gemm(answer, tmp_path, capsys):
    code, out, err = run(capsys, "kernels", LN, pinned(answer, tmp_path, ["q_proj_matmul"]), "--json",
                         tmp_path / "k.json", "-q")
    assert code == 0, err
    plan = json.loads((tmp_path / "k.json").read_text())
    assert plan["kernels"] == plan["fp16_kernels"] + 1 == 12
    split = plan["nodes"][0]["split"]
    assert split["kernel"] == "v_proj_matmul+k_proj_matmul+q_proj_matmul_myl0_1" and split["nodes"] == 3
    assert split["into"][0] == "v_proj_matmul+k_proj_matmul_myl0_1" and len(split["into"]) == 2
    assert "split: q_proj_matmul splits v_proj_matmul+k_proj_matmul+q_proj_matmul_myl0_1 (3 nodes) into 2" in out
    assert "the answer's pins add 1" in out


def test_an_fp32_accumulation_matmul_is_one_gemm_kernel_with_fp16_inputs_and_outputs(tmp_path):
    from accumulation_models import CASES

    case = CASES["matmul"]()
    model, data = tmp_path / "m.onnx", tmp_path / "x.npz"
    onnx.save(case.model, model)
    np.savez(data, **case.inputs)
    found = fp16bisect.search(model, data, space={"accumulate": "fp16"})
    assert [n.name for n in found.fp32_accumulate_nodes] == [case.culprit] and not found.fp32_nodes
    plan = fp16bisect.kernel_plan(model, found, fp16_io=True)
    (placed,) = plan.placements
    assert (placed.node, placed.state) == (case.culprit, "fp32-accumulation")
    (kernel,) = placed.kernels
    assert kernel.layer_type == "gemm" and kernel.covers == (case.culprit,) and kernel.casts == 3  # in, weight, out
    assert kernel.inputs == ("float16",) and kernel.outputs == ("float16",)


def test_a_dynamic_input_builds_for_the_shapes_the_override_file_records_or_those_given(tmp_path, capsys):
    model = onnx.load(SAMPLES / "transformer_block.onnx")
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "seq"
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, path)
    found = fp16bisect.search(path, LN_IN, output=tmp_path / "o.json")
    assert found.to_dict()["shapes"] == {"x": [{"dim": 1, "name": "seq", "covered": [16, 16]}]}
    plan = fp16bisect.kernel_plan(path, tmp_path / "o.json")
    assert plan.shapes == {"x": ((1, 16, 64), (1, 16, 64), (1, 16, 64))}
    assert [p.node for p in plan.placements] == ["ln1_square", "ln1_var"]
    wider = fp16bisect.kernel_plan(path, tmp_path / "o.json", min_shapes="x:1x8x64", max_shapes="x:1x32x64")
    assert wider.shapes == {"x": ((1, 8, 64), (1, 32, 64), (1, 32, 64))}
    data = json.loads((tmp_path / "o.json").read_text())
    data["shapes"] = {}
    (tmp_path / "none.json").write_text(json.dumps(data))
    code, _out, err = run(capsys, "kernels", path, tmp_path / "none.json", "-q")
    assert code == 2 and "no shapes to build for: pass --opt-shapes" in err


def test_without_tensorrt_the_command_says_how_to_install_it(answer, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("tensorrt", "tensorrt_rtx") else real(name, *a))
    code, out, err = run(capsys, "kernels", LN, answer)
    assert code == 2 and not out
    assert "pip install 'fp16bisect[tensorrt]'" in err and "pip install tensorrt-rtx-cu13" in err
    assert len(err.strip().splitlines()) == 1


def test_the_docstring_example_runs(tmp_path, monkeypatch):
    import fp16bisect.api.kernels as kernels

    (tmp_path / "sample_models").symlink_to(SAMPLES)
    monkeypatch.chdir(tmp_path)
    failed, tried = doctest.testmod(kernels, optionflags=doctest.ELLIPSIS, verbose=False)
    assert tried >= 4 and failed == 0
