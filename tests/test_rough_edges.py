"""The rough edges a newcomer hit (issue 28, part 4), one test each: the journal keyed by the search (in
test_resume.py), non-finite metrics, what to do next, batch, progress, --help, the HTML report."""

from __future__ import annotations

import json

import numpy as np
import onnx
from conftest import F, make_model, run
from onnx import helper


def overflowing(tmp_path):
    """x * 1e5 -> logits: every element of the FP16 output is inf (FP32's is finite)."""
    model = make_model([helper.make_node("Mul", ["x", "big"], ["logits"], name="scale")],
                       [("x", F, [10])], [("logits", F, [10])], {"big": np.array(1e5, np.float32)})
    path = tmp_path / "overflow.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "x.npz", x=np.linspace(2, 3, 10, dtype=np.float32))
    return path, tmp_path / "x.npz"


def test_check_shows_non_finite_metrics_as_inf_never_0_and_cosine_1(tmp_path, capsys):
    model, x = overflowing(tmp_path)
    code, out, _ = run(capsys, "check", model, "--inputs", x, "--backend", "emulate", "--json", tmp_path / "c.json",
                       "-q")
    assert code == 1
    row = next(line for line in out.splitlines() if "logits" in line)
    cells = [c.strip() for c in row.replace("│", "|").split("|") if c.strip()]
    assert cells == ["logits", "0", "inf", "inf", "nan", "10", "no"], row
    logits = json.loads((tmp_path / "c.json").read_text())["outputs"]["logits"]
    assert (logits["max_abs"], logits["max_rel"], logits["cosine"], logits["nonfinite"]) == ("inf", "inf", "nan", 10)
