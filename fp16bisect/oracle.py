"""Plan -> evaluation: run a backend on every sample and apply the tolerance.

Memoised: no plan is run twice. Every evaluation is kept, in order, for the
report and the override JSON.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .errors import BuildFailed, UsageError
from .tolerance import OutputMetrics, Tolerance, compare, worst_per_output


@dataclass(frozen=True)
class Evaluation:
    plan: frozenset
    passed: bool
    metrics: tuple  # OutputMetrics, one per (sample, output)
    seconds: float
    error: str = ""  # the backend could not build or run this plan (its message); then passed is False

    def worst(self) -> dict[str, OutputMetrics]:
        return worst_per_output(list(self.metrics))


class Oracle:
    def __init__(self, backend, samples, tolerance: Tolerance, outputs: list[str]):
        self.backend = backend
        self.samples = samples
        self.tolerance = tolerance
        self.outputs = outputs
        self.memo: dict[frozenset, Evaluation] = {}
        self.history: list[Evaluation] = []

    def __call__(self, plan) -> bool:
        return self.evaluate(plan).passed

    def evaluate(self, plan) -> Evaluation:
        plan = frozenset(plan)
        if plan in self.memo:
            return self.memo[plan]
        start = time.perf_counter()
        metrics = []
        for i, sample in enumerate(self.samples):
            try:
                got = self.backend.run(plan, sample.inputs)
            except BuildFailed as exc:
                return self._keep(Evaluation(plan, False, (), time.perf_counter() - start, error=str(exc)))
            for name in self.outputs:
                try:
                    metrics.append(compare(got[name], sample.reference[name], self.tolerance, name, i))
                except ValueError as exc:
                    raise UsageError(f"{exc} on {sample.source!r}: pass a reference made for these inputs") from None
        return self._keep(
            Evaluation(plan, all(m.passed for m in metrics), tuple(metrics), time.perf_counter() - start)
        )

    def _keep(self, evaluation: Evaluation) -> Evaluation:
        self.memo[evaluation.plan] = evaluation
        self.history.append(evaluation)
        return evaluation

    @property
    def build_failures(self) -> list[Evaluation]:
        return [e for e in self.history if e.error]
