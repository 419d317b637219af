"""The Python API as a user calls it: ``fp16bisect.search/check/scan/apply`` on a model whose culprits are known
by construction (sample_models/transformer_block: ``ln1_square``, ``ln1_var``), with every form of model and
samples it takes; the file ``write`` makes against the command line's; bad input as ``UsageError``."""

from __future__ import annotations

import dataclasses
import doctest
import json
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import pytest
from conftest import LN, LN_IN, ROOT, SAMPLES, one_line_error, run

import fp16bisect

CULPRITS = {"ln1_square", "ln1_var"}


@pytest.fixture(scope="module")
def arrays() -> dict:
    with np.load(LN_IN) as data:
        return {k: data[k] for k in data.files}


def names(result) -> set:
    return {n.name for n in result.fp32_nodes}


def test_search_on_a_path_gives_the_known_set_with_its_nodes():
    result = fp16bisect.search(LN, LN_IN)
    assert names(result) == CULPRITS
    assert result.minimal and result.passed and result.status == "found"
    assert result.evaluations == 4  # sample_models/README.md's count
    by_name = {n.name: n for n in result.fp32_nodes}
    assert (by_name["ln1_square"].op_type, by_name["ln1_square"].outputs) == ("Mul", ("ln1_sq",))
    assert by_name["ln1_var"].op_type == "ReduceMean"
    assert result.with_overrides["y"].passed and not result.all_fp16["y"].passed
    assert result.to_dict()["fp32_nodes"][0]["name"] == result.fp32_nodes[0].name


def test_search_on_a_model_proto_gives_the_same_set_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the temporary model file goes
    result = fp16bisect.search(onnx.load(str(LN)), LN_IN)
    assert names(result) == CULPRITS
    assert list(tmp_path.iterdir()) == []  # the temporary model (and its work directory) removed
    data = result.to_dict()
    assert data["model"]["path"] == "model.onnx"  # not the temporary file's path
    assert data["model"]["sha256"] == fp16bisect.search(LN, LN_IN).to_dict()["model"]["sha256"]
    assert "model.onnx" in data["exports"]["strongly_typed"]["command"]
    assert "--onnx=model.onnx" in data["exports"]["trtexec"]["command"]
    # named so from the start (Graph.name), not patched after the search: the graph still knows the file it read
    graph = result.outcome.graph
    assert graph.shown == "model.onnx" and graph.path is not None and graph.path.parent.parent == tmp_path


def test_search_on_arrays_one_sample_or_several(arrays):
    assert names(fp16bisect.search(LN, arrays)) == CULPRITS
    several = fp16bisect.search(LN, [arrays, {"x": arrays["x"] * 0.5}])
    assert names(several) == CULPRITS
    assert names(fp16bisect.search(LN, (a for a in [arrays]))) == CULPRITS  # any iterable of dicts


def test_search_on_a_directory_takes_every_npz_in_it(tmp_path, arrays):
    np.savez(tmp_path / "b.npz", x=arrays["x"] * 0.5)
    np.savez(tmp_path / "a.npz", **arrays)
    lines = []
    result = fp16bisect.search(LN, tmp_path, progress=lines.append)
    assert names(result) == CULPRITS
    sources = [s.source for s in result.outcome.oracle.samples]
    assert sorted(sources) == [str(tmp_path / "a.npz"), str(tmp_path / "b.npz")]
    assert any(line.startswith("evaluation 1 on emulate: 0 node(s) in FP32 -> FAIL") for line in lines), lines


