"""Judging as users do (issue 35 items 1-3): per-output tolerances, error statistics, argmax/top-K, exact integer
outputs and the API's ``accept=``, on models whose answers are known by construction (emulate backend)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import F, make_model, one_line_error, run
from onnx import TensorProto, helper

import fp16bisect
from fp16bisect.errors import UsageError
from fp16bisect.tolerance import GivenTolerance, Tolerance, compare

QUICK = {"judge": "emulate", "strategy": {"prior": "none"}}


def two_outputs(tmp_path):
    """``prob`` = sigmoid(x) (a probability, judged tight) and ``state`` = 1000 x (a large state: FP16 rounds it
    by up to 1 and more). At atol 1e-4 everywhere both nodes need FP32; the state needs none at atol 10."""
    nodes = [helper.make_node("Mul", ["x", "one"], ["xa"], name="scale"),
             helper.make_node("Sigmoid", ["xa"], ["prob"], name="prob_sigmoid"),
             helper.make_node("Mul", ["x", "big"], ["state"], name="state_mul")]
    model = make_model(nodes, [("x", F, [1, 256])], [("prob", F, [1, 256]), ("state", F, [1, 256])],
                       {"one": np.float32(1.0), "big": np.float32(1000.0)})
    path, data = tmp_path / "two.onnx", tmp_path / "two.npz"
    onnx.save(model, path)
    np.savez(data, x=np.random.default_rng(0).normal(size=(1, 256)).astype(np.float32))
    return str(path), str(data)


def test_one_global_tolerance_over_pins_where_per_output_values_pin_what_the_probability_needs(tmp_path):
    model, data = two_outputs(tmp_path)
    tight = fp16bisect.search(model, data, tolerance={"atol": 1e-4, "rtol": 0}, **QUICK)
    assert sorted(n.name for n in tight.fp32_nodes) == ["prob_sigmoid", "state_mul"]
    for atol in ({"prob": 1e-4, None: 10.0}, ["prob:1e-4", "10"], {"prob": 1e-4, "state": 10.0}):
        found = fp16bisect.search(model, data, tolerance={"atol": atol, "rtol": 0}, **QUICK)
        assert [n.name for n in found.fp32_nodes] == ["prob_sigmoid"], atol


def test_per_output_flags_are_written_and_check_reads_them_unless_given(tmp_path, capsys):
    model, data = two_outputs(tmp_path)
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", model, "--inputs", data, "--backend", "emulate", "--prior", "none", "--atol", "prob:1e-4",
                       "--atol", "10", "--rtol", "0", "-o", out)
    assert code == 0, err
    answer = json.loads(out.read_text())
    assert [n["name"] for n in answer["fp32_nodes"]] == ["prob_sigmoid"]
    assert answer["tolerance"]["atol"] == 10 and answer["tolerance"]["per_output"] == {"prob": {"atol": 1e-4}}
    code, out_text, _ = run(capsys, "check", model, "--inputs", data, "--overrides", out, "--backend", "emulate")
    assert code == 0 and "'prob': atol 0.0001" in out_text
    # --atol 1e-4 replaces the file's default (the state's), not the probability's own value: the state fails
    code, out_text, _ = run(capsys, "check", model, "--inputs", data, "--overrides", out, "--backend", "emulate", "--atol", "1e-4")
    assert code == 1 and "'state'" in out_text


def test_an_unknown_output_name_is_exit_2_listing_the_outputs(tmp_path, capsys):
    model, data = two_outputs(tmp_path)
    code, _, err = run(capsys, "search", model, "--inputs", data, "--backend", "emulate", "--atol", "logits:1e-3")
    assert code == 2
    assert "'logits', which the model does not have: its outputs are prob, state" in one_line_error(err)
    code, _, err = run(capsys, "check", model, "--inputs", data, "--backend", "emulate", "--argmax", "nope")
    assert code == 2 and "its outputs are prob, state" in one_line_error(err)


@pytest.mark.parametrize("flags, said", [
    (["--error-stat", "p101"], "--error-stat 'p101': give max, mean, median or pNN"),
    (["--atol", "prob:abc"], "--atol 'prob:abc' is not a number: give VALUE or OUTPUT:VALUE"),
    (["--topk", "prob"], "--topk 'prob': give OUTPUT:K[:AXIS]"),
    (["--error-stat", "p99", "--max-mismatch", "0.1"], "give one"),
])
def test_bad_judging_flags_are_exit_2(tmp_path, capsys, flags, said):
    model, data = two_outputs(tmp_path)
    code, _, err = run(capsys, "search", model, "--inputs", data, "--backend", "emulate", *flags)
    assert code == 2 and said in one_line_error(err)


def few_off(tmp_path):
    """y = x + c, c 1000 on 4 of 1000 elements (FP16 rounds those by up to 0.25), else 0 (rounded by < 1e-3)."""
    c = np.zeros((1, 1000), np.float32)
    c[0, :4] = 1000.0
    model = make_model([helper.make_node("Add", ["x", "c"], ["y"], name="add")], [("x", F, [1, 1000])],
                       [("y", F, [1, 1000])], {"c": c})
    path, data = tmp_path / "few.onnx", tmp_path / "few.npz"
    onnx.save(model, path)
    np.savez(data, x=np.random.default_rng(1).normal(size=(1, 1000)).astype(np.float32))
    return str(path), str(data)


def test_error_stat_p99_passes_a_model_a_few_elements_of_which_are_off_and_max_fails_it(tmp_path, capsys):
    model, data = few_off(tmp_path)
    strict = fp16bisect.search(model, data, tolerance={"atol": 1e-2, "rtol": 0}, **QUICK)
    assert [n.name for n in strict.fp32_nodes] == ["add"]
    lenient = fp16bisect.search(model, data, tolerance={"atol": 1e-2, "rtol": 0, "error_stat": "p99"}, **QUICK)
    assert lenient.fp32_nodes == [] and lenient.passed
    code, out, _ = run(capsys, "check", model, "--inputs", data, "--backend", "emulate", "--atol", "1e-2", "--rtol", "0",
                       "--error-stat", "y:p99")
    assert code == 0 and "p99 of the error" in out
    code, _, _ = run(capsys, "check", model, "--inputs", data, "--backend", "emulate", "--atol", "1e-2", "--rtol", "0",
                     "--error-stat", "mean")
    assert code == 0  # the mean too: 4 elements of 1000 cannot lift it above the allowance
    code, _, _ = run(capsys, "check", model, "--inputs", data, "--backend", "emulate", "--atol", "1e-2", "--rtol", "0")
    assert code == 1


def classifier(tmp_path, x: np.ndarray, bias: np.ndarray, cls: bool = False):
    """``logits`` = x + bias (node ``add``), ``aux`` = relu(x) (FP16-exact x); with ``cls``, also ``cls`` =
    argmax(relu(logits)) (int64: the emulator rounds what the relu reads, not what the ArgMax, no candidate,
    reads)."""
    nodes = [helper.make_node("Add", ["x", "bias"], ["logits"], name="add"),
             helper.make_node("Relu", ["x"], ["aux"], name="relu")]
    n, c = x.shape
    outputs = [("logits", F, [n, c]), ("aux", F, [n, c])]
    if cls:
        nodes += [helper.make_node("Relu", ["logits"], ["r"], name="relu_logits"),
                  helper.make_node("ArgMax", ["r"], ["cls"], name="argmax", axis=1, keepdims=0)]
        outputs.append(("cls", TensorProto.INT64, [n]))
    model = make_model(nodes, [("x", F, [n, c])], outputs, {"bias": bias})
    path, data = tmp_path / "cls.onnx", tmp_path / "cls.npz"
    onnx.save(model, path)
    np.savez(data, x=x)
    return str(path), str(data)


X = np.array([[100.0, 50.0, 20.0], [10.0, 100.0, 30.0]], np.float32)  # FP16-exact


def test_argmax_passes_drifting_logits_whose_argmax_holds_and_pins_the_node_that_flips_it(tmp_path):
    # drift: 100.3 rounds to 100.25 in FP16 (0.05 off, beyond atol 1e-2), but no class changes
    model, data = classifier(tmp_path, X, np.array([0.3, 0.3, 0.3], np.float32))
    tight = {"atol": 1e-2, "rtol": 0.0}
    assert [n.name for n in fp16bisect.search(model, data, tolerance=tight, **QUICK).fp32_nodes] == ["add"]
    held = fp16bisect.search(model, data, tolerance={**tight, "argmax": ["logits"]}, **QUICK)
    assert held.fp32_nodes == [] and held.passed
    # flip: 100 + 0.01 = 100.01 beats row 1's 100, but FP16 rounds it to 100 (a tie its argmax breaks the other way)
    flips = np.array([[100.0, 50.0, 20.0], [100.0, 100.0, 30.0]], np.float32)
    model, data = classifier(tmp_path, flips, np.array([0.0, 0.01, 0.0], np.float32))
    assert [n.name for n in fp16bisect.search(model, data, tolerance={"argmax": ["logits:1"]}, **QUICK).fp32_nodes] == ["add"]


def test_an_integer_output_is_compared_exactly(tmp_path):
    """``cls`` (the ArgMax, int64) flips in FP16 where ``logits`` stays within a loose atol: its difference fails
    the plan (before, integer outputs were not compared, and all-FP16 passed)."""
    flips = np.array([[100.0, 50.0, 20.0], [100.0, 100.0, 30.0]], np.float32)
    model, data = classifier(tmp_path, flips, np.array([0.0, 0.01, 0.0], np.float32), cls=True)
    loose = {"atol": 1.0}
    assert not fp16bisect.check(model, data, tolerance=loose, judge="emulate").passed
    assert sorted(n.name for n in fp16bisect.search(model, data, tolerance=loose, **QUICK).fp32_nodes) == \
        ["add", "relu_logits"]
    metrics = fp16bisect.check(model, data, tolerance=loose, judge="emulate").outputs["cls"]
    assert not metrics.passed and metrics.rule == "exact" and metrics.mismatch == 0.5


def test_ties_within_a_relative_1e_6_accept_either_index_and_topk_compares_index_sets():
    tol = GivenTolerance(argmax=["o"]).over(Tolerance())
    actual = np.array([[2.0, 1.0, 0.0]])
    assert compare(actual, np.array([[1.0, 1.0000001, 0.0]]), tol, "o", 0).passed  # a tie: either index
    assert not compare(actual, np.array([[1.0, 1.001, 0.0]]), tol, "o", 0).passed  # no tie: index 1 wins
    top2 = GivenTolerance(topk=["o:2"]).over(Tolerance())
    assert not compare(np.array([[0.0, 5.0, 6.0, 9.0]]), np.array([[1.0, 9.0, 2.0, 8.0]]), top2, "o", 0).passed
    assert compare(np.array([[0.0, 8.0, 4.0, 9.0]]), np.array([[1.0, 9.0, 2.0, 8.0]]), top2, "o", 0).passed
    assert GivenTolerance(topk="o:3:0").over(Tolerance()).for_output("o").topk == (3, 0)


def test_the_last_colon_splits_an_output_name_from_its_value():
    tol = GivenTolerance(atol=["a:b:c:0.5", "0.25"], argmax=["x:y:1", "plain"]).over(Tolerance())
    assert tol.for_output("a:b:c").atol == 0.5 and tol.for_output("other").atol == 0.25
    assert tol.for_output("x:y").argmax == 1 and tol.for_output("plain").argmax == -1


def test_accept_is_anded_recorded_as_not_reproducible_and_check_warns(tmp_path, capsys):
    model, data = few_off(tmp_path)  # within atol 1 in all-FP16; its 4 large elements off by up to 0.25
    loose = {"atol": 1.0, "rtol": 0.0}

    def close(outputs, reference):
        return bool(np.abs(outputs["y"] - reference["y"]).max() < 0.1)

    calls = []

    def counting(outputs, reference):
        calls.append(sorted(outputs))
        return True

    assert fp16bisect.search(model, data, tolerance={**loose, "accept": counting}, **QUICK).fp32_nodes == [] and calls == [["y"]]
    out = tmp_path / "o.json"
    found = fp16bisect.search(model, data, tolerance={**loose, "accept": close}, output=out, **QUICK)
    assert [n.name for n in found.fp32_nodes] == ["add"]
    assert json.loads(out.read_text())["tolerance"]["accept"].startswith("a Python callable")
    assert fp16bisect.check(model, data, out, judge="emulate").passed  # without it: atol 1 alone
    assert not fp16bisect.check(model, data, tolerance={"atol": 1.0, "accept": close}, judge="emulate").passed
    code, text, err = run(capsys, "check", model, "--inputs", data, "--overrides", out, "--backend", "emulate")
    assert code == 0 and "warning: the search also ran a Python accept function" in text + err
    with pytest.raises(UsageError, match="cannot go to parallel workers"):
        fp16bisect.search(model, data, tolerance={**loose, "accept": lambda o, r: True}, parallel=2, **QUICK)


def test_every_form_is_checked_once_in_the_value():
    with pytest.raises(UsageError, match="error_stat 'p101'"):
        GivenTolerance(error_stat={"y": "p101"})
    with pytest.raises(UsageError, match="for output 'y'"):
        GivenTolerance(atol={"y": -1.0})
    with pytest.raises(UsageError, match="accept 3 is not callable"):
        GivenTolerance(accept=3)
    given = GivenTolerance(atol=["p:1e-4", "10"], error_stat=["s:p99"], topk={"t": (3, 1)})
    assert GivenTolerance(**given.values(), per_output=given.per_output) == given  # its normal form is one
    tol = given.over(Tolerance())
    assert Tolerance.from_json(json.loads(json.dumps(tol.to_json()))) == tol
    assert Tolerance().to_json() == {"atol": 0.01, "rtol": 0.01, "min_cosine": None, "max_mismatch": 0.0}


def test_silero_vad_per_output_tolerances_pin_what_the_probability_needs():
    """A real two-state model (Silero VAD's LSTM, from its PyPI wheel): all-FP16 moves speech_probs by 5.6e-5 and
    the state hn/cn by up to 7.6e-3. One atol 2e-5 for everything pins 16 nodes (most for the state); the
    probability at 2e-5 and the state at 1e-2 pin 3, on the probability's path alone."""
    from real_models import SILERO_VAD_SEQ, real_model

    model = str(real_model(SILERO_VAD_SEQ))
    rng = np.random.default_rng(0)
    data = {"input": (rng.standard_normal((8, 576)) * 0.5).astype(np.float32),
            "h": (rng.standard_normal((1, 1, 128)) * 0.5).astype(np.float32),
            "c": (rng.standard_normal((1, 1, 128)) * 0.5).astype(np.float32)}
    one = fp16bisect.search(model, data, tolerance={"atol": 2e-5, "rtol": 0.0}, judge="emulate")
    each = fp16bisect.search(model, data, tolerance={"atol": ["speech_probs:2e-5", "1e-2"], "rtol": 0.0},
                             judge="emulate")
    assert sorted(n.name for n in each.fp32_nodes) == ["/Sigmoid", "/encoder.3/Conv", "/output/Conv"]
    assert len(one.fp32_nodes) == 16 and "/recurrent/LSTM" in {n.name for n in one.fp32_nodes}
    assert each.evaluations < one.evaluations


def test_apply_verify_and_a_batch_manifest_judge_per_output(tmp_path, capsys):
    model, data = two_outputs(tmp_path)
    out = tmp_path / "o.json"
    fp16bisect.search(model, data, tolerance={"atol": {"prob": 1e-4, None: 10.0}, "rtol": 0}, output=out, **QUICK)
    code, _, _ = run(capsys, "apply", model, out, "-o", tmp_path / "m.onnx", "--verify", "--inputs", data)
    assert code == 0  # the file's per-output values: the state at 10, the probability at 1e-4
    code, _, _ = run(capsys, "apply", model, out, "-o", tmp_path / "m.onnx", "--verify", "--inputs", data,
                     "--atol", "1e-4")
    assert code == 1  # the default given: the state at 1e-4 fails
    manifest = tmp_path / "batch.toml"
    manifest.write_text('[[entry]]\nmodel = "two.onnx"\ninputs = "two.npz"\naction = "search"\nbackend = "emulate"\n'
                        'atol = ["prob:1e-4", "10"]\nrtol = 0\noutput = "b.json"\n')
    code, _, err = run(capsys, "batch", manifest)
    assert code == 0, err
    written = json.loads((tmp_path / "b.json").read_text())
    assert [n["name"] for n in written["fp32_nodes"]] == ["prob_sigmoid"]
    assert written["tolerance"]["per_output"] == {"prob": {"atol": 1e-4}}
