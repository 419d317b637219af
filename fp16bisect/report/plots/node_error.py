"""The per-node error plot: each candidate's output error against the FP32 run, along topological order.

One series for all FP16 and one with the overrides when there is a plan; y is what the layer-wise rule
judges (max abs error / max |FP32| of the tensor, on a log scale), failing nodes filled, inf/NaN on a row
of their own at the top, the nodes kept in FP32 shaded, and a note on the first failing node of each series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fp16bisect.report.formatting import capital, esc, finite, listing, num, plural, short
from fp16bisect.report.plots import PLOT_NODE_ERROR
from fp16bisect.report.plots.figure import COLOR_FP16, COLOR_PLAN, decade_ticks, log_floor, new_figure, place_note
from fp16bisect.report.plots.svg import Box, Figure, Mark

_DENSE_TICKS = 64  # up to this many nodes, every node's id is a tick label
_COLOR_PINNED = "#ff9f1c"


def plot(data: dict) -> tuple[str, str]:
    """The per-node error plot of ``data["nodes"]`` and its caption."""
    plot = _NodeErrorPlot(data)
    svg = plot.draw()
    return svg, plot.caption()


def _broken(m) -> bool:
    """A node's error no log scale shows: inf/NaN values, or no finite max abs."""
    return m is not None and (int(m.get("nonfinite") or 0) > 0 or not finite(m.get("max_abs")))


def _node_y(m) -> float:
    """What the per-node rule judges (older report data: the absolute error)."""
    return float(m["error"]) if m.get("error") is not None else float(m["max_abs"])


@dataclass
class _SeriesPoints:
    """One series of the per-node plot, ready to draw."""

    xs: list = field(default_factory=list)  # nodes with a finite error (zeros raised to the floor) ...
    ys: list = field(default_factory=list)
    fail_x: list = field(default_factory=list)  # ... those of them that fail
    fail_y: list = field(default_factory=list)
    bad_x: list = field(default_factory=list)  # nodes with inf/NaN values
    line_x: list = field(default_factory=list)  # the connecting line, broken (nan) where a node has no finite error
    line_y: list = field(default_factory=list)
    zeros: int = 0


