"""``check``, ``scan`` and ``compare`` as a user meets them: exit codes, what they name first, files they write."""

import csv
import json

import numpy as np
import onnx
import pytest
from conftest import LN, LN_IN, SAMPLES, one_line_error, run
from conftest import SAMPLE_MODELS as MODELS
from onnx import numpy_helper

from fp16bisect.cli.main import main

def tol(known, name):
    spec = known[name]
    return ["--atol", str(spec.get("atol", 1e-2)), "--rtol", str(spec.get("rtol", 1e-2))]


def sample(name):
    return [SAMPLES / f"{name}.onnx", "--inputs", SAMPLES / f"{name}.npz"]


@pytest.fixture(scope="module")
def searched(tmp_path_factory, known):
    """The override file of every sample model, from a real search."""
    out = {}
    folder = tmp_path_factory.mktemp("overrides")
    for name in MODELS:
        path = folder / f"{name}.json"
        assert main(["search", *map(str, sample(name)), *tol(known, name), "-o", str(path), "-q"]) == 0
        out[name] = path
    return out


# ----------------------------------------------------------------------------------------------- check


@pytest.mark.parametrize("name", MODELS)
def test_check_fails_in_all_fp16_and_passes_with_the_overrides(name, known, searched, tmp_path, capsys):
    code, out, _ = run(capsys, "check", *sample(name), *tol(known, name), "-q")
    breaks = bool(known[name]["culprits"])
    assert code == (1 if breaks else 0), out
    assert ("FAIL in all-FP16" in out) == breaks
    report = tmp_path / "check.json"
    code, out, _ = run(capsys, "check", *sample(name), *tol(known, name), "--overrides", searched[name],
                       "--json", report, "-q")
    assert code == 0, out
    data = json.loads(report.read_text())
    assert data["passed"] is True and data["overrides"]["same_model"] is True
    assert sorted(data["overrides"]["nodes"]) == sorted(n["name"] for n in json.loads(searched[name].read_text())
                                                        ["fp32_nodes"])


def retrained(tmp_path, scale):
    """transformer_block 'retrained': fc1's weights scaled, so the file (and maybe FP16 safety) changes."""
    model = onnx.load(LN)
    for i, t in enumerate(model.graph.initializer):
        if t.name == "fc1.weight":
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * scale, t.name))
    path = tmp_path / f"retrained_{scale}.onnx"
    onnx.save(model, path)
    return path


def test_check_on_a_retrained_model_says_whether_the_old_overrides_still_suffice(searched, tmp_path, capsys):
    old = searched["transformer_block"]
    code, out, err = run(capsys, "check", retrained(tmp_path, 1.001), "--inputs", LN_IN, "--overrides", old)
    assert code == 0
    assert "made for another version of this model and still suffices" in out
    assert "made for another version" in err  # said up front too
    code, out, _ = run(capsys, "check", retrained(tmp_path, 2000.0), "--inputs", LN_IN, "--overrides", old, "-q")
    assert code == 1
    assert "the model changed since" in out and "no longer suffice: rerun 'fp16bisect search" in out


