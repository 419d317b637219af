"""Smaller passing sets where keeping more nodes in FP32 can hurt: a bounded search from the passing sets known.

Pure Python, like ``search.py``: a predicate ``test(plan) -> True | False | None`` on plans (the frozenset of ids
kept in FP32), the verdicts already known, a suspicion order (the most harmful candidates first: the ranking by the
output error each causes alone in FP16) and, optionally, how far each evaluated plan is from passing (``excess``:
the worst output error in units of the tolerance's allowance, above 1 for a failing plan; None where the judge
gives no number, as a command's exit code).

A 1-minimal set S (every single removal fails) is the end of one descent along the ranking, not the smallest
passing set: where FP16 rounding errors cancel, a set with other members can pass with fewer (a node whose error
cancels another's is harmful alone and helpful in company). So, in rounds, from the smallest passing set S known:

1. **The line**: the suspicion order, with S's members in their places but sorted among themselves by how much S
   needs each (how far S without it fails; without numbers, by suspicion). Members S needs most, and the most
   harmful other candidates, come first.
2. **Sets one node smaller than S**, in the line, best first: by the sum of their members' places (every set of
   that size in the end; in practice the budget ends first). Such a set is S's most needed members with the most
   harmful other candidates in place of its least needed ones: drop one, swap some for fewer.
3. A set that passes is **reduced** at once (single removals, the least needed first, as the 1-minimal search's
   final sweep: so the set a round ends on had each single removal evaluated) and the next round starts from it.

Measured on Silero VAD and a YOLOX-style detector at tight tolerances (``scripts/bench_dense.py --smaller``):
sets one node smaller come out earlier than sets two smaller tried alongside them, and the line above than the
plain ranking or S's members first; both are choices made on those measurements, not guarantees.

Every plan is evaluated once (known verdicts are free); ``budget`` new evaluations at most. Nothing is claimed
minimal: the answer is a set seen to pass; the rounds end when the budget does or no set of the size passes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Iterator, Mapping, Sequence

__all__ = ["Asked", "Excess", "Explore", "Explored", "OutOfBudget", "explore", "ordered"]

Excess = Callable[[frozenset], "float | None"]
Verdicts = Mapping[frozenset, "bool | None"]  # plan -> True | False | None (None: could not evaluate)


class OutOfBudget(Exception):
    """``Asked`` was asked a plan it does not know with its budget spent."""


class Asked:
    """A predicate (plan -> True | False | None) asked within a budget: ``results`` holds every verdict known (seeded
    with the ones given), a plan already there costs nothing, a new one costs one of ``budget`` evaluations, and
    asking one more raises ``OutOfBudget``. ``passed_at``: the evaluation (1, 2, ...) that saw a plan pass."""

    def __init__(self, test: Callable[[frozenset], bool | None], known: Verdicts, budget: int) -> None:
        self.test, self.budget, self.asked = test, budget, 0
        self.results: dict[frozenset, bool | None] = {frozenset(p): v for p, v in known.items()}
        self.passed_at: dict[frozenset, int] = {}

    def ask(self, plan: frozenset) -> bool | None:
        if plan not in self.results:
            if self.asked >= self.budget:
                raise OutOfBudget
            self.asked += 1
            value = self.test(plan)
            self.results[plan] = None if value is None else bool(value)
            if value:
                self.passed_at[plan] = self.asked
        return self.results[plan]


def ordered(candidates: Iterable[Hashable], order: Iterable[Hashable] | None) -> list[Hashable]:
    """The candidates, each once: those ``order`` names first, in its order, then the others as given."""
    ids = list(dict.fromkeys(candidates))
    chosen = set(ids)
    first = [c for c in dict.fromkeys(order if order is not None else ids) if c in chosen]
    named = set(first)
    return first + [c for c in ids if c not in named]


@dataclass(frozen=True)
class Explore:
    """What the exploration is given beside the predicate and its start. ``order``: the candidates, most harmful
    first (default: as given). ``known``: plans already evaluated and their verdicts. ``excess``: how far an
    evaluated plan is from passing (None: not known). ``budget``: new evaluations at most."""

    candidates: Sequence[Hashable]
    budget: int
    order: Sequence[Hashable] | None = None
    known: Verdicts = field(default_factory=dict)
    excess: Excess | None = None


@dataclass
class Explored:
    fp32: frozenset  # the smallest passing set known at the end (the start when nothing smaller passed)
    start: frozenset
    evaluations: int  # new plans evaluated
    results: dict[frozenset, bool | None] = field(default_factory=dict)  # every verdict known at the end (the given ones too)
    found_at: int = 0  # the evaluation (1, 2, ...) that first saw ``fp32`` pass (0: it was known before)

    @property
    def gained(self) -> int:
        return len(self.start) - len(self.fp32)


def explore(test: Callable[[frozenset], bool | None], start: Iterable[Hashable], given: Explore) -> Explored:
    """The rounds of the module docstring, from ``start`` (a set seen to pass) or a smaller passing known one."""
    order = ordered(given.candidates, given.order)
    chosen = set(order)
    state = _State(test, given.known, int(given.budget), given.excess)
    start = frozenset(start)
    best = min([start, *(p for p, v in state.results.items() if v and len(p) < len(start) and p <= chosen)], key=len)
    rank = {c: i for i, c in enumerate(order)}
    try:
        while (found := _round(state, best, order, rank)) is not None:
            best = found
    except OutOfBudget:
        pass
    smaller = [p for p, v in state.results.items() if v and len(p) < len(best) and p <= chosen]
    best = min(smaller, key=len) if smaller else best
    return Explored(best, start, state.asked, state.results, state.passed_at.get(best, 0))


class _State(Asked):
    def __init__(self, test: Callable[[frozenset], bool | None], known: Verdicts, budget: int,
                 excess: Excess | None) -> None:
        super().__init__(test, known, budget)
        self.excess = excess

    def need(self, plan: frozenset, member: Hashable) -> float | None:
        """How much ``plan`` needs ``member``: how far its removal is from passing, when that was evaluated."""
        without = plan - {member}
        if self.excess is None or self.results.get(without) is not False:
            return None
        return self.excess(without)


def _round(state: _State, best: frozenset, order: list[Hashable], rank: dict[Hashable, int]) -> frozenset | None:
    """The first set one node smaller than ``best`` that passes, reduced; None when none does."""
    line = _line(state, best, order, rank)
    for picked in _best_first(len(line), len(best) - 1):
        plan = frozenset(line[i] for i in picked)
        if state.ask(plan):
            return _reduce(state, plan, best, rank)
    return None


def _line(state: _State, best: frozenset, order: list[Hashable], rank: dict[Hashable, int]) -> list[Hashable]:
    """The order, ``best``'s members in their places but sorted by need (the most needed first; by how far each
    removal fails when known, else by suspicion)."""
    def need(m: Hashable) -> tuple[bool, float, int]:
        value = state.need(best, m)
        return (value is None, -(value or 0.0), rank[m])

    needed = iter(sorted(best, key=need))
    return [next(needed) if c in best else c for c in order]


def _best_first(n: int, size: int) -> Iterator[tuple[int, ...]]:
    """Every ``size`` of ``range(n)`` as an increasing tuple, by the sum of its members (the smallest first)."""
    if size < 0 or size > n:
        return
    first = tuple(range(size))
    heap, seen = [(sum(first), first)], {first}
    while heap:
        total, picked = heapq.heappop(heap)
        yield picked
        for i in range(size):
            if picked[i] + 1 < (picked[i + 1] if i + 1 < size else n):
                later = picked[:i] + (picked[i] + 1,) + picked[i + 1:]
                if later not in seen:
                    seen.add(later)
                    heapq.heappush(heap, (total + 1, later))


def _reduce(state: _State, plan: frozenset, before: frozenset, rank: dict[Hashable, int]) -> frozenset:
    """Single removals of a passing ``plan`` until each fails, the least needed first (members of ``before`` by
    their need there, the others, new, last, the least suspicious first)."""
    def need(m: Hashable) -> tuple[bool, float, int]:
        value = state.need(before, m) if m in before else None
        return (value is None, value or 0.0, -rank[m])

    changed = True
    while changed:
        changed = False
        for m in sorted(plan, key=need):
            if m in plan and state.ask(plan - {m}):
                plan, changed = plan - {m}, True
    return plan
