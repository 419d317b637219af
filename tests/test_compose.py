"""Modes compose over one plan space (issue 40 item 3): ``--group-by`` with ``--minimum``, ``--objective cost`` and
``--accumulate fp16``, on models whose answers are known by construction; the judge's view of a plan space; and
nothing reconfigures the oracle, the backend or the outcome once made."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from conftest import ROOT, make_model, run
from onnx import TensorProto, helper
from test_minimum import XH, X, heavy_and_light, two_paths

from fp16bisect.artifacts.overrides import problems
from fp16bisect.evaluation.oracle import Oracle
from fp16bisect.evaluation.space import PlanSpace, View
from fp16bisect.run.options import SearchOptions, Space, Strategy
from fp16bisect.tolerance import Tolerance

F = TensorProto.FLOAT


def scoped(model: onnx.ModelProto, names: dict[str, str]) -> onnx.ModelProto:
    """``model`` with its nodes renamed (``names``: old -> new, e.g. into a scope ``/long/Q1``)."""
    for node in model.graph.node:
        node.name = names.get(node.name, node.name)
    return model


def searched(tmp_path: Path, capsys, model: onnx.ModelProto, inputs: dict, *flags) -> tuple[dict, str]:
    """``search`` on ``model`` with ``flags``: the override JSON (checked against its schema) and stdout."""
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", **inputs)
    out = tmp_path / "o.json"
    code, stdout, err = run(capsys, "search", tmp_path / "m.onnx", "--inputs", tmp_path / "x.npz", "-o", out, *flags)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert problems(data) == ""
    return data, stdout


def names(data: dict, key: str = "fp32_nodes") -> list[str]:
    return sorted(n["name"] for n in data.get(key, []))


def test_group_by_with_minimum_finds_the_minimum_outside_the_block_the_block_search_kept(tmp_path, capsys):
    """two_paths (tests/test_minimum.py) in scopes: /short/P alone passes, or both of /long/Q1 and /long/Q2. The
    profile flags Q1 (it overflows), so the block search keeps /long/ and the nodes inside it, {Q1, Q2}: 1-minimal;
    --minimum then proves {P} the minimum, though P is in a block the block search left in FP16."""
    model = scoped(two_paths(), {"P": "/short/P", "Q1": "/long/Q1", "Q2": "/long/Q2"})
    data, out = searched(tmp_path, capsys, model, X, "--group-by", "scope:1", "--minimum")
    assert names(data) == ["/short/P"] and data["search"]["minimal"] is True
    assert data["blocks"] == [{"name": "/long/", "nodes": 2, "fp32_nodes": []}]
    minimum = data["search"]["minimum"]
    assert minimum["proven"] is True and minimum["assumes_monotone"] is False and minimum["one_minimal"] == 2
    assert [p["fp32"] for p in minimum["passing"]] == [["/short/P"], ["/long/Q1", "/long/Q2"]]
    # the block search's 2, the node search's 2 more, the loop's {P}: each distinct plan counted once
    assert data["search"]["evaluations"] == 5 == len(data["search"]["trace"])
    assert "--minimum: 1 node: the minimum (the all-FP16 plan fails); the 1-minimal search kept 2" in out
    assert "blocks: 1 of 3 kept in FP32 by the block search" in out


def test_group_by_with_the_cost_objective_keeps_the_cheap_block(tmp_path, capsys):
    """heavy_and_light (tests/test_minimum.py) in scopes: /heavy/P (a 1024x1024 MatMul) alone passes, or both cheap
    nodes of /light/. The cheapest is /light/'s two nodes, proven; the fewest nodes, one."""
    model = scoped(heavy_and_light(), {"P": "/heavy/P", "Q1": "/light/Q1", "Q2": "/light/Q2"})
    data, out = searched(tmp_path, capsys, model, XH, "--group-by", "scope:1", "--objective", "cost")
    assert names(data) == ["/light/Q1", "/light/Q2"]
    assert data["blocks"] == [{"name": "/light/", "nodes": 2, "fp32_nodes": ["/light/Q1", "/light/Q2"]}]
    minimum = data["search"]["minimum"]
    # as without blocks (tests/test_minimum.py): a cheaper set may have more members, so the cost is not proven
    assert minimum["objective"] == "cost" and minimum["proven"] is False and minimum["estimate_met"] is True
    assert minimum["fewest_nodes"] == 1 and minimum["fewest_nodes_proven"] is True
    assert "no cheaper set found" in out and "the fewest nodes that pass, 1 (proven)" in out


