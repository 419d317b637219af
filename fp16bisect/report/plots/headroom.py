"""The headroom plot: each tensor computed in the low precision, its FP32 peak over the samples against that
precision's largest finite value (FP16: 65504).

One horizontal bar per tensor (the tightest first, at most ``SHOWN``), its length the peak as a share of the
limit on a log axis; the limit (100%) and the ``TIGHT`` headroom line (4x: 25%) drawn across; bars past the
limit in red, with less than ``TIGHT`` headroom in orange.
"""

from __future__ import annotations

import math

from fp16bisect.model.headroom import TIGHT, limit_text, said
from fp16bisect.model.precision import precision_of
from fp16bisect.report.formatting import esc
from fp16bisect.report.plots import PLOT_HEADROOM
from fp16bisect.report.plots.figure import new_figure, power_of_ten
from fp16bisect.report.plots.svg import text_width

SHOWN = 25
_COLOR_OVER, _COLOR_TIGHT, _COLOR_FINE = "#d62728", "#ff7f0e", "#1f77b4"


def plot(tensors: list[dict], low: str = "FP16") -> tuple[str, str]:
    """The peaks of ``tensors`` (the override JSON's ``headroom.tensors`` rows) against the largest finite value
    of ``low`` (a precision's label or name), and the caption."""
    precision = precision_of(low)
    limit = limit_text(precision.max)
    rows = [t for t in tensors if t.get("peak_fraction")][:SHOWN]
    height = 1.0 + 0.28 * max(len(rows), 1)
    labels = [_label(t["tensor"]) for t in rows]
    left = 0.2 + max((text_width(label, 8) for label in labels), default=0.0) / 72  # as wide as the names need
    fig = new_figure(10.0, height, {"left": left, "right": 0.4, "top": 0.35, "bottom": 0.55})
    fractions = [float(t["peak_fraction"]) for t in rows]
    colors = [_COLOR_OVER if f > 1 else _COLOR_TIGHT if f > 1 / TIGHT else _COLOR_FINE for f in fractions]
    positions = list(range(len(rows)))[::-1]
    left = min([*fractions, 0.01]) / 2
    fig.set_x("log", left, max([*fractions, 1.0]) * 2)
    fig.set_y("linear", -0.5, max(len(rows), 1) - 0.5)
    fig.hbars(positions, fractions, colors, 0.6)
    fig.yticks(positions, labels)
    fig.vline(1.0, _COLOR_OVER, 1.2)
    fig.vline(1 / TIGHT, _COLOR_TIGHT, 1.0, dash="4 2")
    fig.text(fig.x(1.0), -2, f" {limit}", 8, _COLOR_OVER, baseline="bottom")
    fig.text(fig.x(1 / TIGHT), -2, f"{TIGHT:g}x ", 8, _COLOR_TIGHT, "end", "bottom")
    decade_x_ticks(fig)
    fig.xlabel(f"FP32 peak |x| over the samples, as a fraction of {limit} (log)")
    over = sum(f > 1 for f in fractions)
    tight = sum(1 / TIGHT < f <= 1 for f in fractions)
    caption = (f"The {len(rows)} tightest tensor(s) computed in {precision.label}: {over} past {precision.label}'s "
               f"limit, {tight} with less than {TIGHT:g}x headroom (a peak above {limit}/F counts as an overflow "
               "with <code>--headroom F</code>).")
    return fig.svg(PLOT_HEADROOM), caption


def decade_x_ticks(fig) -> None:
    """x ticks at the powers of ten within the scale."""
    first, last = math.ceil(math.log10(fig.x.low) - 1e-9), math.floor(math.log10(fig.x.high) + 1e-9)
    fig.xticks([10.0**k for k in range(first, last + 1)], [power_of_ten(k) for k in range(first, last + 1)])


def _label(name: str) -> str:
    return name if len(name) <= 40 else name[:18] + "..." + name[-18:]


def table(tensors: list[dict], low: str = "FP16") -> str:
    """The rows behind the plot, as an HTML table (``low``: the precision's label or name)."""
    rows = "\n".join(
        f"<tr><td><code>{esc(t['tensor'])}</code></td><td><code>{esc(t['node'])}</code></td>"
        f"<td class=\"num\">{t['peak']:.4g}</td>"
        f"<td class=\"num\">{said(100 * t['peak_fraction'], 100 / TIGHT, '.1f')}%</td>"
        f"<td>{esc((t.get('peak_sample') or {}).get('source', ''))}</td></tr>" for t in tensors)
    return ("<table><tr><th>tensor</th><th>written by</th><th>peak |x|</th>"
            f"<th>of {limit_text(precision_of(low).max)}</th><th>sample</th></tr>\n" + rows + "</table>")
