"""The runs behind an HTML report (``--report``): the layer-wise comparisons, the FP32 profile, the contrast.

A command's own result lacks what the report shows: every candidate's error in all-FP16 and with the
plan (the layer-wise comparison, emulated whatever backend judged the plans: TensorRT's fused layers hide
intermediate tensors), the FP32 magnitudes (the profile, the same one the search ranks suspects by; a
search has it already) and, for ``check`` and ``compare``, the all-FP16 outputs to contrast with (emulated
in the layer-wise session). The CLI runs them here and hands them to ``report/data.py``, which only packs.

What a search computed is reused (its all-FP16 and final evaluations, its FP32 profile); what it could not
have (every candidate's tensors, in FP32, in all-FP16 and with the plan) runs once per sample, the three runs
of a sample compared as they come and dropped, so the report holds one sample's tensors at a time. The per-node
errors run on the ``NODE_SAMPLES`` most stressing samples (the FP32 profile's order, the one the search tries) and
each output's worst sample in all-FP16 and with the plan, not on every sample of a data set: where FP16 breaks a
node shows on the samples that stress it, and a report of a 48-sample search then costs about what a report of
one does (``scripts/bench_report.py``). The page says how many of how many. Each stage is said, with its
seconds, through ``say`` (a listener's ``stage``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fp16bisect.diagnose.layerwise import Layerwise, LayerwiseRunner, Thresholds
from fp16bisect.evaluation.oracle import Evaluation, Oracle
from fp16bisect.model.profile import Profile, profile
from fp16bisect.timing import timed

Say = Callable[[str], None]
NODE_SAMPLES = 8  # the most stressing samples the per-node errors run on (plus each output's worst)


def _quiet(text: str) -> None:
    """Says nothing: the stages of a report nobody watches."""


@dataclass
class ReportRuns:
    """What the report shows beside a command's result."""

    plan: frozenset  # the nodes kept in FP32 (empty: none)
    fp16: Evaluation  # the all-FP16 outputs
    with_overrides: Evaluation | None  # the plan's outputs; None when there is no plan to contrast
    layer_fp16: Layerwise  # every candidate's error in all-FP16
    layer_plan: Layerwise | None  # ... with the plan (when ``with_overrides``)
    profile: Profile  # the FP32 run's magnitudes
    thresholds: Thresholds  # the per-node rule the layer-wise runs judged by
    node_samples: tuple[int, ...] = ()  # the samples the per-node errors ran on (indices; all when compare's own)
    samples: int = 0  # how many samples the command had


def search_runs(outcome, say: Say = _quiet) -> ReportRuns:
    """For ``search``: the layer-wise runs of all-FP16 and of the set found; the profile is the search's own."""
    with timed(say, "report: setting up the layer-wise emulation"):
        runner = LayerwiseRunner(outcome.graph, outcome.oracle.samples)
    fp16 = outcome.fp16
    if fp16 is None:  # never judged (--headroom forces nodes in every plan): emulated, as the per-node errors are
        oracle = outcome.oracle
        with timed(say, f"report: all-{outcome.graph.precision.label} outputs on {len(oracle.samples)} sample(s) "
                        "(emulated)"):
            fp16 = Oracle(runner.backend, oracle.samples, oracle.tolerance,
                          outcome.graph.float_output_names()).evaluate(frozenset())
    return _layer_runs(runner, frozenset(outcome.result.fp32), fp16, outcome.final, say, outcome.profile)


def check_runs(outcome, say: Say = _quiet) -> ReportRuns:
    """For ``check``: with overrides, the all-FP16 outputs emulated as the contrast (one emulation session for
    them and the per-node errors), then the profile and the layer-wise runs."""
    use = outcome.overrides
    plan = frozenset(use.nodes) if use else frozenset()
    graph = outcome.graph
    with timed(say, "report: setting up the layer-wise emulation"):
        runner = LayerwiseRunner(graph, outcome.samples)
    fp16 = outcome.evaluation
    if use:
        with timed(say, f"report: all-{graph.precision.label} outputs on {len(outcome.samples)} sample(s) "
                        "(emulated)"):
            oracle = Oracle(runner.backend, outcome.samples, outcome.tolerance, graph.float_output_names())
            fp16 = oracle.evaluate(frozenset())
    return _layer_runs(runner, plan, fp16, outcome.evaluation if use else None, say)


def compare_runs(runner: LayerwiseRunner, result: Layerwise, tolerance, say: Say = _quiet) -> ReportRuns:
    """For ``compare``: the outputs of all-FP16 and of the plan (if any) against ``tolerance``, emulated in the
    comparison's session, then the profile and the layer-wise runs under the comparison's rule."""
    oracle = Oracle(runner.backend, runner.samples, tolerance, runner.graph.float_output_names())
    plan = result.plan
    with timed(say, f"report: the outputs on {len(runner.samples)} sample(s) (emulated)"):
        fp16 = oracle.evaluate(frozenset())
        with_overrides = oracle.evaluate(plan) if plan else None
    return _layer_runs(runner, plan, fp16, with_overrides, say, thresholds=result.thresholds, known=result)


def _layer_runs(runner: LayerwiseRunner, plan: frozenset, fp16: Evaluation, with_overrides: Evaluation | None,
                say: Say, prof: Profile | None = None, thresholds: Thresholds | None = None,
                known: Layerwise | None = None) -> ReportRuns:
    """The profile (unless given) and the layer-wise runs of all-FP16 and, with ``with_overrides``, of the plan;
    ``known``: one of them the command already ran (``compare``'s), not run again."""
    thresholds = thresholds or Thresholds(low=runner.graph.precision)  # None: the precision's own
    if prof is None:
        with timed(say, f"report: FP32 magnitudes on {len(runner.samples)} sample(s)"):
            prof = profile(runner.graph, runner.samples)
    layers = {known.plan: known} if known is not None and known.thresholds == thresholds else {}
    wanted = [frozenset()] + ([plan] if with_overrides is not None else [])
    missing = list(dict.fromkeys(p for p in wanted if p not in layers))  # an empty plan is all-FP16: run once
    chosen = node_samples(prof, (fp16, with_overrides), len(runner.samples))
    if missing:
        said = " and ".join("with the plan" if p else f"all-{runner.graph.precision.label}" for p in missing)
        with timed(say, f"report: per-node errors {said} on {_of(chosen, runner.samples)} (emulated)"):
            layers.update(zip(missing, runner.runs(missing, thresholds, chosen)))
    return ReportRuns(plan, fp16, with_overrides, layers[frozenset()],
                      layers[plan] if with_overrides is not None else None, prof, thresholds,
                      tuple(chosen) if missing else tuple(range(len(runner.samples))), len(runner.samples))


def node_samples(prof: Profile, evaluations, count: int) -> list[int]:
    """The samples the per-node errors run on: the ``NODE_SAMPLES`` most stressing (the profile's order; the
    first ones when it has none) and each output's worst sample in ``evaluations``, in sample order."""
    order = prof.sample_order or list(range(count))
    worst = {m.sample for e in evaluations if e is not None for m in e.worst().values()}
    return sorted(set(order[:NODE_SAMPLES]) | {i for i in worst if 0 <= i < count})


def _of(chosen: list[int], samples) -> str:
    return (f"{len(chosen)} of {len(samples)} samples (the most stressing and each output's worst)"
            if len(chosen) < len(samples) else f"{len(samples)} sample(s)")
