"""Headroom in the console: the tightest low-precision tensors after a result, the forced nodes, and the
--headroom hint."""

from __future__ import annotations

from rich.markup import escape

from fp16bisect.model.headroom import TIGHT, limit_text, said
from fp16bisect.model.precision import precision_of

SHOWN = 3
NAMED = 5  # tight tensors named in the warning


def headroom_lines(section: dict | None, command: str = "search", low: str = "FP16") -> list[str]:
    """Lines (rich markup) for the override JSON's (or a check's) ``headroom`` section: the three tightest
    tensors computed in ``low`` (the precision's label or name), each with its peak, its share of the
    precision's largest value (the section's ``limit``) and the sample that reached it; after a search, a
    warning naming those with less than ``TIGHT`` headroom, each with its headroom, and the ``--headroom``
    value that keeps them in FP32."""
    if not section:
        return []
    precision = precision_of(low)
    tensors = section.get("tensors", [])
    limit = section.get("limit", precision.max)
    lines = []
    range_note = "" if precision.ranked_by == "range" else ": FP32's range, overflow is not its risk"
    if tensors:
        lines.append(f"headroom of the {section.get('fp16_tensors', len(tensors))} tensor(s) computed in "
                     f"{precision.label} (FP32 peak over the samples against {limit_text(limit)}{range_note}), "
                     "tightest first:")
    for t in tensors[:SHOWN]:
        lines.append("  " + _tensor_line(t, limit))
    tight = [t for t in tensors if t.get("headroom") is not None and t["headroom"] < TIGHT]
    if tight and command == "search":
        names = ", ".join(f"{escape(repr(t['tensor']))} ({said(t['headroom'], TIGHT)}x)" for t in tight[:NAMED])
        lines.append(f"[yellow]warning:[/yellow] {len(tight)} {precision.label} tensor(s) with less than {TIGHT:g}x "
                     f"headroom: {names}{', ...' if len(tight) > NAMED else ''}; real inputs routinely reach 2-4x "
                     f"the peak of a few samples and may overflow: '--headroom {TIGHT:g}' keeps their writers and "
                     "readers in FP32")
    return lines


def _tensor_line(t: dict, limit: float) -> str:
    """One tensor's peak and headroom, never printed on the other side of ``TIGHT`` (3.98x is not "4x")."""
    where = f" on {escape(t['peak_sample']['source'])}" if t.get("peak_sample") else ""
    room = f"{said(t['headroom'], TIGHT)}x headroom" if t.get("headroom") is not None else "all zeros"
    style = ("[red]", "[/red]") if t["peak_fraction"] > 1 else ("[yellow]", "[/yellow]") \
        if t.get("headroom") is not None and t["headroom"] < TIGHT else ("", "")
    return (f"{style[0]}{escape(t['tensor'])}{style[1]} ({escape(t['node'])}): peak {t['peak']:.4g} = "
            f"{said(100 * t['peak_fraction'], 100 / TIGHT, '.1f')}% of {limit_text(limit)} ({room}){where}")


def scan_headroom_lines(rows: list[dict], top: int, limit: float) -> list[str]:
    """``scan``: the tensors computed by candidates, least headroom first (``limit``: the precision's max)."""
    if not rows:
        return []
    lines = [f"headroom (FP32 peak over the samples against {limit_text(limit)}; {len(rows)} tensor(s), least first):"]
    lines += ["  " + _tensor_line(t, limit) for t in rows[:top]]
    return lines


def scan_header(path, precision) -> list[str]:
    """``scan``'s first lines: the precision's limits (``Precision.limits_text``), and for one with FP32's range
    (BF16) what it risks instead."""
    low = precision_of(precision)
    said_first = [f"fp16bisect scan of {path}: {low.limits_text}"]
    if low.ranked_by == "range":
        return said_first
    return said_first + [f"--precision {low.name}: {low.label} keeps FP32's range but {low.significant_bits} "
                         f"significant bits: its risk is relative rounding (up to 2^-{low.significant_bits} per value), "
                         "not its range; the suspicion order ranks the candidates that amplify it most (cancellation, "
                         "exponentials)"]
