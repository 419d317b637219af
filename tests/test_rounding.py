"""Rounding told apart from overflow before a long search (issue 41 item 4): what the search says, right after the
all-FP16 evaluation, when the failure is FP16's rounding spread over many nodes; and that an overflow case says
nothing new and costs the same evaluations."""

from __future__ import annotations

import json
import math
import re
import shlex

import numpy as np
import pytest
from conftest import SAMPLES, run
from rounding_models import matmul_chain

from fp16bisect.algorithm.progress import combining_exponent, dense_estimate, dense_evaluations, p_norm
from fp16bisect.strategy import ranking
from fp16bisect.strategy.rounding import passing_tolerance
from fp16bisect.tolerance import OutputMetrics, Tolerance

TIGHT = ["--atol", "1e-3", "--rtol", "0"]


def search(capsys, tmp_path, model, data, *flags):
    code, _, err = run(capsys, "search", model, "--inputs", data, "-o", tmp_path / "o.json", *TIGHT, *flags)
    assert code == 0, err
    return err.splitlines(), json.loads((tmp_path / "o.json").read_text())


def printed(lines: list[str], start: str) -> list[str]:
    return [line.removeprefix("fp16bisect: ") for line in lines if line.removeprefix("fp16bisect: ").startswith(start)]


def test_rounding_spread_over_a_chain_is_said_right_after_the_all_fp16_evaluation_and_the_search_goes_on(
        tmp_path, capsys):
    model, data = matmul_chain(tmp_path)
    lines, found = search(capsys, tmp_path, model, data)
    first = next(i for i, line in enumerate(lines) if "evaluation 1 on emulate: 0 node(s) in FP32 -> FAIL" in line)
    assert lines[first + 1] == ("fp16bisect: diagnosis: all-FP16 fails by rounding, not overflow: no tensor all-FP16 "
                                "rounds comes within 2x of 65504 (the FP32 profile's highest peak: 3.406 at 'h13', "
                                "0.0% of it); no value flushes to 0; the outputs stay finite")
    said = found["diagnosis"]
    assert (said["cause"], said["trigger"], said["said_after_evaluation"]) == ("rounding", "range", 1)
    # the task-level alternatives, each with the command line that uses it (rendered from this run's values)
    assert [a["flag"] for a in said["alternatives"]] == ["--error-stat", "--argmax", "--topk", "accept="]
    stat = said["alternatives"][0]["command"]
    assert stat == shlex.join(["fp16bisect", "search", str(model), "--inputs", str(data), "-o",  # beside the answer
                               str(tmp_path / "o.error-stat.json"), "--atol", "0.001", "--rtol", "0", "--error-stat",
                               "p99"])
    assert any(line.endswith(stat) for line in lines)
    assert said["alternatives"][3]["api"] == (f"fp16bisect.search({str(model)!r}, [{str(data)!r}], tolerance={{'atol': "
                                              "0.001, 'rtol': 0, 'accept': my_metric}, output="
                                              f"{str(tmp_path / 'o.accept.json')!r})")
    # the ranking the search ran anyway: every candidate once, and what the few worst explain
    ranked = said["ranking"]
    assert ranked["runs"] == 40 and len(ranked["most_harmful"]) == 5 and ranked["spread"] is True
    assert 0 < ranked["explained"] < 0.5
    assert printed(lines, "diagnosis: the 5 most harmful node(s) explain ")[0].endswith(
        "the error is spread over many nodes")
    # the estimate: of the answer's size and the evaluations after the ranking, against what the search did
    estimate, evaluations = said["estimate"], found["search"]["evaluations"]
    assert estimate["candidates"] == 40 and estimate["from"] == "the effect ranking"
    assert abs(estimate["fp32_nodes"] - len(found["fp32_nodes"])) <= 8
    assert (evaluations - 2) / 2 <= estimate["evaluations"] <= 2 * (evaluations - 2)
    assert found["search"]["minimal"] and len(found["fp32_nodes"]) > 20  # the search went on to its answer


