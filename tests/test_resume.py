"""Long searches survive: the journal, resuming after Ctrl-C or kill -9, --restart, --repeats, noisy oracles."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
from test_cli import LN, LN_IN, one_line_error, run

import fp16bisect.pipeline as pipeline
from fp16bisect.backends.emulate import EmulateBackend

TWO = ["search", str(LN.parent / "two_branches.onnx"), "--inputs", str(LN.parent / "two_branches.npz")]


class Counting:
    """The emulate backend, counting runs per plan; raises ``stop`` on the run numbered ``stop_at``."""

    runs: Counter = Counter()
    stop_at = None
    stop = KeyboardInterrupt
    name = "emulate"
    deterministic = True

    def __init__(self, graph):
        self.inner = EmulateBackend(graph)

    def versions(self):
        return self.inner.versions()

    def run(self, plan, inputs, repeat=0):
        total = sum(Counting.runs.values())
        if Counting.stop_at is not None and total + 1 == Counting.stop_at:
            raise Counting.stop()
        Counting.runs[(frozenset(plan), repeat)] += 1
        return self.inner.run(plan, inputs)


@pytest.fixture
def counting(monkeypatch):
    Counting.runs = Counter()
    Counting.stop_at = None
    monkeypatch.setattr(pipeline, "make_backend", lambda name, graph, **_: Counting(graph))
    return Counting


def searched(out):
    data = json.loads(out.read_text())
    return sorted(n["name"] for n in data["fp32_nodes"]), data["search"]


def test_ctrl_c_then_rerun_continues_without_repeating_an_evaluation(counting, tmp_path, capsys):
    out = tmp_path / "o.json"
    counting.stop_at = 6
    code, _, err = run(capsys, *TWO, "-o", out, "-q")
    assert code == 130 and "rerun the same command to continue" in err and not out.exists()
    journal = tmp_path / "o.journal.jsonl"
    assert len(journal.read_text().splitlines()) == 1 + 5  # the header and five finished evaluations
    counting.stop_at = None
    code, _, err = run(capsys, *TWO, "-o", out)
    assert code == 0 and "resuming: 5 evaluation(s) replayed" in err
    found, search = searched(out)
    assert found == ["a_mean_sq", "a_square", "b_exp", "b_prob", "b_sum"]
    assert search["evaluations_run"] == search["evaluations"] - 5
    assert max(counting.runs.values()) == 1  # no plan was evaluated twice over the two runs
    code, _, _ = run(capsys, *TWO, "-o", out, "-q")  # a finished search, rerun: all replayed
    assert code == 0 and searched(out)[1]["evaluations_run"] == 0 and searched(out)[0] == found


def test_kill_9_mid_search_then_rerun_continues(tmp_path):
    out = tmp_path / "o.json"
    script = textwrap.dedent(f"""
        import os, signal, sys
        import fp16bisect.backends.emulate as emulate
        run, calls = emulate.EmulateBackend.run, []
        def dying(self, plan, inputs, repeat=0):
            calls.append(plan)
            if len(calls) == 4:
                os.kill(os.getpid(), signal.SIGKILL)
            return run(self, plan, inputs, repeat)
        emulate.EmulateBackend.run = dying
        from fp16bisect.cli import main
        sys.exit(main({[*TWO, "-o", str(out), "-q"]!r}))
    """)
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists()
    lines = (tmp_path / "o.journal.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 3
    resumed = subprocess.run([sys.executable, "-m", "fp16bisect.cli", *TWO, "-o", str(out), "-q"],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    found, search = searched(out)
    assert found == ["a_mean_sq", "a_square", "b_exp", "b_prob", "b_sum"]
    assert search["evaluations_run"] == search["evaluations"] - 3


def test_a_torn_last_line_is_ignored_and_repaired(counting, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    journal = tmp_path / "o.journal.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:4]) + "\n" + lines[4][: len(lines[4]) // 2])  # a kill mid-write
    counting.runs.clear()
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    assert searched(out)[1]["evaluations_run"] == searched(out)[1]["evaluations"] - 3
    assert all(json.loads(line) for line in journal.read_text().splitlines())


def test_a_journal_of_another_search_is_refused_until_restart(counting, tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    code, _, err = run(capsys, *TWO, "-o", out, "--atol", "0.5", "-q")
    assert code == 2
    assert "belongs to another search (its tolerance differ)" in one_line_error(err) and "--restart" in err
    code, _, err = run(capsys, "search", LN, "--inputs", LN_IN, "-o", out, "-q")
    assert code == 2 and "its model_sha256, samples differ" in one_line_error(err)
    assert run(capsys, *TWO, "-o", out, "--atol", "0.5", "--restart", "-q")[0] == 0
    assert searched(out)[1]["evaluations_run"] == searched(out)[1]["evaluations"]


def test_not_a_journal_is_refused(tmp_path, capsys):
    out = tmp_path / "o.json"
    (tmp_path / "o.journal.jsonl").write_bytes(b"\xff\xfe not json")
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


class Flaky(Counting):
    """A backend whose builds vary: repeat 1 of one plan comes out all-FP16."""

    deterministic = False
    bad = None

    def run(self, plan, inputs, repeat=0):
        if repeat >= 1 and frozenset(plan) == Flaky.bad:
            plan = frozenset()
        return super().run(plan, inputs, repeat)


def test_a_final_set_that_fails_when_built_again_is_reported_not_minimal(monkeypatch, tmp_path, capsys):
    Counting.runs, Counting.stop_at = Counter(), None
    Flaky.bad = frozenset({"ln1_square", "ln1_var"})
    monkeypatch.setattr(pipeline, "make_backend", lambda name, graph, **_: Flaky(graph))
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
    """Atomic writes: an interrupted search leaves no JSON, a finished one a complete JSON, no temp files."""
    out = tmp_path / "o.json"
    counting.stop_at = 3
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.journal.jsonl"]
    counting.stop_at = None
    assert run(capsys, *TWO, "-o", out, "-q")[0] == 0
    json.loads(out.read_text())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert os.path.getsize(out) > 0
