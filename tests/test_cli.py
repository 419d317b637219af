"""The command line as a user meets it: exit codes, one-line errors, the JSON it writes."""

import json
import subprocess
import sys
import shutil

import numpy as np
import onnx
import pytest
from conftest import LN, LN_IN, SAMPLE_MODELS, SAMPLES, F, make_model, one_line_error, run
from onnx import TensorProto, helper


@pytest.mark.parametrize("name", SAMPLE_MODELS)
def test_search_finds_the_known_set_on_every_sample_model(name, known, tmp_path, capsys):
    spec = known[name]
    out = tmp_path / "o.json"
    code, stdout, _ = run(capsys, "search", SAMPLES / f"{name}.onnx", "--inputs", SAMPLES / f"{name}.npz",
                          "--atol", spec.get("atol", 1e-2), "--rtol", spec.get("rtol", 1e-2), "-o", out, "-q")
    assert code == 0
    data = json.loads(out.read_text())
    found = [n["name"] for n in data["fp32_nodes"]]
    if spec.get("minimal_size") is not None:
        assert len(found) == spec["minimal_size"]
    else:
        assert sorted(found) == sorted(spec["culprits"])
    assert data["search"]["minimal"] is True
    assert data["search"]["verified"] is True
    if found:
        assert all(m["passed"] for m in data["metrics"]["with_overrides"].values())
        assert not all(m["passed"] for m in data["metrics"]["fp16"].values())
    else:
        assert data["search"]["status"] == "fp16_passes"
    assert "evaluation(s)" in stdout


def test_json_has_the_documented_keys_and_exports(tmp_path, capsys, known):
    out = tmp_path / "o.json"
    code, _, _ = run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "-q")
    assert code == 0
    data = json.loads(out.read_text())
    for key in ("schema", "model", "backend", "tolerance", "fp32_nodes", "search", "metrics", "exports"):
        assert key in data
    assert data["model"]["sha256"] and data["backend"]["name"] == "emulate"
    assert set(data["search"]) >= {"evaluations", "minimal", "seconds"}
    assert set(data["metrics"]) >= {"fp16", "with_overrides"}
    names = [n["name"] for n in data["fp32_nodes"]]
    assert all(set(n) >= {"name", "op_type", "outputs"} for n in data["fp32_nodes"])
    trt = data["exports"]["trtexec"]["args"]
    assert trt[:2] == ["--fp16", "--precisionConstraints=obey"]
    assert trt[2] == "--layerPrecisions=" + ",".join(f"{n}:fp32" for n in names)
    assert trt[3] == "--layerOutputTypes=" + ",".join(f"{n}:fp32" for n in names)
    ac = data["exports"]["modelopt_autocast"]
    assert all(p.startswith("^") and p.endswith("$") for p in ac["nodes_to_exclude"])
    assert ac["args"][ac["args"].index("--data_max") + 1] == "inf"
    assert ac["args"][ac["args"].index("--init_max") + 1] == "inf"
    st = data["exports"]["strongly_typed"]
    assert st["command"] == f"fp16bisect apply {LN} {out} -o {str(LN)[:-5]}.mixed.onnx"  # the model first
    assert st["trtexec"].endswith("--stronglyTyped")


def test_several_samples_must_all_pass(tmp_path, capsys):
    with np.load(LN_IN) as d:
        arrays = {k: d[k] for k in d.files}
    second = tmp_path / "second.npz"
    np.savez(second, **{k: v * 0.5 for k, v in arrays.items()})
    out = tmp_path / "o.json"
    code, _, _ = run(capsys, "search", LN, "--inputs", LN_IN, "--inputs", second, "-o", out, "-q")
    assert code == 0
    data = json.loads(out.read_text())
    assert data["fp32_nodes"]


def test_unreachable_tolerance_exits_3_and_says_by_how_much(tmp_path, capsys):
    model = SAMPLES / "fp16_safe.onnx"
    inputs = SAMPLES / "fp16_safe.npz"
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    with np.load(inputs) as d:
        feed = {k: d[k] for k in d.files}
    names = [o.name for o in session.get_outputs()]
    ref = tmp_path / "ref.npz"
    np.savez(ref, **{n: v + 1.0 for n, v in zip(names, session.run(names, feed))})
    code, _, err = run(capsys, "search", model, "--inputs", inputs, "--reference", ref, "-o", tmp_path / "o.json")
    assert code == 3
    line = one_line_error(err)
    assert "unreachable even in FP32" in line and "x" in line.split("at least")[1]
    assert not (tmp_path / "o.json").exists()


