"""How a backend that judges whole plans (the command backend) runs a plan's samples: in stages, lazily.

Such a backend (a ``backends.PlanJudge``) takes several samples in one call (``run_plan``: one command, one engine build, for all of
them). A plan that fails is known at its first failing sample, so with ``stop_early`` the plan is judged first
on the first sample of the oracle's order alone (the most stressing one, or the one that failed the last plan),
and on the rest only if it passes there: a failing plan usually costs one call on one sample, a passing plan two
calls, every sample judged once. Without ``stop_early`` (``check``), or with one sample, one call takes them all.
The backend gets the samples' inputs as a sequence that reads each sample when asked (``StageInputs``), so one
sample's inputs are in memory at a time however many samples there are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, overload

from fp16bisect.backends.base import PlanJudge, Verdict
from fp16bisect.errors import CouldNotEvaluate

if TYPE_CHECKING:
    from fp16bisect.model.samples import Sample


def stages(indices: list[int], stop_early: bool) -> list[list[int]]:
    """The calls a plan's samples go in: the first alone, then the rest (``stop_early``), else all at once."""
    if stop_early and len(indices) > 1:
        return [indices[:1], indices[1:]]
    return [list(indices)]


class StageInputs(Sequence[dict]):
    """The inputs of the samples ``indices``, in that order, each read when asked (``samples[i].inputs``);
    ``sources`` says which sample each one is (what to call it in messages and files)."""

    def __init__(self, samples: Sequence[Sample], indices: list[int]) -> None:
        self.samples, self.indices = samples, list(indices)
        self.sources = [getattr(samples[i], "source", f"sample {i}") for i in self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, k: int) -> dict: ...

    @overload
    def __getitem__(self, k: slice) -> list[dict]: ...

    def __getitem__(self, k: int | slice) -> dict | list[dict]:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        return self.samples[self.indices[k]].inputs


def judge_stage(backend: PlanJudge, name: str, samples: Sequence[Sample], plan: frozenset, stage: list[int],
                repeat: int, placeholders: dict | None) -> Verdict | Callable[[int], dict]:
    """One call of ``run_plan`` on the samples ``stage``: a ``Verdict``, or a function from a sample's index (one
    of ``stage``) to its outputs. ``name``: the backend's, for messages."""
    judged = backend.run_plan(plan, StageInputs(samples, stage), repeat=repeat,
                              placeholders={"device": "0", **(placeholders or {})})
    if isinstance(judged, Verdict):
        return judged
    if len(judged) != len(stage):
        raise CouldNotEvaluate(f"the {name} backend returned outputs for {len(judged)} sample(s), "
                               f"not {len(stage)}", kind="outputs")
    position = {i: k for k, i in enumerate(stage)}
    return lambda i: judged[position[i]]
