"""Accumulator headroom (issue #34 items 1 and 5): the FP32 profile measures each summing node's largest partial-sum
bound, and scan, search and check show it, warning when a node left in FP16 sums past 65504.

The models (tests/accumulation_models.py) store nothing FP16 cannot hold; one node's sum passes 65504. Their peaks
are computed there with NumPy in float64; the profile's, in FP32 by ONNX Runtime, agree to float32 rounding."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from accumulation_models import CASES
from conftest import F, run
from conftest import make_model as make_typed
from onnx import helper

from fp16bisect.model.accumulators import Accumulator
from fp16bisect.model.graph import Graph
from fp16bisect.model.precision import BF16, FP16
from fp16bisect.model.profile import profile
from fp16bisect.model.samples import Sample

RTOL = 1e-4  # FP32 sums of up to 70000 terms against NumPy's float64


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    """Float inputs and outputs as (name, shape) pairs."""
    return make_typed(nodes, [(n, F, s) for n, s in inputs], [(n, F, s) for n, s in outputs], initializers, opset)


def saved(tmp_path: Path, case) -> tuple[Path, Path]:
    model, data = tmp_path / "m.onnx", tmp_path / "m.npz"
    onnx.save(case.model, model)
    np.savez(data, **case.inputs)
    return model, data


def measured(model: onnx.ModelProto, inputs: dict, precision=FP16):
    return profile(Graph(model, precision=precision), [Sample("s0", inputs)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_profile_measures_the_culprits_peak_and_terms(name):
    case = CASES[name]()
    prof = measured(case.model, case.inputs)
    tightest = prof.accumulators[0]
    assert (tightest.node, tightest.terms, tightest.sample) == (case.culprit, case.terms, 0)
    assert tightest.peak == pytest.approx(case.peak, rel=RTOL)
    assert case.peak > 65504 and tightest.headroom(FP16) < 1 and tightest.over(FP16)
    assert prof.accumulators_note == ""


@pytest.mark.parametrize("name", sorted(CASES))
def test_scan_lists_the_culprit_in_its_json_and_console(tmp_path, capsys, name):
    case = CASES[name]()
    model, data = saved(tmp_path, case)
    code, out, err = run(capsys, "scan", model, "--inputs", data, "--json", tmp_path / "scan.json")
    assert code == 0, err
    rows = json.loads((tmp_path / "scan.json").read_text())["accumulators"]
    assert set(rows[0]) == {"node", "op_type", "peak", "terms", "sample", "headroom"}
    assert (rows[0]["node"], rows[0]["terms"], rows[0]["sample"]["index"]) == (case.culprit, case.terms, 0)
    assert rows[0]["peak"] == pytest.approx(case.peak, rel=RTOL)
    assert rows[0]["headroom"] == pytest.approx(65504 / case.peak, rel=1e-3)
    assert f"{case.culprit} ({rows[0]['op_type']}, {case.terms} terms): peak " in out


@pytest.mark.parametrize("name", sorted(CASES))
def test_search_pins_nothing_exits_0_and_warns_naming_the_node(tmp_path, capsys, name):
    case = CASES[name]()
    model, data = saved(tmp_path, case)
    out_json = tmp_path / "o.json"
    code, out, err = run(capsys, "search", model, "--inputs", data, "-o", out_json)
    assert code == 0, err
    written = json.loads(out_json.read_text())
    assert written["fp32_nodes"] == []
    assert written["accumulators"][0]["node"] == case.culprit
    assert written["accumulators"][0]["peak"] == pytest.approx(case.peak, rel=RTOL)
    warning = next(line for line in out.splitlines() if line.startswith("warning: 1 node(s) left in FP16 sum past"))
    assert f"'{case.culprit}'" in warning and "--accumulate fp16" in warning
    assert f"fp16bisect check {model} --inputs {data} --overrides {out_json} --accumulate fp16" in out  # Next:


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_passes_and_warns_and_its_json_carries_the_node(tmp_path, capsys, name):
    case = CASES[name]()
    model, data = saved(tmp_path, case)
    code, out, err = run(capsys, "check", model, "--inputs", data, "--json", tmp_path / "check.json")
    assert code == 0, err
    written = json.loads((tmp_path / "check.json").read_text())
    assert written["passed"] is True
    listed = written["accumulators"]  # the culprit first; any other summing node fits (the decomposed LN's mean)
    assert (listed[0]["node"], listed[0]["terms"]) == (case.culprit, case.terms)
    assert all(a["headroom"] > 1 for a in listed[1:])
    assert f"warning: 1 node(s) left in FP16 sum past 65504 though every value they store fits: '{case.culprit}'" in out


def test_a_node_in_fp32_or_fp32_accumulation_is_not_listed_for_the_answer():
    from fp16bisect.model.headroom import fp16_accumulators
    from fp16bisect.model.plan_states import plan_of

    case = CASES["matmul"]()
    prof = measured(case.model, case.inputs)
    assert [a.node for a in fp16_accumulators(prof, ())] == ["matmul"]
    assert fp16_accumulators(prof, plan_of(fp32=["matmul"])) == []
    assert fp16_accumulators(prof, plan_of(accumulate=["matmul"])) == []


def test_a_sum_with_less_than_4x_headroom_gets_the_tensors_warning_and_headroom_4_keeps_it(tmp_path, capsys):
    """One rule for tensors and sums: a pooled sum of about 20500 (3.2x headroom) fits 65504, and all-FP16 passes;
    the search warns about it as about a tensor below 4x, with the same '--headroom 4', and its Next: block runs
    that search again. With --headroom 4 the pool is kept in FP32 accumulation in every plan (the file says why,
    no warning); check --headroom 4 fails the all-FP16 plan for it and passes that file."""
    case = CASES["global_pool"](side=64)  # sum of 4096 values of 4 to 6: about 20500
    model, data = saved(tmp_path, case)
    out = tmp_path / "o.json"
    code, said, err = run(capsys, "search", model, "--inputs", data, "-o", out)
    assert code == 0, err
    said = " ".join(said.split())
    assert "sum past 65504 though" not in said  # not the overflow's warning: it fits
    assert "warning: 1 summing node(s) left in FP16 with less than 4x accumulator headroom: 'pool' (3.1" in said
    assert "'--headroom 4' keeps them in FP32 accumulation" in said
    after = said.split("Next:")[1]
    assert "1 sum(s) left in FP16 have less than 4x accumulator headroom: 'pool' (3.1" in after
    assert f"-o {tmp_path / 'o.headroom4.json'}" in after and "--headroom 4" in after  # beside, never over it
    code, said, err = run(capsys, "search", model, "--inputs", data, "--headroom", "4", "-o", out)
    assert code == 0, err
    assert "--headroom 4: 1 summing node(s) forced to FP32 accumulation in every plan" in err
    written = json.loads(out.read_text())
    assert written["fp32_nodes"] == [] and [n["name"] for n in written["fp32_accumulate_nodes"]] == ["pool"]
    assert written["fp32_accumulate_nodes"][0]["fp32_profile"].startswith("forced by --headroom 4: sums 4096 terms")
    assert "accumulator headroom" not in said and "warning" not in said
    code, said, err = run(capsys, "check", model, "--inputs", data, "--headroom", "4", "--json", tmp_path / "c.json")
    assert code == 1, said + err
    assert "1 sum(s) computed in FP16 lack 4x headroom: 'pool' (GlobalAveragePool) sums 4096 terms" in said
    assert json.loads((tmp_path / "c.json").read_text())["lacking_accumulator_headroom"] == ["pool"]
    assert run(capsys, "check", model, "--inputs", data, "--headroom", "4", "--overrides", out)[0] == 0


def test_a_sum_past_the_max_over_f_is_forced_to_fp32_accumulation_under_accumulate_fp16_too(tmp_path, capsys):
    """--accumulate fp16 with --headroom 4: the pool (65504/4 < 20500) is forced, not searched: the answer is it
    in FP32 accumulation, whatever the judge needs."""
    case = CASES["global_pool"](side=64)
    model, data = saved(tmp_path, case)
    out = tmp_path / "o.json"
    code, said, err = run(capsys, "search", model, "--inputs", data, "--headroom", "4", "--accumulate", "fp16",
                          "-o", out)
    assert code == 0, err
    written = json.loads(out.read_text())
    assert written["fp32_nodes"] == [] and [n["name"] for n in written["fp32_accumulate_nodes"]] == ["pool"]


def test_bf16_shows_no_fp16_numbers(tmp_path, capsys):
    case = CASES["softmax"]()
    model, data = saved(tmp_path, case)
    code, out, err = run(capsys, "scan", model, "--inputs", data, "--precision", "bf16", "--json", tmp_path / "s.json")
    assert code == 0, err
    rows = json.loads((tmp_path / "s.json").read_text())["accumulators"]
    assert rows[0]["headroom"] == pytest.approx(BF16.max / case.peak, rel=1e-3)
    assert "65504" not in out and "sum past" not in out


@pytest.mark.parametrize("name", sorted(CASES))
def test_bf16_measures_every_culprit_on_its_opset_22_model(name):
    """BF16 runs the model converted to opset 22 (where ONNX Runtime has no GlobalLpPool): every culprit's
    accumulator is measured there too, with no note."""
    case = CASES[name]()
    prof = measured(case.model, case.inputs, precision=BF16)
    assert prof.accumulators_note == ""
    found = {a.node: a for a in prof.accumulators}
    assert found[case.culprit].peak == pytest.approx(case.peak, rel=RTOL)
    assert found[case.culprit].terms == case.terms


def test_a_refusal_of_the_accumulator_nodes_says_what_onnx_runtime_said_and_which_node(monkeypatch, tmp_path,
                                                                                     capsys):
    """Were ONNX Runtime to refuse a measuring node (GlobalLpPool at opset 22, as before this was measured
    otherwise), scan's note says so in one line: ONNX Runtime's words, naming the op and the node measured."""
    from fp16bisect.model import accumulators

    def old_pool(self, proto, v):
        if proto.op_type != "GlobalAveragePool":
            return measure(self, proto, v)
        pooled = helper.make_node("GlobalLpPool", [proto.input[0]], [f"{v}_sum"], p=1)
        return [pooled, helper.make_node("ReduceMax", [f"{v}_sum"], [f"{v}_peak"], keepdims=0)], f"{v}_peak", []

    measure = accumulators._Nodes.measure
    monkeypatch.setattr(accumulators._Nodes, "measure", old_pool)
    model, data = saved(tmp_path, CASES["global_pool"]())
    code, out, err = run(capsys, "scan", model, "--inputs", data, "--precision", "bf16")
    assert code == 0, err
    note = next(line for line in out.splitlines() if "accumulator peaks not measured" in line)
    assert "ONNX Runtime refused the model with the accumulator nodes" in note
    assert "GlobalLpPool(22)" in note and "(measuring pool)" in note, note


def test_a_model_with_nothing_summing_lists_nothing(tmp_path, capsys):
    model = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                        helper.make_node("Mul", ["r", "r"], ["y"], name="square")], [("x", [2, 8])], [("y", [2, 8])])
    prof = measured(model, {"x": np.ones((2, 8), np.float32)})
    assert prof.accumulators == [] and prof.accumulators_note == ""
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", x=np.ones((2, 8), np.float32))
    code, out, err = run(capsys, "scan", tmp_path / "m.onnx", "--inputs", tmp_path / "m.npz", "--json",
                         tmp_path / "s.json")
    assert code == 0, err
    assert json.loads((tmp_path / "s.json").read_text())["accumulators"] == []
    assert "accumulator" not in out


def conv_gemm_reduce_model():
    """Conv (bias excluded), Gemm (|beta C| added), ReduceSumSquare, ReduceMean over axis 1, AveragePool, LogSoftmax
    at opset 11 (coerced to 2-D), InstanceNormalization and GroupNormalization: every other bound's rule."""
    rng = np.random.default_rng(5)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    b = np.full(4, 100.0, np.float32)
    gw = rng.uniform(-1, 1, (16, 5)).astype(np.float32)
    gc = rng.uniform(-1, 1, (5,)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c"], ["p"], name="avg", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("InstanceNormalization", ["c", "s4", "z4"], ["inorm"], name="inorm"),
             helper.make_node("Flatten", ["p"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "gw", "gc"], ["g"], name="gemm", alpha=-2.0, beta=-3.0),
             helper.make_node("ReduceSumSquare", ["g"], ["ss"], name="sumsq", axes=[1], keepdims=0),
             helper.make_node("ReduceMean", ["c"], ["m"], name="mean", axes=[1], keepdims=0),
             helper.make_node("LogSoftmax", ["c"], ["ls"], name="logsoftmax", axis=2)]
    inits = {"w": w, "b": b, "gw": gw, "gc": gc, "s4": np.ones(4, np.float32), "z4": np.zeros(4, np.float32)}
    model = make_model(nodes, [("x", [2, 3, 4, 4])], [("ss", None), ("m", None), ("ls", None), ("inorm", None)],
                       inits, opset=11)
    return model, w, gw, gc