def test_another_models_override_file_is_refused_by_check_compare_and_apply(searched, tmp_path, capsys):
    """Was: check said "made for another version of this model and still suffices" and exited 0 on a file none
    of whose nodes the model has. One rule (overrides.refuse_foreign) for the three commands; --force cannot
    override it. A retrained model's file (same nodes, new sha256) is still checked: the test above."""
    old = searched["transformer_block"]
    count = len(json.loads(old.read_text())["fp32_nodes"])
    assert count >= 1
    model, inputs = SAMPLES / "cnn_batchnorm.onnx", SAMPLES / "cnn_batchnorm.npz"
    expected = (f"{old} names {count} node(s), none of which is in cnn_batchnorm.onnx: it was made for another "
                "model; pass the override file written for this model")
    for argv in (("check", model, "--inputs", inputs, "--overrides", old),
                 ("compare", model, "--inputs", inputs, "--overrides", old),
                 ("apply", old, model, "-o", tmp_path / "m.onnx"),
                 ("apply", old, model, "-o", tmp_path / "m.onnx", "--force")):
        code, out, err = run(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert expected in one_line_error(err), argv
    assert not (tmp_path / "m.onnx").exists()


def test_check_exit_codes_for_bad_input_and_unreachable_tolerance(tmp_path, capsys):
    code, _, err = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", tmp_path / "none.json")
    assert code == 2 and "not found" in one_line_error(err)


def test_a_zero_tolerance_behaves_the_same_in_search_and_check(tmp_path, capsys):
    # both judge against the FP32 profile's references: FP32 meets atol 0 in both (the check exited 3, the
    # search 0 with every node in FP32)
    zero = ["--atol", "0", "--rtol", "0", "-q"]
    code, _, _ = run(capsys, "search", LN, "--inputs", LN_IN, "-o", tmp_path / "o.json", *zero)
    assert code == 0
    code, out, _ = run(capsys, "check", LN, "--inputs", LN_IN, *zero)
    assert code == 1 and "FAIL in all-FP16" in out
    code, out, _ = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", tmp_path / "o.json", *zero)
    assert code == 0 and "PASS" in out


def test_a_tolerance_fp32_misses_is_exit_3_with_the_same_line_in_search_and_check(tmp_path, capsys):
    import onnxruntime as ort

    x = dict(np.load(LN_IN))
    y, = ort.InferenceSession(str(LN)).run(None, x)
    np.savez(tmp_path / "off.npz", y=y + 0.5)  # references FP32 itself misses by 0.5
    off = ["--reference", tmp_path / "off.npz", "-q"]
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", tmp_path / "o.json", *off)
    line = one_line_error(err).removeprefix("fp16bisect: error: ")
    assert code == 3 and line.startswith("the tolerance is unreachable even in FP32 on the emulate backend")
    code, out, _ = run(capsys, "check", LN, "--inputs", LN_IN, *off)
    assert code == 3 and out.splitlines()[-1] == f"FAIL: {line}"


# ------------------------------------------------------------------------------------------------ scan

# The planted tensors of each sample model (sample_models/README.md): what FP16 overflows or flushes.
PLANTED = {
    "transformer_block": {"ln1_sq"},
    "cnn_batchnorm": {"conv1_out"},
    "attention_unscaled": {"logits", "logits_rows"},
    "log_underflow": {"probs"},
    "two_branches": {"a_sq", "b_e", "b_sum"},
    "fp16_safe": set(),
    "accumulation": set(),  # no single tensor: the error accumulates over ten branches
}


@pytest.mark.parametrize("name", MODELS)
def test_scan_ranks_the_planted_tensors_first(name, tmp_path, capsys, known):
    out = tmp_path / "scan.json"
    code, stdout, _ = run(capsys, "scan", *sample(name), "--json", out)
    assert code == 0
    data = json.loads(out.read_text())
    planted = PLANTED[name]
    activations = [t["name"] for t in data["tensors"] if t["kind"] == "activation"]
    assert set(activations[: len(planted)]) == planted
    assert all(t["tier"] >= 2 for t in data["tensors"] if t["name"] in planted)
    # one implementation: the nodes scan ranks first are the search's suspects, and hold the culprits
    suspects = [n["name"] for n in data["nodes"][: data["suspects"]]]
    assert set(known[name]["culprits"]) <= set(suspects) or name == "accumulation"
    if planted:
        assert next(iter(sorted(planted))) in stdout


def test_scan_lists_weights_beyond_fp16_range(tmp_path, capsys):
    model = onnx.load(LN)
    model.graph.initializer.append(numpy_helper.from_array(np.array([1e6, 1e-9], np.float32), "huge_unused"))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    out = tmp_path / "scan.json"
    assert run(capsys, "scan", path, "--inputs", LN_IN, "--json", out)[0] == 0
    row = next(t for t in json.loads(out.read_text())["tensors"] if t["name"] == "huge_unused")
    assert row["kind"] == "weight" and row["risk"] == "overflow" and row["flushed"] == 1


# --------------------------------------------------------------------------------------------- compare

# Where the error is born in all-FP16, by construction of each model.
FIRST_FAILING = {
    "transformer_block": "ln1_square",  # x² overflows
    "cnn_batchnorm": "conv1_out",  # the unnormalised convolution overflows
    "attention_unscaled": "qk_matmul",  # unscaled logits overflow
    "log_underflow": "log",  # softmax flushes tiny probabilities to 0 (harmless there); log makes them -inf
    "two_branches": "a_square",  # the first of the two planted sites in topological order
    "fp16_safe": None,
    # no node fails alone: ten branches each lose 0.125 (rounding 1000.125 to FP16) and the sum adds them up to
    # 1.25 on values near 204, 0.6% of its scale: rounding, not a fault born at one node (the old absolute rule,
    # max abs > 1, named "sum"); 'check' and 'search' judge the output against the tolerance and catch it
    "accumulation": None,
}


@pytest.mark.parametrize("name", MODELS)
def test_compare_names_the_node_where_the_error_is_born(name, tmp_path, capsys, searched):
    out = tmp_path / "layers.csv"
    code, stdout, _ = run(capsys, "compare", *sample(name), "--csv", out, "-q")
    assert code == 0
    with out.open() as f:
        rows = list(csv.DictReader(f))
    first = next((r["node"] for r in rows if r["passed"] == "False"), None)
    assert first == FIRST_FAILING[name]
    if first:
        assert f"first failing node: {first}" in stdout
    else:
        assert "no node fails" in stdout


def test_compare_with_the_overrides_has_no_non_finite_tensor(tmp_path, capsys, searched):
    out = tmp_path / "layers.csv"
    code, _, _ = run(capsys, "compare", *sample("transformer_block"), "--overrides", searched["transformer_block"],
                     "--csv", out, "-q")
    assert code == 0
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert all(r["nonfinite"] == "0" for r in rows)
    assert {r["node"] for r in rows if r["fp32"] == "True"} == {"ln1_square", "ln1_var"}


# ---------------------------------------------------------------------------------------------- report

PLOTS = ('id="plot-node-error"', 'id="plot-magnitudes"', 'id="plot-trace"', 'id="overrides"', 'id="outputs"')


def test_search_check_and_compare_write_a_self_contained_report_with_every_plot(tmp_path, capsys, searched):
    runs = {
        "search": ["search", *sample("transformer_block"), "-o", tmp_path / "o.json"],
        "check": ["check", *sample("transformer_block"), "--overrides", searched["transformer_block"]],
        "compare": ["compare", *sample("transformer_block"), "--overrides", searched["transformer_block"]],
    }
    for command, argv in runs.items():
        report = tmp_path / f"{command}.html"
        code, stdout, _ = run(capsys, *argv, "--report", report, "-q")
        assert code == 0 and f"report written to {report}" in stdout
        page = report.read_text()
        for plot in PLOTS:  # no search trace where no search ran
            assert plot in page or (command != "search" and plot == 'id="plot-trace"'), (command, plot)
        assert ("Search trace" in page) == (command == "search")
        assert page.count("<svg") >= 3 - (command != "search")  # no trace plot without a search
        assert "ln1_square" in page and "ln1_var" in page
        assert "<script" not in page and "src=" not in page and "<link" not in page
    search_page = (tmp_path / "search.html").read_text()
    assert "ln1_sq" in search_page and "65504" in search_page  # the overflowing tensor against the limit


def test_the_gate_judges_with_the_override_files_tolerance_and_says_so(tmp_path, capsys):
    # a search at atol 10 keeps nothing in FP32; its own gate failed at the defaults (exit 1)
    code, _, _ = run(capsys, "search", LN, "--inputs", LN_IN, "--atol", "10", "-o", tmp_path / "o.json", "-q")
    assert code == 0 and json.loads((tmp_path / "o.json").read_text())["fp32_nodes"] == []
    code, out, _ = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", tmp_path / "o.json",
                       "--json", tmp_path / "c.json", "-q")
    assert code == 0, out
    assert out.splitlines()[0].endswith(f"(emulate backend; precision FP16, accumulation FP32 (from "
                                        f"{tmp_path / 'o.json'}); tolerance: atol 10, rtol 0.01 (from "
                                        f"{tmp_path / 'o.json'}))")
    said = json.loads((tmp_path / "c.json").read_text())
    assert said["tolerance"]["atol"] == 10 and said["tolerance_from"] == f"from {tmp_path / 'o.json'}"
    code, out, _ = run(capsys, "check", LN, "--inputs", LN_IN, "--overrides", tmp_path / "o.json", "--atol", "0.01",
                       "-q")
    assert code == 1 and "atol 0.01, rtol 0.01 (from" in out.splitlines()[0] and "; atol given))" in out