def test_the_tolerance_at_which_all_fp16_passes_is_checked_as_printed_and_fails_just_below(tmp_path, capsys):
    model, data = matmul_chain(tmp_path)
    lines, found = search(capsys, tmp_path, model, data)
    passing = found["diagnosis"]["passing_tolerance"]
    (line,) = printed(lines, "diagnosis: all-FP16 passes at ")
    assert line.endswith(passing["check"]) and passing["samples_run"] == passing["samples"] == 1
    argv = shlex.split(passing["check"])
    assert argv[:2] == ["fp16bisect", "check"]
    code, out, _ = run(capsys, *argv[1:])  # the all-FP16 plan (no --overrides), as printed
    assert code == 0, out
    atol = passing["outputs"]["y"]["atol"]
    assert atol == passing["tolerance"]["atol"] and 1e-3 * 4 < atol < 1e-3 * 6  # the tolerance times ~4.8
    below = [*argv[1:argv.index("--atol")], "--atol", f"{atol * 0.99:.6g}", "--rtol", "0"]
    code, out, _ = run(capsys, *below)
    assert code == 1, out


def test_a_rule_the_run_has_is_kept_in_the_alternatives_and_not_offered_again(tmp_path, capsys):
    model, data = matmul_chain(tmp_path)
    _, found = search(capsys, tmp_path, model, data, "--error-stat", "y:p99")
    offered = found["diagnosis"]["alternatives"]
    assert [a["flag"] for a in offered] == ["--argmax", "--topk", "accept="]
    assert all("--error-stat y:p99" in a["command"] for a in offered[:2])
    check = found["diagnosis"]["passing_tolerance"]["check"]  # the p99 of the error scales with the allowance
    assert check.endswith("--atol 0.00472 --rtol 0 --error-stat y:p99")
    assert run(capsys, *shlex.split(check)[1:])[0] == 0


def test_suspects_that_do_not_explain_the_failure_are_said_with_the_spread_after_the_ranking(tmp_path, capsys):
    """A value within 2x of 65504 (flagged by the profile): nothing is said after the first evaluation; its two
    nodes in FP32 still fail, the ranking shows the error spread, and the diagnosis comes then."""
    model, data = matmul_chain(tmp_path, near=True)
    lines, found = search(capsys, tmp_path, model, data)
    said = found["diagnosis"]
    assert said["trigger"] == "spread" and said["out_of_range"] == ["'big': max |x| 4e+04 within 2x of 65504"]
    ranked = next(i for i, line in enumerate(lines) if "ranking: the 42 candidate(s) measured" in line)
    assert lines[ranked + 1].startswith("fp16bisect: diagnosis: all-FP16 fails mostly by rounding spread over many "
                                        "nodes: the 5 most harmful node(s) explain ")
    assert not any("diagnosis" in line for line in lines[:ranked])
    # said after the suspects' prefixes (1, 2) and all-FP32: evaluation 4
    assert said["said_after_evaluation"] == 4 and found["search"]["trace"][3]["fp32"] == 42


def test_the_ranking_says_its_progress_and_the_evaluations_before_it_count_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ranking, "QUIET_SECONDS", 0.0)  # a quick ranking says its chunks too
    model, data = matmul_chain(tmp_path)
    lines, _ = search(capsys, tmp_path, model, data)
    chunks = printed(lines, "ranking: ")
    assert [c.split(" candidate")[0] for c in chunks] == [f"ranking: {n} of 40" for n in range(4, 40, 4)] + [
        "ranking: the 40"]
    second = next(line for line in lines if "evaluation 2 on emulate" in line)
    assert "more evaluation(s) after a ranking of 40 run(s)" in second


