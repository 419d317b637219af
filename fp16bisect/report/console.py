"""What a person sees: progress while searching, a short table at the end."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.status import Status
from rich.table import Table
from rich.text import Text

from fp16bisect.model.plan_states import states
from fp16bisect.model.precision import precision_of
from fp16bisect.report.conversions import conversion_lines
from fp16bisect.model.shapes import said as shapes_said
from fp16bisect.evaluation.oracle import EXIT_CODE
from fp16bisect.artifacts.overrides import Overrides
from fp16bisect.run.outcome import Listener, Outcome
from fp16bisect.run.outcome import alternatives_json
from fp16bisect.report.dataset import dataset_lines, table_metrics
from fp16bisect.report.judged import judged_text, search_sources
from fp16bisect.report.headroom import accumulator_lines, headroom_lines, scan_header, scan_headroom_lines
from fp16bisect.algorithm.search import Step


class ConsoleListener(Listener):
    """A live status line on a terminal; plain log lines when output is not a terminal."""

    def __init__(self, quiet: bool = False, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.live = self.console.is_terminal and not quiet
        self.status: Status | None = None

    def stage(self, text: str) -> None:
        if self.quiet:
            return
        if self.live:
            self._stop()
            self.console.print(Text("· ", style="dim") + Text(text))  # Text: names with [...] are not markup
        else:
            print(f"fp16bisect: {text}", file=sys.stderr, flush=True)

    @contextmanager
    def timed(self, text: str):
        """A stage said once, with its seconds, when it ends (on a terminal a spinner shows it meanwhile); not
        said when it raises (the error says why)."""
        if self.quiet:
            yield
            return
        spinner = self.console.status(Text(text)) if self.live and self.status is None else None
        if spinner is not None:
            spinner.start()
        start = time.perf_counter()
        try:
            yield
        finally:
            if spinner is not None:
                spinner.stop()
        self.stage(f"{text} ({time.perf_counter() - start:.1f} s)")

    def step(self, step: Step, progress: dict) -> None:
        if self.quiet:
            return
        line = step_line(step, progress)
        if self.live:
            if self.status is None:
                self.status = self.console.status(Text(line))
                self.status.start()
            else:
                self.status.update(Text(line))
        else:
            print(f"fp16bisect: {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def step_line(step: Step, progress: dict) -> str:
    """One evaluation of a search as one line of text (a terminal's status line, a log line, an API callback)."""
    verdict = ("pass" if step.passed else "FAIL") + (" (from the journal)" if progress.get("replayed") else "")
    on = f" on {progress['backend']}" if progress.get("backend") else ""
    fp32, accumulate = states(step.plan)
    also = f", {len(accumulate)} in FP32 accumulation" if accumulate else ""
    return (
        f"evaluation {step.index}{on}: {len(fp32)} node(s) in FP32{also} -> {verdict} "
        f"[{step.phase}; {progress['searching']} candidate(s) in play, {progress['found']} found, "
        f"roughly {progress['estimate_left']} more evaluation(s)"
        + (f" after a ranking of {progress['ranking_runs']} run(s)" if progress.get("ranking_runs") else "")
        + (f" (estimate; at most {progress['bound_left']})" if "bound_left" in progress else " (estimate)")
        + (f"; budget left: {progress['budget']}]" if progress.get("budget") else "]")
    )


def _num(x: float, spec: str = ".3g") -> str:
    """A metric: non-finite ones (an output with inf/NaN) as inf, -inf or nan, never a number they are not."""
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def _error_cell(m) -> str:
    if m is None:
        return "-"
    if m.nonfinite:
        return f"[red]{_num(m.max_abs)} ({m.nonfinite} inf/NaN)[/red]"
    text = f"{m.max_abs:.3g} abs, {m.max_rel:.3g} rel"
    return text if m.passed else f"[red]{text}[/red]"


def _print_coverage(overrides: Overrides, console: Console) -> None:
    """Where the answer was verified: the input shapes the samples covered, and the headroom left in FP16."""
    covered, untested = shapes_said(overrides.section("shapes") or {})
    for line in [escape(t) for t in covered] + [f"[yellow]warning:[/yellow] {escape(t)}" for t in untested]:
        console.print(line, highlight=False, soft_wrap=True)
    for line in headroom_lines(overrides.headroom, low=precision_of(overrides.precision).label):
        console.print(line, highlight=False, soft_wrap=True)
    accumulate = overrides.accumulate
    for line in accumulator_lines(overrides.section("accumulators"), overrides.precision, "search",
                                  (overrides.headroom or {}).get("flag"),
                                  judged=(accumulate, search_sources(overrides.precision, accumulate)["accumulate"])):
        console.print(line, highlight=False, soft_wrap=True)


def print_summary(outcome: Outcome, output_path: str | None, console: Console | None = None) -> None:
    """After a search: the per-output table, the nodes kept in FP32, and what the search met; printed from the
    ``Outcome``'s typed parts and its override file (``outcome.overrides``)."""
    console = console or _console()  # a log file or pipe: output names not cut at 80 columns
    result, overrides = outcome.result, outcome.overrides
    fp16 = outcome.fp16.worst() if outcome.fp16 is not None else {}
    final = outcome.final.worst()
    low = outcome.graph.precision.label  # FP16, or BF16
    precision = outcome.graph.precision.name
    modes = judged_text(precision, outcome.accumulate, search_sources(precision, outcome.accumulate),
                        outcome.headroom)
    console.print(f"fp16bisect on {outcome.graph.shown} ({outcome.backend} backend; {modes}; {outcome.tolerance})",
                  highlight=False, soft_wrap=True)
    if fp16 or final:
        table = Table()
        table.add_column("output")
        table.add_column(f"all {low}: max error" + (" (emulated)" if outcome.fp16_backend != outcome.backend else ""))
        table.add_column("with overrides: max error")
        table.add_column("pass")
        for name in outcome.oracle.outputs:
            m = final.get(name)
            passed = m.passed if m else outcome.final.passed  # no metrics: the command's exit code judged
            table.add_row(name, _error_cell(fp16.get(name)), _error_cell(m), "yes" if passed else "[red]no[/red]")
        console.print(table)
    judged = [(label, e) for label, e in ((f"all {low}", outcome.fp16), ("with overrides", outcome.final))
              if e is not None and e.verdict_from == EXIT_CODE]
    if judged:
        console.print("judged by the command's exit code (it wrote no outputs to compare): " + "; ".join(
            f"{label} {'passes' if e.passed else 'fails'} ({e.detail})" for label, e in judged),
            highlight=False, soft_wrap=True)
    if result.status == "fp16_passes":
        console.print(f"All-{low} already meets the tolerance: nothing needs to stay in FP32.")
    else:
        forced = f" beyond the {len(outcome.forced)} node(s) --headroom forces" if outcome.forced else ""  # kept by rule
        minimal = f"1-minimal{forced}" if result.minimal else "[red]NOT minimal[/red]"
        how = f"{minimal}; {result.minimality}"
        if result.stopped is not None:  # the minimality starts with its label
            label = result.stopped.label
            how = f"[yellow]{escape(label)}[/yellow]{escape(result.minimality.removeprefix(label))}"
        console.print(
            f"{len(overrides.pinned)} of {len(outcome.graph.candidates)} candidate node(s) kept in FP32 ({how}):",
            soft_wrap=True)
        for pinned in overrides.pinned:
            console.print(
                f"  {escape(pinned.node.name)}  [dim]{escape(pinned.node.op_type)}; FP32 run: "
                f"{escape(pinned.fp32_profile)}[/dim]",
                highlight=False,
                soft_wrap=True,
            )
        print_accumulating(overrides.accumulating, console)
        _print_steering(outcome, console)
    if outcome.minimum is not None and outcome.minimum.ran:
        searched = states(result.fp32)[0] - {f.node for f in outcome.forced}  # --minimum, or the default step that ran
        console.print(f"{outcome.minimum.label}: {escape(outcome.minimum.line(searched))}", highlight=False,
                      soft_wrap=True)
    _print_coverage(overrides, console)
    failures = outcome.oracle.build_failures
    if failures:
        console.print(
            f"[yellow]{len(failures)} plan(s) could not be {outcome.evaluation_word}[/yellow] (not evidence either "
            f"way); the first ({len(failures[0].plan)} node(s) in FP32): {escape(failures[0].error)}",
            highlight=False, soft_wrap=True,
        )
    for node, reason in outcome.unverified():
        console.print(
            f"[yellow]kept, not verified:[/yellow] {escape(node)} (its removal could not be evaluated: "
            f"{escape(reason.kind if reason is not None else 'unknown')})", highlight=False, soft_wrap=True)
    for line in conversion_lines(overrides.section("conversions"), precision=outcome.graph.precision):
        console.print(line, highlight=False, soft_wrap=True)
    for note in overrides.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
    _print_prior(outcome, console)
    console.print(
        f"{result.evaluations} evaluation(s) on the {outcome.backend} backend in {outcome.seconds:.1f} s"
        + (f" ({result.rounds} round(s), up to {outcome.oracle.width} at once)" if outcome.oracle.width > 1 else "")
        + (f"; overrides written to {output_path}" if output_path else ""),
        highlight=False,
    )


def _print_steering(outcome, console) -> None:
    """What --keep-fp32/--keep-fp16 and --group-by did, in a line each."""
    steer, picked = outcome.constraints, outcome.blocks
    if steer:
        console.print(f"constraints: {len(steer.fp32)} node(s) kept in FP32, {len(steer.fp16)} never in FP32 "
                      f"({escape(steer.named())}); minimal over the other "
                      f"{steer.to_json(len(outcome.graph.candidates))['free']} node(s)", highlight=False,
                      soft_wrap=True)
    if picked is not None:
        fp32 = set(outcome.result.fp32)
        console.print(f"blocks: {len(picked.blocks)} of {picked.total} kept in FP32 by the block search "
                      f"({picked.evaluations} evaluation(s)), refined to nodes: " + "; ".join(
                          f"{escape(name)} {sum(n in fp32 for n in nodes)} of {len(nodes)}"
                          for name, nodes in picked.blocks.items()), highlight=False, soft_wrap=True)


def _print_prior(outcome: Outcome, console: Console) -> None:
    """On an expensive backend: the emulator's set the search started from, and how the judge took it."""
    prior, result = outcome.prior, outcome.result
    if prior is None:
        return
    how = "agreed" if result.agreed else "disagreed"
    changes = "; ".join(f"{what} {len(nodes)}: {escape(', '.join(nodes[:5]))}" + (", ..." if len(nodes) > 5 else "")
                        for what, nodes in (("added", list(result.added)), ("dropped", list(result.dropped))) if nodes)
    console.print(
        f"prior: the emulator's {len(prior.fp32)} node(s) after {prior.evaluations} emulated evaluation(s)"
        f"{' (read from the journal)' if prior.replayed else ''}; the {outcome.backend} backend {how}"
        + (f" ({changes})" if changes else "") + _alternatives(alternatives_json(prior, result)),
        highlight=False, soft_wrap=True,
    )


def print_next(steps: list[tuple], console: Console | None = None) -> None:
    """After a search: what to do with its answer, each step's command as it is to be typed."""
    console = console or _console()
    console.print("Next:", style="bold", highlight=False)
    for what, command in steps:
        console.print(f"  # {what}", style="dim", markup=False, highlight=False, soft_wrap=True)
        console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=160)


