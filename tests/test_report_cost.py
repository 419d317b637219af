"""--report says its stages with their seconds, and holds one sample's tensors at a time."""

from __future__ import annotations

import re
import weakref
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import SAMPLES, make_model, run
from onnx import TensorProto, helper

from fp16bisect.api import run_search
from fp16bisect.backends.emulate import EmulateBackend
from fp16bisect.diagnose.report_runs import search_runs
from fp16bisect.run.options import SearchOptions

TWO = [str(SAMPLES / "two_branches.onnx"), "--inputs", str(SAMPLES / "two_branches.npz")]
STAGE = r"fp16bisect: report: {} \(\d+\.\d s\)"


def test_search_check_and_compare_say_each_report_stage_with_its_seconds(tmp_path, capsys):
    """A 48-sample report was 24 s of silence after the search; each stage is now said when it ends."""
    code, _, err = run(capsys, "search", *TWO, "-o", tmp_path / "o.json", "--report", tmp_path / "s.html")
    assert code == 0 and (tmp_path / "o.json").exists()
    assert re.search(STAGE.format(r"per-node errors all-FP16 and with the plan on 1 sample\(s\) \(emulated\)"), err)
    assert re.search(STAGE.format("plots and page"), err)
    code, _, err = run(capsys, "check", *TWO, "--overrides", tmp_path / "o.json", "--report", tmp_path / "c.html")
    assert code == 0
    for stage in (r"all-FP16 outputs on 1 sample\(s\) \(emulated\)", r"FP32 magnitudes on 1 sample\(s\)",
                  r"per-node errors all-FP16 and with the plan on 1 sample\(s\) \(emulated\)", "plots and page"):
        assert re.search(STAGE.format(stage), err), stage
    code, _, err = run(capsys, "compare", *TWO, "--overrides", tmp_path / "o.json", "--report", tmp_path / "m.html")
    assert code == 0  # compare ran the plan's per-node errors already: the report runs only all-FP16's
    assert re.search(STAGE.format(r"per-node errors all-FP16 on 1 sample\(s\) \(emulated\)"), err)
    assert "per-node errors with the plan" not in err and "per-node errors all-FP16 and" not in err
    code, _, err = run(capsys, "search", *TWO, "-o", tmp_path / "o.json", "--report", tmp_path / "s.html", "-q")
    assert code == 0 and err == ""  # -q: quiet


def scaled_model(tmp_path, n: int):
    """relu -> scale (x 2000: inputs above 32.75 overflow FP16 there) -> unscale, over [1, n]; its path."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "k"], ["big"], name="scale"),
             helper.make_node("Div", ["big", "k"], ["y"], name="unscale")]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [1, n])], [("y", TensorProto.FLOAT, [1, n])],
                       {"k": np.array(2000.0, np.float32)})
    onnx.save(model, tmp_path / "m.onnx")
    return tmp_path / "m.onnx"


def test_the_report_holds_one_sample_of_tensors_at_a_time(tmp_path, monkeypatch):
    """16 samples: the per-node errors kept every sample's FP32 tensors, then every sample's FP16 tensors, all
    at once (twice the search's memory on 48 samples); now the runs of one sample, compared as they come."""
    n, count = 1 << 12, 16
    path = scaled_model(tmp_path, n)
    rng = np.random.default_rng(0)
    samples = []
    for i in range(count):
        samples.append(tmp_path / f"s{i:02d}.npz")
        np.savez(samples[-1], x=rng.uniform(0, 40, size=(1, n)).astype(np.float32))
    outcome = run_search(str(path), [str(p) for p in samples], SearchOptions(judge="emulate")).outcome
    assert sorted(outcome.result.fp32) == ["scale", "unscale"]
    refs, most = [], [0]  # weak references to every tensor the runs returned; the most alive at once
    original = EmulateBackend.run

    def run_counted(self, plan, inputs, *args, **kwargs):
        got = original(self, plan, inputs, *args, **kwargs)
        refs.extend(weakref.ref(v) for v in got.values())
        most[0] = max(most[0], sum(r() is not None for r in refs))
        return got

    monkeypatch.setattr(EmulateBackend, "run", run_counted)
    runs = search_runs(outcome)
    assert runs.layer_plan is not None and [n.node for n in runs.layer_fp16.nodes] == ["relu", "scale", "unscale"]
    assert runs.layer_fp16.first_failing.node == "scale" and runs.layer_plan.first_failing is None
    assert most[0] <= 3 * 3, f"{most[0]} tensors held at once"  # FP32, all-FP16, the plan: 3 tensors each


def test_the_per_node_errors_run_on_the_most_stressing_samples_not_all(tmp_path, monkeypatch, capsys):
    """A report of a 16-sample search ran every candidate's tensors on all 16 samples (three runs each); it runs
    them on the 8 most stressing and each output's worst, the loudest among them, and the page says so."""
    n, count = 256, 16
    path = scaled_model(tmp_path, n)
    rng = np.random.default_rng(0)
    folder = tmp_path / "data"
    folder.mkdir()
    for i in range(count):  # sample 11 is the loudest by far: it alone overflows
        np.savez(folder / f"s{i:02d}.npz", x=rng.uniform(0, 40 if i == 11 else 10, size=(1, n)).astype(np.float32))
    outcome = run_search(str(path), [str(folder)], SearchOptions(judge="emulate")).outcome
    assert sorted(outcome.result.fp32) == ["scale", "unscale"]
    calls = []
    original = EmulateBackend.run
    monkeypatch.setattr(EmulateBackend, "run", lambda self, plan, inputs, *a, **k: calls.append(plan) or original(
        self, plan, inputs, *a, **k))
    runs = search_runs(outcome)
    loudest = next(i for i, s in enumerate(outcome.oracle.samples) if "s11" in str(s.source))
    assert loudest in runs.node_samples and len(runs.node_samples) <= 9 and runs.samples == count
    assert len(calls) == 3 * len(runs.node_samples)  # FP32, all-FP16 and the plan, on the chosen samples only
    assert runs.layer_fp16.first_failing.node == "scale" and runs.layer_plan.first_failing is None
    monkeypatch.undo()
    code, _, err = run(capsys, "search", path, "--inputs", folder, "-o", tmp_path / "o.json", "--report",
                       tmp_path / "r.html")
    k = len(runs.node_samples)
    assert code == 0 and re.search(STAGE.format(rf"per-node errors all-FP16 and with the plan on {k} of {count} "
                                                r"samples \(the most stressing and each output's worst\) "
                                                r"\(emulated\)"), err), err
    assert f"Per-node errors on {k} of {count} samples" in (tmp_path / "r.html").read_text()


def test_the_report_draws_its_plots_without_a_plotting_library(tmp_path):
    """Importing Matplotlib (0.4 s) and drawing with it (0.2-0.3 s) alone cost more than half of a short search;
    the plots are SVG written by fp16bisect, and a whole report is written without importing it."""
    import subprocess
    import sys

    script = ("import sys; sys.path.insert(0, 'tests'); from test_html_report import report_data; "
              "from fp16bisect.report import html; html.write(sys.argv[1], report_data()); "
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'PIL')))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "r.html")], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, check=True)
    assert done.stdout.strip() == "[]"
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") == 4 and page.count("</svg>") == 4


