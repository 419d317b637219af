"""The smallest (or cheapest) passing set: implicit hitting sets, then a search beyond them; what is proven of it.

Pure Python, like ``search.py``: candidate ids, a predicate ``passes(plan) -> True | False | None`` on plans (the
frozenset of ids kept in FP32) and a hitting-set solver given as a function, so it is property-tested on synthetic
predicates in milliseconds.

The loop (Reiter's diagnoses with QuickXplain conflicts; the smallest-MUS method of Ignatiev et al., CP 2015):

1. Every failing plan F gives a **conflict**: some candidate outside F must stay in FP32 (under monotone verdicts,
   no subset of F passes). The failing plans already known (the 1-minimal search's) seed them for free. A failing
   plan holding a passing one contradicts monotone verdicts: its conflict is left out (it rests on that verdict).
2. The lightest set H hitting every conflict (``solve``) is an **estimate** of the minimum: under monotone verdicts
   no passing set weighs less. Among equally light sets the solver is steered to the most suspicious nodes
   (``_steered``), the likeliest to pass. If the lightest passing set known weighs no more, the loop would close:
   first it tries each set one node lighter (``_below``); one passing means the estimate was false, and the loop
   goes on below it.
3. H is evaluated. It passes: the loop closes on it. It fails: it is **grown** while it fails (QuickXplain over the
   candidates outside it, those the fewest conflicts hold first, so the new conflict is one the current hitting
   sets miss and raises the estimate), inferring verdicts that monotonicity implies from the known ones (only to
   choose what to ask); every failing plan met on the way is a conflict too. Back to 2.

Keeping more nodes in FP32 can hurt (FP16 rounding errors cancel), so the loop's estimate holds only if verdicts
are monotone, which rounding-limited models contradict as a rule. Counting nodes, the search also goes beyond the
hitting-set model (``explore.py``: the passing sets' most needed members with the most harmful other candidates)
and evaluates every set of the next sizes when the budget affords all of them (``claims.enumerate_small``, the only
proof that no smaller set passes). Where the caller's evidence says errors cancel (``explore_first``),
``EXPLORE_SHARE`` of the budget goes beyond the model first, then the loop, then the rest beyond it again; else the
loop goes first and the rest goes beyond it unless the loop met its estimate with no verdict contradicting
monotonicity (then only the proof is bought, when affordable).

A budget caps the evaluations; plans already known are free. A plan that could not be evaluated (None) is never
evidence: while growing, it counts as not failing (the conflict stays sound); a hitting set that cannot be evaluated
is still cut (so the loop moves on).

What the result claims (``claims.py``), from evaluated verdicts alone:
- ``proven``: every lighter set was evaluated and failed;
- ``lower_bound``: every set of fewer members than it was evaluated and failed (proven, never above ``fp32``);
- ``estimate``: the loop's bound, which holds only if more FP32 never hurts; ``contradictions`` counts the pairs of
  evaluated plans that say it does (a passing plan inside a failing one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Callable, Hashable, Iterable, Mapping, Sequence

from fp16bisect.algorithm import claims
from fp16bisect.algorithm.explore import Asked, Excess, Explore, OutOfBudget, explore, ordered

__all__ = ["Minimum", "MinimumResult", "Weights", "exact_hitting_set", "minimum", "weight"]

Solver = Callable[[list, Mapping], "frozenset | None"]  # (conflicts, weights) -> the lightest hitting set, or None

# Counting nodes, where errors cancel: the share of the budget the search beyond the hitting-set model gets before
# the loop runs (there the loop's monotone model misleads it: on Silero VAD its conflicts ruled out the smaller sets
# that exploring first found); the loop then gives its estimate with the rest, and what it leaves goes beyond again.
EXPLORE_SHARE = 0.75
SHARED_EXHAUSTIVE = 14  # nodes up to which the pure-Python solver weighs shared weights exactly (2^14 sets)


class Weights(dict):
    """Per candidate, its weight; and ``shared``: per pair of candidates (a frozenset of two), what their weights
    both count when the two are in one set, which then weighs that much less (the cost objective: adjacent FP32
    nodes need no Cast between them, while each one's weight counts a Cast there)."""

    def __init__(self, per: Mapping, shared: Mapping | None = None):
        super().__init__(per)
        self.shared = {frozenset(pair): float(s) for pair, s in (shared or {}).items()}


def weight(plan: Iterable, weights: Mapping) -> float:
    """A set's weight: its members' (1 each when not given), less what pairs of them share."""
    plan = frozenset(plan)
    total = float(sum(weights.get(c, 1.0) for c in plan))
    shared = getattr(weights, "shared", None)
    return total - sum(s for pair, s in shared.items() if pair <= plan) if shared else total


@dataclass(frozen=True)
class Minimum:
    """What the loop is given beside the predicate. ``order``: the candidates, most suspicious first (growing a
    failing plan adds the least suspicious first). ``weights``: per candidate (default 1: the node count).
    ``known``: plans already evaluated and their verdicts (the seeds). ``budget``: new evaluations at most.
    ``excess``: how far an evaluated plan is from passing, when the judge says (``explore.py``). ``explore_first``:
    the evidence says FP16 errors cancel here (``strategy/improve.py``'s rule): the search beyond the hitting-set
    model goes first."""

    candidates: Sequence[Hashable]
    solve: Solver
    budget: int
    weights: Mapping = field(default_factory=dict)
    known: Mapping = field(default_factory=dict)
    order: Sequence[Hashable] | None = None
    excess: Excess | None = None
    explore_first: bool = False


@dataclass
class MinimumResult:
    fp32: frozenset | None  # the lightest passing set found (None: none known, and none found)
    proven: bool  # fp32 is the minimum: every lighter set was evaluated and failed
    lower_bound: float  # proven: every set of fewer members (lighter than this) was evaluated and failed
    estimate: float  # the hitting-set bound: no lighter set passes *if* more FP32 never hurts (never above fp32)
    evaluations: int  # new plans evaluated
    contradictions: int  # pairs of evaluated plans in which a passing plan is inside a failing one
    passing: list = field(default_factory=list)  # every passing plan known, lightest first
    conflicts: int = 0  # subset-minimal conflicts at the end
    smaller_failed: int = -1  # every set of at most this many members was evaluated and failed (-1: not all-FP16)
    estimate_met: bool = False  # the loop closed: fp32 weighs its estimate (what the estimate says of it)
    explored: int = 0  # of ``evaluations``, those beyond the hitting-set model (neighbourhoods, every small set)

    @property
    def contradicted(self) -> bool:
        return self.contradictions > 0


def minimum(passes: Callable[[frozenset], bool | None], given: Minimum) -> MinimumResult:
    """The loop of the module docstring, then (counting nodes) the search beyond it with what is left."""
    ids = list(dict.fromkeys(given.candidates))
    order = ordered(ids, given.order)
    weights = Weights({c: float(given.weights.get(c, 1)) for c in ids}, getattr(given.weights, "shared", None))
    state = _State(passes, dict(given.known), int(given.budget), frozenset(ids))
    counting = _counts_nodes(weights)
    if counting and given.explore_first:  # sets the hitting-set model rules out, with most of the budget
        _beyond(state, order, given.excess, state.asked + int(EXPLORE_SHARE * (state.budget - state.asked)))
    before = state.asked
    highest, closed = _loop(state, given.solve, weights, order)
    looped = state.asked - before
    if counting and (given.explore_first or not closed or claims.contradictions(state.results)):
        _beyond(state, order, given.excess, state.budget)
    elif counting:  # the loop met its estimate and no verdict says more FP32 hurt: only the proof, when affordable
        claims.enumerate_small(state.ask, state.results, order, len(state.best({}) or ()), state.budget - state.asked)
    return _result(state, weights, highest, closed, state.asked - looped)


def _counts_nodes(weights: Weights) -> bool:
    return len(set(weights.values())) <= 1 and not weights.shared


def _loop(state: _State, solve: Solver, weights: Weights, order: list) -> tuple[float, bool]:
    """Steps 1 to 3: the highest hitting-set bound met, and whether the loop closed on a passing set (not when the
    budget ran out first)."""
    steer = _steered(weights, order)
    bound, highest, closed, unsure, checked = 0.0, 0.0, False, False, set()
    while True:
        hit = solve(state.conflicts(), steer)
        if hit is None:  # no set hits every conflict: all-FP32 fails (or verdicts contradict each other)
            break
        if not state.cut:  # a bound cut by a plan that could not be evaluated is no bound
            bound = _weight(hit, weights)
            highest = max(highest, bound)
        best, asked = state.best(weights), state.asked
        try:
            if best is None or _weight(best, weights) > bound + 1e-9:
                verdict = state.ask(hit)
                if verdict is None:
                    unsure = True
                    state.cut.add(hit)
                if verdict is False:
                    _grow(state, hit, [c for c in order if c not in hit])
                if not verdict:
                    if state.asked == asked:  # nothing learnt this round: stop rather than go round again
                        break
                    continue
                best = state.best(weights)
            closed = True  # the lightest passing set known weighs no more than the bound
            if best is None or best in checked or not _below(state, best, order):
                break
        except OutOfBudget:  # closed stays as it was: in _below, the bound was met
            break
        closed = False
        checked.add(best)  # a lighter set passed: the bound rested on verdicts it contradicts; go on without them
    return highest, closed and not unsure


def _beyond(state: _State, order: list, excess: Excess | None, until: int) -> None:
    """Up to ``until`` evaluations in all: sets the hitting-set model rules out (``explore``), then every set of the
    next sizes while what is left affords all of a size (``claims.enumerate_small``); a passing set found there is
    explored from in its turn."""
    while (best := state.best({})) is not None and state.asked < until:
        found = explore(state.ask, best, Explore(order, until - state.asked, order=order, known=state.results,
                                                 excess=excess))
        smaller, _ = claims.enumerate_small(state.ask, state.results, order, len(found.fp32), until - state.asked)
        if smaller is None:
            return


class _State(Asked):
    """The verdicts known and asked, the budget left (``Asked``), and the hitting-set loop's conflicts."""

    def __init__(self, passes: Callable[[frozenset], bool | None], known: Mapping, budget: int,
                 everything: frozenset) -> None:
        super().__init__(passes, known, budget)
        self.everything = everything
        self.cut: set[frozenset] = set()  # hitting sets that could not be evaluated, cut as if they failed

    def conflicts(self) -> list:
        """From every failing plan that holds no passing one (a failing superset of a passing plan contradicts
        monotone verdicts: the conflict it would give is the one in doubt, so it is left out)."""
        passing = self.passing()
        failing = [p for p, v in self.results.items() if v is False and not any(q < p for q in passing)]
        failing += list(self.cut)
        return _minimal_sets([self.everything - p for p in failing])

    def passing(self) -> list:
        return [p for p, v in self.results.items() if v]

    def best(self, weights: dict) -> frozenset | None:
        passing = self.passing()
        return min(passing, key=lambda p: (_weight(p, weights), len(p), sorted(map(repr, p)))) if passing else None


def _steered(weights: dict, order: list) -> dict:
    """The weights the solver is given: with every weight equal (the node count), ties among the lightest hitting
    sets go to the most suspicious nodes (those likelier to pass: the loop looks among the most harmful nodes
    first), by a nudge too small to change which weight is lightest (a set's nudges sum to less than one
    weight); real weights (the cost objective) are given as they are."""
    values = set(weights.values())
    if len(values) != 1 or getattr(weights, "shared", None):
        return weights
    unit, n = values.pop(), len(weights)
    rank = {c: i for i, c in enumerate(order)}
    return {c: w + unit * (rank.get(c, n) + 1) / (n + 1) ** 2 for c, w in weights.items()}


def _below(state: _State, best: frozenset, order: list) -> bool:
    """Before the loop closes on ``best``: does a set one node lighter pass (the least suspicious node out first)?
    Under monotone verdicts none does and these are the evaluations the judge's certification makes anyway; on a
    real model one may, and then the bound was false: going below it is worth the evaluations."""
    for c in sorted(best, key=lambda c: -order.index(c) if c in order else 0):
        if state.ask(best - {c}):
            return True
    return False


def _grow(state: _State, failing: frozenset, outside: list) -> None:
    """A small conflict from a failing plan: the fewest of ``outside`` (the candidates not in it) that must stay out
    for it to fail, by QuickXplain over the plans ``everything - C`` (which fail for C = ``outside``). Each failing
    plan asked on the way is a conflict too.

    ``outside`` is tried in the order the conflict prefers: the candidates the fewest known conflicts hold first
    (a conflict of nodes the lightest hitting set does not already cover raises the bound; one sharing the popular
    nodes often leaves it where it was), the most suspicious first among equals.

    Under monotone verdicts a plan holding a known passing one passes, and one inside a known failing one fails:
    both are taken unasked (if a verdict would differ, the conflict is only larger than it could be, never wrong:
    conflicts come from evaluated plans only, and the conflict found is evaluated unless a known failing plan
    already gives a smaller one)."""
    passing, failed = state.passing(), [p for p, v in state.results.items() if v is False]
    held: dict = {}
    for conflict in state.conflicts():
        for c in conflict:
            held[c] = held.get(c, 0) + 1
    rank = {c: i for i, c in enumerate(outside)}
    outside = sorted(outside, key=lambda c: (held.get(c, 0), rank[c]))

    def fails(out: frozenset, infer: bool = True) -> bool:
        plan = state.everything - out
        if infer and any(p <= plan for p in passing):
            return False
        if infer and any(plan <= f for f in failed):
            return True
        verdict = state.ask(plan)
        if verdict:
            passing.append(plan)
        elif verdict is False:
            failed.append(plan)
        return verdict is False

    kept_out = frozenset(_quickxplain(fails, frozenset(), False, outside))
    if not any(state.everything - kept_out <= f for f in failed):
        fails(kept_out, infer=False)  # the conflict found, evaluated (QuickXplain infers its last answer)


def _quickxplain(holds: Callable[[frozenset], bool], background: frozenset, changed: bool, cands: list) -> list:
    """Smallest D of ``cands`` with ``holds(background | D)`` (true for all of ``cands``), preferring the earlier."""
    if changed and holds(background):
        return []
    if len(cands) <= 1:
        return list(cands)
    half = len(cands) // 2
    first, second = cands[:half], cands[half:]
    found_second = _quickxplain(holds, background | frozenset(first), True, second)
    found_first = _quickxplain(holds, background | frozenset(found_second), bool(found_second), first)
    return found_first + found_second


def _result(state: _State, weights: Weights, bound: float, closed: bool, explored: int) -> MinimumResult:
    best = state.best(weights)
    results, ids = state.results, sorted(state.everything, key=repr)
    passing = sorted(state.passing(), key=lambda p: (_weight(p, weights), len(p), sorted(map(repr, p))))
    proven = best is not None and claims.lighter_all_failed(results, ids, best, weights, _weight)
    lower = claims.proven_bound(results, ids, weights)
    if best is not None:  # neither bound above a passing set
        lower = _weight(best, weights) if proven else min(lower, _weight(best, weights))
        bound = min(bound, _weight(best, weights))
    return MinimumResult(best, proven, lower, bound, state.asked, claims.contradictions(results), passing,
                         len(state.conflicts()), claims.smaller_failed(results, ids),
                         closed and best is not None and bound >= _weight(best, weights) - 1e-9, explored)


_weight = weight


def _minimal_sets(sets: list) -> list:
    """The sets no other is a proper subset of (duplicates once), smallest first."""
    kept: list = []
    for s in sorted(set(sets), key=lambda s: (len(s), sorted(map(repr, s)))):  # the same order in every process
        if not any(k <= s for k in kept):
            kept.append(s)
    return kept


def exact_hitting_set(conflicts: list, weights: Mapping) -> frozenset | None:
    """The lightest set hitting every conflict, by branch and bound (pure Python: for small instances and tests;
    ``strategy/hitting_solver.py`` solves large ones). None when a conflict is empty. With shared weights
    (``Weights.shared``), every subset of up to ``SHARED_EXHAUSTIVE`` nodes is tried; beyond, they are ignored."""
    if any(not c for c in conflicts):
        return None
    shared = getattr(weights, "shared", None)
    nodes = sorted({c for conflict in conflicts for c in conflict} | {c for pair in shared or () for c in pair}, key=repr)
    if shared and len(nodes) <= SHARED_EXHAUSTIVE:  # a set heavier by its members may weigh less: every set tried
        sets = (frozenset(s) for k in range(len(nodes) + 1) for s in combinations(nodes, k))
        hitting = [s for s in sets if all(s & c for c in conflicts)]
        return min(hitting, key=lambda s: (weight(s, weights), len(s), sorted(map(repr, s))))
    best: list = [None, math.inf]

    def branch(chosen: frozenset, cost: float, left: list) -> None:
        if cost >= best[1] - 1e-12:
            return
        open_ = [c for c in left if not (c & chosen)]
        if not open_:
            best[0], best[1] = chosen, cost
            return
        smallest = min(open_, key=len)
        for c in sorted(smallest, key=lambda c: (weights.get(c, 1.0), repr(c))):
            branch(chosen | {c}, cost + float(weights.get(c, 1.0)), open_)

    branch(frozenset(), 0.0, list(conflicts))
    return best[0]
