"""Plan -> evaluation: run a backend on every sample and apply the tolerance.

Memoised: no plan is run twice. Every evaluation is kept, in order, for the
report and the override JSON, and appended to the journal (when there is one)
before the next starts; a journal from an interrupted run is replayed instead
of rerun. Each evaluation is journaled as started before it runs, and abandoned when the
process unwinds from it (Ctrl-C): one the process died in is not rerun on resume
(fp16bisect.evaluation.journal). With ``repeats`` N, a plan is run N times (on TensorRT: N builds) and
passes only if every run passes. ``evaluate(plan, recheck=k)`` runs a plan
afresh (the final set's re-evaluation): on a backend whose builds vary, a plan
that passed once can fail the next time, and the search must know.

Samples go most stressing first and a failing verdict stops at the first failing sample: each evaluation is
given the FP32 profile's order (``stress``, ``model/statistics.stress_order``; a search's ``evaluation/space.View``
gives it), and a sample that fails a plan goes first for the next (the most recent first). Only a passing plan runs
every sample, so a plan still passes only if every sample passes, and the verdicts, hence the answer, do not depend
on the order: a resumed search (whose replayed evaluations put their failing samples first again) gives the same
answer. Such an evaluation carries the metrics of the samples it ran (``Evaluation.samples``, in the order run).
``Oracle(..., stop_early=False)`` (``check``) runs every sample of every plan. A backend that judges whole plans gets
the first sample of the order alone, then the rest if the plan passed there (``evaluation/whole_plans.py``), each
sample's inputs read when it is written.

With an ``executor`` (fp16bisect.parallel: worker processes or Ray tasks), ``evaluate_many`` runs the plans not
yet known concurrently; each evaluation is memoised and journaled as it completes, in completion order, so an
interrupted parallel search resumes like a serial one.

Two kinds of backend, told apart by what they are (``backends.base``'s Protocols), never by name. A
``SampleRunner`` runs one sample at a time: ``run(plan, inputs, repeat=)`` returns that sample's outputs. A
``PlanJudge`` judges a whole plan at once (the ``command`` backend runs one command for several samples):
``run_plan(plan, inputs_per_sample, repeat=)`` returns either every given sample's
outputs (compared here, like any others) or a bare ``Verdict`` (the command's
exit code): then the evaluation says so (``verdict_from = "exit_code"``) and
carries no metrics. Outputs such a backend hands over that do not fit the
references (a shape differs) make the plan one that could not be evaluated,
with the reason, never a crash. Either kind raises ``errors.CouldNotEvaluate`` (``BuildFailed`` for a build) for a
plan it cannot evaluate.

Three verdicts: pass, fail, and could not evaluate (a build or a command that
failed, exit 125, an ignored pin, outputs that do not fit, a worker that died).
The third is data (``Reason``: a kind, the message, the ignored pins), never
evidence: ``Oracle(plan)`` answers True, False or None, and the search calls a
set 1-minimal only where every removal answered False. When more than half of
the plans asked (at least ``UNEVALUABLE_AFTER``) could not be evaluated, none
passed and not even all-FP16 (which pins nothing) was judged, the judge itself
is broken (a command that cannot run the file, a TensorRT that cannot build):
the oracle stops with ``JudgeBroken`` (exit 2)
naming the first reason, rather than build on for hours with nothing to end on.
Once a plan has passed, the search can always end on a passing set, so it goes
on, and names the members it could not verify.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from fp16bisect.backends.base import Backend, PlanJudge, SampleRunner, Verdict
from fp16bisect.errors import CouldNotEvaluate, UsageError
from fp16bisect.evaluation.verdicts import EXIT_CODE, OUTPUTS, Evaluation, Reason, VerdictFrom
from fp16bisect.evaluation.whole_plans import judge_stage, stages
from fp16bisect.tolerance import OutputMetrics, Tolerance, accepted, compare

if TYPE_CHECKING:  # the journal writes evaluations (verdicts.py); the oracle only hands it them
    from fp16bisect.evaluation.journal import Journal
    from fp16bisect.model.samples import Sample

__all__ = ["EXIT_CODE", "OUTPUTS", "Evaluation", "Judging", "JudgeBroken", "Oracle", "Reason", "SampleOrder",
           "VerdictFrom", "evaluate_plan"]  # the evaluation's records too: callers import them from here

UNEVALUABLE_AFTER = 8  # plans asked before the share that could not be evaluated can stop the search


class JudgeBroken(UsageError):
    """More than half of the plans asked could not be evaluated: exit 2 with the first reason."""


class Executor(Protocol):
    """What evaluates several plans at once (``fp16bisect.parallel``'s ``PlanExecutor``): ``width`` of them, each
    ``Evaluation`` yielded as it completes."""

    width: int

    def evaluate(self, plans: list[frozenset], first_repeat: int, repeats: int,
                 order: SampleOrder) -> Iterable[Evaluation]: ...

    def close(self) -> None: ...


class Oracle:
    """Plans -> evaluations with ``backend`` on ``samples`` under ``tolerance`` (the ``outputs`` compared): each plan
    evaluated as it is asked (a search adds its fixed members through a ``View``), once. Made with everything it
    judges by; afterwards only its evaluations change it."""

    def __init__(self, backend: Backend, samples: list[Sample], tolerance: Tolerance, outputs: list[str], *,
                 repeats: int = 1, journal: Journal | None = None, executor: Executor | None = None,
                 stop_early: bool = True) -> None:
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
        self.stop_early = stop_early  # a failing plan stops at its first failing sample (module docstring)
        self.failing: list[int] = []  # samples that failed a plan, the most recent first
        self.phases: dict[frozenset, str] = {}  # plan -> the phase of the search that asked it first (``View.asked``)
        for entry in journal.entries if journal else ():
            evaluation = Evaluation.from_json(entry)
            if entry.get("recheck"):
                self.rechecks[(evaluation.plan, int(entry["recheck"]))] = evaluation
            elif evaluation.plan not in self.memo:
                self.memo[evaluation.plan] = evaluation
                self.history.append(evaluation)
                self.replayed.add(evaluation.plan)
                self._note_failure(evaluation)

    def order(self, stress: Sequence[int] = ()) -> list[int]:
        """The order the next plan tries the samples in: those that failed a plan (the most recent first), then
        the rest most stressing first (``stress``: the FP32 profile's order; the rest as given)."""
        failing = set(self.failing)
        ranked = [*map(int, stress), *range(len(self.samples))]
        return [*self.failing, *(i for i in dict.fromkeys(ranked) if i not in failing)]

    def _note_failure(self, evaluation: Evaluation) -> None:
        sample = evaluation.failed_on
        if sample is not None and 0 <= sample < len(self.samples):
            self.failing = [sample, *(i for i in self.failing if i != sample)]

    def __call__(self, plan: Iterable) -> bool | None:
        """The plan's verdict: True pass, False fail, None could not evaluate."""
        return self.evaluate(plan).verdict

    @property
    def width(self) -> int:
        """Plans evaluated at once."""
        return self.executor.width if self.executor is not None else 1

    def test_many(self, plans: Iterable[Iterable]) -> list[bool | None]:
        return [e.verdict for e in self.evaluate_many(plans)]

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        """Stops the executor's workers (if any); a run ended by an exception (a refusal, an interrupt) that
        evaluated nothing leaves no journal. The backend's own lifetime is ``with backend:``."""
        if self.executor is not None:
            self.executor.close()
        if exc[0] is not None and self.journal is not None:
            self.journal.discard_if_unused()

    def evaluate_many(self, plans: Iterable[Iterable], *, stress: Sequence[int] = ()) -> list[Evaluation]:
        """Evaluations of independent plans; those not yet known run together on the executor."""
        asked = [frozenset(p) for p in plans]
        todo = list(dict.fromkeys(p for p in asked if p not in self.memo))
        if self.executor is None or len(todo) <= 1:
            return [self.evaluate(p, stress=stress) for p in asked]
        for plan in todo:  # each marked started before it is submitted (fp16bisect.evaluation.journal)
            self._start(plan, 0)
        try:
            for evaluation in self.executor.evaluate(todo, 0, self.repeats, self._order(stress)):
                self._keep(evaluation, 0)
        except BaseException:  # Ctrl-C or an error, unwinding: those still running are not crashes
            self._abandon(todo, 0)
            raise
        return [self.memo[p] for p in asked]

    def evaluate(self, plan: Iterable, recheck: int = 0, *, stress: Sequence[int] = ()) -> Evaluation:
        """``recheck`` k > 0: a fresh evaluation of a plan already judged (its own builds), kept apart;
        ``stress``: the samples most stressing first (``order``)."""
        plan = frozenset(plan)
        if recheck:
            if (plan, recheck) in self.rechecks:
                return self.rechecks[(plan, recheck)]
        elif plan in self.memo:
            return self.memo[plan]
        self._start(plan, recheck)
        try:
            if self.executor is not None:
                evaluation, = self.executor.evaluate([plan], recheck * self.repeats, self.repeats,
                                                     self._order(stress))
            else:
                first = recheck * self.repeats
                evaluation = evaluate_plan(self.backend, Judging(self.samples, self.tolerance, self.outputs,
                                                                 self._order(stress)), plan,
                                           range(first, first + self.repeats))
        except BaseException:  # Ctrl-C or an error, unwinding: not a crash, a resumed search runs it again
            self._abandon([plan], recheck)
            raise
        return self._keep(evaluation, recheck)

    def _order(self, stress: Sequence[int]) -> SampleOrder:
        return SampleOrder(tuple(self.order(stress)), self.stop_early)

    def _start(self, plan: frozenset, recheck: int) -> None:
        """Journal the plan as started before it runs: if the process dies in it, a resume does not rerun it."""
        if self.journal is not None:
            self.journal.start(plan, recheck)

    def _abandon(self, plans: Iterable[frozenset], recheck: int) -> None:
        if self.journal is not None:
            self.journal.abandon(plans, recheck)

    def _keep(self, evaluation: Evaluation, recheck: int) -> Evaluation:
        """Memoise and journal an evaluation that has just completed."""
        plan = evaluation.plan
        self.runs += 1
        self._note_failure(evaluation)
        if recheck:
            self.rechecks[(plan, recheck)] = evaluation
        else:
            self.memo[plan] = evaluation
            self.history.append(evaluation)
        if self.journal is not None:
            self.journal.append({**evaluation.to_json(), **({"recheck": recheck} if recheck else {})})
        self._check_judge()
        return evaluation

    def _check_judge(self) -> None:
        """Stop when more than half of the plans asked could not be evaluated (module docstring)."""
        asked, lost = len(self.history), self.build_failures
        works = any(e.passed or (not e.plan and e.reason is None) for e in self.history)  # a pass, or all-FP16 judged
        if asked >= UNEVALUABLE_AFTER and 2 * len(lost) > asked and not works:
            first = lost[0]
            assert first.reason is not None  # build_failures holds the evaluations with a reason
            raise JudgeBroken(
                f"{len(lost)} of {asked} plans could not be evaluated on the {self.backend.name} backend and none "
                f"passed, so its verdicts cannot steer a search; the first ({len(first.plan)} node(s) in FP32): "
                f"{first.error.splitlines()[0] if first.error else first.reason.kind}: fix what makes it fail "
                "(the journal keeps every verdict), then rerun"
            )

    @property
    def build_failures(self) -> list[Evaluation]:
        """The evaluations that could not be evaluated (a build, a command, outputs, a worker), in order."""
        return [e for e in self.history if e.reason is not None]

    @property
    def flaky(self) -> list[Evaluation]:
        return [e for e in [*self.history, *self.rechecks.values()] if e.flaky]


@dataclass(frozen=True)
class SampleOrder:
    """Which samples an evaluation runs, in what order, and whether a failing sample ends it."""

    indices: tuple = ()  # () : every sample, in the given order
    stop_early: bool = True


@dataclass(frozen=True)
class Judging:
    """What a plan's evaluation is judged on: the samples (inputs and FP32 references), the tolerance, the
    outputs compared, and the order the samples run in (the same for every plan of a search, but the order)."""

    samples: list
    tolerance: Tolerance
    outputs: list
    order: SampleOrder = SampleOrder()

    @property
    def indices(self) -> list[int]:
        return list(self.order.indices) or list(range(len(self.samples)))


def evaluate_plan(backend: Backend, judging: Judging, plan: frozenset, repeats: range = range(1),
                  placeholders: dict | None = None) -> Evaluation:
    """Run a plan on ``judging``'s samples once per repeat index in ``repeats``, against its tolerance, in its
    order (by default every sample in turn, stopping at the first that fails). A plan the backend cannot evaluate
    is a failing evaluation with the backend's message. Runs wherever the backend lives: in this process, in a
    thread or in a worker of fp16bisect.parallel. A ``PlanJudge`` (the command backend) is given the samples in
    stages (``whole_plans.stages``); ``placeholders``: more values for what it runs, e.g. ``{"device": "1"}``."""
    start = time.perf_counter()
    judge = _Judge(backend, judging)
    metrics: list[OutputMetrics] = []
    verdicts = []
    bare: list[Verdict] = []  # the repeats' bare verdicts (exit codes)
    for repeat in repeats:
        try:
            run_metrics, said = judge.repeat(plan, repeat, placeholders)
        except CouldNotEvaluate as exc:
            return Evaluation(plan, False, tuple(metrics), time.perf_counter() - start, reason=Reason.of(exc),
                              samples=tuple(judge.ran))
        bare += said
        verdicts.append(all(v.passed for v in said) and all(m.passed for m in run_metrics))
        metrics += run_metrics  # every repeat runs (repeats that disagree are reported flaky), each stopping early
    return Evaluation(plan, all(verdicts), tuple(metrics), time.perf_counter() - start,
                      flaky=len(set(verdicts)) > 1, verdict_from=EXIT_CODE if bare else OUTPUTS,
                      detail="; ".join(dict.fromkeys(v.detail for v in bare if v.detail)), samples=tuple(judge.ran))


class _Judge:
    """One plan's evaluation under way: a repeat's metrics and bare verdicts, and the samples run (``ran``)."""

    def __init__(self, backend: Backend, judging: Judging) -> None:
        self.backend, self.judging = backend, judging
        self.plan_judge = backend if isinstance(backend, PlanJudge) else None  # judges whole plans: asked first
        self.runner = backend if isinstance(backend, SampleRunner) else None
        if self.plan_judge is None and self.runner is None:
            raise TypeError(f"the {backend.name} backend neither runs a sample (run) nor judges a plan (run_plan)")
        self.ran: dict[int, None] = {}

    def repeat(self, plan: frozenset, repeat: int, placeholders: dict | None) -> tuple[list, list[Verdict]]:
        if self.plan_judge is not None:
            return self._whole(self.plan_judge, plan, repeat, placeholders)
        samples, runner = self.judging.samples, self.runner
        assert runner is not None
        return self._compare(lambda i: runner.run(plan, samples[i].inputs, repeat=repeat), self.judging.indices), []

    def _whole(self, judge: PlanJudge, plan: frozenset, repeat: int, placeholders: dict | None) -> tuple[list, list]:
        """A plan judged whole, in stages (``whole_plans.stages``: the first sample alone, then the rest), until a
        stage fails: its metrics and the bare verdicts (exit codes) it got."""
        metrics: list[OutputMetrics] = []
        said: list[Verdict] = []
        for stage in stages(self.judging.indices, self.judging.order.stop_early):
            judged = judge_stage(judge, self.backend.name, self.judging.samples, plan, stage, repeat, placeholders)
            if isinstance(judged, Verdict):
                self.ran.update(dict.fromkeys(stage))
                said.append(judged)
                passed = judged.passed
            else:
                found = self._compare(judged, stage)
                metrics += found
                passed = all(m.passed for m in found)
            if not passed:
                break
        return metrics, said

    def _compare(self, outputs_of: Callable[[int], dict], indices: list[int]) -> list[OutputMetrics]:
        """The metrics of the samples ``indices``, in that order, until one fails when the order stops early."""
        samples, tolerance, found = self.judging.samples, self.judging.tolerance, []
        for i in indices:
            sample, got = samples[i], outputs_of(i)
            self.ran[i] = None
            for name in self.judging.outputs:
                if name not in got and sample.reference[name].dtype.kind != "f":
                    continue  # a command's files hold the float outputs alone
                try:
                    found.append(compare(got[name], sample.reference[name], tolerance, name, i))
                except ValueError as exc:
                    if self.plan_judge is not None:  # outputs made outside fp16bisect that do not fit: the plan's problem
                        raise CouldNotEvaluate(f"the {self.backend.name} backend's outputs for sample {i} do not "
                                               f"fit the reference: {exc}", kind="outputs") from None
                    raise UsageError(f"{exc} on {sample.source!r}: pass a reference made for these inputs") \
                        from None
            verdict = accepted(tolerance, got, sample.reference, i)  # the Python API's accept, ANDed
            found += [verdict] if verdict is not None else []
            if self.judging.order.stop_early and not all(m.passed for m in found):
                break
        return found