def test_tensor_errors_give_compare_manys_metrics_in_fewer_passes():
    """The per-node errors' own measure (float32, BLAS dot products, large tensors one at a time) gives the numbers
    compare_many gives under METRICS_ONLY: max abs, max rel, cosine, NaN/inf counts, within 1e-6."""
    import math

    from fp16bisect.diagnose.tensor_errors import tensor_errors
    from fp16bisect.tolerance import METRICS_ONLY, compare_many

    rng = np.random.default_rng(0)
    pairs = []
    for i, n in enumerate([1 << 16] * 9 + [300] * 9 + [0]):  # large ones alone, small ones in one batch
        b = (rng.normal(size=n) * 100 + 3).astype(np.float32)
        a = b.astype(np.float16).astype(np.float32)  # FP16 rounding: cosine within 1e-7 of 1
        if n and i % 9 == 1:
            a[5] = np.inf
        if n and i % 9 == 2:
            a[7] = np.nan
        if n and i % 9 == 3:
            b[:10], a[:3] = 0.0, 1.0  # a zero reference: no relative error there
        if n and i % 9 == 4:
            a, b = a * np.float32(3e19), b * np.float32(3e19)  # squares past float32's range
        if n and i % 9 == 5:
            a = -b
        if n and i % 9 == 6:
            a = np.zeros_like(b)
        if n and i % 9 == 7:
            a = (b + rng.normal(size=n) * 30).astype(np.float32)
        pairs.append((f"t{i}", a.reshape(-1, 4) if n == 1 << 16 else a, b.reshape(-1, 4) if n == 1 << 16 else b))
    pairs.append(("f64", rng.normal(size=1 << 16), rng.normal(size=1 << 16)))  # not float32: the batch
    expected, got = compare_many(pairs, METRICS_ONLY, 3), tensor_errors(pairs, 3)
    assert [m.output for m in got] == [p[0] for p in pairs] and {m.sample for m in got} == {3}
    for e, g in zip(expected, got):
        assert (g.nonfinite, g.passed) == (e.nonfinite, e.passed), e.output
        for field in ("max_abs", "max_rel", "cosine", "mismatch"):
            x, y = getattr(e, field), getattr(g, field)
            assert (math.isnan(x) and math.isnan(y)) or x == y or abs(x - y) <= 1e-6 * abs(x), (e.output, field, x, y)
    near = [(e.cosine, g.cosine) for e, g in zip(expected, got) if e.output == "t0"]
    assert abs(near[0][0] - near[0][1]) < 1e-10  # the digits near 1 kept (1 - cosine is 2e-8 here)
    with pytest.raises(ValueError):
        tensor_errors([("y", np.zeros(3, np.float32), np.zeros(4, np.float32))], 0)