def _bad_inputs(tmp_path):
    with np.load(LN_IN) as d:
        good = {k: d[k] for k in d.files}
    name, value = next(iter(good.items()))
    cases = {}
    cases["missing input"] = ({}, "no array for model input")
    cases["extra input"] = ({**good, "bogus": value}, "not model inputs")
    cases["wrong dtype"] = ({name: value.astype(np.float64)}, "float64")
    cases["wrong rank"] = ({name: value[None]}, "rank")
    files = {}
    for label, (arrays, expect) in cases.items():
        path = tmp_path / f"{label.replace(' ', '_')}.npz"
        np.savez(path, **arrays)
        files[label] = (path, expect)
    return files


def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys):
    for label, (path, expect) in _bad_inputs(tmp_path).items():
        code, _, err = run(capsys, "search", LN, "--inputs", path, "-o", tmp_path / "o.json")
        assert code == 2, label
        assert expect in one_line_error(err), label


def test_bad_files_and_flags_exit_2(tmp_path, capsys):
    not_onnx = tmp_path / "x.onnx"
    not_onnx.write_text("hello, not a model")
    not_npz = tmp_path / "x.npz"
    not_npz.write_text("not a zip")
    npy = tmp_path / "array.npz"
    with open(npy, "wb") as f:
        np.save(f, np.ones(3, np.float32))
    cases = [
        (["search", tmp_path / "missing.onnx", "--inputs", LN_IN], "not found"),
        (["search", not_onnx, "--inputs", LN_IN], "not an ONNX model"),
        (["search", LN, "--inputs", tmp_path / "missing.npz"], "not found"),
        (["search", LN, "--inputs", not_npz], "not a readable .npz"),
        (["search", LN, "--inputs", npy], "single .npy array"),
        (["search", LN, "--inputs", LN_IN, "--atol", "-1"], "--atol"),
        (["search", LN, "--inputs", LN_IN, "--rtol", "inf"], "--rtol"),
        (["search", LN, "--inputs", LN_IN, "--min-cosine", "nan"], "--min-cosine"),
        (["search", tmp_path, "--inputs", LN_IN], "is a directory"),
        (["search", LN, "--inputs", LN_IN, "--backend", "cuda"], "--backend"),
        (["search", LN], "--inputs"),
        (["search", LN, "--inputs", LN_IN, "--backend", "tensorrt"], "--backend emulate"),
        ([], "no command"),
    ]
    for argv, expect in cases:
        code, _, err = run(capsys, *argv, "-o", tmp_path / "o.json") if argv else run(capsys)
        assert code == 2, argv
        assert expect in one_line_error(err), argv
    blocker = tmp_path / "file"
    blocker.write_text("")
    for output, expect in [(blocker / "o.json", "cannot write"), (tmp_path, "is a directory")]:
        code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", output)
        assert code == 2, output
        assert expect in one_line_error(err), output
    assert not (tmp_path / "o.json").exists()


def test_nan_in_reference_exits_2(tmp_path, capsys):
    import onnxruntime as ort

    session = ort.InferenceSession(str(LN), providers=["CPUExecutionProvider"])
    with np.load(LN_IN) as d:
        feed = {k: d[k] for k in d.files}
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, feed)
    values[0] = values[0].copy()
    values[0].flat[0] = np.nan
    ref = tmp_path / "ref.npz"
    np.savez(ref, **dict(zip(names, values)))
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "--reference", ref, "-o", tmp_path / "o.json")
    assert code == 2
    assert "NaN" in one_line_error(err)


def test_model_without_float_outputs_exits_2(tmp_path, capsys):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("ArgMax", ["r"], ["y"], name="argmax", axis=0),
    ]
    model = make_model(nodes, [("x", F, [4])], [("y", TensorProto.INT64, [1])])
    path = tmp_path / "int.onnx"
    onnx.save(model, path)
    inputs = tmp_path / "int.npz"
    np.savez(inputs, x=np.ones(4, np.float32))
    code, _, err = run(capsys, "search", path, "--inputs", inputs, "-o", tmp_path / "o.json")
    assert code == 2
    assert "no float32 output" in one_line_error(err)


def test_console_script_prints_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fp16bisect.cli.main", "search", str(tmp_path / "nope.onnx"), "--inputs", str(LN_IN)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "nope.onnx' not found" in one_line_error(proc.stderr)


