"""The ``--report FILE.html`` renderer: one self-contained HTML page from the report data.

``render(data)`` turns the plain data that ``report_data`` gathers (from ``search``,
``check`` or ``compare``) into a page a person opens in a browser, offline: a
header (model, backend, tolerance, command, summary), the per-output table, and
three plots as inline SVG (per-node error along topological order, the FP32
magnitude of every tensor against the FP16 limits, the search trace), then the
override list. No scripts, no external styles, fonts or images. ``write`` saves
it atomically.

Matplotlib is imported inside the plotting functions, so ``import fp16bisect``
stays light; figures are drawn on the Agg canvas and saved as SVG with text kept
as text (small, selectable, searchable).
"""

from __future__ import annotations

import html
import io
import math
from pathlib import Path

from fp16bisect import __version__
from fp16bisect.artifacts.overrides import write_atomic
from fp16bisect.model.statistics import FP16_MAX, FP16_MIN_NORMAL

FP16_MIN_SUBNORMAL = 2.0**-24  # 5.96e-08; nonzero |x| below half of it rounds to 0 in FP16

# ids of the page's sections: part of the contract (tests and links look for them)
PLOT_NODE_ERROR = "plot-node-error"
PLOT_MAGNITUDES = "plot-magnitudes"
PLOT_TRACE = "plot-trace"
OUTPUTS_TABLE = "outputs"
OVERRIDES_TABLE = "overrides"

_MAX_NAME_LABELS = 15  # tensors labelled by name in the magnitude plot
_DENSE_TICKS = 64  # up to this many nodes, every node's id is a tick label
_LABEL_CHARS = 28  # longer names are shortened in plots (tables show them whole)

_COLOR_FP16 = "#d62728"
_COLOR_PLAN = "#2ca02c"
_COLOR_PINNED = "#ff9f1c"
_COLOR_ACTIVATION = "#1f77b4"
_COLOR_WEIGHT = "#9467bd"

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 0 auto;
       max-width: 1240px; padding: 0 24px 48px; }