@pytest.mark.parametrize("name", ["transformer_block", "attention_unscaled", "log_underflow", "cnn_batchnorm"])
def test_an_overflow_case_says_nothing_new_and_costs_the_same_evaluations(tmp_path, capsys, known, name):
    """A regression guard (the old code said nothing either): the same sets and evaluation counts as
    ``scripts/bench_search.py --quick`` before the diagnosis existed (4 evaluations each)."""
    code, _, err = run(capsys, "search", SAMPLES / f"{name}.onnx", "--inputs", SAMPLES / f"{name}.npz", "-o",
                       tmp_path / "o.json")
    assert code == 0
    found = json.loads((tmp_path / "o.json").read_text())
    assert "diagnosis" not in found and "diagnosis" not in err and "ranking" not in err
    assert sorted(n["name"] for n in found["fp32_nodes"]) == sorted(known[name]["culprits"])
    assert found["search"]["evaluations"] == 4


def test_batchnorm_statistics_the_writer_folds_are_not_a_range_problem(tmp_path):
    """PP-OCRv4's detector holds a running variance of 9.8e7: folded into an FP32 scale, it is never rounded, so
    it does not keep the diagnosis from being said (the tensors all-FP16 rounds are the profile's ranking's)."""
    from conftest import conv_bn_relu

    from fp16bisect.model.graph import Graph
    from fp16bisect.model.profile import profile
    from fp16bisect.model.samples import Sample, add_fp32_references
    from fp16bisect.strategy.rounding import out_of_range, rounded

    path = tmp_path / "bn.onnx"
    path.write_bytes(conv_bn_relu(var=1e8, gamma=1e4).SerializeToString())
    graph = Graph.load(str(path))
    samples = [Sample("x", {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)})]
    add_fp32_references(graph, samples)
    prof = profile(graph, samples)
    assert prof.tensors["var"].overflow  # 1e8 is past 65504 ...
    tensors = rounded(graph, prof, frozenset())
    assert "var" not in tensors and {"w", "conv_out", "bn_out", "y"} <= set(tensors)  # ... but never rounded
    assert out_of_range(tensors, prof, graph.precision, "fp32") == []


def metrics(output: str, excess: float, max_abs: float, passed: bool = False) -> OutputMetrics:
    return OutputMetrics(output, 0, max_abs, max_abs, 1.0, 0.5, 0, excess, passed)


def test_the_passing_tolerance_scales_each_failing_output_and_leaves_the_passing_ones():
    tol = Tolerance(atol=0.01, rtol=0.01)
    found, said = passing_tolerance({"a": metrics("a", 7.7745, 0.12), "b": metrics("b", 0.3, 0.001, True)}, tol)
    assert said["b"] == {"passes": True} and (said["a"]["atol"], said["a"]["rtol"]) == (0.0778, 0.0778)
    assert (found.for_output("a").atol, found.for_output("b").atol) == (0.0778, 0.01)
    # an allowance of 0 where the error is not: atol takes the max abs error; NaN/inf: no tolerance passes
    found, said = passing_tolerance({"a": metrics("a", math.inf, 0.123456)}, Tolerance(atol=0, rtol=0.1))
    assert (found.atol, found.rtol) == (0.124, 0.1)
    nan = OutputMetrics("a", 0, math.inf, math.inf, math.nan, 1.0, 3, math.inf, False)
    assert passing_tolerance({"a": nan}, tol) == (None, {})


