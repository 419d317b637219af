"""The default answer's bounded improvement step: after the 1-minimal search, smaller passing sets tried from what it
learned, where FP16 rounding errors cancel (issue 41 item 3).

A 1-minimal set is the end of one descent along the ranking. Where keeping more nodes in FP32 can hurt, a set with
other members may pass with fewer (onnxconverter-common's segment loop finds 3 nodes on Silero VAD where the descent
keeps 5). The step runs ``algorithm/explore.py`` from the 1-minimal set on the oracle the search used: the sets
around it, its most needed members with the most harmful other candidates.

**When it runs** (from evidence the search already has; when the rule says no, it evaluates nothing):

1. some member of the answer is not explained by an overflow or an underflow: not among the FP32 profile's
   suspects (an overflow's answer, found in a suspect prefix in k + 2 evaluations, is left as it is);
2. and the errors do not simply add up: the search's own verdicts contradicted monotonicity, or the candidates'
   single-node errors (the ranking's: each alone in FP16, the rest in FP32, in units of the tolerance's allowance)
   sum to more than ``SPREAD`` times the all-FP16 error. Errors that add (rounding of one sign, a long sum) sum to
   the all-FP16 error: keeping more in FP32 then only helps, and the descent's set is as small as it gets. Errors
   that cancel, or fall on different output elements, sum to more.

**Budget**: the search's own evaluations on that oracle, at least ``AT_LEAST`` and at most ``AT_MOST``. A smaller set found has had each
of its single removals evaluated (the exploration reduces what passes), so certifying it costs nothing more there.
On an expensive judge the step runs on the emulator prior (its oracle, its ranking, its evaluations) and the set it
finds is the start set the judge certifies (k + 2 evaluations when they agree). The answer stays "1-minimal": the
step claims no minimum (``--minimum`` searches on, within its own budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Collection, Mapping, Sequence

from fp16bisect.algorithm.claims import contradictions
from fp16bisect.algorithm.explore import Explore, explore
from fp16bisect.evaluation.space import View
from fp16bisect.evaluation.verdicts import Evaluation
from fp16bisect.strategy.prior import LABEL, Prior

__all__ = ["AT_LEAST", "AT_MOST", "SPREAD", "Evidence", "Improvement", "Seen", "on_prior", "said_each", "step",
           "worst_excess"]

SPREAD = 1.5  # single-node errors summing to more than this times the all-FP16 error: they do not simply add
AT_LEAST = 20  # the step's budget: the search's own evaluations, at least this many
AT_MOST = 100  # and at most this many (a search of hundreds of evaluations is not doubled)


@dataclass(frozen=True)
class Evidence:
    """What the 1-minimal search learned that steers the search for smaller sets: the candidates in its order (the
    most harmful first: the ranking by the error each causes alone in FP16 when it ran), the FP32 profile's
    suspects (near the FP16 limits) and the ranking's single-node errors (candidate -> excess; None when no
    ranking ran). The rule reads the last two."""

    order: Sequence[str]
    suspects: frozenset[str]
    measured: Mapping[str, float] | None = None


@dataclass(frozen=True)
class Improvement:
    """What the step did: its set (the 1-minimal one when nothing smaller passed), why it ran or did not, where."""

    fp32: frozenset[str]
    one_minimal: int
    ran: bool
    why: str
    evaluations: int = 0
    budget: int = 0
    on: str = ""
    judge: str = ""
    found_at: int = 0  # the step's evaluation that first saw its set pass (0: nothing smaller passed)

    json_key = "improvement"  # the override JSON's search.improvement (``--minimum``'s record is search.minimum)
    label = "smaller set"  # the console line's

    @classmethod
    def from_json(cls, data: dict[str, Any], judge: str) -> Improvement:  # Any: a record read from JSON
        """The record as a journal kept it (``to_json``, with the set under ``fp32``), for a resumed search."""
        return cls(frozenset(data["fp32"]), int(data["one_minimal"]), bool(data["ran"]), str(data["why"]),
                   int(data.get("evaluations", 0)), int(data.get("budget", 0)), str(data.get("backend", "")), judge,
                   int(data.get("found_at", 0)))

    def certified(self, final: Collection[str]) -> Improvement:
        """After the judge certified the set (each single removal evaluated there): the set it kept."""
        return replace(self, fp32=frozenset(final))

    def to_json(self) -> dict[str, object]:
        return {"ran": self.ran, "why": self.why, "one_minimal": self.one_minimal, "size": len(self.fp32),
                "evaluations": self.evaluations, "found_at": self.found_at, "budget": self.budget,
                **({"backend": self.on} if self.on else {})}

    def line(self, final: Collection[str]) -> str:
        """What the console says of a step that ran: what it gained, in how many evaluations, and why it ran."""
        k = len(frozenset(final))
        said = (f"{self.one_minimal} -> {k} node(s), also 1-minimal, seen to pass at its evaluation {self.found_at}"
                if k < self.one_minimal else f"none smaller than the 1-minimal {self.one_minimal} node(s) found")
        said += (f"; {self.evaluations} of at most {self.budget} evaluation(s) ({self.why}); not claimed the "
                 "minimum (--minimum searches on)")
        if self.on != self.judge:
            said += f"; on the emulator, certified on the {self.judge} backend"
        return said


def worst_excess(evaluation: Evaluation | None) -> float | None:
    """How far an evaluated plan is from passing: its worst output error in units of the tolerance's allowance
    (infinite for NaN/inf); None when it could not be evaluated or the judge gave a bare verdict."""
    if evaluation is None or evaluation.reason is not None or not evaluation.metrics:
        return None
    return max(math.inf if m.nonfinite else float(m.excess) for m in evaluation.metrics)


class Seen:
    """What ``oracle`` (plan -> True | False | None, with the ``memo`` of what it evaluated) has evaluated among
    the plans of ``ids`` (its forced nodes taken off): the verdicts, and how far each plan is from passing."""

    def __init__(self, ids: Sequence[str], oracle: View) -> None:
        self.oracle, self.forced, allowed = oracle, frozenset(getattr(oracle, "forced", ())), set(ids)
        self.verdicts: dict[frozenset, bool | None] = {plan - self.forced: e.verdict for plan, e in oracle.memo.items()
                         if self.forced <= plan and plan - self.forced <= allowed}

    def excess(self, plan: frozenset) -> float | None:
        return worst_excess(self.oracle.memo.get(plan | self.forced))

    def spread(self, one_minimal: Sequence, evidence: Evidence) -> tuple[bool, str]:
        """The rule of the module docstring: whether FP16 errors do not simply add here, and why."""
        return _rule(frozenset(one_minimal), evidence, self.excess(frozenset()), contradictions(self.verdicts))


def step(ids: Sequence[str], oracle: View, one_minimal: Sequence[str], evidence: Evidence, *, evaluations: int,
         on: tuple[str, str], say: Callable[[str], None] = print) -> Improvement:
    """The step on ``oracle`` (plan -> True | False | None, with the ``memo`` of what it evaluated), from the
    1-minimal ``one_minimal``, when the rule says so; ``evaluations``: the search's there (the budget)."""
    seen = Seen(ids, oracle)
    ran, why = seen.spread(one_minimal, evidence)
    if not ran:
        return Improvement(frozenset(one_minimal), len(one_minimal), False, why, on=on[0], judge=on[1])
    spend = min(AT_MOST, max(AT_LEAST, int(evaluations)))
    passes = said_each(oracle, "smaller set", spend, on[0], say)
    say(f"smaller set: {why}; trying sets smaller than the {len(one_minimal)} node(s) (up to {spend} evaluation(s))")
    allowed = set(ids)
    found = explore(passes, one_minimal, Explore(list(ids), spend, order=[c for c in evidence.order if c in allowed],
                                                 known=seen.verdicts, excess=seen.excess))
    return Improvement(found.fp32, len(one_minimal), True, why, found.evaluations, spend, on[0], on[1],
                       found.found_at)