def test_every_bound_matches_numpy():
    model, w, gw, gc = conv_gemm_reduce_model()
    x = np.random.default_rng(6).uniform(-2, 2, (2, 3, 4, 4)).astype(np.float32)
    found = {a.node: a for a in measured(model, {"x": x}).accumulators}
    x64, w64 = np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64))
    padded = np.pad(x64, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv_abs = np.array([[[[(padded[n, :, i:i + 3, j:j + 3] * w64[o]).sum() for j in range(4)] for i in range(4)]
                          for o in range(4)] for n in range(2)])
    xs = x.astype(np.float64)
    conv = np.array([[[[(np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1)))[n, :, i:i + 3, j:j + 3] * w[o]).sum() + 100
                        for j in range(4)] for i in range(4)] for o in range(4)] for n in range(2)])
    pooled = conv.reshape(2, 4, 2, 2, 2, 2).mean(axis=(3, 5)).reshape(2, 16)
    g = -2.0 * pooled @ gw - 3.0 * gc
    expected = {
        "conv": (conv_abs.max(), 27),
        "avg": (np.abs(conv).reshape(2, 4, 2, 2, 2, 2).sum(axis=(3, 5)).max(), 4),
        "gemm": ((2.0 * np.abs(pooled) @ np.abs(gw) + 3.0 * np.abs(gc)).max(), 16),
        "sumsq": ((g ** 2).sum(axis=1).max(), 5),
        "mean": (np.abs(conv).sum(axis=1).max(), 4),
        "logsoftmax": (np.exp(conv.reshape(2, 4, 16) - conv.reshape(2, 4, 16).max(-1, keepdims=True))
                       .sum(-1).max(), 16),  # opset 11: axis 2 of [2, 4, 4, 4] coerced to rows of 4 x 4
        "inorm": (((conv.reshape(8, 16) - conv.reshape(8, 16).mean(1, keepdims=True)) ** 2).sum(1).max(), 16),
    }
    assert {n: (pytest.approx(p, rel=RTOL), t) for n, (p, t) in expected.items()} == \
        {n: (a.peak, a.terms) for n, a in found.items()}


