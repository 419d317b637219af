"""What a person sees: progress while searching, a short table at the end."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from .pipeline import Listener, Outcome
from .search import Step


class ConsoleListener(Listener):
    """A live status line on a terminal; plain log lines when output is not a terminal."""

    def __init__(self, quiet: bool = False, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.live = self.console.is_terminal and not quiet
        self.status = None

    def stage(self, text: str) -> None:
        if self.quiet:
            return
        if self.live:
            self._stop()
            self.console.print(f"[dim]·[/dim] {text}")
        else:
            print(f"fp16bisect: {text}", file=sys.stderr, flush=True)

    def step(self, step: Step, progress: dict) -> None:
        if self.quiet:
            return
        verdict = "pass" if step.passed else "FAIL"
        line = (
            f"evaluation {step.index}: {len(step.plan)} node(s) in FP32 -> {verdict} "
            f"[{step.phase}; {progress['searching']} candidate(s) in play, {progress['found']} found, "
            f"roughly {progress['estimate_left']} more evaluation(s) (estimate)]"
        )
        if self.live:
            if self.status is None:
                self.status = self.console.status(line)
                self.status.start()
            else:
                self.status.update(line)
        else:
            print(f"fp16bisect: {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def _error_cell(m) -> str:
    if m is None:
        return "-"
    if m.nonfinite:
        return f"[red]{m.nonfinite} inf/NaN[/red]"
    text = f"{m.max_abs:.3g} abs, {m.max_rel:.3g} rel"
    return text if m.passed else f"[red]{text}[/red]"


def print_summary(outcome: Outcome, output_path: str | None, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:  # a log file or pipe: do not cut output names at 80 columns
            console = Console(width=160)
    result = outcome.result
    fp16 = outcome.fp16.worst()
    final = outcome.final.worst()
    console.print(
        f"fp16bisect on {outcome.graph.path} ({outcome.backend} backend; {outcome.tolerance})",
        highlight=False, soft_wrap=True,
    )
    table = Table()
    table.add_column("output")
    table.add_column("all FP16: max error")
    table.add_column("with overrides: max error")
    table.add_column("pass")
    for name in outcome.oracle.outputs:
        m = final.get(name)
        table.add_row(name, _error_cell(fp16.get(name)), _error_cell(m), "yes" if m and m.passed else "[red]no[/red]")
    console.print(table)
    if result.status == "fp16_passes":
        console.print("All-FP16 already meets the tolerance: nothing needs to stay in FP32.")
    else:
        minimal = "1-minimal" if result.minimal else "[red]NOT minimal[/red]"
        console.print(
            f"{len(result.fp32)} of {len(outcome.graph.candidates)} candidate node(s) kept in FP32 ({minimal}; "
            f"{result.minimality}):",
            soft_wrap=True,
        )
        for entry in outcome.data["fp32_nodes"]:
            console.print(
                f"  {entry['name']}  [dim]{entry['op_type']}; FP32 run: {entry['fp32_profile']}[/dim]",
                highlight=False,
                soft_wrap=True,
            )
    for note in outcome.data.get("notes", []):
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
    console.print(
        f"{result.evaluations} evaluation(s) in {outcome.seconds:.1f} s"
        + (f"; overrides written to {output_path}" if output_path else ""),
        highlight=False,
    )
