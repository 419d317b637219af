"""What the plots share beyond the SVG canvas (``svg.py``): their colours, decade ticks, and labels and notes
placed where they hide nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence

from fp16bisect.report.formatting import finite
from fp16bisect.report.plots.svg import Box, Figure, text_height, text_width

COLOR_FP16 = "#d62728"  # the all-FP16 series, a failing evaluation
COLOR_PLAN = "#2ca02c"  # the series with the overrides, a passing evaluation
INCH = 72.0  # SVG user units per inch: the plots' sizes read as Matplotlib's did


def new_figure(width: float, height: float, margins: dict) -> Figure:
    """A figure ``width`` x ``height`` inches whose axes sit at ``margins`` (inches: left, right, top, bottom);
    the margins may grow to fit ticks and a legend, the axes keep their size."""
    return Figure((width - margins["left"] - margins["right"]) * INCH,
                  (height - margins["top"] - margins["bottom"]) * INCH,
                  [margins["left"] * INCH, margins["top"] * INCH, margins["right"] * INCH, margins["bottom"] * INCH])


def decade_ticks(fig: Figure, low: float, high: float, extra: Sequence[tuple[float, str]] = (),
                 grid: str = "#eee") -> None:
    """y ticks at the powers of ten in [low, high] (at most about 12), plus labelled ``extra`` ticks (e.g. the
    inf/NaN row), with grid lines."""
    first, last = math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(high) + 1e-9)
    step = max(1, math.ceil((last - first + 1) / 12))
    ticks = [10.0**k for k in range(first, last + 1, step)]
    labels = [power_of_ten(k) for k in range(first, last + 1, step)]
    fig.yticks(ticks + [t for t, _ in extra], labels + [text for _, text in extra], grid=grid)


def nice_ticks(low: float, high: float, count: int = 10) -> list[int]:
    """Whole-number ticks from ``low`` to ``high``, every 1, 2 or 5 times a power of ten, about ``count`` of them."""
    span = max(high - low, 1.0)
    step = 1
    for power in range(0, 12):
        step = next((m * 10**power for m in (1, 2, 5) if span / (m * 10**power) <= count), 0)
        if step:
            break
    return list(range(math.ceil(low / step) * step, math.floor(high) + 1, step))


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_of_ten(k: int) -> str:
    """10 to the k as plain text with superscript digits."""
    return "1" if k == 0 else "10" + str(k).translate(_SUPERSCRIPT)


def _label_box(x: float, y: float, text: str, size: float, dx: float) -> Box:
    w, h = text_width(text, size), text_height(text, size)
    x0 = x if dx >= 0 else x - w
    return Box(x0, y - h / 2, x0 + w, y + h / 2)


def place_labels(fig: Figure, points, offsets, size: float = 8, color: str = "#222") -> int:
    """Label ``points`` [(x, y, text)] (data coordinates) in order, each at the first offset (dx, dy: points, y
    up) whose box overlaps no label placed before and stays inside the axes, with a leader line to its point; a
    label with no free place is left out. Returns how many were placed."""
    placed: list[Box] = []
    for x, y, text in points:
        px, py = fig.x(x), fig.y(y)
        for dx, dy in offsets:
            tx, ty = px + dx, py - dy
            box = _label_box(tx + (2 if dx >= 0 else -2), ty, text, size, dx).expanded(1, 1)
            if box.within(fig.box) and not any(box.overlaps(b) for b in placed):
                placed.append(box)
                fig.above.append(f'<path d="M{px:.1f} {py:.1f}L{tx:.1f} {ty:.1f}" stroke="#888" '
                                 'stroke-width="0.6"/>')
                fig.text(tx + (2 if dx >= 0 else -2), ty, text, size, color, "start" if dx >= 0 else "end")
                break
    return len(placed)


_NOTE_OFFSETS = [(16, -36), (16, 36), (-16, -36), (-16, 36), (40, -70), (40, 70), (-40, -70), (-40, 70),
                 (80, -110), (80, 110), (-80, -110), (-80, 110)]


def place_note(fig: Figure, xy: tuple[float, float], text: str, color: str, points, taken: list[Box]) -> Box:
    """A boxed note with an arrow to ``xy`` (data coordinates), at the nearby place that hides the fewest of
    ``points`` (data coordinates) and overlaps none of the ``taken`` boxes, inside the axes. Returns its box."""
    size = 8.5
    px, py = fig.x(xy[0]), fig.y(xy[1])
    shown = [(fig.x(x), fig.y(y)) for x, y in points]
    w, h = text_width(text, size) + 6, text_height(text, size) + 4
    best: tuple | None = None
    for dx, dy in _NOTE_OFFSETS:
        cx, cy = px + dx, py - dy  # the corner nearest the point
        box = Box(cx if dx > 0 else cx - w, cy if dy < 0 else cy - h, (cx + w) if dx > 0 else cx,
                  (cy + h) if dy < 0 else cy)
        room = box.expanded(2, 2)
        cost = (not room.within(fig.box) or any(room.overlaps(b) for b in taken),
                sum(room.holds(x, y) for x, y in shown))
        if best is None or cost < best[0]:
            best = (cost, box, cx, cy)
        if cost == (False, 0):
            break
    assert best is not None
    _, box, cx, cy = best
    fig.above.append(_arrow(cx, cy, px, py, color))
    fig.above.append(f'<rect x="{box.x0:.1f}" y="{box.y0:.1f}" width="{box.x1 - box.x0:.1f}" '
                     f'height="{box.y1 - box.y0:.1f}" rx="3" fill="white" fill-opacity="0.85" stroke="{color}" '
                     'stroke-width="0.8"/>')
    fig.text(box.x0 + 3, box.y0 + 2, text, size, color, baseline="top")
    return box


def _arrow(x0: float, y0: float, x1: float, y1: float, color: str) -> str:
    """A line from (x0, y0) with an arrowhead at (x1, y1)."""
    length = math.hypot(x1 - x0, y1 - y0) or 1.0
    ux, uy = (x1 - x0) / length, (y1 - y0) / length
    bx, by = x1 - 7 * ux, y1 - 7 * uy  # the head's base
    head = f"M{x1:.1f} {y1:.1f}L{bx - 3 * uy:.1f} {by + 3 * ux:.1f}L{bx + 3 * uy:.1f} {by - 3 * ux:.1f}z"
    return (f'<path d="M{x0:.1f} {y0:.1f}L{bx:.1f} {by:.1f}" stroke="{color}" stroke-width="1"/>'
            f'<path d="{head}" fill="{color}"/>')


def log_floor(values) -> float:
    """A floor one decade below the smallest positive finite value (zeros are drawn there)."""
    positive = [v for v in values if finite(v) and v > 0]
    if not positive:
        return 1e-8
    return 10.0 ** (math.floor(math.log10(min(positive))) - 1)
