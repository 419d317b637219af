"""The plans one search chooses among (``PlanSpace``), and the judge as that search sees it (``View``).

A ``PlanSpace`` is one frozen value: the candidates a search chooses among (node ids, or the FP32-accumulation marks
of ``model/plan_states.py``), grouped into blocks under ``--group-by``, and the fixed members every plan holds (the
nodes ``--headroom`` forces and ``--keep-fp32`` keeps in FP32, the marks a stage of ``--accumulate fp16`` fixes).
Each mode makes the space it searches from the space it is given (``fixing``, ``without``, ``grouped``); none
changes a space or the oracle.

A ``View`` is an oracle over one space, its samples in one order: each plan it is asked gets the space's fixed
members, and it says plans without them (``chosen``, ``known``, ``replayed``). The views of one oracle share its memo,
journal and history, so a plan is evaluated once whichever view asks, and the journal records whole plans, fixed
members included (as journals always have). A view's ``budget`` (``--max-evaluations``, ``--time-limit``), shared by
the views made from it, is asked before each evaluation the view is about to run (a plan the oracle knows, or a
journal replayed, costs nothing) and raises before one it cannot afford; a report or a check that asks the oracle
itself spends none.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Protocol, Sequence

from fp16bisect.backends.base import Backend
from fp16bisect.evaluation.journal import Journal
from fp16bisect.evaluation.oracle import Evaluation, Oracle
from fp16bisect.model.graph import Graph
from fp16bisect.model.profile import Profile
from fp16bisect.model.samples import Sample
from fp16bisect.tolerance import Tolerance


@dataclass(frozen=True)
class PlanSpace:
    """``candidates``: what a search chooses among, in graph order; ``fixed``: the members of every plan;
    ``blocks``: under ``--group-by``, block name -> its candidates, in graph order (empty: no blocks)."""

    candidates: tuple = ()
    fixed: frozenset = frozenset()
    blocks: Mapping[str, tuple] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, graph: Graph) -> PlanSpace:
        """Every candidate node of ``graph``, nothing fixed."""
        return cls(tuple(n.id for n in graph.candidates))

    def plan(self, chosen: Iterable) -> frozenset:
        """The whole plan of ``chosen`` candidates: with the fixed members."""
        return frozenset(chosen) | self.fixed

    def chosen(self, plan: Iterable) -> frozenset:
        """A whole plan as the search chose it: without the fixed members."""
        return frozenset(plan) - self.fixed

    def fixing(self, members: Iterable) -> PlanSpace:
        """This space with ``members`` in every plan, no longer chosen."""
        members = frozenset(members)
        return replace(self.without(members), fixed=self.fixed | members)

    def without(self, members: Iterable) -> PlanSpace:
        """This space with ``members`` never chosen (nor fixed: in no plan)."""
        gone = frozenset(members)
        kept = {name: tuple(n for n in nodes if n not in gone) for name, nodes in self.blocks.items()}
        blocks = {name: nodes for name, nodes in kept.items() if nodes}
        return replace(self, candidates=tuple(c for c in self.candidates if c not in gone), blocks=blocks)

    def grouped(self, blocks: Mapping[str, tuple]) -> PlanSpace:
        """This space searched by ``blocks`` (each a tuple of its candidates) first."""
        return replace(self, blocks=dict(blocks))

    def ranked(self, prof: Profile) -> Profile:
        """The FP32 profile the search orders its candidates by: only this space's."""
        ids = set(self.candidates)
        risks = [r for r in prof.risks if r.node in ids]
        return prof if len(risks) == len(prof.risks) else replace(prof, risks=risks)


class Affords(Protocol):
    """A budget (``algorithm.budget.Budget``): how many of the evaluations about to run it allows (it raises when it
    allows none), what it leaves, and its clock alone (for evaluations it does not count: the prior's)."""

    def take(self, wanted: int = 1) -> int: ...

    def left(self) -> str: ...

    def uncounted(self) -> Affords: ...


@dataclass(frozen=True)
class View:
    """``oracle`` over ``space``, the samples tried in the ``stress`` order (most stressing first; empty: as given),
    after those that failed a plan, each evaluation it runs first afforded by ``budget`` (None: no limit). Called,
    asked for evaluations and for what it knows, as an oracle is, with plans without the fixed members."""

    oracle: Oracle
    space: PlanSpace = PlanSpace()
    stress: tuple = ()
    budget: Affords | None = None

    def over(self, space: PlanSpace) -> View:
        """The same oracle, samples in the same order, over another space."""
        return replace(self, space=space)

    def __call__(self, plan: Iterable) -> bool | None:
        """The plan's verdict: True pass, False fail, None could not evaluate."""
        return self.evaluate(plan).verdict

    def evaluate(self, plan: Iterable, recheck: int = 0) -> Evaluation:
        whole = self.space.plan(plan)
        if (whole, recheck) not in self.oracle.rechecks if recheck else whole not in self.oracle.memo:
            self._afford(1)
        return self.oracle.evaluate(whole, recheck, stress=self.stress)

    def evaluate_many(self, plans: Iterable[Iterable]) -> list[Evaluation]:
        wholes = [self.space.plan(p) for p in plans]
        todo = list(dict.fromkeys(p for p in wholes if p not in self.oracle.memo))
        afforded = self._afford(len(todo)) if todo else 0
        if afforded < len(todo):  # the budget's last evaluations run together, then it stops the search
            self.oracle.evaluate_many(todo[:afforded], stress=self.stress)
            self._afford(1)
        return self.oracle.evaluate_many(wholes, stress=self.stress)

    def _afford(self, wanted: int) -> int:
        """How many of ``wanted`` evaluations about to run the budget allows (it raises when none)."""
        return wanted if self.budget is None else self.budget.take(wanted)

    def test_many(self, plans: Iterable[Iterable]) -> list[bool | None]:
        return [e.verdict for e in self.evaluate_many(plans)]

    def asked(self, plan: Iterable, phase: str) -> None:
        """Notes the phase of the search that asked ``plan`` (without the fixed members), the first time it is asked:
        the trace of a search that a budget or Ctrl-C ends (``run/stopping.py``)."""
        self.oracle.phases.setdefault(self.space.plan(plan), phase)

    def left(self) -> str:
        """What the budget leaves, for a progress line ('' without a budget)."""
        return self.budget.left() if self.budget is not None else ""

    def known(self, plan: Iterable) -> Evaluation | None:
        """The evaluation of ``plan`` (without the fixed members), if there is one."""
        return self.oracle.memo.get(self.space.plan(plan))

    def replayed(self, plan: Iterable) -> bool:
        """Whether a journal replayed ``plan``'s evaluation (without the fixed members)."""
        return self.space.plan(plan) in self.oracle.replayed

    @property
    def forced(self) -> frozenset:
        """The members in every plan (``strategy/minimum.py`` reads the memo's plans without them)."""
        return self.space.fixed

    @property
    def memo(self) -> Mapping[frozenset, Evaluation]:
        """Every evaluation, by whole plan (fixed members included)."""
        return self.oracle.memo

    @property
    def history(self) -> Sequence[Evaluation]:
        return self.oracle.history

    @property
    def backend(self) -> Backend:
        return self.oracle.backend

    @property
    def samples(self) -> list[Sample]:
        return self.oracle.samples

    @property
    def tolerance(self) -> Tolerance:
        return self.oracle.tolerance

    @property
    def outputs(self) -> list[str]:
        return self.oracle.outputs

    @property
    def journal(self) -> Journal | None:
        return self.oracle.journal

    @property
    def width(self) -> int:
        return self.oracle.width