def test_write_makes_the_file_the_command_line_makes(tmp_path, monkeypatch, capsys):
    def without_timings(path) -> dict:
        data = json.loads(path.read_text())
        data["search"].pop("seconds")
        return data

    (tmp_path / "cli").mkdir()
    monkeypatch.chdir(tmp_path / "cli")
    assert run(capsys, "search", LN, "--inputs", LN_IN, "-o", "overrides.json", "-q")[0] == 0
    cli = without_timings(tmp_path / "cli" / "overrides.json")

    (tmp_path / "api").mkdir()
    monkeypatch.chdir(tmp_path / "api")
    journaled = fp16bisect.search(LN, LN_IN, output="overrides.json")  # written there, journaled beside it
    assert without_timings(tmp_path / "api" / "overrides.json") == cli
    (tmp_path / "api" / "overrides.json").unlink()
    assert journaled.write("overrides.json").resolve() == tmp_path / "api" / "overrides.json"
    assert without_timings(tmp_path / "api" / "overrides.json") == cli

    (tmp_path / "memory").mkdir()
    monkeypatch.chdir(tmp_path / "memory")
    fp16bisect.search(LN, LN_IN).write("overrides.json")  # not journaled: the one difference
    cli["search"]["journal"] = None
    assert without_timings(tmp_path / "memory" / "overrides.json") == cli


def test_write_names_its_own_path_in_the_apply_command(tmp_path):
    result = fp16bisect.search(LN, LN_IN, output=tmp_path / "first.json")
    result.write(tmp_path / "second.json")
    written = json.loads((tmp_path / "second.json").read_text())
    command = written["exports"]["strongly_typed"]["command"]  # apply MODEL OVERRIDES: the model first
    assert command.startswith("fp16bisect apply ") and f" {tmp_path / 'second.json'} -o " in command
    assert result.to_dict() == json.loads((tmp_path / "first.json").read_text())


def test_bad_samples_raise_the_command_lines_one_line_usage_error(tmp_path, capsys, arrays):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=arrays["x"].astype(np.float64))
    code, _, err = run(capsys, "search", LN, "--inputs", bad, "-o", tmp_path / "o.json")
    assert code == 2
    with pytest.raises(fp16bisect.UsageError) as raised:
        fp16bisect.search(LN, bad)
    assert one_line_error(err) == f"fp16bisect: error: {raised.value}"
    with pytest.raises(fp16bisect.UsageError) as raised:  # the same check on arrays given in memory
        fp16bisect.search(LN, {"x": arrays["x"].astype(np.float64)})
    assert str(raised.value) == ("input 'x' in 'sample 0' is float64, the model expects float32: convert it with "
                                 ".astype(float32)")


@pytest.mark.parametrize("call, message", [
    (lambda: fp16bisect.search(LN, SAMPLES / "missing.npz"), "file '{samples}/missing.npz' not found"),
    (lambda: fp16bisect.search(LN, 3), "samples is a int: pass an .npz path"),
    (lambda: fp16bisect.search(LN, []), "no samples given"),
    (lambda: fp16bisect.search(LN, {"y": np.zeros(3)}), "has no array for model input(s) 'x'"),
    (lambda: fp16bisect.search(LN, LN_IN, tolerance={"atol": -1}), "atol -1: give a finite number >= 0"),
    (lambda: fp16bisect.search(LN, LN_IN, tolerance={"atol": float("inf")}), "atol inf: give a finite number >= 0"),
    (lambda: fp16bisect.check(LN, LN_IN, tolerance={"rtol": float("nan")}), "rtol nan: give a finite number >= 0"),
    (lambda: fp16bisect.check(LN, LN_IN, tolerance={"min_cosine": 2}), "min_cosine 2: give a cosine similarity from -1 to 1"),
    (lambda: fp16bisect.search(LN, LN_IN, judge={"keep_plans": True}), "keep_plans keeps the plan files of backend='command'"),
    (lambda: fp16bisect.search(LN, LN_IN, judge={"opt_level": 9}), "opt_level 9: give a TensorRT builder optimisation level"),
    (lambda: fp16bisect.search(LN, LN_IN, judge="command"), "backend='command' needs the command"),
    (lambda: fp16bisect.search(LN, LN_IN, judge="gpu"), "backend 'gpu': use one of"),
    (lambda: fp16bisect.search(LN_IN, LN_IN), "transformer_block.npz"),
    (lambda: fp16bisect.search(object(), LN_IN), "model is a object: pass the path of an .onnx file"),
    (lambda: fp16bisect.check(LN, LN_IN, overrides=SAMPLES / "README.md"), "README.md"),
    (lambda: fp16bisect.apply(LN, None, "m.onnx"), "apply needs overrides"),
    (lambda: fp16bisect.apply(LN, {"schema": "x"}, "m.json"), "would hold an ONNX model"),
])
def test_bad_input_raises_usage_error_with_one_line_not_system_exit(call, message):
    with pytest.raises(fp16bisect.UsageError) as raised:
        call()
    text = str(raised.value)
    assert message.format(samples=SAMPLES) in text and "\n" not in text
    assert isinstance(raised.value, fp16bisect.Error) and raised.value.exit_code == 2


