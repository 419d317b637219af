"""Every command fp16bisect prints runs as printed, keeps the run's mode and never overwrites the answer it
follows (the Next: block, a check's FAIL hint, the headroom and accumulation suggestions, batch's hint, the Python
API's hint, the override JSON's ``search.command``); and check's and search's stdout say what they judged with
(precision, accumulation, where each came from), ``-q`` or not, without a sentence contradicting it."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LN, LN_IN, SAMPLES, run

import fp16bisect
from accumulation_models import CASES

LOUD = SAMPLES / "loudness.onnx"
LOUD_IN = SAMPLES / "loudness.npz"


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory holding copies of the sample models (what a printed ``apply -o`` writes beside the
    model lands here), and one of each accumulation model (``<name>.onnx``, ``<name>.npz``)."""
    for path in (LN, LN_IN, LOUD, LOUD_IN):
        shutil.copy(path, tmp_path / path.name)
    for name, make in CASES.items():
        case = make()
        onnx.save(case.model, tmp_path / f"{name}.onnx")
        np.savez(tmp_path / f"{name}.npz", **case.inputs)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def next_commands(stdout: str) -> list[str]:
    """The fp16bisect commands of the Next: block, as printed."""
    block = stdout.split("Next:\n", 1)[1]
    return [line.strip() for line in block.splitlines() if line.strip().startswith("fp16bisect ")]


def quoted_command(line: str) -> str:
    """The command a verdict line suggests between quotes ('fp16bisect search ...')."""
    return line.split("'fp16bisect ", 1)[1].rsplit("'", 1)[0].join(["fp16bisect ", ""])


def judged(data: dict) -> tuple:
    """What an override file says it was judged with."""
    return data["precision"], data.get("accumulate", "fp32"), data["tolerance"]


def run_printed(capsys, command: str) -> tuple[int, str, str]:
    words = shlex.split(command)
    assert words[0] == "fp16bisect", command
    return run(capsys, *words[1:], "-q")


SEARCHES = {  # name: the search's words (flags in the records' order), and the commands its Next: block holds
    "default": (["transformer_block.onnx", "--inputs", "transformer_block.npz"], ["apply"]),
    "accumulate fp16": (["loudness.onnx", "--inputs", "loudness.npz", "--atol", "0.02", "--accumulate", "fp16"],
                        ["search", "apply"]),
    "headroom, per-output atol, keep-fp32": (["loudness.onnx", "--inputs", "loudness.npz", "--atol", "features:0.05",
                                              "--headroom", "1.2", "--keep-fp32", "rms"], ["search", "apply"]),
    "a sum past the max": (["layernorm.onnx", "--inputs", "layernorm.npz"], ["check", "search"]),
}


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_every_next_command_runs_as_printed_keeps_the_mode_and_writes_beside_the_answer(here, capsys, name):
    given, kinds = SEARCHES[name]
    code, stdout, err = run(capsys, "search", *given, "-o", "o.json")
    assert code == 0, err
    first = (here / "o.json").read_bytes()
    answer = json.loads(first)
    assert answer["search"]["command"] == ["fp16bisect", "search", given[0], *given[1:3], "-o", "o.json",
                                           *given[3:]]  # the search as typed, -o after the samples
    commands = next_commands(stdout)
    assert [shlex.split(c)[1] for c in commands] == kinds
    for command in commands:
        code, out, err = run_printed(capsys, command)
        words = shlex.split(command)
        if words[1] == "check":  # judges the answer with FP16 sums: fails (exit 1) where they overflow
            assert code in (0, 1), err
            assert "accumulation FP16 (given)" in out.splitlines()[0]
            continue
        assert code == 0, err
        if words[1] == "search":
            output = words[words.index("-o") + 1]
            assert output != "o.json" and output.startswith("o.") and output.endswith(".json")
            again = json.loads((here / output).read_text())
            precision, accumulate, tolerance = judged(again)
            assert (precision, tolerance) == (answer["precision"], answer["tolerance"])  # kept
            assert again.get("constraints") == answer.get("constraints")
            # changed: only what the suggestion is about
            fp16_sums = "--accumulate" in given or "accumulate-fp16" in output
            assert accumulate == ("fp16" if fp16_sums else "fp32")
            assert again["headroom"].get("flag") == (4 if "headroom4" in output else answer["headroom"].get("flag"))
        assert (here / "o.json").read_bytes() == first  # the answer it follows is never overwritten


