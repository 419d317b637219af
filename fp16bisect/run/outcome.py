"""What a search returns to whoever runs it: the ``Listener`` it reports to, the ``Outcome`` it ends with, and that
outcome as the values of its override JSON (what pipelines read), small on any model.

The file itself is built by ``artifacts/override_json.py`` (its one builder, which the command backend uses too);
the functions below turn the search, the oracle and the prior into the plain sections that builder takes, and the
``Outcome`` makes its file from them when it is made."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from fp16bisect import __version__
from fp16bisect.algorithm.budget import Stop
from fp16bisect.artifacts.override_json import graph_sections, overrides_file
from fp16bisect.artifacts.overrides import Overrides
from fp16bisect.model.graph import Graph
from fp16bisect.model.headroom import Forced, accumulator_reason
from fp16bisect.model.plan_states import accumulating, states
from fp16bisect.model.profile import Profile
from fp16bisect.evaluation.oracle import EXIT_CODE, Evaluation, Oracle, Reason
from fp16bisect.evaluation.space import View
from fp16bisect.run.coverage import answer_accumulators, answer_headroom, samples_json
from fp16bisect.run.invocation import Invocation
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

    def timed(self, text: str) -> AbstractContextManager[None]:
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
    forced: list[Forced] = field(default_factory=list)  # the nodes --headroom kept in FP32
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


# The override file stays small whatever the search met (pipelines read it, CI stores it): lists of plans are
# capped to their first EXAMPLES entries ("<key>_total" says how many there were), a plan is listed in full up to
# PLAN_IDS ids, the trace to TRACE_LIMIT steps. The journal keeps everything.
EXAMPLES, PLAN_IDS, TRACE_LIMIT = 10, 64, 1000


def plan_json(plan: frozenset) -> list | dict:
    """A plan's ids, or for a large plan how many it holds."""
    return sorted(plan) if len(plan) <= PLAN_IDS else {"ids": len(plan), "listed_in": "the journal"}


def capped(key: str, items: list, limit: int = EXAMPLES) -> dict:
    """``key``: the first ``limit`` items; ``<key>_total``: how many there were, when some were left out."""
    return {key: items} if len(items) <= limit else {key: items[:limit], f"{key}_total": len(items)}


def contradictions_json(found: list[tuple[frozenset, frozenset]]) -> dict:
    """How often the judge contradicted monotonicity, and the first examples as node-id differences: a plan that
    passed and what its failing superset added (nothing: the same plan failed when evaluated again)."""
    return {"count": len(found), "examples": [
        {"passed_ids": len(small), "failed_adding": sorted(big - small), "same_plan_failed_again": small == big}
        for small, big in found[:EXAMPLES]]}


def prior_json(o: Outcome) -> dict | None:
    p, r = o.prior, o.result
    if p is None:
        return None
    return {"backend": "emulate", "status": p.status, "fp32": list(p.fp32), "evaluations": p.evaluations,
            "seconds": round(p.seconds, 3), "minimal": p.minimal, "agreed": bool(r.agreed),
            "added": list(r.added), "dropped": list(r.dropped), "replayed": p.replayed,
            "journal": p.journal if o.oracle.journal is None or o.oracle.journal.keep else "",  # removed: ""
            "alternatives": alternatives_json(p, r)}


def alternatives_json(p: Prior, r: SearchResult) -> dict | None:
    """When the prior's set failed on the judge: the emulator's alternatives (made, from how many emulator
    evaluations) and how many were evaluated on the judge; ``used``: the answer came from one of them."""
    tried = [s for s in r.trace if s.phase == "alternative"]
    if not p.alternatives and not tried:
        return None
    return {**p.alternatives, "evaluated": len(tried), "used": any(s.passed for s in tried)}


def ignored_pins(oracle: Oracle) -> list[dict]:
    """Weakly typed TensorRT builds whose FP32 pins TensorRT ignored: node, the engine layer it was fused
    into, and the plan (not counted as evidence). Read from the evaluations' reasons, so a resumed search
    lists those of the replayed evaluations too."""
    return [{"node": node, "layer": layer, "fp32": plan_json(e.plan)}
            for e in oracle.build_failures if e.reason for node, layer in e.reason.pins]


def unverified(o: Outcome) -> list[dict]:
    """The members of the answer whose removal could not be evaluated, each with the reason."""
    return [{"node": member, "reason": reason.to_json() if reason else {"kind": "unknown", "message": ""}}
            for member, reason in o.unverified()]


def stopped_json(stop: Stop) -> dict:
    """Why the search ended before its end, the label its answer carries, and the budget it was given."""
    limits = {"max_evaluations": stop.evaluations, "time_limit": stop.seconds}
    return {"by": stop.cause, "label": stop.label, "reason": stop.said,
            **{key: value for key, value in limits.items() if value is not None}}


