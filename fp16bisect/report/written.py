"""What ``apply`` prints: the mixed-precision file it wrote (FP32 pins, FP32-accumulation nodes, Casts, constants)
and, with ``--verify``, the written model's verification."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fp16bisect.model.fp16 import rule
from fp16bisect.report.console import _console, _metric_cells
from fp16bisect.report.conversions import conversion_lines


def print_mixed(mixed, output_path: str, console: Console | None = None) -> None:
    """What ``apply`` wrote."""
    console = console or _console()
    pinned = mixed.pinned
    console.print(
        f"wrote {output_path}: {len(mixed.fp16_nodes)} node(s) compute in {mixed.precision.label}, {len(pinned)} "
        "pinned in FP32"
        + (f" ({', '.join(pinned[:8])}{', ...' if len(pinned) > 8 else ''})" if pinned else "")
        + (f", {len(mixed.accumulating)} in FP32 accumulation ({', '.join(mixed.accumulating[:8])}"
           f"{', ...' if len(mixed.accumulating) > 8 else ''}: FP16 tensors, FP32 arithmetic between Casts)"
           if mixed.accumulating else "")
        + f"; {mixed.casts} Cast(s) at precision boundaries, {mixed.fp16_constants} constant(s) stored in "
        f"{mixed.precision.label}; "
        "passes onnx.checker (full check)",
        highlight=False, soft_wrap=True,
    )
    for note in mixed.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
    said = {"rule": rule(mixed.precision), "all_fp16": [c.to_json() for c in mixed.conversions]}
    for line in conversion_lines(said, "this file stores", mixed.precision):
        console.print(line, highlight=False, soft_wrap=True)


def print_verification(v, console: Console | None = None, summed=None) -> None:
    """``apply --verify``: the written model and the all-FP16 (or all-BF16) contrast, per output; ``summed``
    (a ``CheckResult``, under ``--accumulate fp16``): the file's plan judged with FP16 sums on the emulator."""
    console = console or _console()
    table = Table(title=f"verification of the written model ({v.tolerance})")
    table.add_column("model")
    table.add_column("output")
    table.add_column("max abs")
    table.add_column("max rel")
    table.add_column("cosine")
    table.add_column("inf/NaN")
    table.add_column("pass")
    low = v.label
    rows = [(f"with overrides ({low} storage)", v.with_overrides), (f"all {low} ({low} storage)", v.all_fp16)]
    if v.strict:
        rows += [(f"with overrides (onnx.reference {low} math)", v.strict[0]),
                 (f"all {low} (onnx.reference {low} math)", v.strict[1])]
    for label, check in rows:
        if check.error:
            table.add_row(label, "-", "-", "-", "-", "-", f"[yellow]{check.error}[/yellow]")
            continue
        for name, m in check.worst().items():
            table.add_row(label, name, *_metric_cells(m))
    for name, m in (summed.outputs.items() if summed is not None else ()):
        table.add_row(f"with overrides (emulated, {low} sums)", name, *_metric_cells(m))
    console.print(table)
    if v.passed:
        console.print("verified: the written model meets the tolerance on every sample"
                      + (f"; all-{v.label} does not" if not v.all_fp16.passed else "" if summed is not None else
                         f"; note: all-{v.label} meets it too, so the overrides may be unnecessary"),
                      highlight=False, soft_wrap=True)
    else:
        bad = [m for m in v.with_overrides.metrics if not m.passed]
        console.print(f"[red]NOT verified[/red]: {bad[0].why(v.tolerance)}; the model was written but does not "
                      "meet the tolerance: rerun 'fp16bisect search' with these samples", highlight=False,
                      soft_wrap=True)
    if summed is not None:
        bad = [m for m in summed.outputs.values() if not m.passed]
        console.print(f"with {low} sums (--accumulate fp16; the emulator, which models this file): "
                      + ("[red]NOT verified[/red]: " + bad[0].why(v.tolerance) if bad else
                         "verified: the file's plan meets the tolerance on every sample"), highlight=False,
                      soft_wrap=True)
    if v.strict and not v.strict[0].error and not v.strict[0].passed:
        console.print("[yellow]note:[/yellow] onnx.reference rounds each op's output to FP16 and sums matmuls and "
                      "reductions in FP32 (NumPy's float16 sums): neither FP16 accumulation nor a bound on what an "
                      "engine does; its failure is a second opinion, not a verdict", highlight=False, soft_wrap=True)