def test_the_headroom_suggestion_after_an_accumulate_fp16_search_keeps_fp16_accumulation(here, capsys):
    """The issue's case: the --headroom 4 search suggested after ``search --accumulate fp16`` dropped the flag and
    wrote to the same -o, replacing the accumulation answer with a storage-only one."""
    code, stdout, err = run(capsys, "search", "loudness.onnx", "--inputs", "loudness.npz", "--accumulate", "fp16",
                            "-o", "o.json")
    assert code == 0, err
    headroom = next(c for c in next_commands(stdout) if "--headroom 4" in c)
    assert shlex.split(headroom)[-6:] == ["-o", "o.headroom4.json", "--accumulate", "fp16", "--headroom", "4"]
    assert run_printed(capsys, headroom)[0] == 0
    again = json.loads((here / "o.headroom4.json").read_text())
    assert again["accumulate"] == "fp16" and again["headroom"]["flag"] == 4
    assert json.loads((here / "o.json").read_text())["accumulate"] == "fp16"


def test_the_override_json_records_the_command_that_reproduces_the_search(here, capsys):
    given = ["loudness.onnx", "--inputs", "loudness.npz", "--headroom", "1.2", "--atol", "features:0.05",
             "--keep-fp32", "rms", "--accumulate", "fp16", "-o", "o.json"]
    assert run(capsys, "search", *given, "-q")[0] == 0
    first = json.loads((here / "o.json").read_text())
    command = first["search"]["command"]
    assert command[:5] == ["fp16bisect", "search", "loudness.onnx", "--inputs", "loudness.npz"]
    assert {"--headroom", "--atol", "--keep-fp32", "--accumulate", "-o"} <= set(command)
    (here / "o.json").rename(here / "first.json")
    assert run(capsys, *command[1:], "-q")[0] == 0  # as recorded: the same search, the same answer
    again = json.loads((here / "o.json").read_text())
    for key in ("fp32_nodes", "fp32_accumulate_nodes", "tolerance", "accumulate", "precision", "constraints"):
        assert again[key] == first[key], key
    assert again["search"]["command"] == command and again["headroom"]["flag"] == 1.2


def test_a_search_given_samples_in_memory_records_no_command_and_old_files_still_read(here, capsys):
    data = dict(np.load("transformer_block.npz"))
    found = fp16bisect.search("transformer_block.onnx", data, output="api.json")
    assert found.to_dict()["search"]["command"] is None
    typed = fp16bisect.search("transformer_block.onnx", "transformer_block.npz", output="typed.json")
    assert typed.to_dict()["search"]["command"] == ["fp16bisect", "search", "transformer_block.onnx", "--inputs",
                                                    "transformer_block.npz", "-o", "typed.json"]
    old = json.loads(Path("typed.json").read_text())
    del old["search"]["command"]  # a file written before the key
    Path("old.json").write_text(json.dumps(old))
    code, out, err = run(capsys, "check", "transformer_block.onnx", "--inputs", "transformer_block.npz",
                         "--overrides", "old.json", "-q")
    assert code == 0, err
    code, _, err = run(capsys, "apply", "transformer_block.onnx", "old.json", "-o", "m.onnx", "-q")
    assert code == 0, err


def test_a_failing_check_with_fp16_sums_suggests_the_search_with_fp16_sums(here, capsys):
    """``check --accumulate fp16`` failed and suggested a search without it, which answered "no node needed"."""
    code, out, err = run(capsys, "check", "layernorm.onnx", "--inputs", "layernorm.npz", "--accumulate", "fp16", "-q")
    assert code == 1, err
    line = out.splitlines()[-1]
    command = quoted_command(line)
    assert "--accumulate fp16" in command and "-o layernorm.overrides.json" in command
    assert run_printed(capsys, command)[0] == 0
    found = json.loads((here / "layernorm.overrides.json").read_text())
    assert found["accumulate"] == "fp16"
    assert [n["name"] for n in found["fp32_accumulate_nodes"]] == ["layernorm"]  # not "no node needed"


def test_a_failing_check_of_an_override_file_suggests_a_search_beside_it(here, capsys):
    assert run(capsys, "search", "transformer_block.onnx", "--inputs", "transformer_block.npz", "--atol", "10",
               "--precision", "bf16", "-o", "o.json", "-q")[0] == 0
    first = (here / "o.json").read_bytes()
    code, out, err = run(capsys, "check", "transformer_block.onnx", "--inputs", "transformer_block.npz",
                         "--overrides", "o.json", "--atol", "0.001", "-q")
    assert code == 1, err
    assert "precision BF16, accumulation FP32 (from o.json)" in out.splitlines()[0]
    command = quoted_command(out.splitlines()[-1])
    assert "-o o.new.json" in command and "--precision bf16" in command and "--atol 0.001" in command
    assert run_printed(capsys, command)[0] == 0
    again = json.loads((here / "o.new.json").read_text())
    assert (again["precision"], again["tolerance"]["atol"], again["tolerance"]["rtol"]) == ("bf16", 0.001, 0.01)
    assert (here / "o.json").read_bytes() == first


