"""What a person watching a long search is told: the phase, how much is left to search, and a rough
estimate of the evaluations still to come. Beside the search, not in it: ``search.py`` only says
where it is (``Progress`` fields); the estimate is made here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

# Where the search is. The search's own: precondition, suspects, grow, reorder, reduce, verify, minimality; from a
# start set: start, alternative, extend; at the end: recheck (the final set afresh), fallback.
Phase = Literal["precondition", "suspects", "grow", "reorder", "reduce", "verify", "minimality", "start",
                "alternative", "extend", "recheck", "fallback"]


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


@dataclass
class Progress:
    """Where the search is (set by the search as it goes) and what that means for the time left."""

    phase: Phase = "precondition"
    searching: int = 0  # candidates the current phase works on
    decided: int = 0  # of those, settled in or out (QuickXplain)
    found: int = 0  # members found so far
    pending: list = field(default_factory=list)  # the removals the final reduction still has to evaluate

    def report(self, evaluations: int, results: dict) -> dict:
        if self.pending:
            left = float(sum(1 for plan in self.pending if plan not in results))
        elif self.searching:
            left = quickxplain_left(self.searching, self.decided, self.found)
        else:
            left = 0.0
        return {"evaluations": evaluations, "phase": self.phase, "searching": self.searching,
                "found": self.found, "estimate_left": int(math.ceil(left))}
