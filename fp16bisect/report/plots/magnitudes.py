"""The magnitude plot: every float tensor's FP32 magnitude (max |x|, min nonzero |x|) against the low precision's
limits (``data["precision"]``: FP16 or BF16).

Tensors sorted by their largest magnitude, activations and weights apart; the precision's overflow, subnormal
and flush-to-zero ranges shaded; the riskiest tensors labelled by name where a label hides nothing. A precision
with FP32's range (BF16) draws its limits only where they fall within the tensors' magnitudes: its risk is
rounding, not range, and its limits are 80 decades apart.
"""

from __future__ import annotations

import math

from fp16bisect.model.precision import NEAR, Precision, precision_of
from fp16bisect.report.formatting import finite, num, plural, short
from fp16bisect.report.plots import PLOT_MAGNITUDES
from fp16bisect.report.plots.figure import decade_ticks, log_floor, new_figure, nice_ticks, place_labels
from fp16bisect.report.plots.svg import Figure, Mark

_MAX_NAME_LABELS = 15  # tensors labelled by name
# where a tensor's name may go around its marker (points), tried in order
_LABEL_OFFSETS = [(10, 0), (10, 12), (10, -12), (10, 24), (10, -24), (10, 36), (10, -36), (10, 48), (10, -48),
                  (-10, 0), (-10, 12), (-10, -12), (-10, 24), (-10, -24), (30, 60), (30, -60)]
_COLOR_ACTIVATION = "#1f77b4"
_COLOR_WEIGHT = "#9467bd"


def plot(data: dict) -> tuple[str, str]:
    """The FP32 magnitudes of ``data["tensors"]`` against the limits of ``data["precision"]``, and its caption."""
    plot = _MagnitudePlot(data["tensors"], precision_of(data.get("precision")))
    svg = plot.draw()
    return svg, plot.caption()


def _size(t) -> float:
    """Sort key: largest first, non-finite before everything, nan last."""
    v = t.get("max_abs")
    if v is None or math.isnan(float(v)):
        return -1.0
    return float(v)


