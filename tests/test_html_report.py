"""The HTML report renderer: every plot is there as inline SVG, nothing is fetched, names are escaped."""

from __future__ import annotations

import html
import math
import re

import pytest

from fp16bisect.report import html as html_report
from fp16bisect.errors import UsageError

INF, NAN = math.inf, math.nan
NASTY = 'mul<&"x>'  # a node name that breaks HTML unless escaped


def metrics(max_abs, nonfinite=0, passed=None):
    return {"max_abs": max_abs, "max_rel": max_abs * 2, "cosine": NAN if nonfinite else 0.999,
            "nonfinite": nonfinite, "passed": (max_abs < 0.01 and not nonfinite) if passed is None else passed}


def report_data(n=40, with_plan=True, trace=True, overrides=True) -> dict:
    """40 nodes: an overflow at node 5 that turns the next ones inf, exact zeros, a NaN, an escaped name."""
    nodes = []
    for i in range(n):
        name = NASTY if i == 5 else f"node_{i}"
        if i == 5:
            fp16 = metrics(INF, nonfinite=4)
        elif 5 < i < 9:
            fp16 = metrics(NAN, nonfinite=8)
        elif i % 7 == 0:
            fp16 = metrics(0.0)
        else:
            fp16 = metrics(0.5 + i / 10)
        plan = metrics(0.0 if i % 3 == 0 else 1e-3) if with_plan else None
        nodes.append({"id": name, "op_type": "Mul" if i == 5 else "Add", "pinned": with_plan and i in (5, 6),
                      "fp16": fp16, "with_overrides": plan})
    tensors = [{"name": f"t{i}", "kind": "activation", "max_abs": 10.0**(i % 5), "min_nonzero_abs": 1e-3,
                "tier": 0, "reason": "fine"} for i in range(30)]
    tensors += [
        {"name": f"{NASTY}_out", "kind": "activation", "max_abs": 1.6e5, "min_nonzero_abs": 1e-3, "tier": 3,
         "reason": "max |x| 1.6e+05 > 65504 (4 element(s) become inf)"},
        {"name": "big_weight", "kind": "weight", "max_abs": 2e5, "min_nonzero_abs": 1.0, "tier": 3,
         "reason": "max |x| 2e+05 > 65504"},
        {"name": "tiny_weight", "kind": "weight", "max_abs": 1e-9, "min_nonzero_abs": 1e-9, "tier": 2,
         "reason": "1 nonzero element(s) flush to 0"},
        {"name": "zeros", "kind": "weight", "max_abs": 0.0, "min_nonzero_abs": 0.0, "tier": 0, "reason": "fine"},
        {"name": "already_inf", "kind": "activation", "max_abs": INF, "min_nonzero_abs": 1.0, "tier": 3,
         "reason": "inf in FP32"},
    ]
    return {
        "title": f"fp16bisect search: {NASTY}.onnx",
        "command": f"fp16bisect search '{NASTY}.onnx' --inputs x.npz",
        "model": {"path": f"{NASTY}.onnx", "sha256": "ab12" * 16},
        "backend": "emulate",
        "tolerance": "atol 0.01, rtol 0.01",
        "summary": "2 of 40 candidate node(s) kept in FP32 (1-minimal); 5 evaluation(s) in 0.2 s",
        "notes": ["a note with <b>markup</b>"],
        "outputs": [{"output": "y", "fp16": metrics(INF, nonfinite=3), "with_overrides": metrics(0.004) if with_plan
                     else None}],
        "nodes": nodes,
        "first_failing": {"fp16": NASTY, "with_overrides": None},
        "tensors": tensors,
        "trace": [{"index": i + 1, "fp32": size, "passed": ok, "phase": phase} for i, (size, ok, phase) in enumerate(
            [(40, True, "precondition"), (0, False, "precondition"), (2, True, "suspects"), (1, False, "minimality"),
             (1, False, "minimality")])] if trace else [],
        "headroom": [{"tensor": name, "node": name.split("_")[0], "peak": 65504 * f, "peak_fraction": f,
                      "peak_sample": {"source": "x.npz"}}
                     for name, f in (("big_out", 1.6), ("tight_out", 0.5), (f"{NASTY}_y", 0.2), ("calm_out", 1e-3))],
        "overrides": [{"name": NASTY, "op_type": "Mul", "outputs": [f"{NASTY}_out"], "fp32_profile": "max |x| > 65504"},
                      {"name": "node_6", "op_type": "Add", "outputs": ["node_6_out"], "fp32_profile": ""}]
        if overrides else [],
    }


def figure(page: str, fig_id: str) -> str:
    m = re.search(rf'<figure id="{fig_id}">(.*?)</figure>', page, re.S)
    assert m, f"no figure {fig_id}"
    return m.group(1)


@pytest.fixture(scope="module")
def page() -> str:
    return html_report.render(report_data())


def test_each_plot_is_inline_svg_with_a_caption(page):
    for fig_id in ("plot-node-error", "plot-magnitudes", "plot-trace"):
        body = figure(page, fig_id)
        assert "<svg" in body and "</svg>" in body
        assert "<figcaption>" in body
    assert page.startswith("<!DOCTYPE html>")
    assert "<?xml" not in page and "<!DOCTYPE svg" not in page
    assert '<table id="outputs">' in page and '<table id="overrides">' in page