def search_json(o: Outcome) -> dict:
    """The ``search`` section: what the search did and found, its evaluations, and what went wrong."""
    result, oracle = o.result, o.oracle
    return {
        "status": result.status,
        "candidates": len(o.graph.candidates),
        "evaluations": result.evaluations,
        "evaluations_run": oracle.runs,
        "rounds": result.rounds,  # batches that waited on each other (== evaluations with --jobs 1)
        "jobs": oracle.width,  # plans evaluated at once
        "repeats": oracle.repeats,
        **capped("flaky", [plan_json(e.plan) for e in oracle.flaky]),
        "minimal": result.minimal,  # with forced_by_headroom: 1-minimal beyond those nodes
        "minimality": result.minimality,
        **({"forced_by_headroom": [f.node for f in o.forced]} if o.headroom else {}),
        # members kept because their removal could not be evaluated: why, from that evaluation
        "unverified": unverified(o),
        "unevaluable": len(oracle.build_failures),
        # search --minimum's record (search.minimum), or the default step's (search.improvement)
        **({o.minimum.json_key: o.minimum.to_json()} if o.minimum is not None else {}),
        "verified": result.passed,
        **({"stopped": stopped_json(result.stopped)} if result.stopped is not None else {}),
        "contradictions": contradictions_json(result.contradictions),
        "seconds": round(o.seconds, 3),
        **capped("trace", [{"fp32": len(s.plan), "passed": s.passed, "phase": s.phase, "round": s.round}
                           for s in result.trace], TRACE_LIMIT),
        **capped("build_failures", [{"fp32": plan_json(e.plan), "error": e.error}
                                    for e in oracle.build_failures]),
        **capped("ignored_pins", ignored_pins(oracle)),
        # every evaluation in full (plans, verdicts, errors, metrics): the journal, when -o and --keep-journal
        "journal": str(oracle.journal.path) if oracle.journal is not None and oracle.journal.keep else None,
        # the command line that reproduces this search (None: its model or samples were given in memory)
        "command": o.run.argv() if o.run is not None else None,
    }


def metrics_json(o: Outcome) -> dict:
    """Per output, the worst sample of the all-FP32 plan, the all-FP16 plan and the answer. fp32 is null when
    the search never needed the all-FP32 plan (a passing plan implies it); fp16 comes from the emulator
    (fp16_backend says so) when a prior's witness made the all-FP16 build unnecessary."""

    def worst(plan: Iterable) -> dict | None:
        """Per output, the worst sample; {} when the plan was not evaluated, None when its verdict was a
        command's exit code (no outputs to measure). The all-FP16 plan may come from the prior (o.fp16)."""
        evaluation = o.fp16 if not plan else o.oracle.memo.get(frozenset(plan))
        if evaluation is not None and evaluation.verdict_from == EXIT_CODE:
            return None
        return {k: m.to_json() for k, m in evaluation.worst().items()} if evaluation else {}

    everything = frozenset(n.id for n in o.graph.candidates)
    return {"fp32": worst(everything) or None, "fp16": worst(()), "fp16_backend": o.fp16_backend,
            "with_overrides": worst(o.result.fp32)}


def overrides_json(o: Outcome) -> Overrides:
    """The whole file for ``o``, as the file's type: the final plan split into its
    FP32 nodes and its FP32-accumulation nodes (``model/plan_states.py``)."""
    graph, result = o.graph, o.result
    fp32 = states(result.fp32)[0]
    sources = [s.source for s in o.oracle.samples]
    reasons = {r.node: r.reason for r in o.profile.risks}
    reasons.update({f.node: f.reason(sources) for f in o.forced})
    reasons.update({n: o.constraints.reason(n) for n in o.constraints.fp32})
    reasons.update({accumulating(a.node): accumulator_reason(a, sources, graph.precision, o.headroom)
                    for a in o.profile.accumulators})
    return overrides_file(
        graph, {i: reasons.get(i, "") for i in result.fp32},
        backend={"name": o.backend, **o.backend_info,
                 "versions": {"fp16bisect": __version__, **o.backend_info.get("versions", {})}},
        tolerance=o.tolerance.to_json(), search=search_json(o), metrics=metrics_json(o), output=o.output,
        more={**({"environment": o.environment} if o.environment else {}), "accumulate": o.accumulate,
              "prior": prior_json(o), **({"diagnosis": o.diagnosis} if o.diagnosis else {}), "shapes": o.shapes,
              **graph_sections(graph, result.fp32),
              "samples": samples_json(o.oracle, o.profile.sample_order),
              "headroom": answer_headroom(graph, o.profile, fp32, sources, o.headroom, o.forced),
              "accumulators": answer_accumulators(graph, o.profile, result.fp32, sources),
              **({"constraints": o.constraints.to_json(len(graph.candidates))} if o.constraints else {}),
              **({"blocks": o.blocks.to_json(fp32)} if o.blocks is not None else {})})
