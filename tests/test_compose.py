"""Modes compose over one plan space (issue 40 item 3): the judge's view of a plan space, and nothing reconfigures
the oracle, the backend or the outcome once made."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import numpy as np
from conftest import ROOT

from fp16bisect.evaluation.oracle import Oracle
from fp16bisect.evaluation.space import PlanSpace, View
from fp16bisect.tolerance import Tolerance


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