def test_the_dense_estimate_calibrates_how_errors_combine_on_the_all_fp16_error():
    same = [0.5] * 16
    assert combining_exponent(same, 8.0) == 1.0  # they add up
    assert combining_exponent(same, 2.0) == pytest.approx(2.0, rel=1e-6)  # independent: sqrt(16) * 0.5
    assert math.isinf(combining_exponent([3.0, 0.1], 3.0))  # one node explains it
    assert p_norm(same, 2.0) == pytest.approx(2.0)
    estimate = dense_estimate(same, 2.0)  # 2-norm: 4 nodes left in FP16 pass (sqrt(4) * 0.5 = 1)
    assert (estimate.fp32, estimate.top) == (12, 5)
    assert estimate.explained == pytest.approx(1 - math.sqrt(11) / 4)
    one = dense_estimate([3.0] + [0.01] * 20, 3.0)  # one culprit explains it (the maximum): the rest 0.01
    assert (one.fp32, one.exponent, one.explained) == (1, math.inf, pytest.approx(1 - 0.01 / 3))
    assert dense_estimate([math.inf, 0.5, 0.5], 0.9).fp32 == 1  # a node alone breaking an output is a member
    assert dense_evaluations(1, 100) == 1 + 2 + 1 + 1  # the prefix of 1, its leaf, the check, the removal


def test_an_allowance_of_0_takes_the_max_abs_error_and_says_no_share_of_an_infinite_error(tmp_path, capsys):
    model, data = matmul_chain(tmp_path)
    code, _, err = run(capsys, "search", model, "--inputs", data, "-o", tmp_path / "o.json", "--atol", "0",
                       "--rtol", "0")
    assert code == 0
    said = json.loads((tmp_path / "o.json").read_text())["diagnosis"]
    assert said["passing_tolerance"]["tolerance"]["atol"] == 0.00485 and said["ranking"]["explained"] is None
    assert "0.00484 where its allowance is 0" in err and "most harmful" not in err
    assert said["estimate"]["fp32_nodes"] == 40  # each node alone in FP16 fails an allowance of 0


def test_the_progress_lines_count_the_members_the_estimate_expects_while_quickxplain_looks_for_them(tmp_path,
                                                                                                   capsys):
    """QuickXplain's own estimate guesses one member until it has found some (a dozen evaluations left, said with
    ~90 to go, as on PP-OCRv4's detector); with the ranking's estimate the lines stay within 2x of what is left."""
    model, data = matmul_chain(tmp_path)
    lines, found = search(capsys, tmp_path, model, data)
    # the search's own evaluations (the step that tries smaller sets after it says its own lines)
    total = found["search"]["evaluations"] - found["search"]["improvement"]["evaluations"]
    said = [(int(i), int(left)) for i, left in
            (re.search(r"evaluation (\d+) .* roughly (\d+) more", line).groups() for line in lines
             if re.search(r"evaluation \d+ on emulate", line))]
    assert [i for i, _ in said] == list(range(1, total + 1))
    early = [(i, left) for i, left in said if 3 <= i <= total // 2]  # once ranked, through the first half
    assert all((total - i) / 2 <= left <= 2 * (total - i) for i, left in early), early


def test_on_an_expensive_judge_the_estimate_is_the_emulators_set_and_the_priors_ranking_says_its_progress(
        fake_backend, tmp_path, capsys, monkeypatch):
    """A judge that is not the emulator (a double computing as the emulator does, so that it agrees): the prior
    searches first, its ranking saying its progress; the judge's all-FP16 failure is said as rounding, the
    estimate being the emulator's set, certified in k + 2 evaluations when the judge agrees."""
    monkeypatch.setattr(ranking, "QUIET_SECONDS", 0.0)
    fake_backend(name="engine", deterministic=True, versions={"engine": "test double"})
    model, data = matmul_chain(tmp_path)
    lines, found = search(capsys, tmp_path, model, data)
    assert printed(lines, "prior: ranking: ")[0].startswith("prior: ranking: 4 of 40 candidate(s) measured (")
    # the judge starts from the emulator's set, or the smaller one the emulator's step found: the set it certified
    said, k = found["diagnosis"], len(found["fp32_nodes"])
    assert k <= len(found["prior"]["fp32"])
    assert said["said_after_evaluation"] == 1 and "ranking" not in said
    assert said["estimate"] == {"fp32_nodes": k, "evaluations": k + 2, "from": "the emulator's prior"}
    assert found["search"]["evaluations"] == k + 2 and len(found["fp32_nodes"]) == k  # as the estimate said