def print_accumulating(entries, console: Console) -> None:
    """The nodes in FP32 accumulation (stored in FP16, adding in FP32), listed apart from the FP32 pins, each with
    why (its sum's peak against the max, on which sample) when the file says."""
    if not entries:
        return
    console.print(f"{len(entries)} node(s) in FP32 accumulation (stored in FP16, adding in FP32; the mixed-precision "
                  "file writes Casts around each, which TensorRT fuses into one FP16-I/O kernel):", soft_wrap=True,
                  highlight=False)
    for entry in entries:
        why = f"; FP32 run: {escape(entry.fp32_profile)}" if entry.fp32_profile else ""
        console.print(f"  {escape(entry.node.name)}  [dim]{escape(entry.node.op_type)}; FP32 accumulation{why}[/dim]",
                      highlight=False, soft_wrap=True)


def _metric_cells(m) -> list[str]:
    bad = "[red]{}[/red]".format if m.nonfinite else str
    return [bad(_num(m.max_abs)), bad(_num(m.max_rel)), bad(_num(m.cosine, ".6f")), bad(str(m.nonfinite)),
            "yes" if m.passed else "[red]no[/red]"]


def print_check(outcome, line: str, console: Console | None = None) -> None:
    """``check``: the per-output table, then one verdict line."""
    console = console or _console()
    judged = judged_text(outcome.graph.precision.name, outcome.accumulate, outcome.judged_from,
                         (outcome.headroom or {}).get("flag"))
    console.print(f"fp16bisect check on {outcome.graph.shown} ({outcome.backend} backend; {judged}; tolerance: "
                  f"{outcome.tolerance} ({outcome.tolerance_from}))", highlight=False, soft_wrap=True)
    if outcome.evaluation.metrics:
        table = Table()
        for column in ("output", "sample", "max abs", "max rel", "cosine", "inf/NaN", "pass"):
            table.add_column(column)
        for m in table_metrics(outcome):
            table.add_row(m.output, str(m.sample), *_metric_cells(m))
        console.print(table)
    for text in [*dataset_lines(outcome), *(escape(t) for t in (outcome.drift.lines() if outcome.drift else []))]:
        console.print(text, highlight=False, soft_wrap=True)
    use = outcome.overrides
    if use and use.missing:
        console.print(f"[yellow]note:[/yellow] {len(use.missing)} override node(s) are not in this model and were "
                      f"not pinned: {', '.join(use.missing[:8])}", highlight=False, soft_wrap=True)
    style = "green" if outcome.passed else "red"
    console.print(f"[{style}]{line}[/{style}]", highlight=False, soft_wrap=True)


