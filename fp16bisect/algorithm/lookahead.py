"""Evaluating several plans at once (``--jobs``, Ray) for a search written one question at a time.

The search (``search.py``) is a deterministic function of the verdicts it gets, so it can be replayed.
At width 1 it asks ``Memo`` directly. At width > 1 it is replayed from the start on the verdicts known
so far until it asks a plan not yet known; then, before evaluating that plan, it is replayed again on
hypothetical verdicts to find the plans it would ask next under each answer. Those, most probable first,
fill one round of up to ``width`` plans, leaving out any the search asks with a probability below
``AT_LEAST`` (evaluations that are likely wasted). The search says which answer it expects where it has
one (``expect``: all-FP16 fails, a start set passes, a removal from a set that passes fails: taken as
``EXPECTED``); otherwise a failure is taken as twice as likely as a pass (most of its questions are
about sets still missing a member). Known answers are followed, not branched on, so a round only holds
plans some outcome asks, and the first is the one asked next. Independent questions (the final
reduction's removals, the growing prefixes) come out as chains of expected answers, so they go together.

What the search computes through ``Ask.once`` (the caller's callbacks: a ranking, the prior's
alternatives) is computed once, on real verdicts only.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Hashable, Iterable, TypeVar

from fp16bisect.algorithm.memo import Memo
from fp16bisect.algorithm.progress import Phase

T = TypeVar("T")

FAIL_ODDS = 2 / 3  # the probability a speculated question is taken to fail, when the search expects nothing
EXPECTED = 0.8  # the probability of the answer the search expects
AT_LEAST = 0.25  # plans asked with a lower probability are not speculated


class Unknown(Exception):
    """A replay reached a question whose answer is not known."""

    def __init__(self, plan: frozenset, phase: Phase, expect: bool | None = None) -> None:
        super().__init__(plan)
        self.plan, self.phase, self.expect = plan, phase, expect

    def odds(self) -> tuple[float, float]:
        """(probability of a failure, of a pass)."""
        fail = FAIL_ODDS if self.expect is None else (1 - EXPECTED if self.expect else EXPECTED)
        return fail, 1 - fail


class Uncomputed(Exception):
    """A replay on hypothetical verdicts reached a computation (``Ask.once``), which is made on real verdicts only."""


class Ask:
    """What the search asks through: ``ask(plan, phase)`` -> True, False or None (could not evaluate)."""

    def __init__(self, memo: Memo, hypothesis: dict[frozenset, bool | None] | None = None,
                 replay: bool = False) -> None:
        self.memo = memo
        self.hypothesis = hypothesis  # speculation: verdicts assumed (None: real verdicts only)
        self.replay = replay or hypothesis is not None  # unknown plans raise instead of being evaluated

    def __call__(self, plan: Iterable[Hashable], phase: Phase, expect: bool | None = None) -> bool | None:
        plan = frozenset(plan)
        if plan in self.memo.results:
            return self.memo.results[plan]
        if self.hypothesis is not None and plan in self.hypothesis:
            return self.hypothesis[plan]
        if self.replay:
            raise Unknown(plan, phase, expect)
        return self.memo(plan, phase)

    def passing(self) -> list[frozenset]:
        """Plans seen to pass (and hypothetically passing, when speculating)."""
        known = {**self.memo.results, **(self.hypothesis or {})}
        return [plan for plan, passed in known.items() if passed]

    def once(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, made once per search (key: what it depends on), on real verdicts only."""
        done = self.memo.computed
        if key not in done:
            if self.hypothesis is not None:
                raise Uncomputed(key)
            done[key] = compute()
        return done[key]

    def note(self, **where: object) -> None:
        """Where the search is, for progress (ignored while speculating)."""
        if self.hypothesis is None:
            for name, value in where.items():
                setattr(self.memo.progress, name, value)


def run(algorithm: Callable[[Ask], T], memo: Memo) -> T:
    """``algorithm(ask)``'s return value, its questions evaluated ``memo.width`` at a time."""
    if memo.width == 1:
        return algorithm(Ask(memo))
    while True:
        try:
            return algorithm(Ask(memo, replay=True))
        except Unknown as first:  # (real verdicts compute: no Uncomputed here)
            memo.many(speculate(algorithm, memo, first))


def speculate(algorithm: Callable[[Ask], object], memo: Memo, first: Unknown) -> dict[frozenset, Phase]:
    """The next plan and the plans the search would ask after it, most probable first, up to ``memo.width``
    (plan -> the phase that asks it)."""
    asked = {first.plan: first.phase}
    tie = itertools.count()
    heap: list = []

    def branch(probability: float, hypothesis: dict[frozenset, bool | None], question: Unknown) -> None:
        for passed, share in zip((False, True), question.odds()):
            heapq.heappush(heap, (-probability * share, next(tie), {**hypothesis, question.plan: passed}))

    branch(1.0, {}, first)
    while heap and len(asked) < memo.width:
        odds, _, hypothesis = heapq.heappop(heap)
        if -odds < AT_LEAST:
            break
        try:
            algorithm(Ask(memo, hypothesis))
            continue  # the search ends under these verdicts
        except Uncomputed:
            continue
        except Unknown as then:
            asked.setdefault(then.plan, then.phase)
            branch(-odds, hypothesis, then)
    return asked
