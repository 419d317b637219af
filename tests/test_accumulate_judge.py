"""``--accumulate fp32|fp16`` end to end: the four models of accumulation_models.py (one sum past 65504 each),
and one that needs both an FP32 pin (storage) and FP32 accumulation (a sum). Search, check, the API and batch
manifests; the override file's ``fp32_accumulate_nodes`` and ``accumulate`` keys."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import fp16bisect
from accumulation_models import CASES
from conftest import make_model, one_line_error, run
from fp16bisect.errors import UsageError

F = TensorProto.FLOAT


def _saved(tmp_path: Path, name: str, model: onnx.ModelProto, inputs: dict) -> tuple[Path, Path]:
    path, data = tmp_path / f"{name}.onnx", tmp_path / f"{name}.npz"
    onnx.save(model, path)
    np.savez(data, **inputs)
    return path, data


def _case(tmp_path: Path, name: str):
    case = CASES[name]()
    return (*_saved(tmp_path, name, case.model, case.inputs), case.culprit)


def _names(data: dict, key: str) -> list[str]:
    return [n["name"] for n in data.get(key, [])]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_default_search_pins_nothing_and_check_fp16_fails(tmp_path, capsys, name):
    """Under today's judge (fp32 sums) the all-FP16 plan passes: nothing pinned, exit 0; ``check --accumulate
    fp16`` with no overrides fails (exit 1), the default check passes."""
    model, data, _ = _case(tmp_path, name)
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", model, "--inputs", data, "--backend", "emulate", "-o", out)
    assert code == 0, err
    written = json.loads(out.read_text())
    assert written["fp32_nodes"] == [] and not written.get("fp32_accumulate_nodes")
    assert run(capsys, "check", model, "--inputs", data, "--backend", "emulate")[0] == 0
    code, out_text, err = run(capsys, "check", model, "--inputs", data, "--backend", "emulate", "--accumulate", "fp16")
    assert code == 1, out_text + err
    assert "accumulation: FP16 nodes also add in FP16" in err


@pytest.mark.parametrize("name", sorted(CASES))
def test_search_accumulate_fp16_finds_the_culprit_in_fp32_accumulation(tmp_path, capsys, name):
    """Exactly the culprit, in FP32 accumulation (no FP32 node); the file records accumulate fp16, and ``check``
    on it passes judging with the file's fp16 (said), while the same file without its mark fails."""
    model, data, culprit = _case(tmp_path, name)
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", model, "--inputs", data, "--backend", "emulate", "--accumulate", "fp16",
                       "-o", out)
    assert code == 0, err
    written = json.loads(out.read_text())
    assert written["fp32_nodes"] == [] and _names(written, "fp32_accumulate_nodes") == [culprit]
    assert written["accumulate"] == "fp16"
    code, _, err = run(capsys, "check", model, "--inputs", data, "--backend", "emulate", "--overrides", out)
    assert code == 0, err
    assert "accumulation: FP16 nodes also add in FP16" in err  # the file's accumulate, not the default
    unmarked = tmp_path / "unmarked.json"
    unmarked.write_text(json.dumps({**written, "fp32_accumulate_nodes": []}))
    assert run(capsys, "check", model, "--inputs", data, "--backend", "emulate", "--overrides", unmarked)[0] == 1
    assert run(capsys, "check", model, "--inputs", data, "--backend", "emulate", "--overrides", unmarked,
               "--accumulate", "fp32")[0] == 0  # given, it wins over the file's


