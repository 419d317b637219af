"""A check on a data set in the console: how many samples pass, the worst ones with their errors, the headroom."""

from __future__ import annotations

from rich.markup import escape

from fp16bisect.report.headroom import accumulator_lines, headroom_lines

TABLE_ALL_UP_TO = 8  # samples: above this, the check's table lists the worst samples' rows only


def table_metrics(outcome) -> list:
    """The metrics the check's table shows: every row on a few samples, else the worst samples' rows."""
    metrics = list(outcome.evaluation.metrics)
    if len({m.sample for m in metrics}) <= TABLE_ALL_UP_TO:
        return metrics
    worst = [e["index"] for e in outcome.per_sample()[:5]]
    return [m for i in worst for m in metrics if m.sample == i]


def dataset_lines(outcome) -> list[str]:
    """Lines (rich markup): the samples that pass, the worst named with each output's max abs error and the
    sample's source, then the headroom of the tensors computed in FP16."""
    lines = []
    ranked = outcome.per_sample()
    if ranked:
        passed = sum(e["passed"] for e in ranked)
        lines.append(f"{passed} of {len(ranked)} sample(s) pass")
        failing = [e for e in ranked if not e["passed"]][:5]
        if len(ranked) > 1:
            for e in failing or ranked[:1]:
                errors = ", ".join(f"{escape(k)} {v:.3g}" for k, v in e["max_abs"].items())  # inf prints as inf
                label = "[red]fails[/red]" if not e["passed"] else "worst"
                lines.append(f"  {label}: sample {e['index']} ({escape(e['source'])}): max abs error {errors}")
    lines += headroom_lines(outcome.headroom, command="check", low=outcome.graph.precision.label)
    lines += accumulator_lines(outcome.accumulators, outcome.graph.precision.name, "check",
                               (outcome.headroom or {}).get("flag"),
                               judged=(outcome.accumulate, outcome.judged_from.get("accumulate", "default")))
    return lines