def test_nothing_is_fetched(page):
    assert "<script" not in page.lower()
    assert "<link" not in page.lower()
    assert not re.search(r"""\bsrc\s*=""", page, re.I)
    assert not re.search(r"""href\s*=\s*["'](?!#)""", page, re.I)  # only links inside the page (SVG <use>)
    assert "url(http" not in page and "@import" not in page


def test_names_are_escaped(page):
    assert NASTY not in page
    assert "<b>markup</b>" not in page
    assert html.escape(NASTY) in page
    # the overrides table and the node plot's caption both name the escaped node
    assert html.escape(NASTY) in page.split('id="overrides"')[1]
    assert html.escape(NASTY) in figure(page, "plot-node-error").split("<figcaption>")[1]


def test_the_node_plot_counts_what_a_log_scale_cannot_show(page):
    caption = figure(page, "plot-node-error").split("<figcaption>")[1]
    assert "All FP16: 4 nodes with inf/NaN values" in caption
    assert "zero errors drawn at the floor" in caption
    assert "2 nodes kept in FP32" in caption
    assert "inf/NaN" in figure(page, "plot-node-error").split("<figcaption>")[0]  # the top row's tick label


def test_the_magnitude_plot_shows_the_limits_and_names_the_risky_tensors(page):
    svg = figure(page, "plot-magnitudes").split("<figcaption>")[0]
    for limit in ("65504", "6.1e-05", "6.0e-08"):
        assert limit in svg
    for name in ("big_weight", "tiny_weight", "already_inf", "x&gt;_out"):  # SVG text escapes &, < and >
        assert name in svg
    caption = figure(page, "plot-magnitudes").split("<figcaption>")[1]
    assert "1 all-zero tensor" in caption and "already inf in FP32" in caption


def test_non_finite_numbers_print_as_inf_and_nan(page):
    outputs = page.split('<table id="outputs">')[1].split("</table>")[0]
    assert ">inf<" in outputs and ">nan<" in outputs


def test_empty_lists_and_no_plan():
    data = report_data(n=6, with_plan=False, trace=False, overrides=False)
    data["tensors"] = data["tensors"][-3:]
    data["first_failing"] = {"fp16": None, "with_overrides": None}
    page = html_report.render(data)
    assert "plot-trace" not in page and "Search trace" not in page  # no search ran: no empty section
    assert '<p id="overrides" class="empty">none' in page
    assert "with overrides" not in figure(page, "plot-node-error")  # one series only
    assert "not run" in page.split('<table id="outputs">')[1]

    data.update(nodes=[], tensors=[], outputs=[], notes=[])
    page = html_report.render(data)
    for fig_id in ("plot-node-error", "plot-magnitudes"):
        assert "<svg" not in figure(page, fig_id)
    assert 'id="outputs"' in page and 'id="overrides"' in page


def test_write_is_atomic(tmp_path):
    target = tmp_path / "sub" / "report.html"
    data = report_data(trace=False)
    data.update(nodes=[], tensors=[])  # no plots: this test is about the file
    html_report.write(target, data)
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in target.parent.iterdir()] == ["report.html"]  # no temporary file left behind
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError):
        html_report.write(tmp_path / "file" / "report.html", data)


def test_each_plot_is_well_formed_svg_sized_by_its_view_box(page):
    """fp16bisect writes the SVG itself: each figure parses as XML, scales to the page by its viewBox, keeps its
    ids unique to it, and shows its text as text (the headroom plot: the tensors, the limit and the 4x line)."""
    import xml.etree.ElementTree as ET

    ns = "{http://www.w3.org/2000/svg}"
    ids = []
    for fig_id in ("plot-node-error", "plot-magnitudes", "plot-headroom", "plot-trace"):
        root = ET.fromstring(figure(page, fig_id).split("<figcaption>")[0].strip())
        assert root.tag == f"{ns}svg"
        width, height = (float(v) for v in root.get("viewBox").split()[2:])
        assert (float(root.get("width")), float(root.get("height"))) == (width, height) and width > 500
        ids += [e.get("id") for e in root.iter() if e.get("id")]
        texts = " ".join("".join(t.itertext()) for t in root.iter(f"{ns}text"))
        if fig_id == "plot-headroom":
            assert all(name in texts for name in ("big_out", "tight_out", f"{NASTY}_y", "65504", "4x"))
    assert len(ids) == len(set(ids)) == 4  # one clip path each, salted by the plot's id
    caption = figure(page, "plot-headroom").split("<figcaption>")[1]
    assert "1 past FP16's limit, 1 with less than 4x headroom" in caption


def test_scales_map_decades_and_small_plan_sizes_apart():
    from fp16bisect.report.plots.svg import Scale

    log = Scale("log", 1e-4, 1e4, 0.0, 800.0)
    assert [log(10.0**k) for k in (-4, 0, 4)] == [0.0, 400.0, 800.0]
    assert log(0.0) < 0  # zero is off a log scale (drawn at a floor by the plots)
    sym = Scale("symlog", -0.3, 100.0, 300.0, 0.0, linthresh=1, linscale=0.6)  # y: down the page
    ys = [sym(v) for v in (0, 1, 2, 4, 100)]
    assert ys == sorted(ys, reverse=True) and ys[0] - ys[1] > 20 and ys[1] - ys[2] > 20
