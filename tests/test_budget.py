"""A budget that returns a passing set (issue 41 item 5): --max-evaluations, --time-limit and Ctrl-C end the search
with the smallest set seen to pass, written and labelled, exit 5 (130 for Ctrl-C), and the journal resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from itertools import count

import numpy as np
import pytest
from conftest import LN, LN_IN, SAMPLES, F, journal_of, make_model, one_line_error, run
from onnx import helper, save

import fp16bisect.algorithm.budget as budgets
from fp16bisect.algorithm.budget import Budget, Stop, Stopped
from fp16bisect.algorithm.memo import Step
from fp16bisect.algorithm.search import Hooks, ended, search

BUDGET_REACHED, INTERRUPTED = 5, 130
LABEL = "passing, not minimal: budget reached"

# --------------------------------------------------------------------------- the algorithm, on synthetic predicates

NEEDED = frozenset({2, 5, 11, 17})  # a monotone judge: a plan passes when it keeps these four
IDS = list(range(24))
ORDER = IDS[::-1]


def budgeted(evaluations=None, seconds=None, clock=None):
    """The search on the synthetic judge, each evaluation asked of ``Budget(evaluations, seconds)`` first: the
    steps it made and why it stopped (None: it finished)."""
    budget, steps = Budget(evaluations, seconds, clock), []

    def test(plan):
        budget.take()
        return NEEDED <= plan

    try:
        search(IDS, test, order=ORDER, hooks=Hooks(on_step=lambda step, progress: steps.append(step)))
    except Stopped as stop:
        return steps, budget.stop(stop.cause, str(stop))
    return steps, None


def test_a_budget_ends_the_search_with_the_smallest_plan_seen_to_pass_and_claims_nothing_more():
    full = search(IDS, lambda plan: NEEDED <= plan, order=ORDER)
    assert full.minimal and set(full.fp32) == NEEDED and full.evaluations == 19
    steps, stop = budgeted(evaluations=12)
    assert stop is not None and stop.cause == "max_evaluations" and len(steps) == 12
    result = ended(steps, stop, ORDER)
    passing = [s.plan for s in steps if s.passed]
    assert frozenset(result.fp32) == min(passing, key=len) and len(result.fp32) == 15
    assert result.status == "found" and result.passed and not result.minimal and result.evaluations == 12
    assert result.stopped.label == LABEL and result.stopped.evaluations == 12
    assert result.minimality.startswith(LABEL + " (the 12 evaluation(s) of the budget are spent)")
    assert "1-minimal" not in result.minimality and "minimum" not in result.minimality
    assert list(result.fp32) == [c for c in ORDER if c in result.fp32]  # in the search's order
    assert "passing, not minimal: budget reached" in str(result)


def test_the_time_limit_stops_it_too_and_an_evaluation_under_way_finishes():
    ticks = count()  # a clock that moves one second each time it is read: no real time involved
    steps, stop = budgeted(seconds=6.5, clock=lambda: float(next(ticks)))
    assert stop.cause == "time_limit" and stop.seconds == 6.5 and len(steps) == 6
    assert "time limit of 6.5 s is reached" in stop.said
    assert ended(steps, stop).stopped.label == LABEL


def test_what_ended_answers_comes_from_the_verdicts_alone():
    stop = Stop("interrupt", "Ctrl-C")
    a, ab, abc = frozenset("a"), frozenset("ab"), frozenset("abc")
    assert ended([Step(1, frozenset(), False, "precondition"), Step(2, ab, False, "grow")], stop) is None
    # a plan that passed, then failed when evaluated again, is not an answer
    again = [Step(1, ab, True, "grow"), Step(2, abc, True, "grow"), Step(3, ab, False, "recheck")]
    result = ended(again, stop)
    assert set(result.fp32) == set(abc) and (ab, ab) in result.contradictions
    assert result.stopped.label == "passing, not minimal: interrupted"
    # every single removal of the smallest evaluated and failed: it is 1-minimal, and says that much only
    certified = [Step(1, ab, True, "grow"), Step(2, a, False, "minimality"), Step(3, frozenset("b"), False, "x")]
    result = ended(certified, stop)
    assert result.minimal and result.stopped.label == "passing, 1-minimal, search not finished: interrupted"
    # all-FP16 passing is the whole answer, whatever stopped the search
    assert ended([Step(1, frozenset(), True, "precondition")], stop).stopped is None


# --------------------------------------------------------------------------- the command line, on constructed models


def dense(path, branches: int = 16):
    """A rounding-limited model (no overflow, many nodes needed): ``branches`` Adds of x + b_i summed; x holds
    integers in [1024, 1032), where FP16's spacing is 1, so each Add in FP16 loses its b_i (0.05 to 0.45) and the
    errors add up. At atol 0.3 most branches and the Sum must stay in FP32."""
    offsets = np.round(np.random.default_rng(0).uniform(0.05, 0.45, branches), 3).astype(np.float32)
    nodes = [helper.make_node("Add", ["x", f"b{i}"], [f"y{i}"], name=f"add{i}") for i in range(branches)]
    nodes.append(helper.make_node("Sum", [f"y{i}" for i in range(branches)], ["s"], name="sum"))
    inits = {f"b{i}": np.array([b], np.float32) for i, b in enumerate(offsets)}
    save(make_model(nodes, [("x", F, [1, 8])], [("s", F, [1, 8])], inits), str(path / "dense.onnx"))
    np.savez(path / "dense.npz", x=np.arange(1024, 1032, dtype=np.float32).reshape(1, 8))
    return ["search", str(path / "dense.onnx"), "--inputs", str(path / "dense.npz"), "--atol", "0.3", "--rtol", "0"]


def read(out):
    data = json.loads(out.read_text())
    return sorted(n["name"] for n in data["fp32_nodes"]), data["search"]


def checks(capsys, path, out):
    """``fp16bisect check --overrides out`` on the dense model: its exit code."""
    return run(capsys, "check", path / "dense.onnx", "--inputs", path / "dense.npz", "--overrides", out, "-q")[0]


def test_max_evaluations_writes_the_smallest_passing_set_labelled_exit_5(tmp_path, capsys):
    search_ = dense(tmp_path)
    code, stdout, err = run(capsys, *search_, "-o", tmp_path / "full.json", "-q")
    full, searched = read(tmp_path / "full.json")
    assert code == 0 and searched["minimal"] and searched["evaluations"] > 20 and len(full) == 13
    out = tmp_path / "o.json"
    code, stdout, err = run(capsys, *search_, "-o", out, "--max-evaluations", "9")
    nodes, said = read(out)
    assert code == BUDGET_REACHED
    assert said["stopped"] == {"by": "max_evaluations", "label": LABEL, "max_evaluations": 9,
                               "reason": "the 9 evaluation(s) of the budget are spent"}
    assert said["minimal"] is False and said["minimality"].startswith(LABEL) and said["evaluations_run"] == 9
    assert said["status"] == "found" and said["verified"] and len(nodes) == 14  # the 9th evaluation's set
    assert f"kept in FP32 ({LABEL}" in stdout and f"fp16bisect: {LABEL}" in err and "rerun the same command" in err
    assert "-> pass [grow; 16 candidate(s) in play, 0 found, roughly" in err
    assert "budget left: 2 of 9 evaluation(s)]" in err  # the progress lines say what is left
    assert journal_of(out).exists()  # kept for the rerun, which continues from it
    assert checks(capsys, tmp_path, out) == 0  # the set written passes


def test_rerunning_continues_from_the_journal_to_the_answer_of_an_unbudgeted_run(tmp_path, capsys):
    search_ = dense(tmp_path)
    assert run(capsys, *search_, "-o", tmp_path / "full.json", "-q")[0] == 0
    full, searched = read(tmp_path / "full.json")
    out = tmp_path / "o.json"
    assert run(capsys, *search_, "-o", out, "-q", "--max-evaluations", "10")[0] == BUDGET_REACHED
    code, _, err = run(capsys, *search_, "-o", out, "--max-evaluations", "10")  # replayed ones cost nothing
    nodes, said = read(out)
    assert code == BUDGET_REACHED and "resuming: 10 evaluation(s) replayed" in err and said["evaluations_run"] == 10
    assert said["evaluations"] == 20 and len(nodes) >= len(full)
    code, _, err = run(capsys, *search_, "-o", out, "-q")  # no budget: to the end
    nodes, said = read(out)
    assert code == 0 and "stopped" not in said and said["minimal"]
    assert nodes == full and said["evaluations"] == searched["evaluations"]
    assert said["evaluations_run"] == searched["evaluations"] - 20
    assert sorted(p.name for p in tmp_path.iterdir() if "journal" in p.name) == []  # finished: journal removed


def test_a_time_limit_stops_and_writes(tmp_path, capsys, monkeypatch):
    search_ = dense(tmp_path)
    out = tmp_path / "o.json"
    code, stdout, err = run(capsys, *search_, "-o", out, "--time-limit", "0.001")  # spent before any evaluation
    nodes, said = read(out)
    assert code == BUDGET_REACHED and said["stopped"]["by"] == "time_limit" and said["stopped"]["time_limit"] == 0.001
    assert len(nodes) == 17 and said["trace"] == [{"fp32": 17, "passed": True, "phase": "precondition", "round": 1}]
    assert "evaluating the all-FP32 plan (beyond the budget)" in err
    assert checks(capsys, tmp_path, out) == 0
    ticks = count()  # a clock moving a second each time it is read: the limit falls inside the search
    monkeypatch.setattr(budgets, "monotonic", lambda: float(next(ticks)))
    code, _, err = run(capsys, *search_, "-o", tmp_path / "t.json", "--time-limit", "15s", "-q")
    nodes, said = read(tmp_path / "t.json")
    assert code == BUDGET_REACHED and said["stopped"]["by"] == "time_limit" and said["stopped"]["time_limit"] == 15
    assert 1 < said["evaluations"] < 15 and len(nodes) < 17 and said["minimal"] is False
    assert checks(capsys, tmp_path, tmp_path / "t.json") == 0


SLOW_SEARCH = """
    import signal, sys, time
    # Ctrl-C as a terminal sends it: a job started in the background (CI under `&`, nohup) inherits SIGINT ignored,
    # which Python then keeps, and the search would never see it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import fp16bisect.backends.emulate as emulate
    run = emulate.EmulateBackend.run
    def slow(self, plan, inputs, repeat=0):
        time.sleep(0.3)
        return run(self, plan, inputs, repeat)
    emulate.EmulateBackend.run = slow
    from fp16bisect.cli.main import main
    sys.exit(main({argv!r}))
