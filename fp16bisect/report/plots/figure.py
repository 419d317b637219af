"""Matplotlib for the report's plots: a figure on the Agg canvas, its SVG inline, ticks, legends, and labels
placed where they hide nothing.

Matplotlib is imported inside these functions, so ``import fp16bisect`` stays light; figures are drawn on
the Agg canvas (no pyplot, no global state) and saved as SVG with text kept as text (small, selectable,
searchable).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from fp16bisect.report.formatting import finite

COLOR_FP16 = "#d62728"  # the all-FP16 series, a failing evaluation
COLOR_PLAN = "#2ca02c"  # the series with the overrides, a passing evaluation


def new_figure(width: float, height: float, margins: dict):
    """A figure on the Agg canvas (no pyplot, no global state) whose axes sit at fixed ``margins`` (inches:
    left, right, top, bottom), so text can be measured and placed before drawing; a layout engine would
    cost a layout pass per figure and move things after they were placed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=margins["left"] / width, right=1 - margins["right"] / width,
                        top=1 - margins["top"] / height, bottom=margins["bottom"] / height)
    FigureCanvasAgg(fig)
    return fig


def inline_svg(fig, salt: str) -> str:
    """The figure as an inline ``<svg>`` element: no XML prolog, no metadata, ids unique to this plot."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    start = text.find("<metadata>")
    if start >= 0:
        text = text[:start] + text[text.index("</metadata>", start) + len("</metadata>"):]
    return text.strip()


def text_renderer(fig) -> object:
    """A renderer to measure text with; the figure's axes must already be where they will be drawn."""
    return fig.canvas.get_renderer()


def place_labels(ax, renderer, points, offsets, fontsize=8, color="#222") -> int:
    """Annotate ``points`` [(x, y, text)] in order, each at the first offset whose box overlaps no label
    placed before and stays inside the axes; a label with no free place is left out. Returns how many."""
    from matplotlib.text import Text

    placed: list = []  # the boxes of the labels placed so far
    axes_box = ax.get_window_extent(renderer)
    count = 0
    for x, y, text in points:
        for dx, dy in offsets:
            ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                              color=color, ha="left" if dx >= 0 else "right", va="center",
                              arrowprops={"arrowstyle": "-", "color": "#888", "lw": 0.6, "shrinkA": 0, "shrinkB": 0})
            ann.update_positions(renderer)
            box = Text.get_window_extent(ann, renderer).expanded(1.05, 1.2)  # the text alone, not its leader line
            inside = (box.x0 >= axes_box.x0 and box.x1 <= axes_box.x1 and box.y0 >= axes_box.y0
                      and box.y1 <= axes_box.y1)
            if inside and not any(box.overlaps(b) for b in placed):
                placed.append(box)
                count += 1
                break
            ann.remove()
    return count


def legend_above(ax, handles=None, labels=None, ncol: int = 4) -> float:
    """The legend above the axes, whole: in up to ``ncol`` columns, fewer (more rows) when a row would run past
    the figure's right edge, and the figure taller at the top when the rows would run past its top edge (the
    axes keep their size). Returns the inches added at the top."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    for columns in range(max(1, ncol), 0, -1):
        legend = ax.legend(handles, labels, fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=columns,
                           frameon=False, borderaxespad=0, handletextpad=0.4, columnspacing=1.6)
        box = legend.get_window_extent(renderer)
        if box.x1 <= fig.bbox.x1 - 2:
            break
    over = (box.y1 - fig.bbox.y1 + 4) / fig.dpi  # inches past the top, and a little room
    if over <= 0:
        return 0.0
    width, height = fig.get_size_inches()
    where = ax.get_position()
    top, bottom = (1 - where.y1) * height + over, where.y0 * height
    fig.set_size_inches(width, height + over)
    fig.subplots_adjust(top=1 - top / (height + over), bottom=bottom / (height + over))
    return over


def decade_ticks(ax, low: float, high: float, extra: Sequence[tuple[float, str]] = ()) -> None:
    """Major ticks at the powers of ten in [low, high], plus labelled ``extra`` ticks (e.g. the inf/NaN row)."""
    from matplotlib.ticker import NullLocator

    first, last = math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(high) + 1e-9)
    step = max(1, math.ceil((last - first + 1) / 12))
    ticks = [10.0**k for k in range(first, last + 1, step)]
    labels = [_power_of_ten(k) for k in range(first, last + 1, step)]
    ax.set_yticks(ticks + [t for t, _ in extra], labels + [text for _, text in extra])
    ax.yaxis.set_minor_locator(NullLocator())  # the decades and their grid lines are enough to read (and faster)


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_of_ten(k: int) -> str:
    """10 to the k as plain text with superscript digits (mathtext would cost a TeX-like parse per label)."""
    return "1" if k == 0 else "10" + str(k).translate(_SUPERSCRIPT)


def place_note(ax, renderer, xy, text, color, points, taken):
    """An boxed note with an arrow to ``xy``, at the nearby place that hides the fewest of ``points`` (data
    coordinates) and overlaps none of the ``taken`` boxes, inside the axes. Returns its box."""
    import numpy as np
    from matplotlib.text import Text

    shown = ax.transData.transform(np.asarray(points, dtype=float)) if points else np.zeros((0, 2))
    axes_box = ax.get_window_extent(renderer)
    best = None
    for dx, dy in [(16, -36), (16, 36), (-16, -36), (-16, 36), (40, -70), (40, 70), (-40, -70), (-40, 70),
                   (80, -110), (80, 110), (-80, -110), (-80, 110)]:
        note = ax.annotate(text, xy, xytext=(dx, dy), textcoords="offset points", fontsize=8.5, color=color,
                           ha="left" if dx > 0 else "right", va="top" if dy < 0 else "bottom", zorder=6,
                           bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": color, "lw": 0.8, "alpha": 0.85},
                           arrowprops={"arrowstyle": "->", "color": color, "lw": 1.0})
        note.update_positions(renderer)
        box = Text.get_window_extent(note, renderer).expanded(1.1, 1.25)
        outside = not (box.x0 >= axes_box.x0 and box.x1 <= axes_box.x1 and box.y0 >= axes_box.y0
                       and box.y1 <= axes_box.y1)
        hidden = int(np.count_nonzero((shown[:, 0] >= box.x0) & (shown[:, 0] <= box.x1) & (shown[:, 1] >= box.y0)
                                      & (shown[:, 1] <= box.y1)))
        cost = (outside or any(box.overlaps(b) for b in taken), hidden)
        if best is None or cost < best[0]:
            if best is not None:
                best[1].remove()
            best = (cost, note, box)
        else:
            note.remove()
        if cost == (False, 0):
            break
    return best[2]


def log_floor(values) -> float:
    """A floor one decade below the smallest positive finite value (zeros are drawn there)."""
    positive = [v for v in values if finite(v) and v > 0]
    if not positive:
        return 1e-8
    return 10.0 ** (math.floor(math.log10(min(positive))) - 1)
