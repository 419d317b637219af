"""The rough edges a newcomer hit (issue 28, part 4), one test each: the journal keyed by the search (in
test_resume.py), non-finite metrics, what to do next, batch, progress, --help, the HTML report."""

from __future__ import annotations

import argparse
import html
import json
import re
import shlex

import numpy as np
import onnx
import pytest
from conftest import SAMPLES, F, make_model, run
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


def test_batch_writes_each_search_s_overrides_beside_the_manifest_lists_the_kept_nodes_and_takes_q(tmp_path, capsys,
                                                                                                   known):
    manifest = tmp_path / "zoo.toml"
    manifest.write_text(f"""
[defaults]
backend = "emulate"
model = "{SAMPLES / 'two_branches.onnx'}"
inputs = "{SAMPLES / 'two_branches.npz'}"
action = "search"

[[entry]]
name = "branches"

[[entry]]
atol = 0.5

[[entry]]
atol = 0.6
""")
    code, out, err = run(capsys, "batch", manifest)
    assert code == 0 and "(entry 1): FOUND" in err
    culprits = sorted(known["two_branches"]["culprits"])
    for name in ("branches", "two_branches-2", "two_branches-3"):
        written = json.loads((tmp_path / f"{name}.overrides.json").read_text())
        assert sorted(n["name"] for n in written["fp32_nodes"]) == culprits or name != "branches"
        assert f"overrides written to {tmp_path / name}.overrides.json" in out
    row = next(line for line in out.splitlines() if line.startswith("branches"))
    assert all(c in row for c in culprits)
    code, out, err = run(capsys, "batch", manifest, "-q")
    assert code == 0 and err == "" and "3 of 3 entries passed" in out


def test_every_subcommand_s_help_has_a_description_an_example_and_the_model_first(capsys):
    for command, first in [("search", "MODEL --inputs"), ("check", "MODEL --inputs"), ("scan", "MODEL --inputs"),
                           ("compare", "MODEL --inputs"), ("apply", "MODEL OVERRIDES"), ("batch", "MANIFEST"),
                           ("migrate", "MODEL (")]:
        with pytest.raises(SystemExit) as exited:
            run(capsys, command, "--help")
        out = capsys.readouterr().out
        assert exited.value.code == 0
        lines = out.splitlines()
        assert lines[0].startswith((f"usage: fp16bisect {command} {first}", f"Usage: fp16bisect {command} {first}"))
        assert lines[1] == "" and len(lines[2]) > 20  # a description under the usage line
        assert re.search(r"^examples?:\n  \$ (fp16bisect|trtexec) ", out, re.M)
        groups = [line for line in lines[3:] if line and not line.startswith(" ") and line.endswith(":")]
        assert groups[0] in ("inputs and output:", "model and overrides:", "manifest:", "model:"), groups
        assert groups[-2] == f"{command} options:", groups  # the command's own flags last, -h last among them
        assert lines[lines.index(groups[-1]) - 2].lstrip().startswith("-h, --help"), out
        assert "\x1b[" not in out  # not a terminal: plain text
        if command == "search":  # square brackets are text, not rich markup
            assert "'fp16bisect[ray]'" in " ".join(out.split())


def test_search_help_is_one_screen_one_line_a_flag_pointing_to_the_docs(capsys, monkeypatch):
    """At 100 columns: at most 60 lines, every flag still listed, each on one line with its help, and the page that
    has them in detail named."""
    from fp16bisect.cli.main import build_parser

    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        run(capsys, "search", "--help")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 60 and max(map(len, lines)) <= 100, out
    assert "Every flag in detail: docs/commands/search.md" in lines
    search = build_parser()._subparsers._group_actions[0].choices["search"]
    flags = [a.option_strings[0] for a in search._actions if a.option_strings and a.help != argparse.SUPPRESS]
    listed = [line for line in lines if line.startswith("  -")]
    assert len(listed) == len(flags) and all(len(line.split("  ")) > 1 and line.split()[-1] for line in listed)
    assert all(any(line.split()[0].rstrip(",") == flag for line in listed) for flag in flags), out
    assert all(re.match(r"  \S.*?\S  +\S", line) for line in listed), out  # the help on the flag's line


def test_apply_takes_the_model_first_and_the_old_order_still_works(tmp_path, capsys):
    model, x = SAMPLES / "two_branches.onnx", SAMPLES / "two_branches.npz"
    assert run(capsys, "search", model, "--inputs", x, "-o", tmp_path / "o.json", "-q")[0] == 0
    for i, order in enumerate([(model, tmp_path / "o.json"), (tmp_path / "o.json", model)]):
        code, out, err = run(capsys, "apply", *order, "-o", tmp_path / f"m{i}.onnx", "--verify", "--inputs", x, "-q")
        assert code == 0 and "verified" in out, err
    assert (tmp_path / "m0.onnx").read_bytes() == (tmp_path / "m1.onnx").read_bytes()


