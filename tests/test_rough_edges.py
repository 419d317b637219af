"""The rough edges a newcomer hit (issue 28, part 4), one test each: the journal keyed by the search (in
test_resume.py), non-finite metrics, what to do next, batch, progress, --help, the HTML report."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import onnx
from conftest import SAMPLES, F, make_model, run
from onnx import helper

from fp16bisect.algorithm.search import search


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


TWO = [str(SAMPLES / "two_branches.onnx"), "--inputs", str(SAMPLES / "two_branches.npz")]


def test_progress_estimates_stay_between_0_and_the_bound_left_and_stages_are_said_once(tmp_path, capsys):
    code, _, err = run(capsys, "search", *TWO, "-o", tmp_path / "o.json")
    assert code == 0
    steps = [tuple(map(int, m)) for m in re.findall(r"evaluation (\d+) .* roughly (\d+) more .*at most (\d+)\)", err)]
    total = json.loads((tmp_path / "o.json").read_text())["search"]["evaluations"]
    assert [i for i, _, _ in steps] == list(range(1, total + 1))
    for i, estimate, bound in steps:
        assert 0 <= estimate <= bound and bound >= total - i, (i, estimate, bound, total)
    assert steps[0][1] > 0  # more is to come after the first evaluation
    assert steps[-1][1] <= 2  # at the last, little is left (was "roughly 7 more")
    stages = [line for line in err.splitlines() if "evaluation " not in line]
    assert len(stages) == len(set(stages))
    loading = [line for line in stages if "loading" in line]
    assert len(loading) == 1 and re.search(r"loading .*two_branches\.onnx \(\d+\.\d s\)$", loading[0])


def test_the_bound_left_holds_on_monotone_judges():
    for n, k, suspects in [(13, 5, 6), (300, 90, 0), (200, 40, 10), (1000, 10, 0), (50, 1, 3), (8, 8, 0)]:
        for seed in range(3):
            rng = random.Random(seed)
            ids = list(range(n))
            culprits = frozenset(rng.sample(ids, k))
            rng.shuffle(ids)
            rows = []
            result = search(ids, lambda plan, c=culprits: c <= plan, order=ids, suspects=suspects,
                            on_step=lambda step, p: rows.append((step.index, p["estimate_left"], p["bound_left"])))
            for i, estimate, bound in rows:
                assert 0 <= estimate <= bound and bound >= result.evaluations - i, (n, k, seed, i)
            assert rows[0][1] > 0 or result.evaluations == 1