"""


def test_ctrl_c_writes_the_smallest_passing_set_and_exits_130(tmp_path, capsys):
    """SIGINT to a search in another process after a few progress lines (each evaluation slowed to 0.3 s)."""
    search_ = dense(tmp_path)
    out = tmp_path / "o.json"
    script = textwrap.dedent(SLOW_SEARCH.format(argv=[*search_, "-o", str(out)]))
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    said = []
    for line in process.stderr:
        said.append(line)
        if sum("fp16bisect: evaluation" in s for s in said) == 6:
            process.send_signal(signal.SIGINT)
            break
    stdout, rest = process.communicate(timeout=300)
    err = "".join(said) + rest
    assert process.returncode == INTERRUPTED, err
    nodes, searched = read(out)
    assert searched["stopped"]["by"] == "interrupt" and searched["stopped"]["label"] == \
        "passing, not minimal: interrupted" and searched["verified"]
    assert "fp16bisect: passing, not minimal: interrupted (Ctrl-C)" in err and "rerun the same command" in err
    assert "passing, not minimal: interrupted" in stdout and 6 <= searched["evaluations"] <= 8
    assert checks(capsys, tmp_path, out) == 0
    code, _, _ = run(capsys, *search_, "-o", out, "-q")  # the rerun continues to the whole answer
    assert code == 0 and read(out)[1]["minimal"] and len(read(out)[0]) == 13


def test_a_generous_budget_changes_nothing_on_an_overflow_model(tmp_path, capsys):
    plain = ["search", LN, "--inputs", LN_IN, "-q"]
    assert run(capsys, *plain, "-o", tmp_path / "a.json")[0] == 0
    code, _, _ = run(capsys, *plain, "-o", tmp_path / "b.json", "--max-evaluations", "1000", "--time-limit", "1h")
    assert code == 0
    (nodes, said), (again, budgeted_) = read(tmp_path / "a.json"), read(tmp_path / "b.json")
    assert nodes == again == ["ln1_square", "ln1_var"] and said["evaluations"] == budgeted_["evaluations"] == 4
    assert "stopped" not in budgeted_ and budgeted_["minimal"] and budgeted_["trace"] == said["trace"]


def test_on_an_expensive_judge_the_budget_counts_its_evaluations_not_the_emulators(fake_backend, tmp_path, capsys):
    engine = fake_backend(name="engine", deterministic=True, versions={"engine": "test double"})
    out = tmp_path / "o.json"
    code, stdout, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "--max-evaluations", "2")
    nodes, said = read(out)
    assert code == BUDGET_REACHED and len(engine.runs) == 2  # all-FP16, then the emulator's set: it passes
    assert nodes == ["ln1_square", "ln1_var"] and said["stopped"]["by"] == "max_evaluations" and not said["minimal"]
    assert json.loads(out.read_text())["prior"]["evaluations"] == 4  # the emulator's: not counted
    prior_lines = [line for line in err.splitlines() if "on emulate (prior):" in line]
    assert prior_lines and not any("budget left" in line for line in prior_lines)  # no time limit: nothing to say
    assert "evaluation 2 on engine: 2 node(s) in FP32 -> pass" in err and "budget left: 0 of 2 evaluation(s)" in err


def test_the_time_limit_runs_through_the_prior_too(fake_backend, tmp_path, capsys, monkeypatch):
    """Reached while the emulator searches (a clock moving a second each read): nothing has passed on the judge,
    so the all-FP32 plan is evaluated there, beyond the budget, and written."""
    engine = fake_backend(name="engine", deterministic=True, versions={"engine": "test double"})
    ticks = count()
    monkeypatch.setattr(budgets, "monotonic", lambda: float(next(ticks)))
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "--time-limit", "4")
    nodes, said = read(out)
    assert code == BUDGET_REACHED and said["stopped"]["by"] == "time_limit" and len(nodes) == 41
    assert engine.runs == [frozenset(nodes)] and said["trace"][0]["phase"] == "precondition"
    assert [line.split("budget left: ")[1] for line in err.splitlines() if "on emulate (prior)" in line] == \
        ["2.0 s]", "0.0 s]"]  # the prior's lines: its clock, no count


def test_minimums_evaluations_count_against_the_budget(tmp_path, capsys):
    search_ = dense(tmp_path)
    assert run(capsys, *search_, "-o", tmp_path / "full.json", "-q")[0] == 0
    first = read(tmp_path / "full.json")[1]["evaluations"]
    out = tmp_path / "o.json"
    code, _, err = run(capsys, *search_, "-o", out, "-q", "--minimum", "--max-evaluations", str(first + 3))
    nodes, said = read(out)
    assert code == BUDGET_REACHED and said["evaluations_run"] == first + 3 and said["stopped"]["by"] == \
        "max_evaluations"
    assert len(nodes) <= 13 and said["verified"] and checks(capsys, tmp_path, out) == 0


def test_with_fp16_accumulation_the_answer_written_passes_as_the_file_says(tmp_path, capsys):
    acc = ["search", SAMPLES / "accumulation.onnx", "--inputs", SAMPLES / "accumulation.npz", "--accumulate", "fp16",
           "--atol", "0.4", "--rtol", "0", "-q"]
    for budget in ("3", "6"):
        out = tmp_path / f"o{budget}.json"
        assert run(capsys, *acc, "-o", out, "--max-evaluations", budget)[0] == BUDGET_REACHED
        code, _, _ = run(capsys, "check", SAMPLES / "accumulation.onnx", "--inputs", SAMPLES / "accumulation.npz",
                         "--overrides", out, "-q")
        assert code == 0 and read(out)[1]["stopped"]["by"] == "max_evaluations"


def test_parallel_evaluations_stop_at_the_budget_exactly(tmp_path, capsys):
    search_ = dense(tmp_path)
    out = tmp_path / "o.json"
    assert run(capsys, *search_, "-o", out, "-q", "--jobs", "3", "--max-evaluations", "7")[0] == BUDGET_REACHED
    nodes, said = read(out)
    assert said["evaluations_run"] == 7 and said["stopped"]["by"] == "max_evaluations"
    assert checks(capsys, tmp_path, out) == 0


@pytest.mark.parametrize("flag, value", [("--max-evaluations", "0"), ("--max-evaluations", "ten"),
                                         ("--time-limit", "0"), ("--time-limit", "soon")])
def test_a_bad_budget_is_one_usage_error(flag, value, tmp_path, capsys):
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", tmp_path / "o.json", flag, value)
    assert code == 2 and one_line_error(err).startswith(f"fp16bisect: error: {flag} {value}: give")


def test_the_python_api_and_a_manifest_take_the_budget(tmp_path):
    import fp16bisect

    result = fp16bisect.search(LN, LN_IN, strategy={"max_evaluations": 2}, output=tmp_path / "o.json")
    assert result.stopped == LABEL and result.passed and not result.minimal and "budget reached" in repr(result)
    assert fp16bisect.search(LN, LN_IN, strategy=fp16bisect.Strategy(time_limit="1h")).stopped is None
    (tmp_path / "m.toml").write_text(textwrap.dedent(f"""
        [[entry]]
        model = "{LN}"
        inputs = ["{LN_IN}"]
        action = "search"
        max_evaluations = 2
        output = "{tmp_path / 'm.json'}"
    """))
    row, = fp16bisect.batch(tmp_path / "m.toml", jobs=1).entries
    assert row.verdict == "NOT MINIMAL" and row.error.startswith(LABEL)
    assert json.loads((tmp_path / "m.json").read_text())["search"]["stopped"]["max_evaluations"] == 2


def test_counting_is_by_evaluation_not_by_sample(fake_backend, tmp_path, capsys):
    """Two samples: an evaluation runs both (a pass) or stops at the first failing one; the budget counts plans."""
    counting = fake_backend(deterministic=True, runs=Counter())
    second = tmp_path / "second.npz"
    with np.load(LN_IN) as data:
        np.savez(second, **{k: data[k] * 0.5 for k in data.files})
    out = tmp_path / "o.json"
    code, _, _ = run(capsys, "search", LN, "--inputs", LN_IN, "--inputs", second, "-o", out, "-q",
                     "--max-evaluations", "3")
    assert code == BUDGET_REACHED and read(out)[1]["evaluations_run"] == 3
    assert len({plan for plan, _ in counting.runs}) == 3 < sum(counting.runs.values())
