"""What evaluated verdicts prove about the smallest passing set, with no assumption about the others.

Pure Python, like ``search.py``. FP16 rounding errors cancel, so keeping more nodes in FP32 can turn a passing
plan failing (verdicts are not monotone), and a plan that was not evaluated can pass whatever its subsets and
supersets did. So the only proof that no set lighter than S passes is that every lighter set was evaluated and
failed. Here:

- ``smaller_failed``: the most members j such that every set of at most j candidates was evaluated and failed
  (the minimum then has at least j + 1 members: a fact, not an estimate);
- ``lighter_all_failed``: every set lighter than a given one was evaluated and failed (the proof of a minimum);
- ``enumerate_small``: the sets of the next sizes evaluated, when a budget affords every one of a size (the
  proof bought with evaluations; a passing one found on the way is a smaller set);
- ``contradictions``: how often the verdicts contradict monotonicity (a passing plan inside a failing one).

A bound that assumes monotone verdicts (the hitting-set bound of ``hitting.py``) is an estimate, and is said as
one, with this count beside it.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Callable, Hashable, Iterable, Iterator, Mapping, Sequence

__all__ = ["contradictions", "enumerate_small", "lighter_all_failed", "proven_bound", "smaller_failed"]

Verdicts = Mapping[frozenset, "bool | None"]  # plan -> True | False | None (None: could not evaluate)
# per candidate, its weight; a hitting.Weights also carries ``shared`` (what pairs of members share)
WeightsOf = Mapping[Hashable, float]

# Sets enumerated at most to prove, without the monotonicity assumption, that no lighter set passes (weights).
EXHAUSTIVE_LIMIT = 4096


def smaller_failed(results: Verdicts, candidates: Sequence[Hashable]) -> int:
    """The largest j such that every set of at most j of ``candidates`` was evaluated and failed; -1 when not even
    the empty set (all-FP16) was. ``results``: plan -> True | False | None (None: could not evaluate, no proof)."""
    everything = frozenset(candidates)
    failing: dict[int, int] = {}
    for plan, verdict in results.items():
        if verdict is False and plan <= everything:
            failing[len(plan)] = failing.get(len(plan), 0) + 1
    j = -1
    while j < len(everything) and failing.get(j + 1, 0) == math.comb(len(everything), j + 1):
        j += 1
    return j


def contradictions(results: Verdicts) -> int:
    """Pairs of evaluated plans in which a passing plan is a proper subset of a failing one: each says that keeping
    more nodes in FP32 turned a passing plan failing."""
    passing = [p for p, v in results.items() if v]
    failing = [p for p, v in results.items() if v is False]
    return sum(1 for q in failing for p in passing if len(p) < len(q) and p < q)


def lighter_all_failed(results: Verdicts, candidates: Sequence[Hashable], best: frozenset, weights: WeightsOf,
                       weigh: Callable[[Iterable[Hashable], WeightsOf], float]) -> bool:
    """Every set lighter than ``best`` was evaluated and failed. By node count, from ``smaller_failed``; by weight
    (``weigh(plan, weights)``), enumerated up to ``EXHAUSTIVE_LIMIT`` sets (shared weights: never, since a lighter
    set may have more members than any bound here enumerates)."""
    ids = list(dict.fromkeys(candidates))
    if len(set(weights.get(c, 1.0) for c in ids)) <= 1 and not getattr(weights, "shared", None):
        return smaller_failed(results, ids) >= len(best) - 1
    if getattr(weights, "shared", None):
        return False
    limit = weigh(best, weights) - 1e-9
    ids.sort(key=lambda c: (weights.get(c, 1.0), repr(c)))
    size = 0
    while size < len(ids) and sum(weights.get(c, 1.0) for c in ids[: size + 1]) < limit:
        size += 1  # the most members a lighter set can have
    if sum(math.comb(len(ids), k) for k in range(size + 1)) > EXHAUSTIVE_LIMIT:
        return False
    return all(results.get(frozenset(s)) is False for k in range(size + 1) for s in combinations(ids, k)
               if weigh(s, weights) < limit)


def proven_bound(results: Verdicts, candidates: Sequence[Hashable], weights: WeightsOf) -> float:
    """What the verdicts alone prove the lightest passing set weighs at least: every set of at most j members
    failed, so it has j + 1 or more, and weighs at least the j + 1 lightest weights (0 with shared weights, which a
    set of more members may undercut)."""
    j = smaller_failed(results, candidates)
    if j < 0 or getattr(weights, "shared", None):
        return 0.0
    lightest = sorted(float(weights.get(c, 1.0)) for c in dict.fromkeys(candidates))
    return float(sum(lightest[: j + 1]))


def sets_of(size: int, order: Sequence[Hashable]) -> Iterator[frozenset]:
    """Every set of ``size`` of ``order``, those of the earliest (most harmful) members first."""
    return (frozenset(s) for s in combinations(order, size))


def enumerate_small(ask: Callable[[frozenset], bool | None], results: Verdicts, order: Sequence[Hashable],
                    below: int, budget: int) -> tuple[frozenset | None, int]:
    """Evaluates every set of the sizes above ``smaller_failed`` and below ``below``, a size at a time, while the
    ``budget`` (new evaluations) affords all of that size's sets not yet known; stops at the first that passes
    (a smaller set). ``ask`` evaluates a plan and records it in ``results``. Returns the passing set found (or
    None) and the evaluations made."""
    asked = 0
    size = smaller_failed(results, order) + 1
    while size < below:
        unknown = [s for s in sets_of(size, order) if s not in results]
        if len(unknown) > budget - asked:
            break
        for plan in unknown:
            asked += 1
            if ask(plan):
                return plan, asked
        if smaller_failed(results, order) < size:  # a set could not be evaluated: no proof at this size
            break
        size += 1
    return None, asked
