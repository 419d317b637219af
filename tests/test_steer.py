"""``search --keep-fp32/--keep-fp16 PATTERN`` (constraints) and ``--group-by scope[:DEPTH]`` (blocks, then nodes),
on models whose answers are known by construction: the CLI, a batch manifest and the Python API."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import make_model, one_line_error, run
from onnx import TensorProto, helper
from test_minimum import X, two_paths

import fp16bisect
from fp16bisect.artifacts.overrides import problems
from fp16bisect.errors import UsageError
from fp16bisect.run.options import Space

F = TensorProto.FLOAT


@pytest.fixture
def paths(tmp_path):
    """two_paths (tests/test_minimum.py): the passing sets hold P, or both Q1 and Q2; the search finds {Q1, Q2}."""
    onnx.save(two_paths(), tmp_path / "two_paths.onnx")
    np.savez(tmp_path / "x.npz", **X)
    return ["search", tmp_path / "two_paths.onnx", "--inputs", tmp_path / "x.npz", "-o", tmp_path / "o.json"]


def nodes(tmp_path) -> list[str]:
    return [n["name"] for n in json.loads((tmp_path / "o.json").read_text())["fp32_nodes"]]


def written(tmp_path) -> dict:
    data = json.loads((tmp_path / "o.json").read_text())
    assert problems(data) == ""  # the file validates against its declared schema
    return data


def test_keep_fp32_pins_a_node_the_answer_does_not_need_and_minimality_is_over_the_free_nodes(paths, tmp_path,
                                                                                                capsys):
    code, out, _ = run(capsys, *paths, "--keep-fp32", "M")
    assert code == 0
    data = written(tmp_path)
    assert sorted(nodes(tmp_path)) == ["M", "Q1", "Q2"]
    assert data["constraints"] == {
        "keep_fp32": [{"pattern": "M", "nodes": ["M"]}], "keep_fp16": [], "free": 3,
        "minimality": "over the free nodes: the --keep-fp32 nodes are in every plan, the --keep-fp16 nodes in none"}
    assert "kept in FP32 by --keep-fp32 'M'" in json.dumps(data["fp32_nodes"])
    assert "over the free nodes" in data["search"]["minimality"]
    assert "constraints: 1 node(s) kept in FP32, 0 never in FP32 (--keep-fp32 'M'); minimal over the other 3" in out


def test_keep_fp32_on_a_fix_alone_makes_it_the_answer(paths, tmp_path, capsys):
    assert run(capsys, *paths, "--keep-fp32", "P", "-q")[0] == 0
    data = written(tmp_path)
    assert nodes(tmp_path) == ["P"]
    assert data["search"]["minimality"].startswith("the 1 node(s) kept by --keep-fp32 alone pass")


def test_keep_fp16_on_the_culprit_gives_the_alternative_fix(paths, tmp_path, capsys):
    assert run(capsys, *paths, "--keep-fp16", "Q1", "-q")[0] == 0
    data = written(tmp_path)
    assert nodes(tmp_path) == ["P"] and data["search"]["minimal"] is True
    assert data["constraints"]["keep_fp16"] == [{"pattern": "Q1", "nodes": ["Q1"]}]
    assert data["constraints"]["free"] == 3


def test_keep_fp16_on_every_fix_is_exit_3_naming_the_constraints(paths, tmp_path, capsys):
    code, out, err = run(capsys, *paths, "--keep-fp16", "P|Q2")
    assert code == 3
    assert "the constraints --keep-fp16 'P|Q2' leave no passing plan" in one_line_error(err)


@pytest.mark.parametrize("flag, pattern", [("--keep-fp32", "Nope"), ("--keep-fp16", "op:LayerNormalization"),
                                           ("--keep-fp32", "Q")])  # fullmatch: Q is not Q1
def test_a_pattern_matching_no_candidate_is_exit_2_naming_it(paths, capsys, flag, pattern):
    code, _, err = run(capsys, *paths, flag, pattern)
    assert code == 2
    assert f"{flag} {pattern!r} matches no candidate node" in err


def test_a_bad_pattern_and_a_node_kept_both_ways_are_usage_errors(paths, capsys):
    code, _, err = run(capsys, *paths, "--keep-fp32", "Q(")
    assert code == 2 and "--keep-fp32 'Q(' is not a regular expression" in err
    code, _, err = run(capsys, *paths, "--keep-fp32", "Q.", "--keep-fp16", "Q1")
    assert code == 2 and "both --keep-fp32 and --keep-fp16, e.g. 'Q1'" in err


def layer_norm_model() -> onnx.ModelProto:
    """x -> LayerNormalization (ln) -> Relu (relu): harmless in FP16, so only a constraint pins ln."""
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], name="ln", axis=-1),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    return make_model(nodes, [("x", F, [2, 4])], [("y", F, [2, 4])],
                      {"gamma": np.ones(4, np.float32), "beta": np.zeros(4, np.float32)})


def test_keep_fp32_by_op_type(tmp_path, capsys):
    onnx.save(layer_norm_model(), tmp_path / "ln.onnx")
    np.savez(tmp_path / "x.npz", x=np.arange(8, dtype=np.float32).reshape(2, 4))
    code, _, _ = run(capsys, "search", tmp_path / "ln.onnx", "--inputs", tmp_path / "x.npz", "-o",
                     tmp_path / "o.json", "-q", "--keep-fp32", "op:LayerNormalization")
    assert code == 0
    assert nodes(tmp_path) == ["ln"]
    assert written(tmp_path)["constraints"]["keep_fp32"] == [{"pattern": "op:LayerNormalization", "nodes": ["ln"]}]


def blocks_model() -> onnx.ModelProto:
    """x in 1..4. /block0/ (relu, add: b = x + 1) is harmless; in /block1/, big = b * 30000 overflows FP16 and
    small = big * 1e-4 reads it, so both stay in FP32 (neg does not need to); final (Abs, no scope) is a block of its
    own. The block search keeps /block1/, the node search inside it {big, small}."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="/block0/relu"),
             helper.make_node("Add", ["a", "one"], ["b"], name="/block0/add"),
             helper.make_node("Mul", ["b", "k_big"], ["c"], name="/block1/big"),
             helper.make_node("Mul", ["c", "k_small"], ["d"], name="/block1/small"),
             helper.make_node("Neg", ["d"], ["e"], name="/block1/neg"),
             helper.make_node("Abs", ["e"], ["y"], name="final")]
    return make_model(nodes, [("x", F, [1, 4])], [("y", F, [1, 4])],
                      {"one": np.float32(1), "k_big": np.float32(30000), "k_small": np.float32(1e-4)})


