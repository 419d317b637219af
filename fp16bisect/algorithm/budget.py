"""A search's budget (evaluations, time) and why a search stopped before its end.

Standard library only, like ``search.py``. A ``Budget`` is asked before each evaluation a run is about to make
(``take``): it counts them against ``evaluations`` and watches the clock against ``seconds`` (from when the budget
was made), and raises ``Stopped`` before one it cannot afford; an evaluation under way always finishes. What is not
evaluated (a plan already known, a verdict a journal replays) is not asked, so it costs nothing. ``uncounted()`` is
the same clock for cheap evaluations that do not count (the emulator's, as the prior of an expensive judge).

Whoever catches ``Stopped`` (or an interrupt) ends the search with the smallest plan seen to pass
(``search.ended``), labelled with a ``Stop``: what ended it, and what that allows the answer to claim.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from time import monotonic
from typing import Callable, Iterator, Literal

# What ended a search early: the evaluations given, the time given, or an interrupt (Ctrl-C).
Cause = Literal["max_evaluations", "time_limit", "interrupt"]
EVALUATIONS: Cause = "max_evaluations"
TIME: Cause = "time_limit"
INTERRUPT: Cause = "interrupt"


class Stopped(Exception):
    """The budget allows no more evaluations (``cause``: which of its limits): the search ends with what it has."""

    def __init__(self, cause: Cause, said: str):
        super().__init__(said)
        self.cause = cause


@dataclass(frozen=True)
class Stop:
    """Why a search ended before its end (``cause``, ``said``: in words, with the numbers), and the label its answer
    carries: ``passing, not minimal: budget reached`` (or ``interrupted``), or ``passing, 1-minimal, search not
    finished: ...`` when every removal of the answer happened to be evaluated and failed."""

    cause: Cause
    said: str
    minimal: bool = False
    evaluations: int | None = None  # the budget's limits (None: not given)
    seconds: float | None = None

    @property
    def label(self) -> str:
        why = "interrupted" if self.cause == INTERRUPT else "budget reached"
        return f"passing, {'1-minimal, search not finished' if self.minimal else 'not minimal'}: {why}"


class Budget:
    """At most ``evaluations`` evaluations (None: no limit) and ``seconds`` of wall time from now (None: no limit);
    ``clock``: seconds, monotonic (default ``time.monotonic``)."""

    def __init__(self, evaluations: int | None = None, seconds: float | None = None,
                 clock: Callable[[], float] | None = None):
        self.evaluations, self.seconds = evaluations, seconds
        self.clock = clock or monotonic  # the module's, read when the budget is made
        self.started = self.clock()
        self.spent = 0  # evaluations taken
        self._lifted = 0

    def elapsed(self) -> float:
        return self.clock() - self.started

    def take(self, wanted: int = 1, counted: bool = True) -> int:
        """How many of ``wanted`` evaluations about to start the budget allows (each one ``counted`` is spent);
        ``Stopped`` when it allows none. Inside ``lifted`` every evaluation is allowed, none spent."""
        if self._lifted:
            return wanted
        if self.seconds is not None and self.elapsed() >= self.seconds:
            raise Stopped(TIME, f"the time limit of {_duration(self.seconds)} is reached "
                                f"({_duration(self.elapsed())} since the start)")
        if not counted or self.evaluations is None:
            return wanted
        allowed = min(wanted, self.evaluations - self.spent)
        if allowed <= 0:
            raise Stopped(EVALUATIONS, f"the {self.evaluations} evaluation(s) of the budget are spent")
        self.spent += allowed
        return allowed

    @contextmanager
    def lifted(self) -> Iterator[None]:
        """Evaluations beyond the budget (the last resort of a search it stopped: the all-FP32 plan)."""
        self._lifted += 1
        try:
            yield
        finally:
            self._lifted -= 1

    def left(self, counted: bool = True) -> str:
        """What is left, for a progress line: "7 of 10 evaluation(s), 4 min 10 s" ('' without limits)."""
        parts = []
        if counted and self.evaluations is not None:
            parts.append(f"{max(0, self.evaluations - self.spent)} of {self.evaluations} evaluation(s)")
        if self.seconds is not None:
            parts.append(_duration(max(0.0, self.seconds - self.elapsed())))
        return ", ".join(parts)

    def uncounted(self) -> Uncounted:
        """This budget's clock alone, for evaluations it does not count."""
        return Uncounted(self)

    def stop(self, cause: Cause, said: str) -> Stop:
        """Why the search ended (this budget's ``Stopped``, or an interrupt), with this budget's limits."""
        return Stop(cause, said, evaluations=self.evaluations, seconds=self.seconds)


@dataclass(frozen=True)
class Uncounted:
    """A ``Budget``'s clock without its count: evaluations stop at its time limit, none is spent."""

    budget: Budget

    def take(self, wanted: int = 1) -> int:
        return self.budget.take(wanted, counted=False)

    def left(self) -> str:
        return self.budget.left(counted=False)

    def uncounted(self) -> Uncounted:
        return self


def _duration(seconds: float) -> str:
    """"42.0 s", "4 min 10 s", "2 h 5 min"."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"
