"""The trace plot: the plan size of each evaluation of a search, passing or failing, in bands by phase."""

from __future__ import annotations

import math

from fp16bisect.report.formatting import esc, plural
from fp16bisect.report.plots import PLOT_TRACE
from fp16bisect.report.plots.figure import COLOR_FP16, COLOR_PLAN, new_figure, nice_ticks
from fp16bisect.report.plots.svg import Figure, Mark, text_width


def plot(steps: list[dict]) -> tuple[str, str]:
    """The search trace plot of ``steps`` (``data["trace"]``) and its caption."""
    xs = [int(s.get("index", i + 1)) for i, s in enumerate(steps)]
    ys = [int(s.get("fp32", 0)) for s in steps]
    fig = new_figure(12, 3.4, {"left": 0.8, "right": 0.15, "top": 0.4, "bottom": 0.5})
    _trace_axes(fig, xs, ys)
    bands = _phase_bands(xs, steps)
    for k, (a, b, _) in enumerate(bands):
        fig.vspan(a - 0.5, b + 0.5, "#000" if k % 2 else "#4a7fb5", 0.04 if k % 2 else 0.07)
    fig.line(xs, ys, "#999", 0.9, steps=True)
    for passed, mark, radius in ((True, Mark("passes", color=COLOR_PLAN, shape="o"), 3.4),
                                 (False, Mark("fails", color=COLOR_FP16, shape="X"), 3.6)):
        chosen = [(x, y) for x, y, s in zip(xs, ys, steps) if bool(s.get("passed")) == passed]
        if chosen:
            fig.scatter([x for x, _ in chosen], [y for _, y in chosen], mark, radius=radius)
    if len(xs) <= 40:
        for x, y in zip(xs, ys):
            fig.text(fig.x(x), fig.y(y) - 6, str(y), 7.5, "#333", "middle", "bottom")
    fig.legend()
    _label_phases(fig, bands)
    return fig.svg(PLOT_TRACE), _trace_caption(steps, ys, bands)


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


def _trace_axes(fig: Figure, xs: list[int], ys: list[int]) -> None:
    """Plan sizes on a symmetric log scale, each labelled when few; evaluations along x."""
    n = len(xs)
    # plan sizes span 0 to every candidate, and the small ones matter: a symmetric log scale keeps 0, 1 and 2 apart
    ymax = max(ys + [1])
    fig.set_y("symlog", -0.3, ymax * 3 + 2, linthresh=1, linscale=0.6)
    fig.set_x("linear", min(xs) - 0.6, max(xs) + 0.6)
    ticks = [0] + [2**k for k in range(0, max(1, math.ceil(math.log2(ymax))) + 1)]
    ticks = sorted({t for t in ticks if t == ymax or t <= ymax / 1.5} | {ymax})  # no power of 2 crowding the top
    fig.yticks(ticks, [str(t) for t in ticks], grid="#eee")
    xticks = xs if n <= 30 else nice_ticks(min(xs), max(xs), 25)
    fig.xticks(xticks, [str(x) for x in xticks])
    fig.xlabel("evaluation")
    fig.ylabel("nodes in FP32 (symlog)")


def _label_phases(fig: Figure, bands: list[list]) -> None:
    """Each phase's name at the top of its band, turned upright when the band is too narrow for it."""
    for a, b, phase in bands:
        if not phase:
            continue
        x = fig.x((a + b) / 2)
        if text_width(phase, 8) > (fig.x(b + 0.5) - fig.x(a - 0.5)) * 0.95:
            fig.text(x, 4, phase, 8, "#333", "end", rotate=-90)
        else:
            fig.text(x, 4, phase, 8, "#333", "middle", "top")


def _trace_caption(steps: list[dict], ys: list[int], bands: list[list]) -> str:
    n = len(steps)
    passed = [y for y, s in zip(ys, steps) if s.get("passed")]
    return (f"Each of the {plural(n, 'evaluation')} of the search: the number of nodes the plan keeps in FP32, "
            "green ● if the outputs met the tolerance, red ✕ if not; shaded bands are the search phases "
            f"({', '.join(esc(p) for p in dict.fromkeys(b[2] for b in bands if b[2]))}). "
            f"{len(passed)} passed, {n - len(passed)} failed"
            + (f"; the smallest passing plan keeps {plural(min(passed), 'node')} in FP32." if passed else "."))