def test_a_tolerance_fp32_misses_raises_tolerance_unreachable(arrays):
    reference = {"y": fp16bisect.search(LN, arrays).outcome.oracle.samples[0].reference["y"] + 1.0}
    with pytest.raises(fp16bisect.ToleranceUnreachable, match="unreachable even in FP32"):
        fp16bisect.search(LN, arrays, reference=reference)


def test_check_passes_with_the_found_overrides_and_fails_without(tmp_path, arrays):
    found = fp16bisect.search(LN, LN_IN)
    without = fp16bisect.check(LN, LN_IN)
    assert not without.passed and without.reachable and not without.outputs["y"].passed
    assert without.verdict.startswith("FAIL in all-FP16: max abs error 7.72")
    for overrides in (found, found.write(tmp_path / "o.json"), found.to_dict()):
        checked = fp16bisect.check(onnx.load(str(LN)), arrays, overrides=overrides)
        assert checked.passed and {n.name for n in checked.nodes} == CULPRITS, checked.verdict
        assert checked.nodes[0] == found.fp32_nodes[0]  # one Node type: a check's nodes are a search's
    data = checked.to_dict()
    assert data["schema"] == "fp16bisect.check/1" and data["passed"] is True and data["verdict"].startswith("PASS")


def test_apply_writes_a_model_onnx_checker_accepts_and_verifies_it(tmp_path):
    found = fp16bisect.search(LN, LN_IN)
    applied = fp16bisect.apply(onnx.load(str(LN)), found, tmp_path / "mixed.onnx", verify=True, samples=LN_IN)
    onnx.checker.check_model(str(tmp_path / "mixed.onnx"), full_check=True)
    assert applied.path == tmp_path / "mixed.onnx" and applied.fp32_nodes == found.fp32_nodes
    assert applied.passed and applied.check.passed and not applied.verification.all_fp16.passed
    plain = fp16bisect.apply(LN, found.write(tmp_path / "o.json"), tmp_path / "plain.onnx")
    assert plain.verification is None and plain.passed is None
    assert (tmp_path / "plain.onnx").read_bytes() == (tmp_path / "mixed.onnx").read_bytes()


def test_scan_ranks_the_culprits_first(arrays):
    found = fp16bisect.scan(LN, arrays)
    assert {n.name for n in found.nodes[:found.suspects]} == CULPRITS
    assert found.rows[0].name == "ln1_sq" and found.rows[0].risk == "overflow"
    assert [row.to_json() for row in found.rows] == found.to_dict()["tensors"]  # scan --json's rows, unchanged
    assert all(isinstance(n, fp16bisect.ScanNode) for n in found.nodes)  # typed records, not dicts
    assert [n.to_json() for n in found.nodes] == found.to_dict()["nodes"]  # ... and scan --json's nodes, unchanged
    assert found.to_dict()["schema"].startswith("fp16bisect.scan/")


