"""Plan -> evaluation: run a backend on every sample and apply the tolerance.

Memoised: no plan is run twice. Every evaluation is kept, in order, for the
report and the override JSON, and appended to the journal (when there is one)
before the next starts; a journal from an interrupted run is replayed instead
of rerun. With ``repeats`` N, a plan is run N times (on TensorRT: N builds) and
passes only if every run passes. ``evaluate(plan, recheck=k)`` runs a plan
afresh (the final set's re-evaluation): on a backend whose builds vary, a plan
that passed once can fail the next time, and the search must know.

Two kinds of backend. Most run one sample at a time: ``run(plan, inputs, repeat=)``
returns that sample's outputs. A backend that judges a whole plan at once (the
``command`` backend runs one command for all samples) has ``run_plan(plan,
inputs_per_sample, repeat=)`` instead, and returns either every sample's
outputs (compared here, like any others) or a bare ``Verdict`` (the command's
exit code): then the evaluation says so (``verdict_from = "exit_code"``) and
carries no metrics. Outputs such a backend hands over that do not fit the
references (a shape differs) make the plan one that could not be evaluated,
with the reason, never a crash. Either kind raises ``errors.BuildFailed`` for a
plan it cannot evaluate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .errors import BuildFailed, UsageError
from .tolerance import OutputMetrics, Tolerance, compare, worst_per_output


@dataclass(frozen=True)
class Verdict:
    """A whole plan judged by the backend itself, with no outputs to compare (a command's exit code)."""

    passed: bool
    detail: str = ""  # what the verdict rests on, e.g. "exit code 1; stderr: ..."


OUTPUTS, EXIT_CODE = "outputs", "exit_code"  # where an evaluation's verdict came from


@dataclass(frozen=True)
class Evaluation:
    plan: frozenset
    passed: bool
    metrics: tuple  # OutputMetrics, one per (repeat, sample, output); empty when the verdict is an exit code
    seconds: float
    error: str = ""  # the backend could not build or run this plan (its message); then passed is False
    flaky: bool = False  # repeats disagreed: some passed, some failed
    verdict_from: str = OUTPUTS  # OUTPUTS: the metrics under the tolerance; EXIT_CODE: the backend's bare verdict
    detail: str = ""  # with EXIT_CODE: what the verdict rests on (the exit code, the command's last stderr line)

    def worst(self) -> dict[str, OutputMetrics]:
        return worst_per_output(list(self.metrics))

    def to_json(self) -> dict:
        entry = {"plan": sorted(self.plan), "passed": self.passed, "seconds": round(self.seconds, 4),
                 "error": self.error, "flaky": self.flaky, "metrics": [m.to_json() for m in self.metrics]}
        if self.verdict_from != OUTPUTS:
            entry["verdict_from"] = self.verdict_from
        if self.detail:
            entry["detail"] = self.detail
        return entry

    @classmethod
    def from_json(cls, entry: dict) -> Evaluation:
        metrics = tuple(OutputMetrics(**{k: _number(v) for k, v in m.items()}) for m in entry.get("metrics", []))
        return cls(frozenset(entry["plan"]), bool(entry["passed"]), metrics, float(entry.get("seconds", 0.0)),
                   str(entry.get("error", "")), bool(entry.get("flaky", False)),
                   str(entry.get("verdict_from", OUTPUTS)), str(entry.get("detail", "")))


def _number(value):
    return float(value) if value in ("inf", "-inf", "nan") else value


class Oracle:
    def __init__(self, backend, samples, tolerance: Tolerance, outputs: list[str], *, repeats: int = 1,
                 journal=None):
        self.backend = backend
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

    def evaluate(self, plan, recheck: int = 0) -> Evaluation:
        """``recheck`` k > 0: a fresh evaluation of a plan already judged (its own builds), kept apart."""
        plan = frozenset(plan)
        if recheck:
            if (plan, recheck) in self.rechecks:
                return self.rechecks[(plan, recheck)]
        elif plan in self.memo:
            return self.memo[plan]
        evaluation = self._run(plan, first_repeat=recheck * self.repeats)
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
    def whole_plans(self) -> bool:
        """The backend judges a plan over all samples at once (``run_plan``), not sample by sample."""
        return hasattr(self.backend, "run_plan")

    def _run(self, plan: frozenset, first_repeat: int) -> Evaluation:
        start = time.perf_counter()
        metrics = []
        verdicts = []
        bare = []  # the repeats' bare verdicts (exit codes)
        for repeat in range(first_repeat, first_repeat + self.repeats):
            try:
                judged = self._judge(plan, repeat)
                if isinstance(judged, Verdict):
                    bare.append(judged)
                    verdicts.append(judged.passed)
                    continue
                run_metrics = self._compare(judged)
            except BuildFailed as exc:
                return Evaluation(plan, False, tuple(metrics), time.perf_counter() - start, error=str(exc))
            verdicts.append(all(m.passed for m in run_metrics))
            metrics += run_metrics
        return Evaluation(plan, all(verdicts), tuple(metrics), time.perf_counter() - start,
                          flaky=len(set(verdicts)) > 1, verdict_from=EXIT_CODE if bare else OUTPUTS,
                          detail="; ".join(dict.fromkeys(v.detail for v in bare if v.detail)))

    def _judge(self, plan: frozenset, repeat: int):
        """Outputs per sample (lazily, for backends that run one sample at a time), or a ``Verdict``."""
        if self.whole_plans:
            judged = self.backend.run_plan(plan, [s.inputs for s in self.samples], repeat=repeat)
            if not isinstance(judged, Verdict) and len(judged) != len(self.samples):
                raise BuildFailed(f"the {self.backend.name} backend returned outputs for {len(judged)} sample(s), "
                                  f"not {len(self.samples)}")
            return judged
        return (self.backend.run(plan, s.inputs, repeat=repeat) for s in self.samples)

    def _compare(self, outputs_per_sample) -> list[OutputMetrics]:
        found = []
        for i, (sample, got) in enumerate(zip(self.samples, outputs_per_sample)):
            for name in self.outputs:
                try:
                    found.append(compare(got[name], sample.reference[name], self.tolerance, name, i))
                except ValueError as exc:
                    if self.whole_plans:  # outputs made outside fp16bisect that do not fit: this plan's problem
                        raise BuildFailed(f"the {self.backend.name} backend's outputs for sample {i} do not fit "
                                          f"the reference: {exc}") from None
                    raise UsageError(f"{exc} on {sample.source!r}: pass a reference made for these inputs") \
                        from None
        return found

    @property
    def build_failures(self) -> list[Evaluation]:
        return [e for e in self.history if e.error]

    @property
    def flaky(self) -> list[Evaluation]:
        return [e for e in [*self.history, *self.rechecks.values()] if e.flaky]