def test_the_python_check_suggests_a_call_that_runs_and_keeps_the_mode(here):
    checked = fp16bisect.check("layernorm.onnx", "layernorm.npz", space={"accumulate": "fp16"}, tolerance={"atol": 0.02})
    assert not checked.passed
    call = checked.verdict.split("'fp16bisect.search(", 1)[1].rsplit("'", 1)[0]
    assert "space={'accumulate': 'fp16'}" in call and "tolerance={'atol': 0.02}" in call, call
    assert "output='layernorm.overrides.json'" in call
    found = eval("fp16bisect.search(" + call, {"fp16bisect": fp16bisect})  # noqa: S307 (the line as printed)
    assert found.to_dict()["accumulate"] == "fp16" and found.tolerance.atol == 0.02
    assert [n.name for n in found.fp32_accumulate_nodes] == ["layernorm"]


def test_a_failing_batch_entry_suggests_a_search_that_runs_as_printed(here, capsys):
    manifest = here / "zoo.json"
    manifest.write_text(json.dumps({"entries": [
        {"model": "layernorm.onnx", "inputs": "layernorm.npz", "accumulate": "fp16", "atol": 0.02}]}))
    assert run(capsys, "batch", manifest, "--json", "batch.json", "-q")[0] == 1
    error = json.loads((here / "batch.json").read_text())["entries"][0]["error"]
    command = quoted_command(error)
    assert "--inputs" in command and "--atol 0.02" in command and "--accumulate fp16" in command
    assert run_printed(capsys, command)[0] == 0
    found = json.loads((here / "layernorm.overrides.json").read_text())
    assert found["accumulate"] == "fp16" and found["tolerance"]["atol"] == 0.02


# -- what was judged


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_says_the_accumulation_it_judged_and_where_it_came_from_with_q(here, capsys, name):
    model, data = f"{name}.onnx", f"{name}.npz"
    code, out, _ = run(capsys, "check", model, "--inputs", data, "-q")
    assert code == 0
    assert "(emulate backend; precision FP16, accumulation FP32 (defaults); tolerance:" in out.splitlines()[0]
    assert "This check assumed FP32 accumulation (the default) and its verdict stands" in " ".join(out.split())
    code, out, _ = run(capsys, "check", model, "--inputs", data, "--accumulate", "fp16", "-q")
    assert code == 1
    assert "precision FP16 (default), accumulation FP16 (given)" in out.splitlines()[0]
    assert "assumed FP32 accumulation" not in out  # it judged FP16 sums: no sentence says otherwise
    assert "--accumulate fp16" in out.splitlines()[-1]


def test_a_check_of_an_answer_with_fp32_accumulation_counts_its_marks_and_names_the_files_mode(here, capsys):
    assert run(capsys, "search", "layernorm.onnx", "--inputs", "layernorm.npz", "--accumulate", "fp16",
               "-o", "o.json", "-q")[0] == 0
    code, out, err = run(capsys, "check", "layernorm.onnx", "--inputs", "layernorm.npz", "--overrides", "o.json",
                         "--json", "c.json", "-q")
    assert code == 0, err
    assert "precision FP16, accumulation FP16 (from o.json)" in out.splitlines()[0]
    assert out.splitlines()[-1] == ("PASS: every output of every sample meets the tolerance with 0 override node(s) "
                                    "in FP32 and 1 in FP32 accumulation")
    said = json.loads(Path("c.json").read_text())
    assert (said["accumulate"], said["accumulate_from"], said["precision_from"]) == ("fp16", "from o.json",
                                                                                    "from o.json")


def test_search_says_the_precision_and_accumulation_it_judged_with_q(here, capsys):
    code, out, _ = run(capsys, "search", "transformer_block.onnx", "--inputs", "transformer_block.npz",
                       "--precision", "bf16", "-o", "o.json", "-q")
    assert code == 0
    assert "(emulate backend; precision BF16 (given), accumulation FP32 (default); atol" in out.splitlines()[0]
    code, out, _ = run(capsys, "search", "layernorm.onnx", "--inputs", "layernorm.npz", "-o", "l.json", "-q")
    assert "precision FP16, accumulation FP32 (defaults)" in out.splitlines()[0]
    assert "This search assumed FP32 accumulation (the default) and its verdict stands" in " ".join(out.split())
