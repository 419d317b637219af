"""The trace plot: the plan size of each evaluation of a search, passing or failing, in bands by phase."""

from __future__ import annotations

import math

from fp16bisect.report.formatting import esc, plural
from fp16bisect.report.plots import PLOT_TRACE
from fp16bisect.report.plots.figure import (COLOR_FP16, COLOR_PLAN, inline_svg, legend_above, new_figure,
                                            text_renderer)


def plot(steps: list[dict]) -> tuple[str, str]:
    """The search trace plot of ``steps`` (``data["trace"]``) and its caption."""
    xs = [int(s.get("index", i + 1)) for i, s in enumerate(steps)]
    ys = [int(s.get("fp32", 0)) for s in steps]
    fig = new_figure(12, 3.4, {"left": 0.8, "right": 0.15, "top": 0.4, "bottom": 0.5})
    ax = fig.subplots()
    bands = _phase_bands(xs, steps)
    for k, (a, b, _) in enumerate(bands):
        ax.axvspan(a - 0.5, b + 0.5, color="#000" if k % 2 else "#4a7fb5", alpha=0.04 if k % 2 else 0.07, lw=0,
                   zorder=0)
    ax.plot(xs, ys, color="#999", lw=0.9, zorder=1, drawstyle="steps-mid")
    ok = [(x, y) for x, y, s in zip(xs, ys, steps) if s.get("passed")]
    bad = [(x, y) for x, y, s in zip(xs, ys, steps) if not s.get("passed")]
    if ok:
        ax.scatter(*zip(*ok), s=36, marker="o", color=COLOR_PLAN, zorder=3, label="passes")
    if bad:
        ax.scatter(*zip(*bad), s=40, marker="X", color=COLOR_FP16, zorder=3, label="fails")
    _trace_axes(ax, xs, ys)
    _label_phases(ax, text_renderer(fig), bands, xs)
    svg = inline_svg(fig, PLOT_TRACE)
    return svg, _trace_caption(steps, ys, bands)


def _phase_bands(xs: list[int], steps: list[dict]) -> list[list]:
    """Contiguous runs of one phase: [first x, last x, phase]."""
    bands: list[list] = []
    for x, s in zip(xs, steps):
        phase = str(s.get("phase") or "")
        if bands and bands[-1][2] == phase:
            bands[-1][1] = x
        else:
            bands.append([x, x, phase])
    return bands


def _trace_axes(ax, xs: list[int], ys: list[int]) -> None:
    """Plan sizes on a symmetric log scale, each labelled when few; evaluations along x."""
    from matplotlib.ticker import MaxNLocator, NullLocator

    n = len(xs)
    # plan sizes span 0 to every candidate, and the small ones matter: a symmetric log scale keeps 0, 1 and 2 apart
    ymax = max(ys + [1])
    ax.set_yscale("symlog", linthresh=1, linscale=0.6)
    ax.set_ylim(-0.3, ymax * 3 + 2)
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ticks = [0] + [2**k for k in range(0, max(1, math.ceil(math.log2(ymax))) + 1)]
    ticks = [t for t in ticks if t == ymax or t <= ymax / 1.5] + [ymax]  # no power of 2 crowding the largest
    ax.set_yticks(sorted(set(ticks)), [str(t) for t in sorted(set(ticks))])
    ax.yaxis.set_minor_locator(NullLocator())
    if n <= 40:
        for x, y in zip(xs, ys):
            ax.annotate(str(y), (x, y), xytext=(0, 6), textcoords="offset points", fontsize=7.5, ha="center",
                        va="bottom", color="#333")
    if n <= 30:
        ax.set_xticks(xs)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=25))
    ax.set_xlabel("evaluation")
    ax.set_ylabel("nodes in FP32 (symlog)")
    legend_above(ax)
    ax.grid(axis="y", color="#eee", lw=0.6)
    ax.set_axisbelow(True)


def _label_phases(ax, renderer, bands: list[list], xs: list[int]) -> None:
    """Each phase's name at the top of its band, turned upright when the band is too narrow for it."""
    per_x = ax.get_window_extent(renderer).width / (max(xs) - min(xs) + 1.2)
    for a, b, phase in bands:
        if not phase:
            continue
        t = ax.text((a + b) / 2, 0.97, phase, transform=ax.get_xaxis_transform(), fontsize=8, color="#333",
                    ha="center", va="top")
        if t.get_window_extent(renderer).width > (b - a + 1) * per_x * 0.95:
            t.set_rotation(90)


def _trace_caption(steps: list[dict], ys: list[int], bands: list[list]) -> str:
    n = len(steps)
    passed = [y for y, s in zip(ys, steps) if s.get("passed")]
    return (f"Each of the {plural(n, 'evaluation')} of the search: the number of nodes the plan keeps in FP32, "
            "green ● if the outputs met the tolerance, red ✕ if not; shaded bands are the search phases "
            f"({', '.join(esc(p) for p in dict.fromkeys(b[2] for b in bands if b[2]))}). "
            f"{len(passed)} passed, {n - len(passed)} failed"
            + (f"; the smallest passing plan keeps {plural(min(passed), 'node')} in FP32." if passed else "."))
