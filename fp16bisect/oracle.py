"""Plan -> evaluation: run a backend on every sample and apply the tolerance.

Memoised: no plan is run twice. Every evaluation is kept, in order, for the
report and the override JSON, and appended to the journal (when there is one)
before the next starts; a journal from an interrupted run is replayed instead
of rerun. With ``repeats`` N, a plan is run N times (on TensorRT: N builds) and
passes only if every run passes. ``evaluate(plan, recheck=k)`` runs a plan
afresh (the final set's re-evaluation): on a backend whose builds vary, a plan
that passed once can fail the next time, and the search must know.

With an ``executor`` (fp16bisect.parallel: worker processes or Ray tasks), ``evaluate_many`` runs the plans not
yet known concurrently; each evaluation is memoised and journaled as it completes, in completion order, so an
interrupted parallel search resumes like a serial one.
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
    metrics: tuple  # OutputMetrics, one per (repeat, sample, output)
    seconds: float
    error: str = ""  # the backend could not build or run this plan (its message); then passed is False
    flaky: bool = False  # repeats disagreed: some passed, some failed

    def worst(self) -> dict[str, OutputMetrics]:
        return worst_per_output(list(self.metrics))

    def to_json(self) -> dict:
        return {"plan": sorted(self.plan), "passed": self.passed, "seconds": round(self.seconds, 4),
                "error": self.error, "flaky": self.flaky, "metrics": [m.to_json() for m in self.metrics]}

    @classmethod
    def from_json(cls, entry: dict) -> Evaluation:
        metrics = tuple(OutputMetrics(**{k: _number(v) for k, v in m.items()}) for m in entry.get("metrics", []))
        return cls(frozenset(entry["plan"]), bool(entry["passed"]), metrics, float(entry.get("seconds", 0.0)),
                   str(entry.get("error", "")), bool(entry.get("flaky", False)))


def _number(value):
    return float(value) if value in ("inf", "-inf", "nan") else value


class Oracle:
    def __init__(self, backend, samples, tolerance: Tolerance, outputs: list[str], *, repeats: int = 1,
                 journal=None, executor=None):
        self.backend = backend
        self.executor = executor  # evaluates several plans at once (``evaluate_many``); None: one by one, here
        self.samples = samples
        self.tolerance = tolerance
        self.outputs = outputs
        self.repeats = max(1, int(repeats))
        self.journal = journal
        self.memo: dict[frozenset, Evaluation] = {}
        self.rechecks: dict[tuple, Evaluation] = {}
        self.history: list[Evaluation] = []
        self.replayed: set[frozenset] = set()
        self.runs = 0  # evaluations run by this invocation (not replayed)
        for entry in journal.entries if journal else ():
            evaluation = Evaluation.from_json(entry)
            if entry.get("recheck"):
                self.rechecks[(evaluation.plan, int(entry["recheck"]))] = evaluation
            elif evaluation.plan not in self.memo:
                self.memo[evaluation.plan] = evaluation
                self.history.append(evaluation)
                self.replayed.add(evaluation.plan)

    def __call__(self, plan) -> bool:
        return self.evaluate(plan).passed

    @property
    def width(self) -> int:
        """Plans evaluated at once."""
        return self.executor.width if self.executor is not None else 1

    def test_many(self, plans) -> list[bool]:
        return [e.passed for e in self.evaluate_many(plans)]

    def evaluate_many(self, plans) -> list[Evaluation]:
        """Evaluations of independent plans; those not yet known run together on the executor."""
        plans = [frozenset(p) for p in plans]
        todo = list(dict.fromkeys(p for p in plans if p not in self.memo))
        if self.executor is None or len(todo) <= 1:
            return [self.evaluate(p) for p in plans]
        for evaluation in self.executor.evaluate(todo, 0, self.repeats):
            self._keep(evaluation, 0)
        return [self.memo[p] for p in plans]

    def evaluate(self, plan, recheck: int = 0) -> Evaluation:
        """``recheck`` k > 0: a fresh evaluation of a plan already judged (its own builds), kept apart."""
        plan = frozenset(plan)
        if recheck:
            if (plan, recheck) in self.rechecks:
                return self.rechecks[(plan, recheck)]
        elif plan in self.memo:
            return self.memo[plan]
        if self.executor is not None:
            evaluation, = self.executor.evaluate([plan], recheck * self.repeats, self.repeats)
        else:
            evaluation = evaluate_plan(self.backend, self.samples, self.tolerance, self.outputs, plan,
                                       recheck * self.repeats, self.repeats)
        return self._keep(evaluation, recheck)

    def _keep(self, evaluation: Evaluation, recheck: int) -> Evaluation:
        """Memoise and journal an evaluation that has just completed."""
        plan = evaluation.plan
        self.runs += 1
        if recheck:
            self.rechecks[(plan, recheck)] = evaluation
        else:
            self.memo[plan] = evaluation
            self.history.append(evaluation)
        if self.journal is not None:
            self.journal.append({**evaluation.to_json(), **({"recheck": recheck} if recheck else {})})
        return evaluation

    @property
    def build_failures(self) -> list[Evaluation]:
        return [e for e in self.history if e.error]

    @property
    def flaky(self) -> list[Evaluation]:
        return [e for e in [*self.history, *self.rechecks.values()] if e.flaky]


def evaluate_plan(backend, samples, tolerance: Tolerance, outputs: list[str], plan: frozenset, first_repeat: int = 0,
                  repeats: int = 1) -> Evaluation:
    """Run a plan on every sample, ``repeats`` times (repeat indices from ``first_repeat``), against the
    tolerance. A build failure is a failing evaluation with the backend's message. Runs wherever the backend
    lives: in this process, or in a worker of fp16bisect.parallel."""
    start = time.perf_counter()
    metrics = []
    verdicts = []
    for repeat in range(first_repeat, first_repeat + repeats):
        run_metrics = []
        for i, sample in enumerate(samples):
            try:
                got = backend.run(plan, sample.inputs, repeat=repeat)
            except BuildFailed as exc:
                return Evaluation(plan, False, tuple(metrics), time.perf_counter() - start, error=str(exc))
            for name in outputs:
                try:
                    run_metrics.append(compare(got[name], sample.reference[name], tolerance, name, i))
                except ValueError as exc:
                    raise UsageError(f"{exc} on {sample.source!r}: pass a reference made for these inputs") \
                        from None
        verdicts.append(all(m.passed for m in run_metrics))
        metrics += run_metrics
    return Evaluation(plan, all(verdicts), tuple(metrics), time.perf_counter() - start,
                      flaky=len(set(verdicts)) > 1)