def print_scan(graph, data: dict, top: int, console: Console | None = None) -> None:
    """``scan``: the riskiest tensors and weights, then the candidates in suspicion order."""
    console = console or _console()
    tensors = data["tensors"]
    for line in scan_header(graph.path, graph.precision.name):
        console.print(line, highlight=False, soft_wrap=True)
    if not tensors:
        console.print(f"No tensor or weight comes near {graph.precision.label}'s limits on these inputs.")
    else:
        table = Table(title=f"tensors at risk ({len(tensors)}; riskiest first)")
        for column in ("tensor", "kind", "risk", "max |x|", "min nonzero |x|", f"what {graph.precision.label} does",
                       "written by"):
            table.add_column(column)
        for row in tensors[:top]:
            risk = row["risk"] if row["tier"] < 3 else f"[red]{row['risk']}[/red]"
            table.add_row(row["name"], row["kind"], risk, f"{row['max_abs']:.4g}", f"{row['min_nonzero_abs']:.3g}",
                          row["reason"], row["written_by"] or "-")
        console.print(table)
    for line in [*scan_headroom_lines(data.get("headroom", []), top, graph.precision.max),
                 *accumulator_lines(data.get("accumulators"), graph.precision.name, "scan", None, top,
                                    data.get("accumulators_note", ""))]:
        console.print(line, highlight=False, soft_wrap=True)
    suspects = [r for r in data["nodes"] if r["tier"] >= 2]
    console.print(f"{data['suspects']} suspect node(s) (the search tries them first, in this order)"
                  + (":" if suspects else "."), highlight=False)
    for r in suspects[:top]:
        console.print(f"  {r['name']}  [dim]{r['op_type']}; {r['reason']}[/dim]", highlight=False, soft_wrap=True)


