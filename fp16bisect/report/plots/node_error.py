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
from fp16bisect.report.plots.figure import (COLOR_FP16, COLOR_PLAN, decade_ticks, inline_svg, legend_above,
                                            log_floor, new_figure, place_note, text_renderer)

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
        margins = {"left": 0.9, "right": 0.15, "top": 0.45, "bottom": 1.0}  # bottom grows to fit the node ids
        fig = new_figure(12, 4.0, margins)
        ax = fig.subplots()
        ax.set_yscale("log")
        self._draw_marks(ax)
        for key, label, color, marker in self.series:
            self._draw_series(ax, key, label, color, marker)
        margins["top"] += self._draw_legend(ax)
        self._draw_axes(ax)
        renderer = text_renderer(fig)
        self._fit_node_ids(fig, ax, renderer, margins)
        self._note_first_failing(ax, renderer)
        return inline_svg(fig, PLOT_NODE_ERROR)

    def _draw_marks(self, ax) -> None:
        """The bands of the pinned nodes, the inf/NaN row and the rule's bound."""
        for i in self.pinned:
            ax.axvspan(i - 0.5, i + 0.5, color=_COLOR_PINNED, alpha=0.28, lw=0, zorder=0)
        ax.axhline(self.ceiling, color="#999", lw=0.8, ls=":", zorder=1)
        if self.bound:
            ax.axhline(float(self.bound), color="#c0392b", lw=0.9, ls="--", zorder=1,
                       label=f"fails above {float(self.bound):g}")

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

    def _draw_series(self, ax, key: str, label: str, color: str, marker: str) -> None:
        p = self._points(key)
        size = 34 if key == "fp16" else 16  # the all-FP16 circles stay visible around equal plan squares
        ax.plot(p.line_x, p.line_y, color=color, lw=1.0, alpha=0.55, zorder=2)
        ax.scatter(p.xs, p.ys, s=size, marker=marker, facecolors="white", edgecolors=color, lw=1.1, zorder=3,
                   label=f"{label}: within tolerance")
        ax.scatter(p.fail_x, p.fail_y, s=size, marker=marker, color=color, zorder=4, label=f"{label}: fails")
        if p.bad_x:
            ax.scatter(p.bad_x, [self.ceiling] * len(p.bad_x), s=60, marker="X", color=color, edgecolors="black",
                       lw=0.6, zorder=5, label=f"{label}: inf/NaN values")
        self.counts[key] = (len(p.bad_x), p.zeros)
        self.drawn += list(zip(p.xs, p.ys)) + [(x, self.ceiling) for x in p.bad_x]

    def _draw_legend(self, ax) -> float:
        """The legend (``legend_above``); the inches it added at the top."""
        handles, labels = ax.get_legend_handles_labels()
        if self.pinned:
            from matplotlib.patches import Patch

            handles.append(Patch(color=_COLOR_PINNED, alpha=0.4, lw=0))
            labels.append("kept in FP32 (pinned)")
        return legend_above(ax, handles, labels, ncol=len(labels))

    def _draw_axes(self, ax) -> None:
        n, nodes = self.n, self.nodes
        ax.set_xlim(-0.7, n - 0.3)
        ax.set_ylim(self.floor / 2, self.ceiling * 3)
        decade_ticks(ax, self.floor, self.ceiling / 10, [(self.ceiling, "inf/NaN")])
        ax.set_ylabel("max abs error / max |FP32| (log)" if self.bound else "max abs error vs FP32 (log)")
        ax.grid(axis="y", which="major", color="#eee", lw=0.6)
        ax.set_axisbelow(True)
        if n <= _DENSE_TICKS:
            ticks = list(range(n))
            ax.set_xlabel("node (topological order)")
        else:
            step = math.ceil(n / 40)
            ticks = list(range(0, n, step))
            ax.set_xlabel(f"node index in topological order (one label every {step} nodes)")
        ax.set_xticks(ticks, [short(str(nodes[i].get("id", "")), 24) if n <= _DENSE_TICKS
                              else f"{i} {short(str(nodes[i].get('id', '')), 18)}" for i in ticks],
                      rotation=90, fontsize=7.5)

    @staticmethod
    def _fit_node_ids(fig, ax, renderer, margins: dict) -> None:
        """Grow the figure's bottom margin to fit the rotated node ids and the axis label, the axes unchanged."""
        tick_height = max((t.get_window_extent(renderer).height for t in ax.get_xticklabels()), default=0) / fig.dpi
        axes_height = fig.get_figheight() - margins["top"] - margins["bottom"]
        margins["bottom"] = tick_height + 0.5  # room for the rotated ids and the axis label
        fig.set_size_inches(12, axes_height + margins["top"] + margins["bottom"])
        fig.subplots_adjust(bottom=margins["bottom"] / fig.get_figheight(),
                            top=1 - margins["top"] / fig.get_figheight())

    def _note_first_failing(self, ax, renderer) -> None:
        index = {node.get("id"): i for i, node in enumerate(self.nodes)}
        taken: list = []  # boxes of the notes placed so far
        for key, label, color, _ in self.series:
            name = self.first.get(key)
            if name is None or name not in index:
                continue
            i = index[name]
            m = self.nodes[i].get(key) or {}
            y = self.ceiling if _broken(m) else max(_node_y(m) if m else self.floor, self.floor)
            taken.append(place_note(ax, renderer, (i, y), f"{label} fails first:\n{short(name)}", color,
                                    self.drawn, taken))

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
