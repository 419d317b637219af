"""The bounded step after the 1-minimal search that tries smaller sets (issue 41 item 3, strategy/improve.py): it
gains where FP16 errors cancel (Silero VAD at a tight tolerance: the descent keeps 5 nodes, onnxconverter-common's
segment loop finds 3), and adds no evaluation where an overflow explains the answer or the errors simply add."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import fresh_oracle, run

from fp16bisect.tolerance import Tolerance
from fp16bisect.artifacts.overrides import problems
from fp16bisect.strategy.improve import Evidence, _rule


def test_the_rule_reads_the_evidence_the_search_already_has():
    ranked = {"a": 2.0, "b": 1.5, "c": 1.0}  # single-node errors, in units of the allowance
    order = list(ranked)
    assert _rule(frozenset("ab"), Evidence(order, frozenset("abc"), ranked), 2.0, 0)[0] is False  # overflows
    assert _rule(frozenset("a"), Evidence(order, frozenset(), ranked), 2.0, 0)[0] is False  # 1 node: no smaller
    assert _rule(frozenset("ab"), Evidence(order, frozenset(), ranked), 2.0, 3) == (
        True, "the search's verdicts contradicted monotonicity 3 time(s)")
    spread, why = _rule(frozenset("ab"), Evidence(order, frozenset(), ranked), 2.0, 0)  # 4.5 / 2.0 = 2.25x
    assert spread and "add up to 2.25x the all-FP16 error: they cancel" in why
    adds, why = _rule(frozenset("ab"), Evidence(order, frozenset(), ranked), 4.5, 0)  # they add up to the total
    assert not adds and "add up to 1x the all-FP16 error: they add" in why
    assert _rule(frozenset("ab"), Evidence(order, frozenset(), None), 2.0, 0)[0] is False  # nothing measured


@pytest.mark.parametrize("name, evaluations, why", [
    ("transformer_block", 4, "every member is explained by an overflow or underflow"),
    ("two_branches", 13, "every member is explained by an overflow or underflow"),
    ("accumulation", 18, "the single-node errors add up to 1x the all-FP16 error: they add"),
])
def test_where_an_overflow_or_errors_that_add_explain_the_answer_the_step_adds_no_evaluation(
        name, evaluations, why, known, capsys, tmp_path):
    spec = known[name]
    out = tmp_path / "o.json"
    code, said, _ = run(capsys, "search", f"sample_models/{name}.onnx", "--inputs", f"sample_models/{name}.npz",
                        "--atol", spec.get("atol", 1e-2), "--rtol", spec.get("rtol", 1e-2), "-o", out)
    data = json.loads(out.read_text())
    assert code == 0 and sorted(n["name"] for n in data["fp32_nodes"]) == sorted(spec["culprits"])
    assert data["search"]["evaluations"] == evaluations  # the search's own: k + 2 for a one-site overflow
    step = data["search"]["improvement"]
    assert step["ran"] is False and step["evaluations"] == 0 and step["why"].startswith(why)
    assert "smaller set:" not in said


def silero(factor: float):
    """Silero VAD (17 candidates) on bench_dense's input, at atol = ``factor`` x its all-FP16 max abs error."""
    from real_models import SILERO_VAD_SEQ, real_model

    from fp16bisect.backends.emulate import EmulateBackend
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.samples import Sample, add_fp32_references

    model = str(real_model(SILERO_VAD_SEQ))
    rng = np.random.default_rng(0)
    x = {"input": (rng.standard_normal((4, 576)) * 0.1).astype(np.float32),
         "h": np.zeros((1, 1, 128), np.float32), "c": np.zeros((1, 1, 128), np.float32)}
    graph = Graph.load(model)
    samples = [Sample("x", x)]
    add_fp32_references(graph, samples)
    got = EmulateBackend(graph).run(frozenset(), x)
    err = max(float(np.max(np.abs(got[o] - samples[0].reference[o]))) for o in graph.float_output_names())
    return model, x, factor * err


def silero_search(tmp_path) -> tuple[list, str, float]:
    """The search command on ``silero(0.7)``, its input written to tmp_path/x.npz and its answer to tmp_path/o.json
    (the step's case: the descent keeps 5 nodes, the step 3); the model and the atol too."""
    model, x, atol = silero(0.7)
    np.savez(tmp_path / "x.npz", **x)
    return (["search", model, "--inputs", tmp_path / "x.npz", "--atol", atol, "--rtol", 0, "-o", tmp_path / "o.json"],
            model, atol)


def test_on_silero_vad_the_step_keeps_3_nodes_where_the_descent_kept_5(tmp_path, capsys):
    command, model, atol = silero_search(tmp_path)
    out = tmp_path / "o.json"
    code, said, _ = run(capsys, *command)
    data = json.loads(out.read_text())
    assert code == 0 and problems(data) == ""
    step = data["search"]["improvement"]
    assert step["ran"] is True and step["one_minimal"] == 5 and step["size"] == 3 == len(data["fp32_nodes"])
    assert step["evaluations"] <= step["budget"] == 20  # the search's own 15, at least 20
    assert data["search"]["minimal"] is True  # the smaller set's every single removal evaluated and failed
    assert "smaller set: 5 -> 3 node(s), also 1-minimal, seen to pass at its evaluation " in said
    assert "not claimed the minimum" in said
    kept = frozenset(n["name"] for n in data["fp32_nodes"])
    oracle = fresh_oracle(model, [str(tmp_path / "x.npz")], Tolerance(atol=atol, rtol=0.0))
    assert oracle(kept) and not any(oracle(kept - {m}) for m in kept)  # judged afresh: passes, 1-minimal
    phases = [s["phase"] for s in data["search"]["trace"]]
    assert phases.count("improve") == step["evaluations"] and data["search"]["evaluations"] == len(phases)


def test_on_an_expensive_judge_the_step_runs_on_the_emulator_and_the_judge_certifies_its_set(
        fake_backend, tmp_path, capsys):
    engine = fake_backend(name="engine", deterministic=True, versions={"engine": "test double"})
    command, _, _ = silero_search(tmp_path)
    out = tmp_path / "o.json"
    code, said, _ = run(capsys, *command)
    data = json.loads(out.read_text())
    assert code == 0 and len(data["fp32_nodes"]) == 3 and data["search"]["minimal"] is True
    step = data["search"]["improvement"]
    assert step["backend"] == "emulate (prior)" and step["one_minimal"] == 5 and step["size"] == 3
    assert len(engine.runs) == 3 + 2  # the all-FP16 plan, the set, each single removal: k + 2 builds
    assert "on the emulator, certified on the engine backend" in said


def test_a_search_resumed_on_an_expensive_judge_starts_from_the_steps_set_as_the_journal_kept_it(
        fake_backend, tmp_path, capsys):
    engine = fake_backend(name="engine", deterministic=True, versions={"engine": "test double"}, stop_at=3)
    command, _, _ = silero_search(tmp_path)
    out = tmp_path / "o.json"
    assert run(capsys, *command)[0] == 130  # Ctrl-C on the engine's third build
    engine.stop_at = None
    code, _, progress = run(capsys, *command)  # resumed: the emulator does not run again, nor the step
    data = json.loads(out.read_text())
    assert code == 0 and len(data["fp32_nodes"]) == 3 and data["search"]["minimal"] is True
    assert "prior: the emulator's result read from" in progress and "smaller set: evaluation" not in progress
    step = data["search"]["improvement"]
    assert step["one_minimal"] == 5 and step["size"] == 3 and step["backend"] == "emulate (prior)"
    assert len(set(engine.runs)) == 3 + 2  # the same k + 2 plans as uninterrupted
