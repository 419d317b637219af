"""Long searches survive: the journal, resuming after Ctrl-C or kill -9, --restart, --repeats, noisy oracles."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from collections import Counter
from types import SimpleNamespace

import pytest
from conftest import LN, LN_IN, journal_of, one_line_error, run

from doubles import Fake

from fp16bisect.evaluation.journal import CRASHED, Journal
from fp16bisect.evaluation.oracle import Judging, Oracle, Reason, evaluate_plan

PLAIN = ["search", str(LN.parent / "two_branches.onnx"), "--inputs", str(LN.parent / "two_branches.npz")]
TWO = [*PLAIN, "--keep-journal"]  # most tests below read or resume the journal of a finished search


@pytest.fixture
def counting(fake_backend):
    """The emulate backend, counting runs per (plan, repeat); raises ``stop`` on the run numbered ``stop_at``."""
    return fake_backend(deterministic=True, runs=Counter())


def searched(out):
    data = json.loads(out.read_text())
    return sorted(n["name"] for n in data["fp32_nodes"]), data["search"]


def lines_of(journal):
    """The journal's lines after its header."""
    return [json.loads(line) for line in journal.read_text().splitlines()[1:]]


def finished(journal):
    """The evaluations it holds (its ``plan`` lines)."""
    return [e for e in lines_of(journal) if "plan" in e]


def test_ctrl_c_then_rerun_continues_without_repeating_an_evaluation(counting, tmp_path, capsys):
    out = tmp_path / "o.json"
    counting.stop_at = 6
    code, _, err = run(capsys, *TWO, "-o", out, "-q")
    assert code == 130 and "rerun the same command to continue" in err
    assert searched(out)[1]["stopped"]["by"] == "interrupt"  # the smallest set seen to pass, written
    journal = journal_of(out)
    assert len(finished(journal)) == 5  # five finished evaluations (one of them passed: nothing more ran)
    assert list(lines_of(journal)[-1]) == ["abandoned"]  # the sixth, unwound from: not a crash
    counting.stop_at = None
    code, _, err = run(capsys, *TWO, "-o", out)
    assert code == 0 and "resuming: 5 evaluation(s) replayed" in err
    found, search = searched(out)
    assert found == ["a_mean_sq", "a_square", "b_exp", "b_prob", "b_sum"]
    assert search["evaluations_run"] == search["evaluations"] - 5
    assert max(counting.runs.values()) == 1  # no plan was evaluated twice over the two runs
    code, _, _ = run(capsys, *TWO, "-o", out, "-q")  # a finished search, rerun: all replayed
    assert code == 0 and searched(out)[1]["evaluations_run"] == 0 and searched(out)[0] == found


