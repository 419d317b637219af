"""``fp16bisect batch MANIFEST``: exit codes 0/1/2, a bad entry fails alone, the summary table and the JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SAMPLES
from fp16bisect.cli import main as cli


def entry(name, action="check", **extra):
    return {"model": str(SAMPLES / f"{name}.onnx"), "inputs": str(SAMPLES / f"{name}.npz"), "action": action,
            "backend": "emulate", **extra}


def test_every_entry_passing_is_exit_0_with_one_table_and_every_result_in_the_json(tmp_path, capsys, known):
    manifest = tmp_path / "zoo.toml"
    manifest.write_text(f"""
[defaults]
backend = "emulate"

[[entry]]
model = "{SAMPLES / 'transformer_block.onnx'}"
inputs = ["{SAMPLES / 'transformer_block.npz'}"]
action = "search"
output = "out/transformer_block.json"

[[entry]]
model = "{SAMPLES / 'fp16_safe.onnx'}"
inputs = "{SAMPLES / 'fp16_safe.npz'}"
""")
    code = cli.main(["batch", str(manifest), "--json", str(tmp_path / "batch.json"), "--jobs", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "transformer_block.onnx  search  FOUND" in out and "2 of 2 entries passed" in out
    data = json.loads((tmp_path / "batch.json").read_text())
    assert data["passed"] is True
    search, check = data["entries"]
    assert sorted(search["fp32_nodes"]) == sorted(known["transformer_block"]["culprits"])
    assert search["evaluations"] == search["result"]["search"]["evaluations"]
    assert check["verdict"] == "PASS" and check["result"]["passed"] is True
    written = json.loads((tmp_path / "out" / "transformer_block.json").read_text())  # relative to the manifest
    assert [n["name"] for n in written["fp32_nodes"]] == search["fp32_nodes"]


def test_bad_entries_fail_alone_and_the_batch_is_exit_1(tmp_path, capsys, known):
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, not_an_input=np.zeros((1, 4), dtype=np.float32))
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"entries": [
        entry("missing"),
        {**entry("two_branches"), "inputs": str(wrong)},
        entry("two_branches", "search", atol=known["two_branches"]["atol"]),
        entry("cnn_batchnorm"),  # all-FP16 fails this check
    ]}))
    code = cli.main(["batch", str(manifest), "--json", str(tmp_path / "batch.json")])
    out = capsys.readouterr().out
    assert code == 1, out
    results = json.loads((tmp_path / "batch.json").read_text())["entries"]
    assert [r["verdict"] for r in results] == ["ERROR", "ERROR", "FOUND", "FAIL"]
    assert "missing.onnx" in results[0]["error"] and "not found" in results[0]["error"]
    assert "has no array for model input(s) 'features'" in results[1]["error"]
    assert sorted(results[2]["fp32_nodes"]) == sorted(known["two_branches"]["culprits"])
    assert "1 of 4 entries passed, 3 failed" in out


@pytest.mark.parametrize("text, says", [
    ("not json at all", "not valid JSON"),
    ('{"entries": []}', "lists no entries"),
    ('{"entries": [{"inputs": "x.npz"}]}', "has no 'model'"),
    ('{"entries": [{"model": "m.onnx", "inputs": "x.npz", "action": "fix"}]}', "neither 'check' nor 'search'"),
    ('{"entries": [{"model": "m.onnx", "inputs": "x.npz", "atool": 1}]}', "unknown key(s) atool"),
    ('{"entries": [{"model": "m.onnx", "inputs": "x.npz", "atol": "big"}]}', "atol 'big' is not a number"),
    # the gate silently off was exit 0: the value checks itself, as --atol inf and atol=inf are refused
    ('{"entries": [{"model": "m.onnx", "inputs": "x.npz", "atol": Infinity}]}',
     "entry 1: atol inf: give a finite number >= 0"),
    ('{"entries": [{"model": "m.onnx", "inputs": "x.npz", "rtol": -1}]}', "entry 1: rtol -1: give a finite"),
    ('{"entries": [{"model": "m.onnx", "inputs": "x.npz", "max_mismatch": 2}]}', "max_mismatch 2 is a fraction"),
    ('{"entries": [{"model": "m.onnx", "inputs": "x.npz", "action": "search", "keep_journal": "yes"}]}',
     "entry 1: keep_journal 'yes': give True or False"),
])
def test_a_bad_manifest_is_exit_2_and_runs_nothing(tmp_path, capsys, text, says):
    manifest = tmp_path / "zoo.json"
    manifest.write_text(text)
    assert cli.main(["batch", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_bad_toml_and_a_missing_manifest_are_exit_2(tmp_path, capsys):
    (tmp_path / "zoo.toml").write_text("[[entry]\nmodel = 1")
    assert cli.main(["batch", str(tmp_path / "zoo.toml")]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    assert cli.main(["batch", str(tmp_path / "nope.toml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_search_entry_removes_its_journal_unless_keep_journal(tmp_path, capsys, known):
    """As search does: a finished search entry leaves its override JSON alone; keep_journal = true keeps the
    journal beside it."""
    atol = known["two_branches"]["atol"]
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"entries": [
        {**entry("two_branches", "search", atol=atol), "output": "plain.json"},
        {**entry("two_branches", "search", atol=atol), "output": "kept.json", "keep_journal": True},
    ]}))
    assert cli.main(["batch", str(manifest), "-q"]) == 0, capsys.readouterr()
    journal, = tmp_path.glob("kept.journal-*.jsonl")
    assert {p.name for p in tmp_path.iterdir()} == {"zoo.json", "plain.json", "kept.json", journal.name}


def test_the_api_batch_returns_typed_rows_that_are_the_json_rows(tmp_path):
    import fp16bisect
    from fp16bisect.api.manifest import BatchRow

    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"entries": [entry("fp16_safe")]}))
    result = fp16bisect.batch(manifest, jobs=1)
    row, = result.entries
    assert isinstance(row, BatchRow) and row.passed and row.verdict == "PASS" and row.fp32_nodes == []
    assert result.to_dict()["entries"] == [row.to_json()] and row.to_json()["name"] == "fp16_safe.onnx"
    assert repr(result) == f"BatchResult({str(manifest)!r}: 1 of 1 entries passed)"