def test_internal_error_is_one_line_exit_4_and_the_traceback_goes_to_a_file_it_names(monkeypatch, tmp_path, capsys):
    import re

    import fp16bisect.run.pipeline as pipeline

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(pipeline, "search_model", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", tmp_path / "o.json")
    assert code == 4  # not 1: that is "a check failed"
    line = [x for x in err.splitlines() if "internal error" in x][0]
    assert "internal error: ZeroDivisionError: a bug" in line and "Traceback" not in err
    where = re.search(r"the traceback is in (\S+): please report it", line).group(1)
    assert where.startswith(str(tmp_path)) and "fp16bisect-traceback-" in where
    with open(where) as f:
        written = f.read()
    assert "Traceback (most recent call last)" in written and "ZeroDivisionError: a bug" in written
    assert "in broken" in written  # the frame that raised


def test_model_with_nothing_to_round_needs_no_overrides(tmp_path, capsys):
    nodes = [helper.make_node("Transpose", ["x"], ["y"], name="t", perm=[1, 0])]
    path = tmp_path / "t.onnx"
    onnx.save(make_model(nodes, [("x", F, [2, 3])], [("y", F, [3, 2])]), path)
    inputs = tmp_path / "t.npz"
    np.savez(inputs, x=np.full((2, 3), 70000.0, np.float32))
    code, _, _ = run(capsys, "search", path, "--inputs", inputs, "-o", tmp_path / "o.json", "-q")
    assert code == 0
    data = json.loads((tmp_path / "o.json").read_text())
    assert data["fp32_nodes"] == [] and data["search"]["status"] == "fp16_passes"
    assert data["search"]["candidates"] == 0


def test_tensorrt_backend_without_tensorrt_or_without_a_gpu_exits_2_with_the_fix(tmp_path, capsys, monkeypatch):
    import importlib.util

    import fp16bisect.backends.tensorrt.device as trt_device

    have_rtx = importlib.util.find_spec("tensorrt_rtx") is not None
    argv = ["search", LN, "--inputs", LN_IN, "--backend", "tensorrt", "-o", tmp_path / "o.json"]
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    code, _, err = run(capsys, *argv)
    assert code == 2 and "TensorRT is not installed: pip install 'fp16bisect[tensorrt]'" in one_line_error(err)
    if not have_rtx:
        pytest.skip("TensorRT-RTX is a test extra: pip install '.[test]'")
    monkeypatch.delitem(sys.modules, "tensorrt_rtx")  # a real TensorRT flavour, on a machine without a GPU
    monkeypatch.setattr(trt_device, "gpu_count", lambda: 0)
    code, _, err = run(capsys, *argv)
    assert code == 2 and "CUDA sees no GPU" in one_line_error(err) and "--backend emulate" in err
    assert not (tmp_path / "o.json").exists()


def test_auto_picks_emulate_without_a_gpu(tmp_path, capsys):
    code, _, _ = run(capsys, "search", LN, "--inputs", LN_IN, "-o", tmp_path / "o.json", "-q")
    assert code == 0 and json.loads((tmp_path / "o.json").read_text())["backend"]["name"] == "emulate"


def test_the_removed_check_minimal_flag_is_exit_2_with_a_hint(capsys):
    from fp16bisect.cli.main import main

    code = main(["search", str(SAMPLES / "fp16_safe.onnx"), "--inputs", str(SAMPLES / "fp16_safe.npz"),
                 "--check-minimal"])
    err = capsys.readouterr().err
    assert code == 2 and "--check-minimal was removed" in err and "drop it" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_shell_expanded_glob_gets_a_one_line_hint(tmp_path, capsys, monkeypatch):
    """``--inputs data/*.npz`` unquoted: the shell passes every file; argparse would call all but the first
    unrecognized. The hint says to quote the glob or pass the directory (exit 2)."""
    model = SAMPLES / "two_branches.onnx"
    (tmp_path / "data").mkdir()
    for name in ("a", "b", "c"):
        shutil.copy(SAMPLES / "two_branches.npz", tmp_path / "data" / f"{name}.npz")
    monkeypatch.chdir(tmp_path)
    files = ["data/a.npz", "data/b.npz", "data/c.npz"]  # what bash makes of data/*.npz
    code, _, err = run(capsys, "search", model, "--inputs", *files, "-o", "o.json")
    assert code == 2 and one_line_error(err) == (
        "fp16bisect: error: --inputs got 3 files (data/a.npz data/b.npz ...): the shell expanded an unquoted glob; "
        "quote it (--inputs 'data/*.npz') or pass the directory (--inputs data)")
    code, _, err = run(capsys, "check", model, "--inputs", "data/a.npz", f"--reference={files[0]}", *files[1:])
    assert code == 2 and "--reference got 3 files" in one_line_error(err) and "'data/*.npz'" in err
    code, _, err = run(capsys, "search", model, "--inputs", "data/a.npz", "stray")  # not a glob: argparse's words
    assert code == 2 and "unrecognized arguments: stray" in one_line_error(err)
    assert run(capsys, "search", "--inputs", "data/*.npz", model, "-q", "-o", "o.json")[0] == 0  # quoted: works
