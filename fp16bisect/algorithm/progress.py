"""What a person watching a long search is told: the phase, how much is left to search, and a rough
estimate of the evaluations still to come. Beside the search, not in it: ``search.py`` only says
where it is (``Progress`` fields); the estimate is made here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

# Where the search is. The search's own: precondition, suspects, grow, reorder, reduce, verify, minimality; from a
# start set: start, alternative, extend; at the end: recheck (the final set afresh), fallback; search --minimum's
# search: minimum; the default step after the 1-minimal search (strategy/improve.py): improve.
Phase = Literal["precondition", "suspects", "grow", "reorder", "reduce", "verify", "minimality", "start",
                "alternative", "extend", "recheck", "fallback", "minimum", "improve"]


def group_testing_bound(n: int, k: int) -> float:
    """log2 C(n, k): information-theoretic lower bound on adaptive tests."""
    if k <= 0 or k >= n:
        return 0.0
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def quickxplain_bound(n: int, k: int) -> float:
    """2k*log2(n/k) + 2k: QuickXplain's worst case for k elements among n."""
    if k <= 0:
        return 0.0
    return 2 * k * math.log2(max(n / k, 1.0)) + 2 * k


def quickxplain_left(size: int, decided: int, found: int) -> float:
    """QuickXplain's evaluations still to come on a pool of ``size`` of which ``decided`` are settled (in or
    out) and ``found`` are members: the members left guessed from the density so far, each costing about
    log2(gap) + 2; then each member's removal."""
    left = size - decided
    if left <= 0:
        return float(found)
    k = max(1.0, min(found / decided * left if decided and found else 1.0, float(left)))
    return k * (math.log2(max(left / k, 1.0)) + 2) + found + k


def quickxplain_most(size: int) -> int:
    """At most this many QuickXplain evaluations on a pool of ``size``, whatever k: 2k*log2(n/k) + 2k peaks near
    k = n/1.36, below 3.1n."""
    return math.ceil(3.1 * size) if size > 0 else 0


@dataclass
class Progress:
    """Where the search is (set by the search as it goes) and what that means for the time left: an estimate of
    the evaluations still to come, never below 0 nor above ``bound_left`` (the most a judge that is monotone can
    still take: a judge that is not may take more)."""

    phase: Phase = "precondition"
    searching: int = 0  # candidates the current phase works on
    decided: int = 0  # of those, settled in or out (QuickXplain)
    found: int = 0  # members found so far
    pending: list = field(default_factory=list)  # the removals the final reduction still has to evaluate
    candidates: int = 0  # all of them (0: not said)
    members: frozenset = frozenset()  # the set QuickXplain has so far (its base and the members found)
    settles: int = 0  # QuickXplain's question: the candidates a pass settles (none of them is needed)

    def report(self, evaluations: int, results: dict, plan: frozenset | None = None) -> dict:
        """``plan``: the one just evaluated (when it passes, the ``settles`` candidates it asked about are
        settled)."""
        bound = self.bound_left(results)
        estimate = min(max(int(math.ceil(self.estimate_left(results, plan))), 0), bound)
        return {"evaluations": evaluations, "phase": self.phase, "searching": self.searching,
                "found": self.found, "estimate_left": estimate, "bound_left": bound}

    def estimate_left(self, results: dict, plan: frozenset | None = None) -> float:
        if self.pending:
            return float(sum(1 for plan in self.pending if plan not in results))
        undecided = self.searching - self.decided - (self.settles if results.get(plan) else 0)
        if self.phase == "reduce" and undecided <= 1:  # the last leaf costs at most one; then the removals
            return 2 * max(0, undecided) + self._removals_left(results)
        if self.searching:
            return quickxplain_left(self.searching, self.decided, self.found)
        if self.phase == "precondition" and self.candidates and not self.found:  # nothing known yet: one site
            return math.log2(self.candidates) + 1 + quickxplain_left(self.candidates, 0, 0)
        return 0.0

    def bound_left(self, results: dict) -> int:
        if self.pending:
            return sum(1 for plan in self.pending if plan not in results)
        if self.phase == "minimality":
            return 0
        undecided = max(0, self.searching - self.decided)
        if self.phase == "reduce":  # QuickXplain on what is undecided, the set verified, each removal
            return quickxplain_most(undecided) + 1 + self.found + undecided
        n = self.candidates or self.searching
        grow = math.ceil(math.log2(n)) + 2 if n else 0
        return grow + quickxplain_most(n) + 1 + n + 1  # doubling prefixes, QuickXplain, verify, removals

    def _removals_left(self, results: dict) -> int:
        """The members whose removal no failed plan has answered yet (it is the final reduction's question)."""
        members = self.members
        failed = [p for p, passed in results.items() if passed is False and len(p) >= len(members) - 1]
        return sum(1 for m in members if not any(m not in p and members - {m} <= p for p in failed))