def test_importing_the_package_loads_no_onnx_and_search_is_the_function():
    code = ("import sys, fp16bisect; bad = {'onnx', 'onnxruntime', 'numpy', 'rich'} & set(sys.modules); "
            "assert not bad, bad; from fp16bisect import search, Error, UsageError, ToleranceUnreachable; "
            "assert callable(search) and search.__module__ == 'fp16bisect.api.functions', search; "
            "assert issubclass(UsageError, Error) and fp16bisect.SearchResult.__name__ == 'SearchResult'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_docstring_examples_run(tmp_path, monkeypatch):
    """The examples the API reference shows (mkdocstrings renders the docstrings) work as written."""
    import fp16bisect.api.functions as functions
    import fp16bisect.api.results as results
    import fp16bisect.api.tools as tools

    (tmp_path / "sample_models").symlink_to(SAMPLES)
    monkeypatch.chdir(tmp_path)
    for module in (functions, results, tools):
        failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
        assert tried >= 4 and failed == 0, module.__name__
    assert (tmp_path / "check.html").read_text().startswith("<!DOCTYPE html>")


def test_the_command_backend_without_output_runs_its_plans_beside_the_working_directory(tmp_path, monkeypatch):
    # was a bare TypeError (the plan files' directory was None without output=); a judge that passes every plan
    monkeypatch.chdir(tmp_path)
    judge = f"{sys.executable} -c 'import sys; sys.exit(0)' {{model}}"
    result = fp16bisect.search(LN, LN_IN, judge=fp16bisect.Judge("command", check=judge), strategy={"prior": "none"})
    assert result.fp32_nodes == [] and result.backend == "command"
    assert not (tmp_path / "fp16bisect.plans").exists()  # removed: no keep_plans


def test_check_judges_with_the_override_files_tolerance_unless_given(tmp_path):
    found = fp16bisect.search(LN, LN_IN, tolerance={"atol": 10}, output=tmp_path / "o.json")
    assert found.fp32_nodes == []  # at atol 10 all-FP16 passes
    gate = fp16bisect.check(LN, LN_IN, overrides=tmp_path / "o.json")
    assert gate.passed and gate.tolerance.atol == 10 and gate.tolerance_from == f"from {tmp_path / 'o.json'}"
    assert gate.to_dict()["tolerance_from"] == gate.tolerance_from
    tighter = fp16bisect.check(LN, LN_IN, overrides=tmp_path / "o.json", tolerance={"atol": 0.01})
    assert not tighter.passed and tighter.tolerance.atol == 0.01
    assert tighter.tolerance_from == f"from {tmp_path / 'o.json'}; atol given"
    assert fp16bisect.check(LN, LN_IN).tolerance_from == "defaults"


def test_the_api_has_what_the_command_line_has_and_the_command_line_calls_it(tmp_path, monkeypatch, capsys):
    import fp16bisect.api as api

    for name in ("compare", "migrate", "batch", "write_report"):
        assert callable(getattr(fp16bisect, name)) and name in fp16bisect.__all__
    called = []
    for name in ("compare", "migrate", "batch", "write_report", "run_check", "run_search"):
        real = getattr(api, name)
        monkeypatch.setattr(api, name, lambda *a, _real=real, _name=name, **k: called.append(_name) or _real(*a, **k))
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "compare", LN, "--inputs", LN_IN, "--report", "c.html", "-q")[0] == 0
    assert run(capsys, "migrate", LN, "--trtexec-args=--fp16 --layerPrecisions=ln1_square:fp32", "-o", "m.onnx",
               "-q")[0] == 0
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"entries": [{"model": str(LN), "inputs": str(LN_IN), "atol": 10}]}))
    assert run(capsys, "batch", manifest, "-q", "--jobs", "1")[0] == 0
    assert run(capsys, "check", LN, "--inputs", LN_IN, "--report", "k.html", "-q")[0] == 1
    assert called == ["compare", "write_report", "migrate", "batch", "run_check", "write_report"]