@pytest.fixture
def scoped(tmp_path):
    onnx.save(blocks_model(), tmp_path / "blocks.onnx")
    np.savez(tmp_path / "x.npz", x=np.array([[1, 2, 3, 4]], np.float32))
    return ["search", tmp_path / "blocks.onnx", "--inputs", tmp_path / "x.npz", "-o", tmp_path / "o.json"]


def test_group_by_scope_finds_the_block_then_the_nodes_inside(scoped, tmp_path, capsys):
    code, out, err = run(capsys, *scoped, "--group-by", "scope:1")
    assert code == 0
    data = written(tmp_path)
    assert sorted(nodes(tmp_path)) == ["/block1/big", "/block1/small"]
    assert data["blocks"] == [{"name": "/block1/", "nodes": 3, "fp32_nodes": ["/block1/big", "/block1/small"]}]
    assert data["search"]["minimal"] is True
    assert data["search"]["evaluations"] == 5 == len(data["search"]["trace"])  # each distinct plan counted once
    assert "--group-by scope:1: 6 candidate(s) in 3 block(s) (1 node(s) with no scope, each its own block)" in err
    assert "blocks: 1 of 3 kept in FP32 by the block search" in out and "/block1/ 2 of 3" in out


def test_group_by_gives_the_flat_answer(scoped, tmp_path, capsys):
    assert run(capsys, *scoped, "-q")[0] == 0
    flat = sorted(nodes(tmp_path))
    assert "blocks" not in written(tmp_path)
    assert run(capsys, *scoped, "-q", "--group-by", "scope")[0] == 0
    assert sorted(nodes(tmp_path)) == flat


