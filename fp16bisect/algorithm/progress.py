"""What a person watching a long search is told: the phase, how much is left to search, and a rough
estimate of the evaluations still to come. Beside the search, not in it: ``search.py`` only says
where it is (``Progress`` fields); the estimate is made here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

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


# --- The estimate of a dense answer (accumulated rounding), from the measured effect ranking -----------------------
# Each candidate's effect is the output error it causes alone in FP16 (every other in FP32), in units of the
# tolerance's allowance; the all-FP16 plan's error in the same units is their combination. Rounding errors from many
# nodes combine between a plain sum (errors that add up, p = 1) and their maximum (one node dominates, p = inf); the
# model here is the p-norm whose value on the effects is the all-FP16 error, so one measured number calibrates it.
# A plan passes, under that model, when the p-norm of the effects of the nodes it leaves in FP16 is at most 1.

MOST_EXPONENT = 64.0  # past this the p-norm is the maximum to within 7 %


def p_norm(values: Sequence[float], p: float) -> float:
    """(sum |v|^p)^(1/p), scaled by the largest value so that no power overflows; the maximum for p = inf."""
    top = max((abs(v) for v in values), default=0.0)
    if top == 0.0 or math.isinf(p):
        return top
    return top * sum((abs(v) / top) ** p for v in values) ** (1 / p)


def combining_exponent(effects: Sequence[float], total: float) -> float:
    """The p in [1, inf] with ``p_norm(effects, p) == total``: 1 when ``total`` reaches their sum (the errors add
    up, or grow more than they add: the model is then optimistic), inf when it is at most their maximum (one node
    explains it, or errors cancel)."""
    finite = [e for e in effects if e > 0 and math.isfinite(e)]
    if not finite or total <= max(finite):
        return math.inf
    if total >= sum(finite):
        return 1.0
    low, high = 1.0, MOST_EXPONENT
    if p_norm(finite, high) > total:
        return math.inf
    for _ in range(60):  # the p-norm falls as p grows: bisect on it
        middle = (low + high) / 2
        low, high = (middle, high) if p_norm(finite, middle) > total else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class DenseEstimate:
    """What the effect ranking says of the answer, under the p-norm model above (an estimate, never a claim)."""

    exponent: float  # p: how the single-node errors combine into the all-FP16 error
    fp32: int  # nodes expected in FP32: the fewest most harmful ones that bring the rest's p-norm to 1 or less
    top: int  # the few most harmful nodes ``explained`` speaks of
    explained: float  # the share of the all-FP16 error gone with those ``top`` nodes in FP32 (0 to 1)
    evaluations: int  # evaluations expected after the ranking: prefixes, QuickXplain, the check, the removals


def dense_estimate(effects: Sequence[float], total: float, *, top: int = 5, start: int = 1) -> DenseEstimate:
    """The answer's size and the evaluations left once the candidates are ranked by ``effects`` (each alone in FP16,
    in units of the allowance; inf: it alone breaks an output), the all-FP16 error being ``total`` in those units.
    ``start``: the first prefix the search grows from (1 without suspects). Nodes with an infinite effect are
    members whatever the rest do."""
    ranked = sorted((e for e in effects if e > 0), reverse=True)
    broken = sum(1 for e in ranked if math.isinf(e))
    finite = ranked[broken:]
    p = combining_exponent(finite, total)
    fp32 = broken + next((k for k in range(len(finite) + 1) if p_norm(finite[k:], p) <= 1), len(finite))
    top = min(top, len(ranked))
    rest = p_norm(finite[max(0, top - broken):], p)
    explained = 0.0 if not math.isfinite(total) or total <= 0 else max(0.0, min(1.0, 1 - rest / total))
    return DenseEstimate(p, fp32, top, explained, dense_evaluations(fp32, len(effects), start))


def dense_evaluations(members: int, candidates: int, start: int = 1) -> int:
    """Evaluations from the first grown prefix (``start`` nodes) to a certified answer of ``members`` among
    ``candidates`` ranked by effect, the members taken to lead the ranking: the doubling prefixes up to the first
    that holds them, QuickXplain over it (about log2(gap) + 2 each, as ``quickxplain_left`` counts), the set
    checked, then each member's removal."""
    if members <= 0 or candidates <= 0:
        return 0
    size, grown = max(1, start), 1
    while size < min(members, candidates):
        size, grown = min(size * 2, candidates), grown + 1
    return math.ceil(grown + members * (math.log2(max(size / members, 1.0)) + 2) + 1 + members)


def dense_left(estimate: DenseEstimate, since: int, progress: dict) -> int:
    """The evaluations left a progress line says once the ranking has given ``estimate``, ``since`` evaluations
    ago (``progress``: the search's own report, its ``estimate_left`` assuming one culprit until QuickXplain has
    seen members): while the prefix grows, the estimate's less those done; in QuickXplain, the members expected and
    not found yet at about log2(gap) + 2 each, then the check and the removals; from then on the search's own
    (the removals it has left are known). Never below the search's own, nor above its bound."""
    generic, phase = int(progress["estimate_left"]), progress["phase"]
    if phase in ("precondition", "suspects", "grow", "reorder"):
        left = float(estimate.evaluations - since)
    elif phase == "reduce" and estimate.fp32:
        members, pool = estimate.fp32, max(int(progress.get("searching", 0)), estimate.fp32)
        left = max(members - int(progress.get("found", 0)), 0) * (math.log2(pool / members) + 2) + 1 + members
    else:
        return generic
    return max(generic, min(int(progress.get("bound_left", generic)), math.ceil(left)))