def _storage_and_sum() -> tuple[onnx.ModelProto, dict]:
    """Two branches, each failing FP16 one way, known by construction: ``x * 1e5`` (up to 2e5, past 65504 in
    storage) then ``* 1e-5``: both Muls must stay in FP32 (either one in FP16 rounds the 2e5 to inf); and a mean of
    4096 values of 20 to 30 (their sum about 100000 passes 65504; each value and the mean fit): FP32
    accumulation of ``mean`` suffices."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Mul", ["x", "up"], ["big"], name="scale_up"),
             helper.make_node("Mul", ["big", "down"], ["y"], name="scale_down"),
             helper.make_node("Relu", ["z"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], name="mean", axes=[1], keepdims=1)]
    model = make_model(nodes, [("x", F, [1, 64]), ("z", F, [1, 4096])], [("y", F, [1, 64]), ("m", F, [1, 1])],
                       {"up": np.float32(1e5), "down": np.float32(1e-5)}, opset=13)
    return model, {"x": rng.uniform(1, 2, (1, 64)).astype(np.float32),
                   "z": rng.uniform(20, 30, (1, 4096)).astype(np.float32)}


def test_an_answer_with_both_states_each_in_its_own(tmp_path, capsys):
    model, data = _saved(tmp_path, "both", *_storage_and_sum())
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", model, "--inputs", data, "--backend", "emulate", "-o", out)
    assert code == 0, err
    assert sorted(_names(json.loads(out.read_text()), "fp32_nodes")) == ["scale_down", "scale_up"]
    code, _, err = run(capsys, "search", model, "--inputs", data, "--backend", "emulate", "--accumulate", "fp16",
                       "-o", out, "--restart")
    assert code == 0, err
    written = json.loads(out.read_text())
    assert sorted(_names(written, "fp32_nodes")) == ["scale_down", "scale_up"]
    assert _names(written, "fp32_accumulate_nodes") == ["mean"]
    assert "FP32 accumulation set (1)" in written["search"]["minimality"]
    # each FP32 node checked in the answer itself (removed; demoted when it sums), and every evaluation counted,
    # the all-FP16 baseline with FP16 sums included: one progress line each
    assert written["search"]["minimality"].endswith("2 check(s) of its FP32 nodes (each removed, each accumulator "
                                                    "also demoted to FP32 accumulation): each failed")
    assert written["search"]["minimal"] is True
    steps = [line for line in err.splitlines() if "fp16bisect: evaluation " in line]
    assert len(steps) == written["search"]["evaluations"] == len(written["search"]["trace"]) == 7, steps


def test_the_api_and_a_manifest_entry_give_the_same_answer(tmp_path):
    model, data, culprit = _case(tmp_path, "layernorm")
    found = fp16bisect.search(str(model), str(data), judge="emulate", space={"accumulate": "fp16"})
    assert [n.name for n in found.fp32_nodes] == [] and [n.name for n in found.fp32_accumulate_nodes] == [culprit]
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"entries": [{"model": model.name, "inputs": data.name, "action": "search",
                                                 "backend": "emulate", "accumulate": "fp16"}]}))
    row, = fp16bisect.batch(str(manifest), jobs=1).entries
    assert row.passed, row.error
    assert row.result is not None and row.result["fp32_nodes"] == []
    assert _names(row.result, "fp32_accumulate_nodes") == [culprit]


def test_accumulate_fp8_is_a_usage_error_everywhere(tmp_path, capsys):
    model, data, _ = _case(tmp_path, "global_pool")
    for command in ("search", "check", "compare"):
        code, _, err = run(capsys, command, model, "--inputs", data, "--accumulate", "fp8")
        assert code == 2
        assert "accumulate 'fp8': use fp32" in one_line_error(err)
    with pytest.raises(UsageError, match="accumulate 'fp8'"):
        fp16bisect.search(str(model), str(data), judge="emulate", space={"accumulate": "fp8"})
    with pytest.raises(UsageError, match="accumulate 'fp8'"):
        fp16bisect.check(str(model), str(data), judge="emulate", space={"accumulate": "fp8"})
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"entries": [{"model": model.name, "inputs": data.name, "accumulate": "fp8"}]}))
    with pytest.raises(UsageError, match="accumulate 'fp8'"):
        fp16bisect.batch(str(manifest), jobs=1)


def test_the_journal_of_one_judge_is_not_the_others():
    """The journal header says fp16 accumulation (fp32: no key, so journals from before resume)."""
    from fp16bisect.evaluation.journal import journal_key
    from fp16bisect.model.graph import Graph
    from fp16bisect.run.pipeline import journal_header
    from fp16bisect.tolerance import Tolerance

    graph = Graph(CASES["global_pool"]().model)
    fp32 = journal_header(graph, "emulate", Tolerance(), "digest", 1)
    fp16 = journal_header(graph, "emulate", Tolerance(), "digest", 1, accumulate="fp16")
    assert "accumulate" not in fp32 and fp16["accumulate"] == "fp16"
    assert journal_key(fp32) != journal_key(fp16)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compare_accumulate_fp16_names_the_culprit_first(tmp_path, capsys, name):
    """Layer-wise, with FP16 sums the culprit is the first failing node (the command and the API); with FP32 sums
    (the default) nothing fails."""
    model, data, culprit = _case(tmp_path, name)
    code, out, err = run(capsys, "compare", model, "--inputs", data, "--accumulate", "fp16")
    assert code == 0, err
    assert f"first failing node: {culprit} (" in out
    assert fp16bisect.compare(str(model), str(data), space={"accumulate": "fp16"}).first_failing.node == culprit
    assert fp16bisect.compare(str(model), str(data)).first_failing is None


def test_apply_verify_judges_the_files_plan_with_fp16_sums_when_the_file_or_the_flag_says(tmp_path, capsys):
    """``apply --verify`` of an ``--accumulate fp16`` answer also judges the file's plan with FP16 sums (the
    emulator, which models the file) and says so; without its FP32-accumulation mark that judgement fails (exit 1)
    though the written file itself, run with FP32 sums, passes; ``--accumulate fp32`` overrides the file's."""
    model, data, culprit = _case(tmp_path, "matmul")
    found = tmp_path / "o.json"
    assert run(capsys, "search", model, "--inputs", data, "--backend", "emulate", "--accumulate", "fp16",
               "-o", found)[0] == 0
    mixed = tmp_path / "m.onnx"
    code, out, _ = run(capsys, "apply", model, found, "-o", mixed, "--verify", "--inputs", data)
    assert code == 0 and "with overrides (emulated, FP16 sums)" in out and "with FP16 sums" in out
    unmarked = json.loads(found.read_text())
    assert _names(unmarked, "fp32_accumulate_nodes") == [culprit]
    unmarked["fp32_accumulate_nodes"] = []
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(unmarked))
    code, out, _ = run(capsys, "apply", model, bare, "-o", mixed, "--verify", "--inputs", data)
    assert code == 1 and "NOT verified" in out.split("with FP16 sums")[1]
    code, out, _ = run(capsys, "apply", model, bare, "-o", mixed, "--verify", "--inputs", data, "--accumulate", "fp32")
    assert code == 0 and "FP16 sums" not in out
    applied = fp16bisect.apply(model, bare, tmp_path / "api.onnx", verify=True, samples=data)
    assert applied.passed is False and applied.fp16_sums is not None and not applied.fp16_sums.passed


