"""Headroom in the console: the tightest low-precision tensors after a result, the forced nodes, and the
--headroom hint."""

from __future__ import annotations

from rich.markup import escape

from fp16bisect.model.headroom import LISTED, TIGHT, limit_text, said
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


def accumulator_lines(rows: list[dict] | None, low: str = "FP16", command: str = "scan", flag: float | None = None,
                      top: int = SHOWN, note: str = "", judged: tuple[str, str] = ("fp32", "default")) -> list[str]:
    """Lines (rich markup) for the JSON's ``accumulators`` (tightest first): the ``top`` tightest summing nodes
    left in ``low``, each with its peak partial-sum bound against the precision's max, its terms and the sample
    (after a search or a check only when one has less than ``LISTED`` headroom: the JSON has them all); after a
    search, the tensors' warning for sums with less than ``TIGHT`` headroom that do not pass the max, with the
    same ``--headroom`` (``model/headroom.py``: one rule); then a warning naming those whose peak passes the max
    (max/``flag`` with ``--headroom``), said as the run judged them: ``judged`` is what the search or check assumed
    they add in (``fp32``, ``fp16``) and where that came from (``"default"``, ``"given"``, ``"from FILE"``)."""
    precision = precision_of(low)
    limit = precision.max
    lines = [f"[yellow]note:[/yellow] {escape(note)}"] if note else []
    close = [a for a in rows or [] if a.get("headroom") is not None and a["headroom"] < LISTED]
    if not rows or (command != "scan" and not close):
        return lines
    lines.append(f"accumulator headroom of the summing node(s) left in {precision.label} (largest partial-sum "
                 f"bound in FP32 over the samples against {limit_text(limit)}), tightest first:")
    lines += ["  " + _accumulator_line(a, limit) for a in rows[:top]]
    over = [a for a in rows if a.get("headroom") is not None and a["headroom"] < (flag or 1.0)]
    tight = [a for a in rows if a.get("headroom") is not None and (flag or 1.0) <= a["headroom"] < TIGHT]
    if tight and command == "search":  # the tensors' rule (headroom_lines), for sums
        names = ", ".join(f"{escape(repr(a['node']))} ({said(a['headroom'], TIGHT)}x)" for a in tight[:NAMED])
        lines.append(f"[yellow]warning:[/yellow] {len(tight)} summing node(s) left in {precision.label} with less than "
                     f"{TIGHT:g}x accumulator headroom: {names}{', ...' if len(tight) > NAMED else ''}; real inputs "
                     f"routinely reach 2-4x the peak of a few samples, and a sum past {limit_text(limit)} overflows "
                     f"where the engine adds in {precision.label}: '--headroom {TIGHT:g}' keeps them in FP32 "
                     "accumulation")
    if over and command in ("search", "check"):
        bound = limit_text(limit) + (f"/{flag:g}" if flag else "")
        named = "; ".join(_over_text(a, bound) for a in over[:NAMED]) + (", ..." if len(over) > NAMED else "")
        lines.append(f"[yellow]warning:[/yellow] {len(over)} node(s) left in {precision.label} sum past {bound} "
                     f"though every value they store fits: {named}. " + _judged_sums(command, precision.label,
                                                                                     *judged))
    return lines


def _judged_sums(command: str, label: str, accumulate: str, source: str) -> str:
    """What the verdict of ``command`` says of sums past the max, as it judged them (never "assumed FP32
    accumulation" of a run that judged FP16 sums)."""
    said = escape("the default" if source == "default" else source)
    if accumulate == "fp16":
        return (f"This {command} judged every node left in {label} adding in {label} (--accumulate fp16, {said}) "
                "and its verdict includes these sums; their peak is a bound over every order of addition, which "
                "an engine adding in another order may come closer to")
    return (f"This {command} assumed FP32 accumulation ({said}) and its verdict stands; an engine adding in {label} "
            f"(fused attention, some GEMM and reduction kernels) overflows there: --accumulate fp16 on a check "
            f"judges with {label} accumulation, on a search puts such nodes in FP32 accumulation ({label} storage, "
            "FP32 sums)")


def _accumulator_line(a: dict, limit: float) -> str:
    where = f" on {escape(a['sample']['source'])}" if a.get("sample") else ""
    terms = f", {a['terms']} terms" if a.get("terms") is not None else ""
    if a.get("peak") is None:
        return f"{escape(a['node'])} ({a['op_type']}{terms}): peak not measured (its sum is inside a fused op)"
    room = f"{said(a['headroom'], 1.0)}x headroom" if a.get("headroom") is not None else "a sum of zeros"
    style = ("[red]", "[/red]") if a["peak"] > limit else ("[yellow]", "[/yellow]") \
        if a.get("headroom") is not None and a["headroom"] < TIGHT else ("", "")
    return (f"{style[0]}{escape(a['node'])}{style[1]} ({a['op_type']}{terms}): peak {a['peak']:.4g} = "
            f"{said(100 * a['peak'] / limit, 100.0, '.1f')}% of {limit_text(limit)} ({room}){where}")


def _over_text(a: dict, bound: str) -> str:
    where = f" on {a['sample']['source']}" if a.get("sample") else ""
    return escape(f"{a['node']!r} ({a['op_type']}) peak {a['peak']:.4g} > {bound}{where}")