h1 { font-size: 1.45em; margin: 24px 0 8px; }
h2 { font-size: 1.2em; margin: 32px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
header dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
header dt { color: #666; }
header dd { margin: 0; overflow-wrap: anywhere; }
code { font: 13px ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
.summary { font-weight: 600; }
.notes { color: #444; }
figure { margin: 12px 0; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { color: #444; font-size: 0.92em; margin-top: 4px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.fail { color: #b00020; font-weight: 600; }
.pass { color: #1b7a1b; }
.empty { color: #666; font-style: italic; }
details { margin: 8px 0; }
summary { cursor: pointer; color: #333; }
footer { margin-top: 40px; color: #888; font-size: 0.85em; }
"""


# --- public -------------------------------------------------------------------------------------------------------


def render(data: dict) -> str:
    """The whole report page for ``data`` (the dict ``report_data`` gathers), as one HTML string."""
    title = data.get("title") or "fp16bisect report"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        _header(data),
        _outputs_section(data),
        _node_error_section(data),
        _magnitudes_section(data),
        _trace_section(data),
        _overrides_section(data),
        f"<footer>Written by fp16bisect {_esc(__version__)}. Self-contained: no scripts, no network.</footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def write(path, data: dict) -> None:
    """Render ``data`` and write it to ``path`` atomically (an unwritable path raises UsageError)."""
    write_atomic(Path(path), render(data).encode("utf-8"))


# --- formatting ---------------------------------------------------------------------------------------------------


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _num(x, digits: int = 3) -> str:
    """A number for a table: 3 significant digits, non-finite as inf/-inf/nan, missing as a dash."""
    if x is None:
        return "–"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def _cosine(x) -> str:
    if x is None:
        return "–"
    x = float(x)
    return _num(x, 6)  # 0.999998 stays apart from 1


def _passed(p) -> str:
    if p is None:
        return "<td>–</td>"
    return '<td class="pass">yes</td>' if p else '<td class="fail">no</td>'


def _short(name: str, limit: int = _LABEL_CHARS) -> str:
    """``name`` within ``limit`` characters, cut in the middle: exported names share long prefixes
    (``/encoder/layers.3/…``) and differ in their layer number and their tail."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 3
    return name[:head] + "…" + name[len(name) - (limit - 1 - head):]


def _finite(x) -> bool:
    return x is not None and math.isfinite(float(x))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _listing(names: list[str], limit: int = 20) -> str:
    shown = ", ".join(f"<code>{_esc(n)}</code>" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --- sections -----------------------------------------------------------------------------------------------------


def _header(data: dict) -> str:
    model = data.get("model") or {}
    rows = [
        ("model", f"<code>{_esc(model.get('path', ''))}</code>"),
        ("sha256", f"<code>{_esc(model.get('sha256', ''))}</code>"),
        ("backend", _esc(data.get("backend", ""))),
        ("tolerance", _esc(data.get("tolerance", ""))),
        ("command", f"<code>{_esc(data.get('command', ''))}</code>"),
        ("summary", f'<span class="summary">{_esc(data.get("summary", ""))}</span>'),
    ]
    out = ["<header>", f"<h1>{_esc(data.get('title') or 'fp16bisect report')}</h1>", "<dl>"]
    out += [f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows]
    out.append("</dl>")
    notes = data.get("notes") or []
    if notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>")
    out.append("</header>")
    return "\n".join(out)


def _metric_cells(m: dict | None) -> str:
    if m is None:
        return '<td colspan="5" class="empty">not run</td>'
    return (f'<td class="num">{_num(m.get("max_abs"))}</td><td class="num">{_num(m.get("max_rel"))}</td>'
            f'<td class="num">{_cosine(m.get("cosine"))}</td><td class="num">{int(m.get("nonfinite") or 0)}</td>'
            + _passed(m.get("passed")))


_METRIC_HEADS = "<th>max abs</th><th>max rel</th><th>cosine</th><th>inf/NaN</th><th>pass</th>"


def _outputs_section(data: dict) -> str:
    outputs = data.get("outputs") or []
    out = ["<section>", "<h2>Outputs</h2>"]
    if not outputs:
        out.append(f'<p id="{OUTPUTS_TABLE}" class="empty">no outputs compared</p>')
    else:
        out.append(f'<table id="{OUTPUTS_TABLE}">')
        out.append('<tr><th rowspan="2">output</th><th colspan="5">all FP16</th>'
                   '<th colspan="5">with overrides</th></tr>')
        out.append(f"<tr>{_METRIC_HEADS}{_METRIC_HEADS}</tr>")
        for o in outputs:
            out.append(f"<tr><td><code>{_esc(o.get('output', ''))}</code></td>"
                       f"{_metric_cells(o.get('fp16'))}{_metric_cells(o.get('with_overrides'))}</tr>")
        out.append("</table>")
        out.append('<p class="notes">Each output\'s worst sample against the FP32 reference; '
                   "inf/NaN counts elements that are not finite.</p>")
    out.append("</section>")
    return "\n".join(out)


def _figure(fig_id: str, svg: str | None, caption: str, empty: str = "") -> str:
    body = svg if svg is not None else f'<p class="empty">{_esc(empty)}</p>'
    return f'<figure id="{fig_id}">\n{body}\n<figcaption>{caption}</figcaption>\n</figure>'


def _node_error_section(data: dict) -> str:
    nodes = data.get("nodes") or []
    out = ["<section>", "<h2>Per-node error along the graph</h2>"]
    if not nodes:
        out.append(_figure(PLOT_NODE_ERROR, None, "No per-node comparison.", "no candidate nodes to compare"))
    else:
        svg, caption = _plot_node_error(data)
        out.append(_figure(PLOT_NODE_ERROR, svg, caption))
        out.append(_node_table(nodes))
    out.append("</section>")
    return "\n".join(out)


def _node_table(nodes: list[dict]) -> str:
    plan = any(n.get("with_overrides") is not None for n in nodes)
    head = "<tr><th>#</th><th>node</th><th>op</th><th>FP32</th>" + "".join(
        f"<th>{label}: max abs</th><th>/ max |FP32|</th><th>cosine</th><th>inf/NaN</th><th>pass</th>"
        for label in (["all FP16", "with overrides"] if plan else ["all FP16"])) + "</tr>"
    rows = []
    for i, n in enumerate(nodes):
        cells = ""
        for key in ("fp16", "with_overrides") if plan else ("fp16",):
            m = n.get(key)
            if m is None:
                cells += '<td colspan="5" class="empty">–</td>'
            else:
                cells += (f'<td class="num">{_num(m.get("max_abs"))}</td><td class="num">{_num(m.get("error"))}</td>'
                          f'<td class="num">{_cosine(m.get("cosine"))}</td>'
                          f'<td class="num">{int(m.get("nonfinite") or 0)}</td>{_passed(m.get("passed"))}')
        rows.append(f"<tr><td class=\"num\">{i}</td><td><code>{_esc(n.get('id', ''))}</code></td>"
                    f"<td>{_esc(n.get('op_type', ''))}</td><td>{'yes' if n.get('pinned') else ''}</td>{cells}</tr>")
    return ("<details><summary>Per-node numbers (" + _plural(len(nodes), "node") + ")</summary>\n"
            '<table class="nodes">' + head + "\n" + "\n".join(rows) + "</table>\n</details>")


def _magnitudes_section(data: dict) -> str:
    tensors = data.get("tensors") or []
    out = ["<section>", "<h2>FP32 magnitudes against the FP16 range</h2>"]
    if not tensors:
        out.append(_figure(PLOT_MAGNITUDES, None, "No FP32 profile.", "no float tensors recorded"))
    else:
        svg, caption = _plot_magnitudes(data)
        out.append(_figure(PLOT_MAGNITUDES, svg, caption))
        risky = sorted((t for t in tensors if int(t.get("tier", 0)) >= 1), key=lambda t: -int(t.get("tier", 0)))
        if risky:
            rows = "\n".join(
                f"<tr><td><code>{_esc(t.get('name', ''))}</code></td><td>{_esc(t.get('kind', ''))}</td>"
                f"<td class=\"num\">{int(t.get('tier', 0))}</td><td class=\"num\">{_num(t.get('max_abs'))}</td>"
                f"<td class=\"num\">{_num(t.get('min_nonzero_abs'))}</td><td>{_esc(t.get('reason', ''))}</td></tr>"
                for t in risky)
            out.append("<details><summary>Tensors outside the comfortable FP16 range (" + _plural(len(risky), "tensor")
                       + ")</summary>\n<table><tr><th>tensor</th><th>kind</th><th>tier</th><th>max |x|</th>"
                       "<th>min nonzero |x|</th><th>why</th></tr>\n" + rows + "</table>\n</details>")
    out.append("</section>")
    return "\n".join(out)


def _trace_section(data: dict) -> str:
    trace = data.get("trace") or []
    out = ["<section>", "<h2>Search trace</h2>"]
    if not trace:
        out.append(_figure(PLOT_TRACE, None, "Only searches have a trace.",
                           "No search ran: this report compares fixed plans, so there is no trace."))
    else:
        svg, caption = _plot_trace(trace)
        out.append(_figure(PLOT_TRACE, svg, caption))
    out.append("</section>")
    return "\n".join(out)


def _overrides_section(data: dict) -> str:
    overrides = data.get("overrides") or []
    out = ["<section>", f"<h2>Overrides: nodes kept in FP32 ({len(overrides)})</h2>"]
    if not overrides:
        out.append(f'<p id="{OVERRIDES_TABLE}" class="empty">none: every candidate node runs in FP16</p>')
    else:
        out.append(f'<table id="{OVERRIDES_TABLE}">')
        out.append("<tr><th>node</th><th>op type</th><th>outputs</th><th>FP32 profile</th></tr>")
        for o in overrides:
            outs = ", ".join(f"<code>{_esc(t)}</code>" for t in o.get("outputs") or [])
            out.append(f"<tr><td><code>{_esc(o.get('name', ''))}</code></td><td>{_esc(o.get('op_type', ''))}</td>"
                       f"<td>{outs}</td><td>{_esc(o.get('fp32_profile', ''))}</td></tr>")
        out.append("</table>")
    out.append("</section>")
    return "\n".join(out)


# --- plots --------------------------------------------------------------------------------------------------------


def _new_figure(width: float, height: float, margins: dict):
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


def _svg(fig, salt: str) -> str:
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


def _renderer(fig) -> object:
    """A renderer to measure text with; the figure's axes must already be where they will be drawn."""
    return fig.canvas.get_renderer()


def _place_labels(ax, renderer, points, offsets, fontsize=8, color="#222") -> int:
    """Annotate ``points`` [(x, y, text)] in order, each at the first offset whose box overlaps no label
    placed before and stays inside the axes; a label with no free place is left out. Returns how many."""
    from matplotlib.text import Text

    placed = []
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


def _legend_above(ax, handles=None, labels=None, ncol: int = 4) -> None:
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=ncol, frameon=False,
              borderaxespad=0, handletextpad=0.4, columnspacing=1.6)


def _decade_ticks(ax, low: float, high: float, extra: list[tuple[float, str]] = ()) -> None:
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


def _place_note(ax, renderer, xy, text, color, points, taken):
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


def _log_floor(values) -> float:
    """A floor one decade below the smallest positive finite value (zeros are drawn there)."""
    positive = [v for v in values if _finite(v) and v > 0]
    if not positive:
        return 1e-8
    return 10.0 ** (math.floor(math.log10(min(positive))) - 1)


def _plot_node_error(data: dict) -> tuple[str, str]:
    nodes = data["nodes"]
    n = len(nodes)
    series = [("fp16", "all FP16", _COLOR_FP16, "o")]
    if any(node.get("with_overrides") is not None for node in nodes):
        series.append(("with_overrides", "with overrides", _COLOR_PLAN, "s"))
    first = data.get("first_failing") or {}
    pinned = [i for i, node in enumerate(nodes) if node.get("pinned")]

    def broken(m) -> bool:
        return m is not None and (int(m.get("nonfinite") or 0) > 0 or not _finite(m.get("max_abs")))

    bound = data.get("node_error_bound")

    def y_of(m) -> float:  # what the per-node rule judges (older report data: the absolute error)
        return float(m["error"]) if m.get("error") is not None else float(m["max_abs"])

    finite_values = [y_of(node[key]) for key, *_ in series for node in nodes
                     if node.get(key) is not None and not broken(node[key])]
    if bound:
        finite_values.append(float(bound))
    floor = _log_floor(finite_values)
    top_finite = max([v for v in finite_values if v > 0], default=floor * 10)
    ceiling = 10.0 ** (math.floor(math.log10(top_finite)) + 2)  # the row where non-finite nodes are drawn

    margins = {"left": 0.9, "right": 0.15, "top": 0.45, "bottom": 1.0}  # bottom grows to fit the node ids
    fig = _new_figure(12, 4.0, margins)
    ax = fig.subplots()
    ax.set_yscale("log")
    for i in pinned:
        ax.axvspan(i - 0.5, i + 0.5, color=_COLOR_PINNED, alpha=0.28, lw=0, zorder=0)
    ax.axhline(ceiling, color="#999", lw=0.8, ls=":", zorder=1)
    if bound:
        ax.axhline(float(bound), color="#c0392b", lw=0.9, ls="--", zorder=1, label=f"fails above {float(bound):g}")

    counts, drawn = {}, []
    for key, label, color, marker in series:
        xs, ys, fail_x, fail_y, bad_x, zeros = [], [], [], [], [], 0
        line_x, line_y = [], []  # the connecting line, broken (nan) where a node has no finite error
        for i, node in enumerate(nodes):
            m = node.get(key)
            if m is None or broken(m):
                line_x.append(i)
                line_y.append(math.nan)
                if m is not None:
                    bad_x.append(i)
                continue
            v = y_of(m)
            if v < floor:
                v, zeros = floor, zeros + 1
            xs.append(i)
            ys.append(v)
            line_x.append(i)
            line_y.append(v)
            if m.get("passed") is False:
                fail_x.append(i)
                fail_y.append(v)
        size = 34 if key == "fp16" else 16  # the all-FP16 circles stay visible around equal plan squares
        ax.plot(line_x, line_y, color=color, lw=1.0, alpha=0.55, zorder=2)
        ax.scatter(xs, ys, s=size, marker=marker, facecolors="white", edgecolors=color, lw=1.1, zorder=3,
                   label=f"{label}: within tolerance")
        ax.scatter(fail_x, fail_y, s=size, marker=marker, color=color, zorder=4, label=f"{label}: fails")
        if bad_x:
            ax.scatter(bad_x, [ceiling] * len(bad_x), s=60, marker="X", color=color, edgecolors="black", lw=0.6,
                       zorder=5, label=f"{label}: inf/NaN values")
        counts[key] = (len(bad_x), zeros)
        drawn += list(zip(xs, ys)) + [(x, ceiling) for x in bad_x]

    handles, labels = ax.get_legend_handles_labels()
    if pinned:
        from matplotlib.patches import Patch

        handles.append(Patch(color=_COLOR_PINNED, alpha=0.4, lw=0))
        labels.append("kept in FP32 (pinned)")
    _legend_above(ax, handles, labels, ncol=len(labels))

    ax.set_xlim(-0.7, n - 0.3)
    ax.set_ylim(floor / 2, ceiling * 3)
    _decade_ticks(ax, floor, ceiling / 10, [(ceiling, "inf/NaN")])
    ax.set_ylabel("max abs error / max |FP32| (log)" if bound else "max abs error vs FP32 (log)")
    ax.grid(axis="y", which="major", color="#eee", lw=0.6)
    ax.set_axisbelow(True)
    if n <= _DENSE_TICKS:
        ticks = list(range(n))
        ax.set_xlabel("node (topological order)")
    else:
        step = math.ceil(n / 40)
        ticks = list(range(0, n, step))
        ax.set_xlabel(f"node index in topological order (one label every {step} nodes)")
    ax.set_xticks(ticks, [_short(str(nodes[i].get("id", "")), 24) if n <= _DENSE_TICKS
                          else f"{i} {_short(str(nodes[i].get('id', '')), 18)}" for i in ticks],
                  rotation=90, fontsize=7.5)
    renderer = _renderer(fig)
    tick_height = max((t.get_window_extent(renderer).height for t in ax.get_xticklabels()), default=0) / fig.dpi
    axes_height = 4.0 - margins["top"] - margins["bottom"]
    margins["bottom"] = tick_height + 0.5  # room for the rotated ids and the axis label
    fig.set_size_inches(12, axes_height + margins["top"] + margins["bottom"])
    fig.subplots_adjust(bottom=margins["bottom"] / fig.get_figheight(), top=1 - margins["top"] / fig.get_figheight())

    index = {node.get("id"): i for i, node in enumerate(nodes)}
    taken = []  # boxes of the notes placed so far
    for key, label, color, _ in series:
        name = first.get(key)
        if name not in index:
            continue
        i = index[name]
        m = nodes[i].get(key) or {}
        y = ceiling if broken(m) else max(y_of(m) if m else floor, floor)
        taken.append(_place_note(ax, renderer, (i, y), f"{label} fails first:\n{_short(name)}", color, drawn, taken))
    svg = _svg(fig, PLOT_NODE_ERROR)

    caption = [f"Each candidate node's output compared with the FP32 run, {_plural(n, 'node')} in topological order; "
               + ("y is the largest absolute difference divided by the largest |FP32 value| of the same tensor "
                  "(each tensor's error at its own scale), on a log scale; a node fails (filled marker) on inf/NaN "
                  f"or above the dashed line at {float(bound):g}. Hollow markers pass."
                  if bound else "y is the largest absolute difference on a log scale. Hollow markers are within "
                  "the per-node tolerance, filled ones fail.")]
    for key, label, *_ in series:
        bad, zeros = counts[key]
        if bad:
            caption.append(f"{label[0].upper() + label[1:]}: {_plural(bad, 'node')} with inf/NaN values, drawn as ✕ on the "
                           "dotted inf/NaN line at the top.")
        if zeros:
            caption.append(f"{label[0].upper() + label[1:]}: {_plural(zeros, 'zero error')} drawn at the floor {_num(floor)} "
                           "(a log scale has no zero).")
    for key, label, *_ in series:
        name = first.get(key)
        caption.append(f"{label[0].upper() + label[1:]}: first failing node "
                       + (f"<code>{_esc(name)}</code>." if name else "none."))
    if pinned:
        caption.append(f"Orange bands: the {_plural(len(pinned), 'node')} kept in FP32: "
                       + _listing([str(nodes[i].get("id", "")) for i in pinned]) + ".")
    else:
        caption.append("No node is kept in FP32.")
    return svg, " ".join(caption)


def _plot_magnitudes(data: dict) -> tuple[str, str]:
    tensors = data["tensors"]

    def size(t) -> float:  # sort key: largest first, non-finite before everything, nan last
        v = t.get("max_abs")
        if v is None or math.isnan(float(v)):
            return -1.0
        return float(v)

    order = sorted(tensors, key=size, reverse=True)
    values = [float(t["max_abs"]) for t in order if _finite(t.get("max_abs"))]
    values += [float(t["min_nonzero_abs"]) for t in order if _finite(t.get("min_nonzero_abs"))]
    floor = min(_log_floor(values), FP16_MIN_SUBNORMAL / 100)
    top_finite = max([v for v in values if v > 0] + [FP16_MAX])
    ceiling = 10.0 ** (math.floor(math.log10(top_finite)) + 2)

    fig = _new_figure(12, 5.2, {"left": 0.8, "right": 1.9, "top": 0.45, "bottom": 0.5})
    ax = fig.subplots()
    ax.set_yscale("log")
    n = len(order)
    ax.axhspan(FP16_MAX, ceiling * 100, color="#d62728", alpha=0.07, lw=0, zorder=0)
    ax.axhspan(FP16_MIN_SUBNORMAL, FP16_MIN_NORMAL, color="#ffbf00", alpha=0.10, lw=0, zorder=0)
    ax.axhspan(floor / 100, FP16_MIN_SUBNORMAL, color="#888", alpha=0.10, lw=0, zorder=0)
    limits = [
        (FP16_MAX, "#d62728", "65504 FP16 max\n(above: inf)"),
        (FP16_MIN_NORMAL, "#b8860b", "6.1e-05 smallest normal\n(below: subnormal)"),
        (FP16_MIN_SUBNORMAL, "#555", "6.0e-08 smallest subnormal\n(below 3e-08: 0)"),
    ]
    for y, color, text in limits:
        ax.axhline(y, color=color, lw=1.1, ls="--", zorder=1)
        ax.text(1.006, y, text, transform=ax.get_yaxis_transform(), fontsize=8, color=color, ha="left",
                va="center", linespacing=1.1)

    nan_count, zero_count, inf_count = 0, 0, 0
    for kind, color, marker in (("activation", _COLOR_ACTIVATION, "o"), ("weight", _COLOR_WEIGHT, "D")):
        xs, hi, lo_x, lo, inf_x = [], [], [], [], []
        for i, t in enumerate(order):
            if (t.get("kind") == "weight") != (kind == "weight"):
                continue
            v = t.get("max_abs")
            if v is None or math.isnan(float(v)):
                nan_count += 1
                continue
            v = float(v)
            if math.isinf(v):
                inf_x.append(i)
                inf_count += 1
                continue
            if v <= 0:
                zero_count += 1
                v = floor
            xs.append(i)
            hi.append(v)
            mn = t.get("min_nonzero_abs")
            if _finite(mn) and float(mn) > 0:
                lo_x.append(i)
                lo.append(float(mn))
        if lo_x:
            ax.vlines(lo_x, lo, [hi[xs.index(i)] for i in lo_x], color=color, lw=0.7, alpha=0.35, zorder=2)
        ax.scatter(xs, hi, s=16, marker=marker, color=color, zorder=3, label=f"{kind}: max |x|")
        if lo_x:
            ax.scatter(lo_x, lo, s=12, marker=marker, facecolors="white", edgecolors=color, lw=0.9, zorder=2.5,
                       label=f"{kind}: min nonzero |x|")
        if inf_x:
            ax.scatter(inf_x, [ceiling] * len(inf_x), s=50, marker="^", color=color, edgecolors="black", lw=0.6,
                       zorder=4, label=f"{kind}: inf/NaN in FP32 already")

    ax.set_xlim(-1, max(n, 2))
    ax.set_ylim(floor / 3, ceiling * 5)
    ax.set_xlabel(f"tensor, sorted by max |x| ({_plural(n, 'tensor')})")
    ax.set_ylabel("|x| in the FP32 run (log)")
    _decade_ticks(ax, floor / 3, ceiling * 5)
    _legend_above(ax, ncol=6)
    ax.grid(axis="y", which="major", color="#eee", lw=0.6)
    ax.set_axisbelow(True)
    renderer = _renderer(fig)

    risky = [(i, t) for i, t in enumerate(order) if int(t.get("tier", 0)) >= 2]
    risky.sort(key=lambda it: -int(it[1].get("tier", 0)))  # stable: keeps largest-first within a tier
    points = []
    for i, t in risky[:_MAX_NAME_LABELS]:
        mx, mn = t.get("max_abs"), t.get("min_nonzero_abs")
        if mx is None or math.isnan(float(mx)):
            continue
        if math.isinf(float(mx)):
            y = ceiling
        elif float(mx) >= FP16_MAX / 2 or not (_finite(mn) and float(mn) > 0):
            y = max(float(mx), floor)
        else:  # near the bottom: the values that flush to zero
            y = float(mn)
        points.append((i, y, _short(str(t.get("name", "")))))
    offsets = [(10, 0), (10, 12), (10, -12), (10, 24), (10, -24), (10, 36), (10, -36), (10, 48), (10, -48),
               (-10, 0), (-10, 12), (-10, -12), (-10, 24), (-10, -24), (30, 60), (30, -60)]
    labelled = _place_labels(ax, renderer, points, offsets)
    svg = _svg(fig, PLOT_MAGNITUDES)

    weights = sum(1 for t in tensors if t.get("kind") == "weight")
    caption = [f"Every float tensor of the FP32 run ({_plural(n - weights, 'activation')}, "
               f"{_plural(weights, 'weight')}), sorted by its largest magnitude: a filled marker is max |x|, the "
               "hollow one below it the smallest nonzero |x| (circles: activations, diamonds: weights). "
               "Dashed lines are the FP16 limits: above 65504 a value becomes inf; between 5.96e-08 and "
               "6.10e-05 it is subnormal and loses precision; below about 2.98e-08 it becomes 0."]
    tier2 = len(risky)
    if tier2:
        caption.append(f"{_plural(tier2, 'tensor')} at risk tier 2 or 3 (overflow, or near a limit); "
                       f"{labelled} labelled by name"
                       + (" (the table below lists them all)." if labelled < tier2 else "."))
    else:
        caption.append("No tensor is near an FP16 limit.")
    if zero_count:
        caption.append(f"{_plural(zero_count, 'all-zero tensor')} drawn at the floor {_num(floor)}.")
    if inf_count:
        caption.append(f"{_plural(inf_count, 'tensor')} already inf in FP32, drawn as ▲ at the top.")
    if nan_count:
        caption.append(f"{_plural(nan_count, 'tensor')} with NaN magnitude not drawn.")
    return svg, " ".join(caption)


def _plot_trace(trace: list[dict]) -> tuple[str, str]:
    from matplotlib.ticker import MaxNLocator, NullLocator

    n = len(trace)
    xs = [int(s.get("index", i + 1)) for i, s in enumerate(trace)]
    ys = [int(s.get("fp32", 0)) for s in trace]
    fig = _new_figure(12, 3.4, {"left": 0.8, "right": 0.15, "top": 0.4, "bottom": 0.5})
    ax = fig.subplots()

    bands = []  # contiguous runs of one phase: (first x, last x, phase)
    for x, s in zip(xs, trace):
        phase = str(s.get("phase") or "")
        if bands and bands[-1][2] == phase:
            bands[-1][1] = x
        else:
            bands.append([x, x, phase])
    for k, (a, b, _) in enumerate(bands):
        ax.axvspan(a - 0.5, b + 0.5, color="#000" if k % 2 else "#4a7fb5", alpha=0.04 if k % 2 else 0.07, lw=0,
                   zorder=0)

    ax.plot(xs, ys, color="#999", lw=0.9, zorder=1, drawstyle="steps-mid")
    ok = [(x, y) for x, y, s in zip(xs, ys, trace) if s.get("passed")]
    bad = [(x, y) for x, y, s in zip(xs, ys, trace) if not s.get("passed")]
    if ok:
        ax.scatter(*zip(*ok), s=36, marker="o", color=_COLOR_PLAN, zorder=3, label="passes")
    if bad:
        ax.scatter(*zip(*bad), s=40, marker="X", color=_COLOR_FP16, zorder=3, label="fails")
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
    _legend_above(ax)
    ax.grid(axis="y", color="#eee", lw=0.6)
    ax.set_axisbelow(True)
    renderer = _renderer(fig)

    per_x = ax.get_window_extent(renderer).width / (max(xs) - min(xs) + 1.2)
    for a, b, phase in bands:
        if not phase:
            continue
        t = ax.text((a + b) / 2, 0.97, phase, transform=ax.get_xaxis_transform(), fontsize=8, color="#333",
                    ha="center", va="top")
        if t.get_window_extent(renderer).width > (b - a + 1) * per_x * 0.95:
            t.set_rotation(90)
    svg = _svg(fig, PLOT_TRACE)

    passed = [y for y, s in zip(ys, trace) if s.get("passed")]
    caption = (f"Each of the {_plural(n, 'evaluation')} of the search: the number of nodes the plan keeps in FP32, "
               "green ● if the outputs met the tolerance, red ✕ if not; shaded bands are the search phases "
               f"({', '.join(_esc(p) for p in dict.fromkeys(b[2] for b in bands if b[2]))}). "
               f"{len(passed)} passed, {n - len(passed)} failed"
               + (f"; the smallest passing plan keeps {_plural(min(passed), 'node')} in FP32." if passed else "."))
    return svg, caption