def print_compare(result, csv_path: str | None, outputs=None, tolerance=None, console: Console | None = None,
                  low: str = "FP16") -> None:
    """``compare``: the first failing node, then every failing node in topological order; then the model's outputs
    against the tolerance (``outputs``, an ``Evaluation``: --atol/--rtol judge them). ``low``: FP16 or BF16."""
    console = console or _console()
    first = result.first_failing
    with_what = f"{len(result.plan)} node(s) in FP32" if result.plan else f"all-{low}"
    console.print(f"layer-wise comparison, {with_what}, against FP32 ({result.thresholds})", highlight=False,
                  soft_wrap=True)
    failing = result.failing
    if failing:
        table = Table(title=f"failing nodes ({len(failing)} of {len(result.nodes)}), topological order")
        for column in ("node", "op", "tensor", "max abs", "max rel", "cosine", "inf/NaN", "in FP32"):
            table.add_column(column)
        for n in failing[:30]:
            m = n.metrics
            table.add_row(n.node, n.op_type, m.output, *_metric_cells(m)[:4], "yes" if n.pinned else "")
        console.print(table)
    if first:
        console.print(f"first failing node: [bold]{first.node}[/bold] ({first.op_type}): where the error is born; "
                      "later nodes mostly inherit it", highlight=False, soft_wrap=True)
    else:
        console.print("no node fails the thresholds", highlight=False)
    if outputs is not None:
        table = Table(title=f"model outputs ({with_what}; {tolerance})")
        for column in ("output", "sample", "max abs", "max rel", "cosine", "inf/NaN", "pass"):
            table.add_column(column)
        for name, m in outputs.worst().items():
            table.add_row(name, str(m.sample), *_metric_cells(m))
        console.print(table)
    if csv_path:
        console.print(f"every node's row written to {csv_path}", highlight=False)


