"""The runs behind an HTML report (``--report``): the layer-wise comparisons, the FP32 profile, the contrast.

A command's own result lacks what the report shows: every candidate's error in all-FP16 and with the
plan (the layer-wise comparison, emulated whatever backend judged the plans: TensorRT's fused layers hide
intermediate tensors), the FP32 magnitudes (the profile, the same one the search ranks suspects by; a
search has it already) and, for ``check`` and ``compare``, the all-FP16 outputs to contrast with (emulated
in the layer-wise session). The CLI runs them here and hands them to ``report/data.py``, which only packs.
"""

from __future__ import annotations

from dataclasses import dataclass

from fp16bisect.diagnose.layerwise import Layerwise, LayerwiseRunner, Thresholds
from fp16bisect.evaluation.oracle import Evaluation, Oracle
from fp16bisect.model.profile import Profile, profile


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


def search_runs(outcome) -> ReportRuns:
    """For ``search``: the layer-wise runs of all-FP16 and of the set found; the profile is the search's own."""
    runner = LayerwiseRunner(outcome.graph, outcome.oracle.samples)
    fp16 = outcome.fp16
    if fp16 is None:  # never judged (--headroom forces nodes in every plan): emulated, as the per-node errors are
        oracle = outcome.oracle
        fp16 = Oracle(runner.backend, oracle.samples, oracle.tolerance, outcome.graph.float_output_names()).evaluate(
            frozenset())
    return _layer_runs(runner, frozenset(outcome.result.fp32), fp16, outcome.final, outcome.profile)


def check_runs(outcome) -> ReportRuns:
    """For ``check``: with overrides, the all-FP16 outputs emulated as the contrast (one emulation session for
    them and the per-node errors), then the profile and the layer-wise runs."""
    use = outcome.overrides
    plan = frozenset(use.nodes) if use else frozenset()
    graph = outcome.graph
    runner = LayerwiseRunner(graph, outcome.samples)
    fp16 = outcome.evaluation
    if use:
        oracle = Oracle(runner.backend, outcome.samples, outcome.tolerance, graph.float_output_names())
        fp16 = oracle.evaluate(frozenset())
    return _layer_runs(runner, plan, fp16, outcome.evaluation if use else None)


def compare_runs(runner: LayerwiseRunner, result: Layerwise, tolerance) -> ReportRuns:
    """For ``compare``: the outputs of all-FP16 and of the plan (if any) against ``tolerance``, emulated in the
    comparison's session, then the profile and the layer-wise runs under the comparison's rule."""
    oracle = Oracle(runner.backend, runner.samples, tolerance, runner.graph.float_output_names())
    plan = result.plan
    fp16 = oracle.evaluate(frozenset())
    with_overrides = oracle.evaluate(plan) if plan else None
    return _layer_runs(runner, plan, fp16, with_overrides, thresholds=result.thresholds)


def _layer_runs(runner: LayerwiseRunner, plan: frozenset, fp16: Evaluation, with_overrides: Evaluation | None,
                prof: Profile | None = None, thresholds: Thresholds | None = None) -> ReportRuns:
    prof = prof or profile(runner.graph, runner.samples)
    thresholds = thresholds or Thresholds(low=runner.graph.precision)  # None: the precision's own
    layer_fp16 = runner.run(frozenset(), thresholds)
    layer_plan = runner.run(plan, thresholds) if with_overrides is not None else None
    return ReportRuns(plan, fp16, with_overrides, layer_fp16, layer_plan, prof, thresholds)
