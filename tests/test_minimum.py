"""``search --minimum [N]`` end to end: a model whose 1-minimal answer is larger than its minimum by construction,
on the emulator and on an expensive judge with the emulator as prior; the option's one check."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import run
from onnx import TensorProto, helper, numpy_helper

import fp16bisect
from fp16bisect.artifacts.overrides import problems
from fp16bisect.errors import UsageError
from fp16bisect.run.options import Strategy


def two_paths() -> onnx.ModelProto:
    """y = Min(p, q2) with x beyond FP16 (70000 to 100000). p = x * 1e-3 (node P) is exact when P alone stays in
    FP32: it reads the graph input as it arrives. q1 = x * 2 (node Q1) is over 65504, so q2 = q1 * 5e-4 (node Q2) is
    right only when both Q1 and Q2 stay in FP32. Either branch right makes Min right (the other is inf): the passing
    sets are those holding P or both Q1 and Q2. The FP32 profile flags Q1 (its output overflows) first, so the
    1-minimal search finds {Q1, Q2}; the minimum is {P}."""
    def const(name, value):
        return numpy_helper.from_array(np.array(value, np.float32), name)

    nodes = [helper.make_node("Mul", ["x", "k_p"], ["p"], name="P"),
             helper.make_node("Mul", ["x", "k_two"], ["q1"], name="Q1"),
             helper.make_node("Mul", ["q1", "k_q"], ["q2"], name="Q2"),
             helper.make_node("Min", ["p", "q2"], ["y"], name="M")]
    graph = helper.make_graph(nodes, "two_paths", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [const("k_p", 1e-3), const("k_two", 2.0), const("k_q", 5e-4)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


X = {"x": np.array([[70000, 80000, 90000, 100000]], np.float32)}


@pytest.fixture
def files(tmp_path):
    onnx.save(two_paths(), tmp_path / "two_paths.onnx")
    np.savez(tmp_path / "x.npz", **X)
    return ["search", tmp_path / "two_paths.onnx", "--inputs", tmp_path / "x.npz"]


def nodes(data: dict) -> list[str]:
    return sorted(n["name"] for n in data["fp32_nodes"])


def test_the_default_search_keeps_the_longer_path_and_minimum_finds_the_one_node_proven(files, tmp_path, capsys):
    plain, least = tmp_path / "plain.json", tmp_path / "least.json"
    assert run(capsys, *files, "-o", plain, "-q")[0] == 0
    assert nodes(json.loads(plain.read_text())) == ["Q1", "Q2"]
    assert "minimum" not in json.loads(plain.read_text())["search"]
    code, out, err = run(capsys, *files, "-o", least, "--minimum")
    assert code == 0
    data = json.loads(least.read_text())
    assert problems(data) == ""  # the file validates against its declared schema
    assert nodes(data) == ["P"] and data["search"]["minimal"] is True
    minimum = data["search"]["minimum"]
    assert minimum["proven"] is True and minimum["assumes_monotone"] is False and minimum["lower_bound"] == 1
    assert minimum["smaller_failed"] == 0 and minimum["estimate"] == 1  # the all-FP16 plan failed: the proof
    assert minimum["one_minimal"] == 2 and minimum["evaluations"] == 1 and minimum["backend"] == "emulate"
    assert [p["fp32"] for p in minimum["passing"]] == [["P"], ["Q1", "Q2"]]
    # the search's 4, the loop's {P}; the certification's questions were all known already
    assert data["search"]["evaluations"] == 5 == len(data["search"]["trace"])
    assert data["search"]["trace"][-1]["phase"] == "minimum"
    assert "--minimum: 1 node: the minimum (the all-FP16 plan fails); the 1-minimal search kept 2" in out


def test_a_budget_too_small_for_the_proof_keeps_a_smaller_set_only_as_found_and_says_the_bound(files, tmp_path,
                                                                                                capsys):
    out_path = tmp_path / "o.json"
    code, out, _ = run(capsys, *files, "-o", out_path, "--minimum", "0")
    assert code == 0
    data = json.loads(out_path.read_text())
    minimum = data["search"]["minimum"]
    assert nodes(data) == ["Q1", "Q2"] and minimum["proven"] is False and minimum["evaluations"] == 0
    assert minimum["lower_bound"] == 1 and minimum["estimate"] == 1 and minimum["budget"] == 0
    assert ("2 node(s): no smaller set found; a bound of 1 holds only if keeping more nodes in FP32 never hurts, "
            "an assumption no verdict here contradicts, not a proof; the budget of 0 evaluation(s) ran out") in out


def test_the_python_api_takes_minimum_and_returns_its_record():
    result = fp16bisect.search(two_paths(), X, strategy={"minimum": True})
    assert result.names == ["P"] and result.minimal
    assert result.minimum is not None and result.minimum["proven"] and result.minimum["budget"] == 20
    assert fp16bisect.search(two_paths(), X).minimum is None


@pytest.mark.parametrize("value", [-1, "x", 2.5])
def test_a_bad_minimum_is_one_usage_error(value, files, capsys):
    with pytest.raises(UsageError, match="minimum"):
        Strategy(minimum=value)
    code, _, err = run(capsys, *files, "--minimum", str(value), "-q")
    assert code == 2 and "--minimum" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_on_an_expensive_judge_the_loop_runs_on_the_emulator_and_the_judge_certifies_its_set(
        fake_backend, files, tmp_path, capsys):
    engine = fake_backend(name="engine", deterministic=True, versions={"engine": "test double"})
    out_path = tmp_path / "o.json"
    code, out, _ = run(capsys, *files, "-o", out_path, "--minimum")
    assert code == 0
    data = json.loads(out_path.read_text())
    assert nodes(data) == ["P"] and data["search"]["minimal"] is True
    assert data["search"]["minimum"]["backend"] == "emulate (prior)" and data["search"]["minimum"]["proven"]
    assert engine.runs == [frozenset(), frozenset({"P"})]  # all-FP16 (also P's removal), then P: k + 1 here
    assert data["prior"]["fp32"] == ["Q1", "Q2"]  # the emulator's own 1-minimal answer, as recorded
    assert "on the emulator, whose verdicts these are; certified on the engine backend" in out


def test_when_the_judge_rejects_the_emulators_minimum_it_continues_and_says_so(fake_backend, files, tmp_path,
                                                                               capsys):
    fake_backend(name="engine", deterministic=True, versions={"engine": "test double"}, forced=frozenset({"P"}))
    out_path = tmp_path / "o.json"
    code, out, _ = run(capsys, *files, "-o", out_path, "--minimum")
    assert code == 0
    data = json.loads(out_path.read_text())
    assert nodes(data) == ["Q1", "Q2"] and data["search"]["minimal"] is True  # P's pin has no effect there
    assert "certified on the engine backend, which kept 2 node(s) instead" in out


def test_a_manifest_entry_takes_minimum(tmp_path):
    onnx.save(two_paths(), tmp_path / "two_paths.onnx")
    np.savez(tmp_path / "x.npz", **X)
    manifest = tmp_path / "batch.json"
    manifest.write_text(json.dumps({"schema": "fp16bisect.batch/1", "entries": [
        {"model": "two_paths.onnx", "inputs": "x.npz", "action": "search", "minimum": 10}]}))
    result = fp16bisect.batch(str(manifest))
    row = result.entries[0]
    assert row.fp32_nodes == ["P"] and row.result["search"]["minimum"]["budget"] == 10
    manifest.write_text(json.dumps({"schema": "fp16bisect.batch/1", "entries": [
        {"model": "two_paths.onnx", "inputs": "x.npz", "action": "search", "minimum": "lots"}]}))
    with pytest.raises(UsageError, match="minimum"):
        fp16bisect.batch(str(manifest))


def heavy_and_light(rows: int = 8, cols: int = 1024) -> onnx.ModelProto:
    """y = Min(p, q2), x beyond FP16 again. p = x @ D (node P: a 1024x1024 MatMul, every entry of D 2^-20, exact in
    FP16), the row sums scaled, broadcast; q1 = ReduceSum(x) over rows (node Q1, over 65504) and q2 = q1 * 2^-20
    (node Q2): both must stay in FP32 for that branch, and they are cheap (a reduction and 8 products) where P is a
    MatMul with a megabyte of weights. The fewest nodes: {P}; the cheapest: {Q1, Q2}."""
    k = 2.0 ** -20

    def const(name, value, dtype=np.float32):
        return numpy_helper.from_array(np.array(value, dtype), name)

    nodes = [helper.make_node("MatMul", ["x", "d"], ["p"], name="P"),
             helper.make_node("ReduceSum", ["x", "axes"], ["q1"], name="Q1", keepdims=1),
             helper.make_node("Mul", ["q1", "k"], ["q2"], name="Q2"),
             helper.make_node("Min", ["p", "q2"], ["y"], name="M")]
    graph = helper.make_graph(
        nodes, "heavy_and_light", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])],
        [const("d", np.full((cols, cols), k)), const("k", k), const("axes", [1], np.int64)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


XH = {"x": np.random.default_rng(0).uniform(70000, 100000, (8, 1024)).astype(np.float32)}


def test_the_cost_objective_keeps_the_two_cheap_nodes_where_the_fewest_is_one_expensive_matmul(tmp_path, capsys):
    onnx.save(heavy_and_light(), tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", **XH)
    command = ["search", tmp_path / "m.onnx", "--inputs", tmp_path / "x.npz"]
    fewest, cheapest = tmp_path / "fewest.json", tmp_path / "cheapest.json"
    assert run(capsys, *command, "-o", fewest, "--minimum", "-q")[0] == 0
    assert nodes(json.loads(fewest.read_text())) == ["P"]
    code, out, _ = run(capsys, *command, "-o", cheapest, "--objective", "cost")  # cost implies --minimum
    assert code == 0
    data = json.loads(cheapest.read_text())
    assert problems(data) == ""
    minimum = data["search"]["minimum"]
    assert nodes(data) == ["Q1", "Q2"] and minimum["objective"] == "cost" and minimum["estimate_met"] is True
    assert minimum["proven"] is False  # a cheaper set may have more members: not every one was evaluated
    assert minimum["fewest_nodes"] == 1 and minimum["fewest_nodes_proven"] is True
    assert minimum["cost_us"] < minimum["fewest_nodes_cost_us"] / 5  # a reduction against a 1024x1024 MatMul
    assert "2 node(s) costing" in out and "no cheaper set found" in out
    assert "the fewest nodes that pass, 1 (proven)" in out
    assert run(capsys, *command, "--objective", "time", "-q")[0] == 2


def test_the_cost_estimate_weighs_a_matmul_by_its_arithmetic_and_weights():
    from fp16bisect.model.cost import Nominal, node_costs
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.profile import profile
    from fp16bisect.model.samples import Sample, add_fp32_references

    graph = Graph(heavy_and_light())
    samples = [Sample("x", XH)]
    add_fp32_references(graph, samples)
    costs = node_costs(graph, profile(graph, samples))
    nominal = Nominal()
    elements = 8 * 1024
    matmul = (2 * (elements + 1024 * 1024 + elements) + 6 * 2 * elements) / nominal.bytes_per_us + (
        2 * elements * 1024 / nominal.fp32_flops_per_us * (1 - 1 / nominal.fp16_speedup_heavy))
    assert costs["P"] == pytest.approx(matmul)
    assert costs["Q1"] + costs["Q2"] < costs["P"] / 5


def test_adjacent_pins_share_their_boundary_cast_instead_of_counting_it_twice():
    from fp16bisect.algorithm.hitting import Weights, weight
    from fp16bisect.model.cost import Nominal, node_costs, shared_casts
    from fp16bisect.model.graph import Graph
    from fp16bisect.model.profile import profile
    from fp16bisect.model.samples import Sample, add_fp32_references

    graph = Graph(heavy_and_light())
    samples = [Sample("x", XH)]
    add_fp32_references(graph, samples)
    prof = profile(graph, samples)
    costs, shared = node_costs(graph, prof), shared_casts(graph, prof)
    cast = 6 * 8 / Nominal().bytes_per_us  # q1: 8 elements, read by Q2 alone, written by Q1
    assert shared[frozenset({"Q1", "Q2"})] == pytest.approx(2 * cast)  # Q2's Cast and all of Q1's
    assert set(shared) == {frozenset({"Q1", "Q2"}), frozenset({"Q2", "M"}), frozenset({"P", "M"})}
    both = Weights(costs, shared)
    assert weight({"Q1", "Q2"}, both) == pytest.approx(costs["Q1"] + costs["Q2"] - 2 * cast)
    assert weight({"Q1", "P"}, both) == pytest.approx(costs["Q1"] + costs["P"])  # not adjacent: nothing shared


def test_the_report_lists_the_passing_sets_found_with_their_sizes(files, tmp_path, capsys):
    page = tmp_path / "r.html"
    assert run(capsys, *files, "-o", tmp_path / "o.json", "--minimum", "--report", page, "-q")[0] == 0
    html = page.read_text()
    assert "<h2>Passing sets found (--minimum)</h2>" in html and "1 node(s) kept, proven" in html
    table = html.split('<table id="minimum-sets">')[1].split("</table>")[0]
    assert table.count("<tr>") == 3  # the header, {P}, {Q1, Q2}
    assert "<tr><td>1</td><td><code>P</code></td></tr>" in table
    assert "<tr><td>2</td><td><code>Q1</code>, <code>Q2</code></td></tr>" in table
    plain = tmp_path / "plain.html"
    assert run(capsys, *files, "-o", tmp_path / "p.json", "--report", plain, "-q")[0] == 0
    assert "Passing sets found" not in plain.read_text()


def test_a_certification_that_drops_a_member_voids_the_loops_proof_and_gives_the_answer():
    from fp16bisect.algorithm.hitting import MinimumResult
    from fp16bisect.strategy.minimum import Least

    # the loop ran on the emulator prior, whose verdicts proved {a, b, c} the minimum there
    found = MinimumResult(frozenset("abc"), True, 3, 3, 10, 0, [frozenset("abc"), frozenset("abcd")],
                          smaller_failed=2, estimate_met=True)
    least = Least(frozenset("abc"), found, "emulate (prior)", "engine", 4, 30)
    assert least.certified("abc") is least and least.certified("cab") is least
    said = least.certified("ab")  # the judge found "a, b" passing without c: three was no minimum there
    assert said.fp32 == frozenset("ab") and said.found.fp32 == frozenset("ab")
    assert not said.found.proven and said.found.contradicted and said.found.lower_bound == 2
    assert said.to_json()["passing"][0] == {"size": 2, "fp32": ["a", "b"]}
    assert said.line(frozenset("ab")).startswith("2 node(s): no smaller set found; at least 2 (every set of 1 or "
                                                 "fewer nodes was evaluated and failed)")