PLAIN_RULE = box.Box("    \n    \n -  \n    \n    \n    \n    \n    \n")  # a header rule of "-", nothing else
BATCH_VERDICTS = {"PASS": "green", "FOUND": "green"}  # any other verdict failed: red


def print_batch(results: list[dict], console: Console | None = None) -> None:
    """``batch``: one row per entry (model, action, verdict, set size, evaluations, seconds, the nodes kept in
    FP32), then where each search wrote its override JSON, each failed entry's message and the count. A rich
    table on a terminal; plain columns two spaces apart otherwise."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # a log or a pipe: plain text, never wrapped
            console = Console(width=10_000)
    plain = not console.is_terminal
    table = Table(box=PLAIN_RULE if plain else box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)
    for i, column in enumerate(("model", "action", "verdict", "set size", "evaluations", "seconds", "kept in FP32")):
        table.add_column(column, justify="right" if 3 <= i < 6 else "left", no_wrap=plain)
    for r in results:
        table.add_row(Text(r["name"]), r["action"], Text(r["verdict"], style=BATCH_VERDICTS.get(r["verdict"], "red")),
                      _cell(r["set_size"]), _cell(r["evaluations"]), _cell(r["seconds"]),
                      Text(", ".join(r["fp32_nodes"]) if r["fp32_nodes"] else "-"))
    console.print(table)
    for r in results:
        if r["action"] == "search" and r.get("output") and r["result"] is not None:
            console.print(f"{r['name']}: overrides written to {r['output']}", markup=False, highlight=False,
                          soft_wrap=True)
    for r in results:
        if r["error"]:
            console.print(f"{r['name']} (entry {r['number']}): {r['error']}", markup=False, highlight=False,
                          soft_wrap=True)
    failed = sum(not r["passed"] for r in results)
    console.print(f"{len(results) - failed} of {len(results)} entries passed" + (f", {failed} failed" if failed else ""),
                  highlight=False)


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _alternatives(alt: dict | None) -> str:
    """How the emulator's alternatives went, when its set failed on the judging backend."""
    if not alt:
        return ""
    made = f"{alt.get('found', 0)} alternative(s) made on the emulator"
    if alt.get("used"):
        return f"; {made}, the answer comes from the {_ordinal(alt['evaluated'])} evaluated"
    return f"; {made}, {alt.get('evaluated', 0)} evaluated, none passed: searched for additions instead"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def print_migration(pins, mapping, overrides_path: str, console: Console | None = None) -> None:
    """What ``migrate`` read and mapped: each FP32 layer's node, and what it could not map."""
    console = console or _console()
    said = f"{len(mapping.nodes)} node(s) kept in FP32; wrote {escape(overrides_path)}"
    console.print(f"read {len(pins.fp32)} FP32 layer pin(s) from {escape(pins.source[:200])}: {said}",
                  highlight=False, soft_wrap=True)
    if not pins.low_precision:
        console.print("[yellow]note:[/yellow] those arguments build nothing in FP16 (no --fp16): the mixed model "
                      "computes every other node in FP16", highlight=False, soft_wrap=True)
    for layer in mapping.unmapped:
        console.print(f"[yellow]not mapped:[/yellow] layer {escape(layer)!r}: no node of the model has that name "
                      "(renamed, or a layer TensorRT added)", highlight=False, soft_wrap=True)
    for layer, node in mapping.not_candidates.items():
        console.print(f"[yellow]not kept:[/yellow] layer {escape(layer)!r} is node {escape(node)!r}, which moves "
                      "data and takes its producer's precision", highlight=False, soft_wrap=True)
    for layer, precision in pins.other:
        console.print(f"[yellow]not migrated:[/yellow] {escape(layer)}:{escape(precision)}: only FP32 pins are "
                      "kept; every other node computes in FP16", highlight=False, soft_wrap=True)