def test_group_by_function_on_a_model_without_functions_is_exit_2(scoped, capsys):
    code, _, err = run(capsys, *scoped, "--group-by", "function")
    assert code == 2 and "the model has no ONNX local functions" in err


@pytest.mark.parametrize("value", ["scope:0", "layers", "function:2"])
def test_a_bad_group_by_is_a_usage_error_in_the_value(value):
    with pytest.raises(UsageError, match="--group-by"):
        Space(group_by=value)


def test_the_api_and_a_manifest_take_the_same_constraints_and_blocks(tmp_path):
    onnx.save(two_paths(), tmp_path / "two_paths.onnx")
    np.savez(tmp_path / "x.npz", **X)
    result = fp16bisect.search(str(tmp_path / "two_paths.onnx"), str(tmp_path / "x.npz"), space={"keep_fp16": "Q1"})
    assert [n.name for n in result.fp32_nodes] == ["P"]
    onnx.save(blocks_model(), tmp_path / "blocks.onnx")
    np.savez(tmp_path / "b.npz", x=np.array([[1, 2, 3, 4]], np.float32))
    (tmp_path / "batch.toml").write_text(
        'schema = "fp16bisect.batch/1"\n'
        '[[entries]]\naction = "search"\nmodel = "two_paths.onnx"\ninputs = "x.npz"\nkeep_fp16 = ["Q1"]\n'
        '[[entries]]\naction = "search"\nmodel = "blocks.onnx"\ninputs = "b.npz"\ngroup_by = "scope:1"\n'
        'keep_fp32 = "final"\n')
    batch = fp16bisect.batch(str(tmp_path / "batch.toml"))
    assert [sorted(r.fp32_nodes) for r in batch.entries] == [["P"], ["/block1/big", "/block1/small", "final"]]
    with pytest.raises(UsageError, match="keep_fp32 'Q\\(' is not a regular expression"):
        fp16bisect.search(str(tmp_path / "two_paths.onnx"), str(tmp_path / "x.npz"), space={"keep_fp32": ["Q("]})


def test_under_accumulate_fp16_a_keep_fp16_node_may_still_add_in_fp32(tmp_path, capsys):
    """_storage_and_sum (tests/test_accumulate_judge.py): mean's sum passes 65504, FP32 accumulation suffices."""
    from test_accumulate_judge import _saved, _storage_and_sum

    model, data = _saved(tmp_path, "both", *_storage_and_sum())
    code, _, err = run(capsys, "search", model, "--inputs", data, "--accumulate", "fp16", "-o", tmp_path / "o.json",
                       "--keep-fp16", "mean|scale_up")
    assert code == 3 and "--keep-fp16 'mean|scale_up' leave no passing plan" in one_line_error(err)
    code, _, err = run(capsys, "search", model, "--inputs", data, "--accumulate", "fp16", "-o", tmp_path / "o.json",
                       "--keep-fp16", "mean")
    assert code == 0, err
    data = written(tmp_path)
    assert sorted(nodes(tmp_path)) == ["scale_down", "scale_up"]
    assert [n["name"] for n in data["fp32_accumulate_nodes"]] == ["mean"]


@pytest.mark.parametrize("name, depth, block", [
    ("/bert/encoder/layer.3/attention/self/MatMul", 3, "/bert/encoder/layer.3/"),
    ("/bert/encoder/layer.3/attention/self/MatMul", None, "/bert/encoder/layer.3/attention/self/"),
    ("/bert/pooler/Tanh", 3, "/bert/pooler/"),  # fewer components than DEPTH: its whole scope
    ("MatMul_12", 3, None)])  # no scope: a block of its own
def test_a_scope_is_the_name_cut_at_depth_path_components(name, depth, block):
    from fp16bisect.strategy.blocks import scope

    assert scope(name, depth) == block
