"""Headroom in the console: the tightest FP16 tensors after a result, the forced nodes, and the --headroom hint."""

from __future__ import annotations

from rich.markup import escape

from fp16bisect.model.headroom import TIGHT, limit_text
from fp16bisect.model.statistics import FP16_MAX

SHOWN = 3


def headroom_lines(section: dict | None, command: str = "search", low: str = "FP16") -> list[str]:
    """Lines (rich markup) for the override JSON's (or a check's) ``headroom`` section: the three tightest FP16
    tensors, each with its peak, the share of 65504 and the sample that reached it; a warning naming those with
    less than 2x headroom and the flag that would keep them in FP32. ``low``: the precision's label (BF16's
    headroom is against its own maximum, the section's ``limit``)."""
    if not section:
        return []
    tensors = section.get("tensors", [])
    limit = section.get("limit", FP16_MAX)
    lines = []
    if tensors:
        lines.append(f"headroom of the {section.get('fp16_tensors', len(tensors))} tensor(s) computed in {low} "
                     f"(FP32 peak over the samples against {limit_text(limit)}"
                     f"{'' if low == 'FP16' else ', BF16 max: FP32 range, no overflow at 65504'}), tightest first:")
    for t in tensors[:SHOWN]:
        lines.append("  " + _tensor_line(t, limit))
    flag = section.get("flag")
    tight = [t for t in tensors if t.get("headroom") is not None and t["headroom"] < (flag or TIGHT)]
    if tight and flag is None and command == "search":
        names = ", ".join(escape(repr(t["tensor"])) for t in tight[:5]) + (", ..." if len(tight) > 5 else "")
        lines.append(f"[yellow]warning:[/yellow] {len(tight)} FP16 tensor(s) with less than {TIGHT:g}x headroom: "
                     f"{names}; inputs a little larger than these samples may overflow: "
                     f"'--headroom {TIGHT:g}' keeps their writers and readers in FP32")
    return lines


def _tensor_line(t: dict, limit: float = FP16_MAX) -> str:
    where = f" on {escape(t['peak_sample']['source'])}" if t.get("peak_sample") else ""
    room = f"{t['headroom']:.3g}x headroom" if t.get("headroom") is not None else "all zeros"
    style = ("[red]", "[/red]") if t["peak_fraction"] > 1 else ("[yellow]", "[/yellow]") \
        if t.get("headroom") is not None and t["headroom"] < TIGHT else ("", "")
    return (f"{style[0]}{escape(t['tensor'])}{style[1]} ({escape(t['node'])}): peak {t['peak']:.4g} = "
            f"{100 * t['peak_fraction']:.1f}% of {limit_text(limit)} ({room}){where}")


def scan_headroom_lines(rows: list[dict], top: int, limit: float = FP16_MAX) -> list[str]:
    """``scan``: the tensors computed by candidates, least headroom first (``limit``: the precision's max)."""
    if not rows:
        return []
    lines = [f"headroom (FP32 peak over the samples against {limit_text(limit)}; {len(rows)} tensor(s), least first):"]
    lines += ["  " + _tensor_line(t, limit) for t in rows[:top]]
    return lines


def scan_header(path, precision: str) -> list[str]:
    """``scan``'s first lines: FP16's limits, and with ``--precision bf16`` what BF16 risks instead."""
    said = [f"fp16bisect scan of {path}: FP16 keeps |x| <= 65504; nonzero |x| < 6.1e-05 lose precision (subnormal), "
            "< 6e-08 flush to 0"]
    if precision == "fp16":
        return said
    return said + ["--precision bf16: BF16 keeps FP32's range (|x| <= 3.39e38) but 8 significant bits: its risk is relative "
            "rounding (up to 2^-8 per value), not the FP16 limits above; the suspicion order ranks the candidates that "
            "amplify it most (cancellation, exponentials)"]