def test_compare_migrate_and_write_report_give_what_the_commands_print(tmp_path):
    found = fp16bisect.compare(LN, LN_IN)
    assert found.first_failing.node == "ln1_square" and not found.passed
    found.write_csv(tmp_path / "nodes.csv")
    assert (tmp_path / "nodes.csv").read_text().startswith("node,op_type,fp32,")
    moved = fp16bisect.migrate(LN, tmp_path / "m.onnx", trtexec_args="--layerPrecisions=ln1_square:fp32,ln1_var:fp32",
                               verify=True, samples=LN_IN)
    assert moved.passed and sorted(moved.mapping.nodes) == ["ln1_square", "ln1_var"]
    assert json.loads(moved.overrides.read_text())["environment"]["backend"] == "emulate"  # verified here
    searched = fp16bisect.search(LN, LN_IN, output=tmp_path / "o.json")
    assert fp16bisect.write_report(searched, tmp_path / "r.html") == tmp_path / "r.html"
    with pytest.raises(fp16bisect.UsageError, match="pass what search, check or compare returned"):
        fp16bisect.write_report(moved, tmp_path / "x.html")


def test_results_print_as_one_short_line(tmp_path, monkeypatch):
    """repr of each result is a one-line summary (at most 200 characters), not its every field."""
    found = fp16bisect.search(LN, LN_IN)
    assert repr(found) == "SearchResult(2 FP32 nodes: ln1_square, ln1_var; minimal; 4 evaluations on emulate; passed)"
    checked = fp16bisect.check(LN, LN_IN)
    assert repr(checked) == ("CheckResult(FAILED; 0 FP32 nodes; emulate; atol 0.01, rtol 0.01; all-FP32 passes)")
    scanned = fp16bisect.scan(LN, LN_IN)
    assert repr(scanned).startswith("ScanResult(") and "the riskiest ln1_sq (overflow)" in repr(scanned)
    monkeypatch.chdir(tmp_path)
    applied = fp16bisect.apply(LN, found, "mixed.onnx")
    assert repr(applied) == "ApplyResult(mixed.onnx: 2 FP32 nodes: ln1_square, ln1_var; not verified)"
    many = dataclasses.replace(found, fp32_nodes=[fp16bisect.Node(f"/encoder/layers.{i}/attention/Softmax", "Softmax",
                                                                  ()) for i in range(40)])
    for result in (found, checked, scanned, applied, many):
        assert "\n" not in repr(result) and len(repr(result)) <= 200, repr(result)
    assert repr(many).startswith("SearchResult(40 FP32 nodes: /encoder/layers.0/attention/Softmax, ...")
    assert "(38 more)" in repr(many) or "(39 more)" in repr(many)


def test_apply_result_nodes_are_the_search_result_nodes(tmp_path):
    """One Node type: ApplyResult.fp32_nodes are Node records (not ids), equal to the search's."""
    found = fp16bisect.search(LN, LN_IN)
    applied = fp16bisect.apply(LN, found, tmp_path / "mixed.onnx", keep_fp32=["ln1_add_eps"])
    assert all(isinstance(n, fp16bisect.Node) for n in applied.fp32_nodes)
    assert [n.name for n in applied.fp32_nodes] == ["ln1_square", "ln1_var", "ln1_add_eps"]
    assert applied.fp32_nodes[:2] == found.fp32_nodes and applied.fp32_nodes[2].op_type == "Add"


def test_search_removes_its_journal_once_written_unless_keep_journal(tmp_path):
    fp16bisect.search(LN, LN_IN, output=tmp_path / "o.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"]
    kept = fp16bisect.search(LN, LN_IN, output=tmp_path / "k.json", journal={"keep_journal": True})
    journal, = tmp_path.glob("k.journal-*.jsonl")
    assert json.loads((tmp_path / "k.json").read_text())["search"]["journal"] == str(journal)
    assert kept.evaluations == len([line for line in journal.read_text().splitlines() if line.startswith('{"plan"')])