class _NodeErrorPlot:
    """``node_error`` in steps: its scale, marks, series, legend, axes, the notes on the first failing nodes,
    then the caption (which counts what the series drew)."""

    def __init__(self, data: dict):
        self.nodes = data["nodes"]
        self.n = len(self.nodes)
        self.series = [("fp16", f"all {data.get('precision', 'FP16')}", COLOR_FP16, "o")]
        if any(node.get("with_overrides") is not None for node in self.nodes):
            self.series.append(("with_overrides", "with overrides", COLOR_PLAN, "s"))
        self.first = data.get("first_failing") or {}
        self.pinned = [i for i, node in enumerate(self.nodes) if node.get("pinned")]
        self.bound = data.get("node_error_bound")
        self.floor, self.ceiling = self._scale()
        self.counts: dict = {}  # series key -> (nodes with inf/NaN, zero errors drawn at the floor)
        self.drawn: list = []  # every marker drawn (data coordinates): the notes hide as few as they can

    def _scale(self) -> tuple[float, float]:
        """The floor (zero errors are drawn there) and the ceiling, the row where non-finite nodes are drawn."""
        finite_values = [_node_y(node[key]) for key, *_ in self.series for node in self.nodes
                         if node.get(key) is not None and not _broken(node[key])]
        if self.bound:
            finite_values.append(float(self.bound))
        floor = log_floor(finite_values)
        top_finite = max([v for v in finite_values if v > 0], default=floor * 10)
        return floor, 10.0 ** (math.floor(math.log10(top_finite)) + 2)

    def draw(self) -> str:
        fig = new_figure(12, 4.0, {"left": 0.6, "right": 0.15, "top": 0.45, "bottom": 0.3})
        fig.set_x("linear", -0.7, self.n - 0.3)
        fig.set_y("log", self.floor / 2, self.ceiling * 3)
        self._draw_marks(fig)
        for key, label, color, marker in self.series:
            self._draw_series(fig, key, label, color, marker)
        self._draw_legend(fig)
        self._draw_axes(fig)
        self._note_first_failing(fig)
        return fig.svg(PLOT_NODE_ERROR)

    def _draw_marks(self, fig: Figure) -> None:
        """The bands of the pinned nodes, the inf/NaN row and the rule's bound."""
        for i in self.pinned:
            fig.vspan(i - 0.5, i + 0.5, _COLOR_PINNED, 0.28)
        fig.hline(self.ceiling, "#999", 0.8, dash="1 2")
        if self.bound:
            fig.hline(float(self.bound), "#c0392b", 0.9, dash="4 2")
            fig.marks.append(Mark(f"fails above {float(self.bound):g}", kind="line", color="#c0392b", dash="4 2"))

    def _points(self, key: str) -> _SeriesPoints:
        p = _SeriesPoints()
        for i, node in enumerate(self.nodes):
            m = node.get(key)
            if m is None or _broken(m):
                p.line_x.append(i)
                p.line_y.append(math.nan)
                if m is not None:
                    p.bad_x.append(i)
                continue
            v = _node_y(m)
            if v < self.floor:
                v, p.zeros = self.floor, p.zeros + 1
            p.xs.append(i)
            p.ys.append(v)
            p.line_x.append(i)
            p.line_y.append(v)
            if m.get("passed") is False:
                p.fail_x.append(i)
                p.fail_y.append(v)
        return p

    def _draw_series(self, fig: Figure, key: str, label: str, color: str, marker: str) -> None:
        p = self._points(key)
        radius = 3.3 if key == "fp16" else 2.3  # the all-FP16 circles stay visible around equal plan squares
        fig.line(p.line_x, p.line_y, color, 1.0, opacity=0.55)
        fig.scatter(p.xs, p.ys, Mark(f"{label}: within tolerance", color=color, shape=marker, fill="white"),
                    radius=radius, width=1.1)
        fig.scatter(p.fail_x, p.fail_y, Mark(f"{label}: fails", color=color, shape=marker), radius=radius)
        if p.bad_x:
            fig.scatter(p.bad_x, [self.ceiling] * len(p.bad_x),
                        Mark(f"{label}: inf/NaN values", color=color, shape="X", edge="black"), radius=4.4,
                        width=0.6)
        self.counts[key] = (len(p.bad_x), p.zeros)
        self.drawn += list(zip(p.xs, p.ys)) + [(x, self.ceiling) for x in p.bad_x]

    def _draw_legend(self, fig: Figure) -> None:
        if self.pinned:
            fig.marks.append(Mark("kept in FP32 (pinned)", kind="patch", color=_COLOR_PINNED, opacity=0.4))
        fig.legend(ncol=len(fig.marks))

    def _draw_axes(self, fig: Figure) -> None:
        n, nodes = self.n, self.nodes
        decade_ticks(fig, self.floor, self.ceiling / 10, [(self.ceiling, "inf/NaN")])
        fig.ylabel("max abs error / max |FP32| (log)" if self.bound else "max abs error vs FP32 (log)")
        if n <= _DENSE_TICKS:
            ticks = list(range(n))
            fig.xlabel("node (topological order)")
        else:
            step = math.ceil(n / 40)
            ticks = list(range(0, n, step))
            fig.xlabel(f"node index in topological order (one label every {step} nodes)")
        fig.xticks(ticks, [short(str(nodes[i].get("id", "")), 24) if n <= _DENSE_TICKS
                           else f"{i} {short(str(nodes[i].get('id', '')), 18)}" for i in ticks], 7.5, rotate=True)

    def _note_first_failing(self, fig: Figure) -> None:
        index = {node.get("id"): i for i, node in enumerate(self.nodes)}
        taken: list[Box] = []  # boxes of the notes placed so far
        for key, label, color, _ in self.series:
            name = self.first.get(key)
            if name is None or name not in index:
                continue
            i = index[name]
            m = self.nodes[i].get(key) or {}
            y = self.ceiling if _broken(m) else max(_node_y(m) if m else self.floor, self.floor)
            taken.append(place_note(fig, (i, y), f"{label} fails first:\n{short(name)}", color, self.drawn, taken))

    def caption(self) -> str:
        bound = self.bound
        caption = [f"Each candidate node's output compared with the FP32 run, {plural(self.n, 'node')} in "
                   "topological order; "
                   + ("y is the largest absolute difference divided by the largest |FP32 value| of the same tensor "
                      "(each tensor's error at its own scale), on a log scale; a node fails (filled marker) on "
                      f"inf/NaN or above the dashed line at {float(bound):g}. Hollow markers pass."
                      if bound else "y is the largest absolute difference on a log scale. Hollow markers are within "
                      "the per-node tolerance, filled ones fail.")]
        for key, label, *_ in self.series:
            bad, zeros = self.counts[key]
            if bad:
                caption.append(f"{capital(label)}: {plural(bad, 'node')} with inf/NaN values, drawn as ✕ on the "
                               "dotted inf/NaN line at the top.")
            if zeros:
                caption.append(f"{capital(label)}: {plural(zeros, 'zero error')} drawn at the floor "
                               f"{num(self.floor)} (a log scale has no zero).")
        for key, label, *_ in self.series:
            name = self.first.get(key)
            caption.append(f"{capital(label)}: first failing node "
                           + (f"<code>{esc(name)}</code>." if name else "none."))
        if self.pinned:
            caption.append(f"Orange bands: the {plural(len(self.pinned), 'node')} kept in FP32: "
                           + listing([str(self.nodes[i].get("id", "")) for i in self.pinned]) + ".")
        else:
            caption.append("No node is kept in FP32.")
        return " ".join(caption)
