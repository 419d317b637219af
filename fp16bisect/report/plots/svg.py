"""The report's plots as SVG written by fp16bisect: scales, marks, ticks, a legend, text, in a few hundred lines.

Why not Matplotlib (which drew them until 2026-11-27): importing it took about 0.4 s and drawing the four
plots 0.2-0.3 s, so on a search of under a second ``--report`` cost 2.1-2.3x the search alone
(``scripts/bench_report.py``; the target is 1.5x). The plots are bars, lines, scatters and bands on linear,
log and symmetric-log scales: this module writes them as SVG elements directly, in about 10 ms.

A ``Figure`` is an axes box of a fixed size (SVG user units: 72 per inch, so font sizes read as points) with
margins around it that may grow until ``svg`` writes it (a legend above, rotated labels below): everything is
drawn in the axes' own coordinates (x right, y down from the axes' top left corner), so a margin that grows
moves nothing. Text is measured with ``text_width``, an estimate from per-character widths of a sans-serif
face: labels are placed where they overlap nothing by that estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from fp16bisect.report.formatting import esc

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
LINE = 1.2  # line height, in font sizes


def _char_width(c: str) -> float:
    """A character's advance in a sans-serif face, in font sizes (an estimate: a little wide rather than narrow)."""
    if c in "il.,:;|!'`":
        return 0.3
    if c in "fjtrI()[]{} /-":
        return 0.4
    if c in "mwMW@…":
        return 0.88
    if c.isupper() or c in "%&#_<>=+~":
        return 0.7
    return 0.6


def text_width(text: str, size: float) -> float:
    """The width of the widest line of ``text`` at ``size``."""
    return max((size * sum(_char_width(c) for c in line) for line in text.split("\n")), default=0.0)


def text_height(text: str, size: float) -> float:
    return size * LINE * (text.count("\n") + 1)