def test_compare_honours_atol_and_rtol_on_the_console(capsys):
    block = [str(SAMPLES / "transformer_block.onnx"), "--inputs", str(SAMPLES / "transformer_block.npz"), "-q"]
    verdicts = []
    for atol in ("0.01", "100"):
        code, out, _ = run(capsys, "compare", *block, "--atol", atol)
        assert code == 0 and f"atol {atol}" in out
        verdicts.append(next(line for line in out.splitlines() if line.startswith("│ y ")).split("│")[-2].strip())
    assert verdicts == ["no", "yes"]


def test_a_search_says_what_to_do_next_on_the_console_and_in_the_report_not_with_q(tmp_path, capsys):
    out, report = tmp_path / "o.json", tmp_path / "r.html"
    code, stdout, _ = run(capsys, "search", *TWO, "-o", out, "--report", report)
    assert code == 0
    model, x = TWO[0], TWO[2]
    mixed = f"{model[:-5]}.mixed.onnx"
    data = json.loads(out.read_text())
    apply = f"fp16bisect apply {model} {out} -o {mixed} --verify --inputs {x}"
    strong, weak = f"trtexec --onnx={mixed} --stronglyTyped", data["exports"]["trtexec"]["command"]
    lines = [line.strip() for line in stdout.split("Next:")[1].splitlines()]
    assert apply in lines and strong in lines and weak in lines
    page = report.read_text()
    assert '<h2 id="next">Next</h2>' in page and html.escape(apply) in page and html.escape(weak) in page
    assert "Next:" not in run(capsys, "search", *TWO, "-o", out, "-q")[1]
    # the command as printed works (its -o moved out of the repository)
    code, stdout, err = run(capsys, *shlex.split(apply)[1:5], tmp_path / "m.onnx", *shlex.split(apply)[6:], "-q")
    assert code == 0 and "verified" in stdout, err


def test_the_report_legend_stays_whole_and_check_reports_have_no_empty_search_trace(tmp_path, capsys):
    from fp16bisect.report.plots.figure import new_figure
    from fp16bisect.report.plots.svg import Mark

    fig = new_figure(12, 4.0, {"left": 0.9, "right": 0.15, "top": 0.45, "bottom": 1.0})
    labels = ["fails above 0.125", *(f"{series}: {what}" for series in ("all FP16", "with overrides")
                                     for what in ("within tolerance", "fails", "inf/NaN values")),
              "kept in FP32 (pinned)"]  # the per-node plot's, which ran past the figure ("kept in FP32 (pi")
    box = fig.legend([Mark(label) for label in labels], ncol=len(labels))  # in one row: 2.7 inches too wide
    assert box is not None and box.x1 <= fig.width + fig.margins[2] and box.y0 >= -fig.margins[1], box
    assert box.y1 - box.y0 > 8 * 1.6 + 1  # in more than one row
    svg = fig.svg("legend")
    assert all(label in svg for label in labels)
    code, _, _ = run(capsys, "check", *TWO, "--report", tmp_path / "c.html", "-q")
    page = (tmp_path / "c.html").read_text()
    assert code == 1 and "<h2>Outputs</h2>" in page and "Search trace" not in page and 'id="next"' not in page


def test_ratios_that_are_not_finite_are_said_in_words(capsys):
    from fp16bisect.tolerance import Tolerance, compare

    zero = Tolerance(0, 0)
    m = compare(np.array([1.0, 2.5]), np.array([1.0, 2.0]), zero, "y", 0)  # one exact element: it was NaN
    assert m.excess == float("inf") and "where the allowance is 0" in m.why(zero)
    loose = compare(np.array([np.nan, 2.0]), np.array([1.0, 2.0]), Tolerance(), "y", 0)
    assert loose.ratio() == "NaN/inf where the reference is finite"
    model, data = SAMPLES / "transformer_block.onnx", SAMPLES / "transformer_block.npz"
    code, out, err = run(capsys, "check", model, "--inputs", data, "--atol", "0", "--rtol", "0")
    assert code == 1 and "(where the allowance is 0: atol 0 and rtol*|ref| 0)" in out
    assert not re.search(r"\b(inf|nan)x\b", out + err)


@pytest.mark.parametrize("extra", [[], ["--atol", "10"]])  # a failing tolerance, or only the headroom lacking
def test_check_headroom_suggests_a_search_with_the_flag_once(capsys, extra):
    model, data = SAMPLES / "transformer_block.onnx", SAMPLES / "transformer_block.npz"
    code, out, _ = run(capsys, "check", model, "--inputs", data, "--headroom", "4", *extra, "-q")
    line = out.splitlines()[-1]
    assert code == 1 and line.count("--headroom") == 1 and "--headroom 4'" in line
    assert ("--atol 10 --headroom 4'" in line) == bool(extra)