class _MagnitudePlot:
    """``magnitudes`` in steps: its scale, the precision's limits, one series per kind of tensor, the axes, the
    names of the risky tensors, then the caption (which counts what the series could not draw)."""

    def __init__(self, tensors: list[dict], low: Precision):
        self.tensors = tensors
        self.low = low
        self.by_range = low.ranked_by == "range"  # its limits are where it fails: always drawn
        self.order = sorted(tensors, key=_size, reverse=True)
        self.n = len(self.order)
        self.floor, self.ceiling = self._scale()
        self.nan_count = self.zero_count = self.inf_count = 0
        self.risky = [(i, t) for i, t in enumerate(self.order) if int(t.get("tier", 0)) >= 2]
        self.risky.sort(key=lambda it: -int(it[1].get("tier", 0)))  # stable: keeps largest-first within a tier
        self.labelled = 0

    def _scale(self) -> tuple[float, float]:
        """The floor (all-zero tensors are drawn there) and the ceiling (where inf is drawn)."""
        order = self.order
        values = [float(t["max_abs"]) for t in order if finite(t.get("max_abs"))]
        values += [float(t["min_nonzero_abs"]) for t in order if finite(t.get("min_nonzero_abs"))]
        low = self.low
        floor = min(log_floor(values), low.smallest_subnormal / 100) if self.by_range else log_floor(values)
        top_finite = max([v for v in values if v > 0] + ([low.max] if self.by_range else [1.0]))
        return floor, 10.0 ** (math.floor(math.log10(top_finite)) + 2)

    def draw(self) -> str:
        fig = new_figure(12, 5.2, {"left": 0.8, "right": 1.9, "top": 0.45, "bottom": 0.5})
        fig.set_x("linear", -1, max(self.n, 2))
        fig.set_y("log", self.floor / 3, self.ceiling * 5)
        self._draw_limits(fig)
        for kind, color, marker in (("activation", _COLOR_ACTIVATION, "o"), ("weight", _COLOR_WEIGHT, "D")):
            self._draw_kind(fig, kind, color, marker)
        self._draw_axes(fig)
        self.labelled = place_labels(fig, self._name_points(), _LABEL_OFFSETS)
        return fig.svg(PLOT_MAGNITUDES)

    def _draw_limits(self, fig: Figure) -> None:
        """The precision's overflow, subnormal and flush-to-zero ranges, shaded, and their limits, labelled (those
        within the plot's scale)."""
        low = self.low
        fig.hspan(low.max, self.ceiling * 100, "#d62728", 0.07)
        fig.hspan(low.smallest_subnormal, low.smallest_normal, "#ffbf00", 0.10)
        fig.hspan(self.floor / 100, low.smallest_subnormal, "#888", 0.10)
        limits = [
            (low.max, "#d62728", f"{low.max_text} {low.label} max\n(above: inf)"),
            (low.smallest_normal, "#b8860b", f"{low.normal_text} smallest normal\n(below: subnormal)"),
            (low.smallest_subnormal, "#555", f"{low.smallest_subnormal:.1e} smallest subnormal\n"
                                             f"(below {low.flushed_at:.0e}: 0)"),
        ]
        for y, color, text in [limit for limit in limits if self.floor <= limit[0] <= self.ceiling]:
            fig.hline(y, color, 1.1, dash="4 2")
            fig.text(fig.width + 4, fig.y(y), text, 8, color)

    def _kind_points(self, kind: str) -> tuple[list, list, list, list, list]:
        """The tensors of ``kind``: x and max |x| of the finite ones (zeros at the floor), x and min nonzero |x|
        where there is one, x of those already inf in FP32; NaN, zero and inf ones counted."""
        xs, hi, lo_x, lo, inf_x = [], [], [], [], []
        for i, t in enumerate(self.order):
            if (t.get("kind") == "weight") != (kind == "weight"):
                continue
            v = t.get("max_abs")
            if v is None or math.isnan(float(v)):
                self.nan_count += 1
                continue
            v = float(v)
            if math.isinf(v):
                inf_x.append(i)
                self.inf_count += 1
                continue
            if v <= 0:
                self.zero_count += 1
                v = self.floor
            xs.append(i)
            hi.append(v)
            mn = t.get("min_nonzero_abs")
            if finite(mn) and float(mn) > 0:
                lo_x.append(i)
                lo.append(float(mn))
        return xs, hi, lo_x, lo, inf_x

    def _draw_kind(self, fig: Figure, kind: str, color: str, marker: str) -> None:
        xs, hi, lo_x, lo, inf_x = self._kind_points(kind)
        if lo_x:
            fig.vsegments(lo_x, lo, [hi[xs.index(i)] for i in lo_x], color, 0.7, 0.35)
        fig.scatter(xs, hi, Mark(f"{kind}: max |x|", color=color, shape=marker), radius=2.3, width=0.5)
        if lo_x:
            fig.scatter(lo_x, lo, Mark(f"{kind}: min nonzero |x|", color=color, shape=marker, fill="white"),
                        radius=2.0, width=0.9)
        if inf_x:
            fig.scatter(inf_x, [self.ceiling] * len(inf_x), Mark(f"{kind}: inf/NaN in FP32 already", color=color,
                                                                 shape="^", edge="black"), radius=4.0, width=0.6)

    def _draw_axes(self, fig: Figure) -> None:
        fig.xlabel(f"tensor, sorted by max |x| ({plural(self.n, 'tensor')})")
        fig.ylabel("|x| in the FP32 run (log)")
        decade_ticks(fig, self.floor / 3, self.ceiling * 5)
        ticks = nice_ticks(0, max(self.n - 1, 1))  # tensor ranks along x
        fig.xticks(ticks, [str(t) for t in ticks])
        fig.legend(ncol=6)

    def _name_points(self) -> list[tuple]:
        """Where the riskiest tensors' names point: at the limit each is near (max |x|, or its smallest values)."""
        points = []
        for i, t in self.risky[:_MAX_NAME_LABELS]:
            mx, mn = t.get("max_abs"), t.get("min_nonzero_abs")
            if mx is None or math.isnan(float(mx)):
                continue
            if math.isinf(float(mx)):
                y = self.ceiling
            elif float(mx) >= self.low.max / NEAR or not (finite(mn) and float(mn) > 0):
                y = max(float(mx), self.floor)
            else:  # near the bottom: the values that flush to zero
                y = float(mn)
            points.append((i, y, short(str(t.get("name", "")))))
        return points

    def caption(self) -> str:
        n = self.n
        weights = sum(1 for t in self.tensors if t.get("kind") == "weight")
        caption = [f"Every float tensor of the FP32 run ({plural(n - weights, 'activation')}, "
                   f"{plural(weights, 'weight')}), sorted by its largest magnitude: a filled marker is max |x|, the "
                   "hollow one below it the smallest nonzero |x| (circles: activations, diamonds: weights). "
                   + self._limits_said()]
        tier2 = len(self.risky)
        if tier2:
            caption.append(f"{plural(tier2, 'tensor')} at risk tier 2 or 3 (overflow, or near a limit); "
                           f"{self.labelled} labelled by name"
                           + (" (the table below lists them all)." if self.labelled < tier2 else "."))
        else:
            caption.append(f"No tensor is near a {self.low.label} limit.")
        if self.zero_count:
            caption.append(f"{plural(self.zero_count, 'all-zero tensor')} drawn at the floor {num(self.floor)}.")
        if self.inf_count:
            caption.append(f"{plural(self.inf_count, 'tensor')} already inf in FP32, drawn as ▲ at the top.")
        if self.nan_count:
            caption.append(f"{plural(self.nan_count, 'tensor')} with NaN magnitude not drawn.")
        return " ".join(caption)

    def _limits_said(self) -> str:
        low = self.low
        said = (f"Dashed lines are the {low.label} limits: above {low.max_text} a value becomes inf; between "
                f"{low.smallest_subnormal:.2e} and {low.smallest_normal:.2e} it is subnormal and loses precision; "
                f"below about {low.flushed_at:.2e} it becomes 0.")
        return said if self.by_range else (said + f" {low.label} has FP32's range: limits outside these magnitudes "
                                           "are not drawn; its risk is relative rounding.")