def storage_and_sum_in_blocks() -> tuple[onnx.ModelProto, dict]:
    """Two blocks failing FP16 each one way, known by construction (as tests/test_accumulate_judge.py's
    ``_storage_and_sum``): in /storage/, ``x * 1e5`` (up to 2e5, past 65504) then ``* 1e-5``: both Muls stay in
    FP32, and the Abs after them is harmless; in /sum/, a mean of 4096 values of 20 to 30, whose sum (about 100000)
    passes 65504 while each value and the mean fit: FP32 accumulation of the mean suffices."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Mul", ["x", "up"], ["big"], name="/storage/up"),
             helper.make_node("Mul", ["big", "down"], ["small"], name="/storage/down"),
             helper.make_node("Abs", ["small"], ["y"], name="/storage/abs"),
             helper.make_node("Relu", ["z"], ["r"], name="/sum/relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], name="/sum/mean", axes=[1], keepdims=1)]
    model = make_model(nodes, [("x", F, [1, 64]), ("z", F, [1, 4096])], [("y", F, [1, 64]), ("m", F, [1, 1])],
                       {"up": np.float32(1e5), "down": np.float32(1e-5)}, opset=13)
    return model, {"x": rng.uniform(1, 2, (1, 64)).astype(np.float32),
                   "z": rng.uniform(20, 30, (1, 4096)).astype(np.float32)}


def test_group_by_with_accumulate_fp16_searches_the_blocks_for_the_fp32_set_then_the_sums(tmp_path, capsys):
    """The first stage (every sum in FP32 accumulation) keeps /storage/ and inside it the two Muls; the second
    marks /sum/mean; the flat search gives the same answer."""
    model, inputs = storage_and_sum_in_blocks()
    data, out = searched(tmp_path, capsys, model, inputs, "--group-by", "scope:1", "--accumulate", "fp16")
    assert names(data) == ["/storage/down", "/storage/up"]
    assert names(data, "fp32_accumulate_nodes") == ["/sum/mean"]
    assert data["blocks"] == [{"name": "/storage/", "nodes": 3, "fp32_nodes": ["/storage/up", "/storage/down"]}]
    assert data["accumulate"] == "fp16" and data["search"]["minimal"] is True
    assert "FP32 accumulation set (1)" in data["search"]["minimality"]
    assert "over the nodes of the 1 block(s) chosen (of 2" in data["search"]["minimality"]
    assert len(data["search"]["trace"]) == data["search"]["evaluations"]
    flat, _ = searched(tmp_path, capsys, model, inputs, "--accumulate", "fp16", "--restart")
    assert names(flat) == names(data) and names(flat, "fp32_accumulate_nodes") == ["/sum/mean"]


def test_group_by_accumulate_fp16_and_minimum_together(tmp_path, capsys):
    """All three: the minimum is of the first stage's FP32 set (its two Muls: no one-node set passes)."""
    model, inputs = storage_and_sum_in_blocks()
    data, out = searched(tmp_path, capsys, model, inputs, "--group-by", "scope:1", "--accumulate", "fp16",
                         "--minimum")
    assert names(data) == ["/storage/down", "/storage/up"]
    assert names(data, "fp32_accumulate_nodes") == ["/sum/mean"]
    assert [b["name"] for b in data["blocks"]] == ["/storage/"]
    minimum = data["search"]["minimum"]
    assert minimum["proven"] is True and minimum["size"] == 2 and minimum["one_minimal"] == 2
    assert "--minimum: 2 node(s): the minimum" in out


@pytest.mark.parametrize("strategy, accumulate", [(Strategy(minimum="auto"), None), (Strategy(objective="cost"), None),
                                                  (Strategy(), "fp16")])
def test_the_options_take_group_by_with_each_mode(strategy, accumulate):
    options = SearchOptions(space=Space(group_by="scope:2", accumulate=accumulate), strategy=strategy)
    assert options.space.grouping is not None and options.strategy == strategy


def test_a_view_adds_its_fixed_members_and_says_plans_without_them():
    """Two views of one oracle over spaces with different fixed members: each plan asked holds the fixed ones,
    each is evaluated once whichever view asks, and a view says a plan without its fixed members."""
    class Backend:
        name = "fake"
        runs: list = []

        def run(self, plan, inputs, repeat=0):
            self.runs.append(frozenset(plan))
            return {"y": np.array([0.0 if {"a", "b"} <= plan else 1.0], np.float32)}

    sample = SimpleNamespace(inputs={}, reference={"y": np.zeros(1, np.float32)}, source="s")
    oracle = Oracle(Backend(), [sample], Tolerance(), ["y"])
    space = PlanSpace(("a", "b", "c"))
    pinned = View(oracle, space.fixing({"a"}))
    assert pinned.space.candidates == ("b", "c") and pinned.space.fixed == {"a"}
    assert pinned({"b"}) is True and pinned(set()) is False
    assert View(oracle, space)({"a", "b"}) is True  # the same whole plan: known, not run again
    assert oracle.backend.runs == [{"a", "b"}, {"a"}]
    assert pinned.known({"b"}) is oracle.memo[frozenset({"a", "b"})]
    assert pinned.space.chosen(oracle.history[0].plan) == {"b"}
    assert space.without({"c"}).grouped({"/x/": ("a", "b")}).fixing({"b"}).blocks == {"/x/": ("a",)}
    assert not hasattr(oracle, "forced")


MADE_ONCE = {"oracle", "judge", "backend", "chosen", "outcome"}  # names the package gives what is made once


def test_nothing_assigns_to_the_oracle_the_backend_or_the_outcome_once_made():
    """The modes are functions of the plan space: no module sets an attribute of the oracle, the backend or the
    outcome (as ``oracle.forced = ...`` under try/finally once did)."""
    found = []
    for path in sorted((ROOT / "fp16bisect").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                       if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                for part in ast.walk(target):
                    if (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                            and part.value.id in MADE_ONCE):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {part.value.id}.{part.attr}")
    assert found == []