@dataclass(frozen=True)
class Box:
    """A rectangle in the axes' coordinates (y down)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def within(self, other: Box) -> bool:
        return self.x0 >= other.x0 and self.x1 <= other.x1 and self.y0 >= other.y0 and self.y1 <= other.y1

    def expanded(self, dx: float, dy: float) -> Box:
        return Box(self.x0 - dx, self.y0 - dy, self.x1 + dx, self.y1 + dy)

    def holds(self, x: float, y: float) -> bool:
        return self.x0 <= x <= self.x1 and self.y0 <= y <= self.y1


@dataclass(frozen=True)
class Scale:
    """Data to axes coordinates along one axis: ``low`` at ``start``, ``high`` at ``end``; ``kind`` linear, log
    (base 10) or symlog (linear within ``linthresh`` of 0, ``linscale`` decades wide, logarithmic beyond)."""

    kind: str
    low: float
    high: float
    start: float
    end: float
    linthresh: float = 1.0
    linscale: float = 1.0

    def _t(self, v: float) -> float:
        if self.kind == "log":
            return math.log10(v) if v > 0 else -math.inf
        if self.kind == "symlog":
            a = abs(v)
            t = a / self.linthresh * self.linscale if a <= self.linthresh else (
                self.linscale + math.log10(a / self.linthresh))
            return math.copysign(t, v)
        return v

    def __call__(self, v: float) -> float:
        t0, t1, t = self._t(self.low), self._t(self.high), self._t(float(v))
        if math.isnan(t):
            return math.nan
        if math.isinf(t):  # far outside, on its side: clipped away
            return self.start - (self.end - self.start) if t < 0 else self.end + (self.end - self.start)
        return self.start + (t - t0) / (t1 - t0) * (self.end - self.start)


def _n(v: float) -> str:
    """A coordinate: one decimal, no trailing zero."""
    return f"{v:.1f}".rstrip("0").rstrip(".") if math.isfinite(v) else "0"


def _text(x: float, y: float, text: str, size: float, color: str, anchor: str = "start", baseline: str = "middle",
          rotate: float = 0.0) -> str:
    """``text`` (lines apart at ``\\n``) at (x, y): ``anchor`` start/middle/end, ``baseline`` top/middle/bottom
    for the block of lines; ``rotate`` degrees clockwise about (x, y)."""
    lines = text.split("\n")
    height = size * LINE * len(lines)
    first = {"top": 0.0, "middle": -height / 2, "bottom": -height}[baseline] + size * (LINE / 2 + 0.35)
    turn = f' transform="rotate({_n(rotate)} {_n(x)} {_n(y)})"' if rotate else ""
    spans = "".join(f'<tspan x="{_n(x)}" y="{_n(y + first + i * size * LINE)}">{esc(line)}</tspan>'
                    for i, line in enumerate(lines))
    return f'<text font-size="{size:g}" fill="{color}" text-anchor="{anchor}"{turn}>{spans}</text>'


_SHAPES = {  # marker outlines around (0, 0) for radius 1
    "s": [(-0.89, -0.89), (0.89, -0.89), (0.89, 0.89), (-0.89, 0.89)],
    "D": [(0, -1.25), (1.0, 0), (0, 1.25), (-1.0, 0)],
    "^": [(0, -1.3), (1.15, 0.75), (-1.15, 0.75)],
    "X": [(-1, -0.6), (-0.6, -1), (0, -0.4), (0.6, -1), (1, -0.6), (0.4, 0), (1, 0.6), (0.6, 1), (0, 0.4),
          (-0.6, 1), (-1, 0.6), (-0.4, 0)],
}


def marker_path(points: Sequence[tuple[float, float]], shape: str, r: float) -> str:
    """One path drawing a marker of ``shape`` (o s D ^ X) and radius ``r`` at each point (axes coordinates)."""
    parts = []
    for x, y in points:
        if shape == "o":
            parts.append(f"M{_n(x - r)} {_n(y)}a{_n(r)} {_n(r)} 0 1 0 {_n(2 * r)} 0a{_n(r)} {_n(r)} 0 1 0 "
                         f"{_n(-2 * r)} 0z")
        else:
            parts.append("M" + "L".join(f"{_n(x + dx * r)} {_n(y + dy * r)}" for dx, dy in _SHAPES[shape]) + "z")
    return "".join(parts)


@dataclass(frozen=True)
class Mark:
    """How a series is drawn, and its legend entry: ``kind`` marker (``shape``), line or patch."""

    label: str
    kind: str = "marker"
    color: str = "#000"
    shape: str = "o"
    fill: str | None = None  # a marker's fill: None is ``color``; "white" is hollow
    edge: str | None = None  # a marker's edge: None is ``color``
    opacity: float = 1.0
    dash: str = ""


@dataclass
class Figure:
    """An axes box ``width`` x ``height`` and its margins (left, top, right, bottom), which may grow until
    ``svg``. ``x`` and ``y`` map data to axes coordinates once ``set_x``/``set_y`` set them."""

    width: float
    height: float
    margins: list[float] = field(default_factory=lambda: [60.0, 30.0, 12.0, 36.0])
    x: Scale = field(init=False)
    y: Scale = field(init=False)
    clipped: list[str] = field(default_factory=list)  # inside the axes, cut at their edge
    above: list[str] = field(default_factory=list)  # ticks, labels, notes: not cut
    marks: list[Mark] = field(default_factory=list)  # the legend's entries
    axis_labels: dict[str, tuple[str, float]] = field(default_factory=dict)  # "x", "y": (text, font size)
    depth: dict[str, float] = field(default_factory=dict)  # "x", "y": how far the tick labels reach out

    def __post_init__(self) -> None:
        self.set_x("linear", 0.0, 1.0)
        self.set_y("linear", 0.0, 1.0)

    @property
    def box(self) -> Box:
        return Box(0.0, 0.0, self.width, self.height)

    def set_x(self, kind: str, low: float, high: float, linthresh: float = 1.0, linscale: float = 1.0) -> None:
        self.x = Scale(kind, low, high, 0.0, self.width, linthresh, linscale)

    def set_y(self, kind: str, low: float, high: float, linthresh: float = 1.0, linscale: float = 1.0) -> None:
        self.y = Scale(kind, low, high, self.height, 0.0, linthresh, linscale)

    # --- marks in data coordinates -----------------------------------------------------------------------------

    def hspan(self, y0: float, y1: float, color: str, opacity: float) -> None:
        a, b = sorted((self.y(y0), self.y(y1)))
        self.clipped.append(f'<rect x="0" y="{_n(a)}" width="{_n(self.width)}" height="{_n(b - a)}" fill="{color}" '
                            f'fill-opacity="{opacity:g}"/>')

    def vspan(self, x0: float, x1: float, color: str, opacity: float) -> None:
        a, b = sorted((self.x(x0), self.x(x1)))
        self.clipped.append(f'<rect x="{_n(a)}" y="0" width="{_n(b - a)}" height="{_n(self.height)}" '
                            f'fill="{color}" fill-opacity="{opacity:g}"/>')

    def hline(self, y: float, color: str, width: float = 1.0, dash: str = "") -> None:
        self._segment(0.0, self.y(y), self.width, self.y(y), color, width, dash)

    def vline(self, x: float, color: str, width: float = 1.0, dash: str = "") -> None:
        self._segment(self.x(x), 0.0, self.x(x), self.height, color, width, dash)

    def _segment(self, x0, y0, x1, y1, color, width, dash="", clip=True) -> None:
        style = f' stroke-dasharray="{dash}"' if dash else ""
        (self.clipped if clip else self.above).append(
            f'<path d="M{_n(x0)} {_n(y0)}L{_n(x1)} {_n(y1)}" stroke="{color}" stroke-width="{width:g}"{style}/>')

    def line(self, xs, ys, color: str, width: float = 1.0, opacity: float = 1.0, steps: bool = False) -> None:
        """A polyline through (xs, ys), broken where a value is NaN; ``steps``: level steps centred on each x."""
        runs: list[list[tuple[float, float]]] = [[]]
        for x, y in zip(xs, ys):
            if math.isnan(float(y)):
                runs.append([])
            else:
                runs[-1].append((self.x(x), self.y(y)))
        d = ""
        for run in (r for r in runs if len(r) > 1):
            if steps:
                mids = [(a[0] + b[0]) / 2 for a, b in zip(run, run[1:])]
                corners = [run[0]] + [p for m, a, b in zip(mids, run, run[1:]) for p in ((m, a[1]), (m, b[1]))]
                run = corners + [run[-1]]
            d += "M" + "L".join(f"{_n(px)} {_n(py)}" for px, py in run)
        if d:
            self.clipped.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="{width:g}" '
                                f'stroke-opacity="{opacity:g}" stroke-linejoin="round"/>')

    def scatter(self, xs, ys, mark: Mark, radius: float = 3.0, width: float = 1.0, legend: bool = True) -> None:
        """A marker at each (x, y); the series' legend entry (also when empty, as Matplotlib's was)."""
        points = [(self.x(x), self.y(y)) for x, y in zip(xs, ys)]
        if points:
            fill = mark.fill or mark.color
            self.clipped.append(f'<path d="{marker_path(points, mark.shape, radius)}" fill="{fill}" '
                                f'stroke="{mark.edge or mark.color}" stroke-width="{width:g}"/>')
        if legend:
            self.marks.append(mark)

    def vsegments(self, xs, lows, highs, color: str, width: float, opacity: float) -> None:
        d = "".join(f"M{_n(self.x(x))} {_n(self.y(a))}V{_n(self.y(b))}" for x, a, b in zip(xs, lows, highs))
        if d:
            self.clipped.append(f'<path d="{d}" stroke="{color}" stroke-width="{width:g}" '
                                f'stroke-opacity="{opacity:g}"/>')

    def hbars(self, positions, lengths, colors, thickness: float) -> None:
        """Horizontal bars from the x scale's low end to each length, centred on each y position."""
        half = abs(self.y(thickness / 2) - self.y(0))
        for y, length, color in zip(positions, lengths, colors):
            right = self.x(length)
            self.clipped.append(f'<rect x="0" y="{_n(self.y(y) - half)}" width="{_n(max(right, 0.0))}" '
                                f'height="{_n(2 * half)}" fill="{color}"/>')

    # --- text, ticks, axis labels (axes coordinates) ---------------------------------------------------------

    def text(self, x: float, y: float, text: str, size: float = 8, color: str = "#222", anchor: str = "start",
             baseline: str = "middle", rotate: float = 0.0) -> Box:
        """Text at (x, y) in axes coordinates, not clipped; its box (unrotated)."""
        self.above.append(_text(x, y, text, size, color, anchor, baseline, rotate))
        w, h = text_width(text, size), text_height(text, size)
        x0 = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        y0 = {"top": y, "middle": y - h / 2, "bottom": y - h}[baseline]
        return Box(x0, y0, x0 + w, y0 + h)

    def xticks(self, values, labels, size: float = 8, rotate: bool = False) -> None:
        """Ticks and labels under the axes (rotated upright with ``rotate``); the bottom margin grows to fit."""
        tall = 0.0
        for v, label in zip(values, labels):
            x = self.x(v)
            self._segment(x, self.height, x, self.height + 3.5, "#222", 0.8, clip=False)
            if rotate:
                self.text(x, self.height + 5, label, size, anchor="end", rotate=-90)
                tall = max(tall, text_width(label, size))
            else:
                self.text(x, self.height + 5, label, size, anchor="middle", baseline="top")
                tall = max(tall, text_height(label, size))
        self.depth["x"] = max(self.depth.get("x", 0.0), tall + 8)

    def yticks(self, values, labels, size: float = 8, grid: str = "") -> None:
        """Ticks and labels left of the axes, and grid lines across in ``grid`` (a colour; none if empty)."""
        wide = 0.0
        for v, label in zip(values, labels):
            y = self.y(v)
            if grid:
                self._segment(0.0, y, self.width, y, grid, 0.6)
            self._segment(-3.5, y, 0.0, y, "#222", 0.8, clip=False)
            self.text(-5, y, label, size, anchor="end")
            wide = max(wide, text_width(label, size))
        self.depth["y"] = max(self.depth.get("y", 0.0), wide + 8)

    def xlabel(self, text: str, size: float = 9) -> None:
        """The x axis' label, under its tick labels (placed by ``svg``, once the ticks have set the margin)."""
        self.axis_labels["x"] = (text, size)

    def ylabel(self, text: str, size: float = 9) -> None:
        """The y axis' label, upright, left of its tick labels."""
        self.axis_labels["y"] = (text, size)

    # --- the legend, above the axes ----------------------------------------------------------------------------

    def legend(self, marks: list[Mark] | None = None, ncol: int = 4, size: float = 8) -> Box | None:
        """The legend above the axes, whole: up to ``ncol`` columns, fewer where a row would run past the figure's
        right edge; the top margin grows to hold its rows (the axes keep their size). Returns its box."""
        marks = self.marks if marks is None else marks
        if not marks:
            return None
        widths = [24 + text_width(m.label, size) for m in marks]
        room = self.width + self.margins[2] - 4  # from the axes' left edge to the figure's right one
        columns = max(1, min(ncol, len(marks)))
        while columns > 1 and _row_width(widths, columns) > room:
            columns -= 1
        cols = [max(widths[c::columns]) for c in range(columns)]
        rows = math.ceil(len(marks) / columns)
        row_h = size * 1.6
        top = -6 - rows * row_h
        for i, m in enumerate(marks):
            x, y = sum(cols[: i % columns]) + 10 * (i % columns), top + (i // columns + 0.5) * row_h
            self.above.append(_handle(m, x, y))
            self.above.append(_text(x + 20, y, m.label, size, "#222"))
        self.margins[1] = max(self.margins[1], -top + 6)
        return Box(0.0, top, _row_width(widths, columns), top + rows * row_h)

    # --- the whole figure ------------------------------------------------------------------------------------

    def svg(self, salt: str) -> str:
        """The figure as one inline ``<svg>`` element; ``salt`` makes its ids unique on the page."""
        left, top, right, bottom = self.margins
        below, beside = self.depth.get("x", 4.0), self.depth.get("y", 4.0)
        extra = []
        if "x" in self.axis_labels:
            text, size = self.axis_labels["x"]
            extra.append(_text(self.width / 2, self.height + below, text, size, "#222", "middle", "top"))
            below += text_height(text, size) + 4
        if "y" in self.axis_labels:
            text, size = self.axis_labels["y"]
            beside += text_height(text, size) + 2
            extra.append(_text(-beside, self.height / 2, text, size, "#222", "middle", "top", rotate=-90))
            beside += 4
        left, bottom = max(left, beside), max(bottom, below)
        width, height = self.width + left + right, self.height + top + bottom
        clip = f"{salt}-axes"
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(width)} {_n(height)}" '
                f'width="{_n(width)}" height="{_n(height)}" font-family="{FONT}">'
                f'<defs><clipPath id="{clip}"><rect width="{_n(self.width)}" height="{_n(self.height)}"/></clipPath>'
                f'</defs><rect width="100%" height="100%" fill="white"/>'
                f'<g transform="translate({_n(left)} {_n(top)})"><g clip-path="url(#{clip})">'
                + "".join(self.clipped) + "</g>"
                f'<rect width="{_n(self.width)}" height="{_n(self.height)}" fill="none" stroke="#222" '
                f'stroke-width="0.8"/>' + "".join(self.above) + "".join(extra) + "</g></svg>")


def _row_width(widths: list[float], columns: int) -> float:
    return sum(max(widths[c::columns]) for c in range(columns)) + 10 * (columns - 1)


def _handle(m: Mark, x: float, y: float) -> str:
    """A legend entry's handle, 16 units wide, left at x, centred on y."""
    if m.kind == "line":
        dash = f' stroke-dasharray="{m.dash}"' if m.dash else ""
        return f'<path d="M{_n(x)} {_n(y)}h16" stroke="{m.color}" stroke-width="1.2"{dash}/>'
    if m.kind == "patch":
        return (f'<rect x="{_n(x)}" y="{_n(y - 4.5)}" width="16" height="9" fill="{m.color}" '
                f'fill-opacity="{m.opacity:g}"/>')
    return (f'<path d="{marker_path([(x + 8, y)], m.shape, 3.5)}" fill="{m.fill or m.color}" '
            f'stroke="{m.edge or m.color}" stroke-width="1"/>')