def said_each(oracle: Callable[[frozenset], bool | None], label: str, spend: int, on: str,
              say: Callable[[str], None]) -> Callable[[frozenset], bool | None]:
    """``oracle``, saying a line per plan it is asked (``label: evaluation i of at most spend on BACKEND: ...``)."""
    asked = 0

    def passes(plan: frozenset) -> bool | None:
        nonlocal asked
        verdict = oracle(plan)
        asked += 1
        say(f"{label}: evaluation {asked} of at most {spend} on {on}: {len(plan)} node(s) in FP32 -> "
            + {True: "pass", False: "FAIL", None: "could not evaluate"}[verdict])
        return verdict

    return passes


def on_prior(ids: Sequence[str], prior: Prior, suspects: frozenset[str],
             say: Callable[[str], None] = print) -> dict[str, object]:
    """The step on the emulator prior's oracle, from its 1-minimal set (``prior``: ``strategy/prior.Prior``), as the
    prior's record keeps it (``Improvement.to_json`` with the set under ``fp32``; empty when the prior found
    nothing to keep): the judge certifies that set, and a resumed search reads it back. The rule and the budget
    are the emulator's: its ranking, its suspects, its evaluations."""
    if prior.oracle is None or prior.status != "found":
        return {}
    done = step(ids, prior.oracle, prior.fp32, Evidence(prior.order, suspects, prior.measured),
                evaluations=prior.evaluations, on=(LABEL, ""), say=say)
    return {**done.to_json(), "fp32": sorted(done.fp32)}


def _rule(answer: frozenset[str], evidence: Evidence, fp16_excess: float | None, contradicted: int) -> tuple[bool, str]:
    """Whether the step runs, and why (the module docstring's rule)."""
    if len(answer) <= 1:
        return False, "a 1-node answer: the all-FP16 plan fails, so no set is smaller"
    if answer <= evidence.suspects:
        return False, "every member is explained by an overflow or underflow (a suspect of the FP32 profile)"
    if contradicted:
        return True, f"the search's verdicts contradicted monotonicity {contradicted} time(s)"
    single = [e for e in (evidence.measured or {}).values() if math.isfinite(e)]
    if not single or fp16_excess is None or not math.isfinite(fp16_excess) or fp16_excess <= 0:
        return False, "no single-node errors measured to tell whether the errors cancel"
    ratio = sum(single) / fp16_excess
    if ratio > SPREAD:
        return True, (f"the single-node errors add up to {ratio:.3g}x the all-FP16 error: they cancel or fall on "
                      "different elements, where keeping more nodes in FP32 can hurt")
    return False, (f"the single-node errors add up to {ratio:.3g}x the all-FP16 error: they add, and more FP32 only "
                   "helps")
