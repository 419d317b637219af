"""The search's record of its evaluations: each distinct plan evaluated once, in order, with its verdict.

Standard library only (like ``search.py``, which asks its questions through this). Keeps the trace the
report and the override JSON show, counts the rounds (batches of plans evaluated together with
``test_many``, each waiting on the one before), notes where verdicts contradict monotonicity (a plan
fails while a subset of it passed), and reports each step with an estimate of what is left
(``search_progress.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Iterable

from fp16bisect.algorithm.progress import Phase, Progress


class SearchError(Exception):
    """The predicate raised or the arguments are inconsistent."""


@dataclass(frozen=True)
class Step:
    """One evaluation made by the search."""

    index: int  # 1-based count of distinct evaluations so far
    plan: frozenset
    passed: bool | None  # None: could not be evaluated
    phase: Phase
    round: int = 0  # evaluations of one round ran together (``test_many``); a round waits for the one before


def verdict(value: object) -> bool | None:
    return None if value is None else bool(value)


class Memo:
    """Evaluates each distinct plan once and records the trace."""

    def __init__(self, test: Callable[[frozenset], bool | None],
                 on_step: Callable[[Step, dict], None] | None = None,
                 test_many: Callable[[list], Iterable[bool | None]] | None = None, width: int = 1) -> None:
        self._test = test
        self._test_many = test_many
        self.width = max(1, int(width)) if test_many is not None else 1  # plans that may be evaluated at once
        self._on_step = on_step
        self.results: dict[frozenset, bool | None] = {}
        self.trace: list[Step] = []
        self.contradictions: list[tuple[frozenset, frozenset]] = []  # (passing plan, failing superset)
        self.rounds = 0
        self.progress = Progress()
        self.computed: dict = {}  # what the search computed once (search_lookahead.Ask.once)
        self.everything: frozenset = frozenset()  # the all-FP32 plan (the last resort of a fallback)

    def __call__(self, plan: Iterable[Hashable], phase: Phase) -> bool | None:
        plan = frozenset(plan)
        if plan not in self.results:
            self.many({plan: phase})
        return self.results[plan]

    def many(self, plans: dict[frozenset, Phase]) -> None:
        """Evaluates the plans not yet known (plan -> the phase that asks it), ``width`` at a time (one round
        each) with ``test_many``."""
        todo = [p for p in plans if p not in self.results]
        for i in range(0, len(todo), self.width):
            chunk = todo[i : i + self.width]
            self.rounds += 1
            if self._test_many is None:  # then width is 1: one plan a round
                verdicts = [self._test(chunk[0])]
            else:
                verdicts = list(self._test_many(chunk))
                if len(verdicts) != len(chunk):
                    raise SearchError(f"test_many returned {len(verdicts)} verdicts for {len(chunk)} plans")
            for plan, passed in zip(chunk, verdicts):
                self._record(plan, verdict(passed), plans[plan])

    def again(self, plan: frozenset, recheck: Callable[[frozenset], bool | None]) -> bool | None:
        """A fresh evaluation of a plan already judged; a different verdict is a contradiction."""
        passed = verdict(recheck(plan))
        self.rounds += 1
        self._step(Step(len(self.trace) + 1, plan, passed, "recheck", self.rounds))
        if passed is not None and passed != self.results.get(plan, passed):
            self.contradictions.append((plan, plan))
            self.results[plan] = self.results[plan] and passed  # a plan that failed once is not trusted
        return passed

    def _record(self, plan: frozenset, passed: bool | None, phase: Phase) -> None:
        self.progress.phase = phase
        if passed is not None:
            for other, other_passed in self.results.items():
                if passed and other_passed is False and plan < other:
                    self.contradictions.append((plan, other))
                elif passed is False and other_passed and other < plan:
                    self.contradictions.append((other, plan))
        self.results[plan] = passed
        self._step(Step(len(self.trace) + 1, plan, passed, phase, self.rounds))

    def _step(self, step: Step) -> None:
        self.trace.append(step)
        if self._on_step is not None:
            self._on_step(step, self.progress.report(len(self.trace), self.results, step.plan))