def test_a_finished_search_removes_its_journal_unless_kept(tmp_path, capsys):
    """The journal is for resuming: a finished search (its override JSON written) removes it, and the file names no
    journal; --keep-journal keeps it, named in the file."""
    out = tmp_path / "o.json"
    assert run(capsys, *PLAIN, "-o", out, "-q")[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"]
    assert searched(out)[1]["journal"] is None
    assert run(capsys, *PLAIN, "-o", out, "-q", "--keep-journal")[0] == 0
    assert searched(out)[1]["journal"] == str(journal_of(out)) and len(finished(journal_of(out))) > 0


def test_an_interrupted_search_keeps_its_journal_and_the_finished_resume_removes_it(counting, tmp_path, capsys):
    out = tmp_path / "o.json"
    counting.stop_at = 4
    code, _, err = run(capsys, *PLAIN, "-o", out, "-q")
    # three finished, none passing: the all-FP32 plan evaluated after Ctrl-C is the answer written
    assert code == 130 and journal_of(out).name in err and len(finished(journal_of(out))) == 4
    assert searched(out)[1]["stopped"]["by"] == "interrupt" and len(searched(out)[0]) == 13
    counting.stop_at = None
    code, _, err = run(capsys, *PLAIN, "-o", out)
    assert code == 0 and "resuming: 4 evaluation(s) replayed" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"]


def test_a_search_that_fails_keeps_its_journal(tmp_path, capsys):
    """exit 3 (references FP32 itself misses by 1): no override JSON, the journal of what was evaluated stays."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(LN), providers=["CPUExecutionProvider"])
    with np.load(LN_IN) as d:
        got = session.run(None, {k: d[k] for k in d.files})
    np.savez(tmp_path / "ref.npz", **{o.name: v + 1.0 for o, v in zip(session.get_outputs(), got)})
    out = tmp_path / "o.json"
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "--reference", tmp_path / "ref.npz", "-o", out, "-q")
    assert code == 3 and "unreachable even in FP32" in err and not out.exists()
    assert finished(journal_of(out))


def die_in_evaluation(out, call: int, how: str) -> list:
    """Run the search in a process that dies, without unwinding, inside the backend's ``call``-th run (``how``: a
    statement, e.g. ``os._exit(139)`` for a segfaulting build); the ids of the plan it died in."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        import fp16bisect.backends.emulate as emulate
        run, calls = emulate.EmulateBackend.run, []
        def dying(self, plan, inputs, repeat=0):
            calls.append(plan)
            if len(calls) == {call}:
                {how}
            return run(self, plan, inputs, repeat)
        emulate.EmulateBackend.run = dying
        from fp16bisect.cli.main import main
        sys.exit(main({[*TWO, "-o", str(out), "-q"]!r}))
    """)
    died = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert died.returncode in (139, -signal.SIGKILL), died.stderr
    assert not out.exists()
    journal = journal_of(out)
    assert len(finished(journal)) == call - 1  # one sample: one run per evaluation
    last = lines_of(journal)[-1]
    assert list(last) == ["started"]  # marked before it ran, never finished nor abandoned
    return last["started"]


def test_kill_9_mid_search_then_rerun_continues(tmp_path):
    out = tmp_path / "o.json"
    crashed = die_in_evaluation(out, 4, "os.kill(os.getpid(), signal.SIGKILL)")
    resumed = subprocess.run([sys.executable, "-m", "fp16bisect.cli.main", *TWO, "-o", str(out), "-q"],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    found, search = searched(out)
    assert found == ["a_mean_sq", "a_square", "b_exp", "b_prob", "b_sum"]
    assert search["evaluations_run"] == search["evaluations"] - 4  # three replayed, the killed one not rerun
    assert search["build_failures"] == [{"fp32": crashed, "error": CRASHED}]


def test_a_torn_last_line_is_ignored_and_repaired(counting, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    journal = journal_of(out)
    lines = journal.read_text().splitlines()
    fourth = [i for i, line in enumerate(lines) if line.startswith('{"plan"')][3]
    # a kill while the fourth evaluation's line was being written: it had ended, so it is rerun, not a crash
    journal.write_text("\n".join(lines[:fourth]) + "\n" + lines[fourth][: len(lines[fourth]) // 2])
    counting.runs.clear()
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    assert searched(out)[1]["evaluations_run"] == searched(out)[1]["evaluations"] - 3
    assert searched(out)[1]["build_failures"] == []
    assert all(json.loads(line) for line in journal.read_text().splitlines())


def test_another_search_at_the_same_output_journals_beside_the_first(counting, tmp_path, capsys):
    """A looser tolerance or another model at the same -o: its own journal (no refusal, no --restart needed);
    the first search, rerun, still resumes its own; --restart still discards."""
    out = tmp_path / "o.json"
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    first = journal_of(out)
    code, _, err = run(capsys, *TWO, "-o", out, "--atol", "0.5")
    assert code == 0 and "resuming" not in err, err
    looser = json.loads(out.read_text())["search"]
    assert looser["evaluations_run"] == looser["evaluations"] and looser["journal"] != str(first)
    assert sorted(p.name for p in tmp_path.glob("o.journal-*.jsonl")) == sorted({first.name, Path(looser["journal"]).name})
    assert run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "-q", "--keep-journal")[0] == 0  # a third journal
    assert len(list(tmp_path.glob("o.journal-*.jsonl"))) == 3
    code, _, err = run(capsys, *TWO, "-o", out)  # the first search again: resumed from its own journal
    assert code == 0 and "resuming" in err and searched(out)[1]["evaluations_run"] == 0
    assert searched(out)[1]["journal"] == str(first)
    assert run(capsys, *TWO, "-o", out, "--atol", "0.5", "--restart", "-q")[0] == 0
    assert searched(out)[1]["evaluations_run"] == searched(out)[1]["evaluations"]


def test_a_journal_written_before_journals_were_keyed_is_resumed(counting, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    legacy = tmp_path / "o.journal.jsonl"
    journal_of(out).rename(legacy)
    code, _, err = run(capsys, *TWO, "-o", out)
    assert code == 0 and "resuming" in err and searched(out)[1]["evaluations_run"] == 0
    assert searched(out)[1]["journal"] == str(legacy) and not list(tmp_path.glob("o.journal-*.jsonl"))
    assert run(capsys, *TWO, "-o", out, "--atol", "0.5", "-q")[0] == 0  # another search: not that one
    assert searched(out)[1]["journal"] == str(journal_of(out))


def test_not_a_journal_is_refused(tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    journal_of(out).write_bytes(b"\xff\xfe not json")
    code, _, err = run(capsys, *TWO, "-o", out, "-q")
    assert code == 2 and "is not an fp16bisect journal" in one_line_error(err)


def test_repeats_evaluate_each_plan_n_times(counting, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(capsys, *TWO, "-o", out, "--repeats", "3", "-q")[0] == 0
    found, search = searched(out)
    assert found == ["a_mean_sq", "a_square", "b_exp", "b_prob", "b_sum"] and search["repeats"] == 3
    plans = {plan for plan, _ in counting.runs}
    assert all(counting.runs[(plan, r)] == 1 for plan in plans for r in range(3))
    code, _, err = run(capsys, *TWO, "-o", tmp_path / "p.json", "--repeats", "0")
    assert code == 2 and "--repeats 0" in one_line_error(err)


def test_a_final_set_that_fails_when_built_again_is_reported_not_minimal(fake_backend, tmp_path, capsys):
    Flaky = SimpleNamespace(bad=frozenset({"ln1_square", "ln1_var"}))  # builds vary: repeat 1 of bad is all-FP16
    fake_backend(flaky=Flaky.bad, runs=Counter())
    out = tmp_path / "o.json"
    code, stdout, _ = run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "-q")
    assert code == 0
    data = json.loads(out.read_text())
    assert data["search"]["minimal"] is False
    assert "failed when evaluated again" in data["search"]["minimality"]
    again = data["search"]["contradictions"]
    assert again["count"] >= 1 and {"passed_ids": 2, "failed_adding": [], "same_plan_failed_again": True} in again[
        "examples"]
    assert len(data["fp32_nodes"]) > 2  # the smallest plan seen to pass and never to fail
    assert "NOT minimal" in stdout
    repeats = run(capsys, "search", LN, "--inputs", LN_IN, "-o", tmp_path / "r.json", "--repeats", "2", "-q")
    assert repeats[0] == 0
    flaky = json.loads((tmp_path / "r.json").read_text())["search"]["flaky"]
    assert sorted(Flaky.bad) in flaky  # its two builds disagreed, so it never counted as passing


def test_output_files_are_whole_or_absent(counting, tmp_path, capsys):
    """Atomic writes: a search interrupted again while it made its answer (Ctrl-C twice) leaves no JSON, an
    interrupted one or a finished one a complete JSON, no temp files."""
    out = tmp_path / "o.json"
    counting.stop_at = {3, 4}  # nothing has passed: the all-FP32 plan, evaluated for the answer, is interrupted too
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == [journal_of(out).name]
    counting.stop_at = counting.tried + 1  # once: the all-FP32 plan is the answer written
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 130
    assert json.loads(out.read_text())["search"]["stopped"]["by"] == "interrupt"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    counting.stop_at = None
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    json.loads(out.read_text())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert os.path.getsize(out) > 0


def test_a_plan_the_process_died_in_is_not_rerun_and_is_reported_as_died(counting, tmp_path, capsys):
    """A build that segfaults or is OOM-killed takes the search with it: a resume must not run that plan again (it
    would die again, on every resume), nor count it as evidence; it is a plan that could not be evaluated."""
    out = tmp_path / "o.json"
    crashed = die_in_evaluation(out, 4, "os._exit(139)")
    code, _, err = run(capsys, *TWO, "-o", out, "-q")
    assert code == 0, err
    assert frozenset(crashed) not in {plan for plan, _ in counting.runs}
    found, search = searched(out)
    assert found == ["a_mean_sq", "a_square", "b_exp", "b_prob", "b_sum"]
    assert search["build_failures"] == [{"fp32": crashed, "error": CRASHED}] and search["unevaluable"] == 1
    assert "fp16bisect search --retry-crashed" in CRASHED  # the message says how to evaluate it again
    journal = journal_of(out)
    died, = [e for e in finished(journal) if e["plan"] == crashed]
    assert died["reason"] == {"kind": "died", "message": CRASHED} and died["passed"] is False and died["crashed"]
    counting.runs.clear()  # resumed again: recorded once, replayed, still never run
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    assert searched(out)[1]["evaluations_run"] == 0 and not counting.runs
    assert len([e for e in finished(journal) if e["plan"] == crashed]) == 1


def test_retry_crashed_evaluates_a_plan_the_process_died_in(counting, monkeypatch, tmp_path, capsys):
    out = tmp_path / "o.json"
    crashed = frozenset(die_in_evaluation(out, 4, "os._exit(139)"))
    code, _, err = run(capsys, *TWO, "-o", out)  # recorded as died, not run, and said
    assert code == 0 and counting.runs[(crashed, 0)] == 0
    assert "1 plan(s) killed the process evaluating them before" in err and "--retry-crashed" in err
    assert run(capsys, *TWO, "-o", out, "-q", "--retry-crashed")[0] == 0
    assert counting.runs[(crashed, 0)] == 1
    assert searched(out)[1]["build_failures"] == []
    counting.runs.clear()  # resumed again without it: the retry's verdict is replayed, not the record of the death
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    assert not counting.runs and searched(out)[1]["build_failures"] == []


@pytest.mark.parametrize("stop", [KeyboardInterrupt, MemoryError])
def test_an_evaluation_unwound_from_is_no_crash_the_resume_runs_it(counting, tmp_path, capsys, stop):
    """Ctrl-C (or an exception) in an evaluation unwinds: the plan is unmarked, and the resume runs it."""
    out = tmp_path / "o.json"
    counting.stop_at, counting.stop = 4, stop
    assert run(capsys, *TWO, "-o", out, "-q")[0] != 0
    journal = journal_of(out)
    lines = lines_of(journal)
    at = next(i for i, line in enumerate(lines) if "abandoned" in line)  # after it, Ctrl-C's answer (all-FP32)
    started, abandoned = lines[at - 1], lines[at]
    assert list(started) == ["started"] and abandoned == {"abandoned": started["started"]}
    counting.stop_at = None
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    assert counting.runs[(frozenset(started["started"]), 0)] == 1  # Ctrl-C came before its run counted
    found, search = searched(out)
    assert found == ["a_mean_sq", "a_square", "b_exp", "b_prob", "b_sum"] and search["build_failures"] == []
    assert not [e for e in finished(journal) if e.get("reason")]


HEADER = {"model_sha256": "m", "backend": "judge", "tolerance": {}, "samples": "s", "repeats": 1}
X, Y, XY = frozenset({"x"}), frozenset({"y"}), frozenset({"x", "y"})


def x_judge() -> Fake:
    """Judges whole plans: a plan passes when it keeps "x" in FP32."""
    return Fake(name="judge", verdict=lambda plan: "x" in plan)


def oracle_on(path, executor=None, **journal_options):
    """An oracle on a fresh judge, journaling to ``path``; and what the judge is asked (``asked``)."""
    asked = x_judge()
    journal = Journal(path, HEADER, **journal_options)
    oracle = Oracle(asked.backend(), [SimpleNamespace(inputs={})], None, [], journal=journal, executor=executor)
    return oracle, SimpleNamespace(asked=asked.runs)


class Interrupted:
    """An executor (worker processes, elsewhere): the first plan completes, then Ctrl-C."""

    width = 3

    def __init__(self, path):
        self.path = path
        self.handed_over_with = None

    def evaluate(self, plans, first_repeat=0, repeats=1, order=None):
        self.handed_over_with = lines_of(self.path)  # what the journal held when the plans were submitted
        yield evaluate_plan(x_judge().backend(), Judging([SimpleNamespace(inputs={})], None, []), plans[0],
                            range(first_repeat, first_repeat + repeats))
        raise KeyboardInterrupt


def test_parallel_plans_are_marked_started_before_they_are_submitted_and_unmarked_on_ctrl_c(tmp_path):
    path = tmp_path / "j.jsonl"
    pool = Interrupted(path)
    oracle, _ = oracle_on(path, pool)
    with pytest.raises(KeyboardInterrupt):
        oracle.evaluate_many([X, Y, XY])
    assert pool.handed_over_with == [{"started": ["x"]}, {"started": ["y"]}, {"started": ["x", "y"]}]
    assert lines_of(path)[3:] == [finished(path)[0], {"abandoned": ["y"]}, {"abandoned": ["x", "y"]}]
    resumed, judge = oracle_on(path)
    assert resumed.journal.crashed == [] and set(resumed.memo) == {X}
    assert resumed.test_many([X, Y, XY]) == [True, False, True] and judge.asked == [Y, XY]


def test_a_process_that_died_with_plans_in_flight_records_each_as_died_until_retried(tmp_path):
    path = tmp_path / "j.jsonl"
    oracle, _ = oracle_on(path)
    oracle.evaluate(X)
    for plan in (Y, XY):  # submitted to workers, then this process was killed
        oracle.journal.start(plan)
    oracle.journal.start(X, 1)  # ... and so was the recheck of X running here
    resumed, judge = oracle_on(path)
    assert resumed.journal.crashed == [Y, XY, X]
    assert resumed.test_many([X, Y, XY]) == [True, None, None]
    assert resumed.evaluate(X, recheck=1).reason == Reason("died", CRASHED) and judge.asked == []
    assert [e.plan for e in resumed.build_failures] == [Y, XY] and resumed.runs == 0
    again, judge = oracle_on(path)  # recorded once: a further resume replays the records
    assert again.test_many([X, Y, XY]) == [True, None, None] and judge.asked == []
    assert len(finished(path)) == 1 + 3
    retried, judge = oracle_on(path, retry_crashed=True)
    assert retried.journal.crashed == [Y, XY, X] and retried.build_failures == []
    assert retried.test_many([X, Y, XY]) == [True, False, True] and retried.evaluate(X, recheck=1).passed
    assert judge.asked == [Y, XY, X]
    after, judge = oracle_on(path)  # the retries' verdicts replace the records of the deaths
    assert after.test_many([X, Y, XY]) == [True, False, True] and after.journal.crashed == [] and judge.asked == []


def test_a_journal_of_evaluations_alone_reads_as_before(tmp_path):
    """Journals written before started lines (evaluations alone) are replayed as they were, and left unchanged."""
    path = tmp_path / "j.jsonl"
    old = [json.dumps({"schema": "fp16bisect.journal/1", **HEADER}),
           json.dumps({"plan": ["x"], "passed": True, "seconds": 0.1, "error": "", "flaky": False, "metrics": []}),
           json.dumps({"plan": ["y"], "passed": False, "seconds": 0.1, "error": "boom", "flaky": False, "metrics": []})]
    path.write_text("\n".join(old) + "\n")
    oracle, judge = oracle_on(path)
    assert oracle.journal.crashed == [] and path.read_text() == "\n".join(old) + "\n"
    assert oracle.test_many([X, Y]) == [True, None] and oracle.evaluate(Y).reason == Reason("build", "boom")
    assert judge.asked == []
