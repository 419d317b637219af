"""Smaller passing sets where keeping more nodes in FP32 can hurt: a bounded search around the passing sets known.

Pure Python, like ``search.py``: a predicate ``test(plan) -> True | False | None`` on plans (the frozenset of ids
kept in FP32), the verdicts already known, a suspicion order (the most harmful candidates first) and, optionally,
how far each evaluated plan is from passing (``excess``: the worst output error in units of the tolerance's
allowance, above 1 for a failing plan; None where the judge gives no number, a command's exit code).

A 1-minimal set S (every single removal fails) is the end of a descent, not the smallest passing set: where FP16
rounding errors cancel, a set with other members can pass with fewer. The moves, each a set smaller than S,
tried in rounds from the smallest passing set known:

1. **Drop two** members of S (a pair whose errors cancel), the pair least needed first.
2. **Swap for one**: the members S needs most (the ``core``: those whose removal fails by the most, else the
   most harmful), all but two, then three, ..., with one other candidate instead, the most harmful first.
3. **Same size, other members** (when nothing smaller passes): S without its least needed member and with one
   other candidate; a passing one is reduced in its turn (its own single removals), which reaches sets the
   moves above cannot.

A set that passes is reduced at once (single removals, the least needed first, as the 1-minimal search's final
sweep) and the next round starts from it. Every plan is evaluated once (known verdicts are free); ``budget`` new
evaluations at most. Nothing here is claimed minimal: the answer is a set seen to pass, and the rounds end when
the budget does or no move passes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterator, Mapping, Sequence

__all__ = ["Explore", "Explored", "explore"]

Excess = Callable[[frozenset], "float | None"]


DEPTH = 1


class _OutOfBudget(Exception):
    pass


@dataclass(frozen=True)
class Explore:
    """What the exploration is given beside the predicate and its start. ``order``: the candidates, most harmful
    first (default: as given). ``known``: plans already evaluated and their verdicts. ``excess``: how far an
    evaluated plan is from passing (None: not known). ``budget``: new evaluations at most."""

    candidates: Sequence[Hashable]
    budget: int
    order: Sequence[Hashable] | None = None
    known: Mapping = field(default_factory=dict)
    excess: Excess | None = None


@dataclass
class Explored:
    fp32: frozenset  # the smallest passing set known at the end (the start when nothing smaller passed)
    start: frozenset
    evaluations: int  # new plans evaluated
    results: dict = field(default_factory=dict)  # every verdict known at the end (the given ones too)

    @property
    def gained(self) -> int:
        return len(self.start) - len(self.fp32)


def explore(test: Callable[[frozenset], bool | None], start, given: Explore) -> Explored:
    """The rounds of the module docstring, from ``start`` (a set seen to pass) or a smaller passing known one."""
    ids = list(dict.fromkeys(given.candidates))
    order = [c for c in (given.order if given.order is not None else ids) if c in set(ids)]
    order += [c for c in ids if c not in set(order)]
    state = _State(test, {frozenset(p): v for p, v in given.known.items()}, int(given.budget), given.excess)
    start = frozenset(start)
    best = min([start, *(p for p, v in state.results.items() if v and len(p) < len(start))], key=len)
    rank = {c: i for i, c in enumerate(order)}
    try:
        while True:
            found = _round(state, best, order, rank)
            if found is None:
                break
            best = found
    except _OutOfBudget:
        pass
    smaller = [p for p, v in state.results.items() if v and len(p) < len(best)]
    best = min(smaller, key=len) if smaller else best
    return Explored(best, start, state.asked, state.results)


class _State:
    def __init__(self, test, results: dict, budget: int, excess: Excess | None):
        self.test, self.results, self.budget, self.asked, self.excess = test, results, budget, 0, excess

    def __call__(self, plan: frozenset) -> bool | None:
        if plan not in self.results:
            if self.asked >= self.budget:
                raise _OutOfBudget
            self.asked += 1
            value = self.test(plan)
            self.results[plan] = None if value is None else bool(value)
        return self.results[plan]

    def need(self, plan: frozenset, member) -> float | None:
        """How much ``plan`` needs ``member``: how far its removal is from passing, when that was evaluated."""
        without = plan - {member}
        if self.excess is None or self.results.get(without) is not False:
            return None
        return self.excess(without)


def _needed(state: _State, best: frozenset, rank: dict) -> list:
    """``best``'s members, the most needed first: by how far each removal fails when known, else by suspicion."""
    def key(m):
        need = state.need(best, m)
        return (need is None, -(need or 0.0), rank[m])
    return sorted(best, key=key)


def _round(state: _State, best: frozenset, order: list, rank: dict) -> frozenset | None:
    """The first move from ``best`` that passes, reduced; None when none does."""
    for plan in _moves(state, best, order, rank):
        if plan != best and state(plan):
            reduced = _reduce(state, plan, best, rank)
            if len(reduced) < len(best):
                return reduced
    return None


def _moves(state: _State, best: frozenset, order: list, rank: dict) -> Iterator[frozenset]:
    """Sets smaller than ``best`` from its members (the most needed first) and then the other candidates (the most
    harmful first), each size's sets by the sum of their members' places in that line (best first), the sizes
    taken in turn from one below ``best``'s down."""
    line = _needed(state, best, rank) + [c for c in order if c not in best]
    sizes = [_best_first(len(line), s) for s in range(len(best) - 1, max(0, len(best) - 1 - DEPTH), -1)]
    while sizes:
        for gen in list(sizes):
            picked = next(gen, None)
            if picked is None:
                sizes.remove(gen)
            else:
                yield frozenset(line[i] for i in picked)


def _best_first(n: int, size: int) -> Iterator[tuple]:
    """Every ``size`` of ``range(n)`` as an increasing tuple, by the sum of its members (the smallest first)."""
    first = tuple(range(size))
    if size > n:
        return
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


def _reduce(state: _State, plan: frozenset, before: frozenset, rank: dict) -> frozenset:
    """Single removals of a passing ``plan`` until each fails, the least needed first (members of ``before`` by
    their need there, the others by suspicion)."""
    changed = True
    while changed:
        changed = False
        for m in sorted(plan, key=lambda m: (state.need(before, m) is None, state.need(before, m) or 0.0,
                                               -rank[m])):
            if m in plan and state(plan - {m}):
                plan, changed = plan - {m}, True
    return plan
