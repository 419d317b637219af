"""What a search returns to whoever runs it: the ``Listener`` it reports to, and the ``Outcome`` it ends with."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from fp16bisect.artifacts.overrides import Overrides
from fp16bisect.model.graph import Graph
from fp16bisect.model.profile import Profile
from fp16bisect.evaluation.oracle import Evaluation, Oracle, Reason
from fp16bisect.evaluation.space import View
from fp16bisect.run.invocation import Invocation
from fp16bisect.run.override_json import overrides_json
from fp16bisect.strategy.prior import LABEL, Prior
from fp16bisect.strategy.improve import Improvement
from fp16bisect.strategy.minimum import Least
from fp16bisect.strategy.blocks import Chosen
from fp16bisect.strategy.constraints import Constraints
from fp16bisect.algorithm.search import SearchResult, Step
from fp16bisect.timing import timed
from fp16bisect.tolerance import Tolerance


class Listener:
    """What a long search tells the person waiting (see report.py)."""

    def stage(self, text: str) -> None: ...

    def timed(self, text: str):
        """A stage that takes time: said once, with its seconds, when it ends."""
        return timed(self.stage, text)

    def step(self, step: Step, progress: dict) -> None: ...


def stepper(judge: View, listener: Listener, after: int = 0) -> Callable[[Step, dict], None]:
    """What a search over ``judge`` calls after each evaluation: the listener's progress line, numbered ``after``
    evaluations on (a later stage of one search), saying whether the journal replayed it and what the budget leaves;
    the phase that asked each plan is noted on the judge (the trace of a search a budget ends)."""
    def step(step: Step, progress: dict) -> None:
        judge.asked(step.plan, step.phase)
        listener.step(replace(step, index=after + step.index) if after else step,
                      {**progress, "backend": judge.backend.name, "replayed": judge.replayed(step.plan),
                       "budget": judge.left()})

    return step


@dataclass(frozen=True)
class Outcome:
    graph: Graph
    tolerance: Tolerance
    backend: str
    result: SearchResult
    oracle: Oracle
    profile: Profile
    seconds: float
    prior: Prior | None = None  # the emulator's search the search on an expensive backend started from
    output: str | None = None  # where the override JSON goes (named in its exports)
    backend_info: dict = field(default_factory=dict)  # versions, and what the backend says of itself (JSON "backend")
    environment: dict = field(default_factory=dict)  # where the judge evaluated (JSON "environment")
    shapes: dict = field(default_factory=dict)  # dynamic input dimensions: the range the samples covered (JSON "shapes")
    forced: list = field(default_factory=list)  # model.headroom.Forced: the nodes --headroom kept in FP32
    headroom: float | None = None  # the --headroom factor (None: not given)
    evaluation_word: str = "built"  # what evaluating a plan is called on its backend (Backend.evaluation_word)
    accumulate: str = "fp32"  # what the judge assumed FP16 nodes add in (SearchOptions.accumulate): JSON "accumulate"
    # search --minimum: the smallest passing set's search (JSON search.minimum); else the default step after the
    # 1-minimal search (strategy/improve.py, JSON search.improvement)
    minimum: Least | Improvement | None = None
    constraints: Constraints = field(default_factory=Constraints)  # --keep-fp32/--keep-fp16 (JSON "constraints")
    blocks: Chosen | None = None  # --group-by: the blocks the first search kept in FP32 (JSON "blocks")
    run: Invocation | None = None  # the search as asked: its model, samples and records (JSON search.command)
    diagnosis: dict | None = None  # what the search said of a rounding failure (strategy/rounding.py; JSON "diagnosis")

    # the override file (its JSON: overrides.to_json()), made from the rest when the outcome is made
    overrides: Overrides = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", overrides_json(self))

    @property
    def fp16(self) -> Evaluation | None:
        """The all-FP16 plan: on the judging backend, or on the emulator when a prior's witness made that
        build unnecessary (``fp16_backend`` says which)."""
        judged = self.oracle.memo.get(frozenset())
        if judged is None and self.prior is not None and self.prior.fp16:
            return Evaluation.from_json(self.prior.fp16)
        return judged

    @property
    def fp16_backend(self) -> str:
        return self.backend if frozenset() in self.oracle.memo or self.fp16 is None else LABEL

    @property
    def final(self) -> Evaluation:
        return self.oracle.memo[frozenset(self.result.fp32)]

    def unverified(self) -> list[tuple[str, Reason | None]]:
        """The members of the answer whose removal could not be evaluated, each with the reason that evaluation
        gave (None: unknown)."""
        plan = frozenset(self.result.fp32)
        return [(member, getattr(self.oracle.memo.get(plan - {member}), "reason", None))
                for member in self.result.unverified]

