"""Constants a plan's file converts beyond rounding (FP16's or BF16's rule), as the console says them."""

from __future__ import annotations

from rich.markup import escape

from fp16bisect.model.precision import FP16, Precision


def conversion_lines(data, where: str = "every plan's file stores", precision: Precision = FP16) -> list[str]:
    """Constants ``precision`` (FP16) cannot hold that a plan's file converts (said once per search: the all-FP16
    plan's): the saturated ones by name, the tiny values raised to 2^-24 (2^-133 in BF16) in one line."""
    if not data or not data.get("all_fp16"):
        return []
    found = data["all_fp16"]
    saturated = sorted((c for c in found if c["saturated"]), key=lambda c: -c["saturated"])
    lifted = [c for c in found if c["lifted"]]
    low, tiny = precision.label, precision.tiny_text
    lines = [f"[yellow]note:[/yellow] {len(found)} constant(s) read in {low} cannot be held by {low}; {where} "
             f"them by TensorRT's rule ({escape(data['rule'])}):"]
    for c in saturated[:5]:
        readers = ", ".join(c["readers"][:3]) + (", ..." if len(c["readers"]) > 3 else "")
        lines.append(f"  {escape(c['constant'])}: {c['saturated']} value(s) saturated (e.g. {c['extreme']:.3g}), "
                     f"read by {escape(readers)}")
    if len(saturated) > 5:
        lines.append(f"  ... and {len(saturated) - 5} more saturated (the JSON's 'conversions' lists them)")
    if lifted:
        lines.append(f"  {sum(c['lifted'] for c in lifted)} non-zero value(s) below {tiny} in {len(lifted)} "
                     f"constant(s) stored as +-{tiny}")
    return lines