@pytest.mark.parametrize("accumulate", ["fp32", "fp16"])
def test_a_rerun_replays_every_evaluation_and_says_so(tmp_path, capsys, accumulate):
    """Run again at the same -o, every evaluation is the journal's and each progress line says so, also for plans
    with nodes added to every plan (--headroom's forced nodes; under fp16 the marks of the first stage)."""
    model, data = _saved(tmp_path, "both", *_storage_and_sum())
    out = tmp_path / "o.json"
    argv = ["search", model, "--inputs", data, "--backend", "emulate", "--accumulate", accumulate, "-o", out,
            "--keep-journal", "--headroom", "1.5"]
    assert run(capsys, *argv)[0] == 0
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    steps = [line for line in err.splitlines() if "fp16bisect: evaluation " in line]
    assert steps and all("(from the journal)" in line for line in steps), err


def test_the_console_the_file_and_the_report_say_which_state_and_why(tmp_path, capsys):
    """An --accumulate fp16 answer names its FP32-accumulation node apart from the FP32 pins, with why (its sum's
    peak against 65504, its terms, the sample), in the console, the override file and the HTML report; the
    progress lines count it apart and number the second stage after the first; Next: offers the mixed file."""
    model, data, culprit = _case(tmp_path, "layernorm")
    out_json, page = tmp_path / "o.json", tmp_path / "r.html"
    code, out, err = run(capsys, "search", model, "--inputs", data, "--backend", "emulate", "--accumulate", "fp16",
                         "-o", out_json, "--report", page)
    assert code == 0, err
    why = "sums 4096 terms to a peak of 1.024e+05 > 65504"
    assert f"{culprit}  LayerNormalization; FP32 accumulation; FP32 run: {why}" in out
    entry = json.loads(out_json.read_text())["fp32_accumulate_nodes"][0]
    assert entry["name"] == culprit and entry["fp32_profile"].startswith(why)
    assert 'id="fp32-accumulation"' in page.read_text() and html.escape(why) in page.read_text()
    steps = [line for line in err.splitlines() if "fp16bisect: evaluation " in line]
    assert [line.split(":")[1].split()[1] for line in steps] == [str(i) for i in range(1, len(steps) + 1)], steps
    assert "0 node(s) in FP32, 1 in FP32 accumulation -> pass" in steps[-1]
    assert "nothing needs FP32" not in out and "--stronglyTyped" in out and "--layerPrecisions" not in out