def attention(q_shape, k_shape) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["q0"], ["q"], name="relu"), helper.make_node("Attention", ["q", "k", "v"], ["y"],
                                                                                  name="attn")]
    model = make_model(nodes, [("q0", q_shape), ("k", k_shape), ("v", k_shape)], [("y", None)], opset=23)
    model.ir_version = 10
    return model


def test_attention_measures_q_k_with_as_many_heads_and_is_unmeasured_otherwise():
    rng = np.random.default_rng(7)
    q, k = rng.uniform(-3, 3, (1, 2, 5, 8)).astype(np.float32), rng.uniform(-3, 3, (1, 2, 6, 8)).astype(np.float32)
    found = measured(attention([1, 2, 5, 8], [1, 2, 6, 8]), {"q0": q, "k": k, "v": k}).accumulators
    bound = (np.abs(np.maximum(q, 0)).astype(np.float64) @ np.abs(k).astype(np.float64).transpose(0, 1, 3, 2)).max()
    assert [(a.node, a.terms) for a in found] == [("attn", 8)] and found[0].peak == pytest.approx(bound, rel=RTOL)
    grouped = attention([1, 4, 5, 8], [1, 2, 6, 8])  # fewer key heads: not measured, listed
    q4 = rng.uniform(-3, 3, (1, 4, 5, 8)).astype(np.float32)
    assert measured(grouped, {"q0": q4, "k": k, "v": k}).accumulators == [Accumulator("attn", "Attention", None, None, -1)]


def test_the_html_report_has_the_accumulator_table(tmp_path, capsys):
    model, data = saved(tmp_path, CASES["matmul"]())
    code, _, err = run(capsys, "check", model, "--inputs", data, "--report", tmp_path / "r.html")
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Accumulator headroom of the summing nodes left in FP16</h2>" in page
    assert '<tr><td>matmul</td><td>MatMul</td><td>4096</td><td>2.053e+05</td><td class="fail">0.319x</td>' in page


def test_a_conv_weight_a_run_feeds_is_bounded_with_the_weight_fed():
    """A 3x3 Conv's weight is an initializer and an input: the accumulator bound is sum |x| |W| of the weight the
    run feeds (10x the stored one here), never of the value in the file."""
    stored = np.full((1, 2, 3, 3), 0.5, np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    graph = Graph(make_typed(nodes, [("x", F, [1, 2, 4, 4]), ("w", F, [1, 2, 3, 3])], [("y", F, [1, 1, 4, 4])],
                             {"w": stored}))
    x = np.ones((1, 2, 4, 4), np.float32)
    got = profile(graph, [Sample("s", {"x": x, "w": stored * 10})]).accumulators
    assert [(a.node, a.peak, a.terms) for a in got] == [("conv", 18 * 5.0, 18)]
