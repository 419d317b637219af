"""The ``--report FILE.html`` page: one self-contained HTML page from the report data.

``render(data)`` turns the plain data that ``report/data.py`` gathers (from ``search``,
``check`` or ``compare``) into a page a person opens in a browser, offline: a
header (model, backend, tolerance, command, summary), the per-output table, and
four plots as inline SVG (per-node error along topological order, the FP32
magnitude of every tensor against the FP16 limits, the FP16 tensors' headroom, the search trace; drawn by
``report/plots/``), each with its table where it has one, then the override
list. No scripts, no external styles, fonts or images. ``write`` saves it
atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from fp16bisect import __version__
from fp16bisect.artifacts.files import write_atomic
from fp16bisect.timing import timed
from fp16bisect.report.formatting import esc, listing, num, plural
from fp16bisect.report.plots import (PLOT_HEADROOM, PLOT_MAGNITUDES, PLOT_NODE_ERROR, PLOT_TRACE, magnitudes,
                                    node_error, trace)
from fp16bisect.report.plots import headroom as headroom_plot

# ids of the page's sections: part of the contract (tests and links look for them), with the plots' PLOT_* ids
OUTPUTS_TABLE = "outputs"
ACCUMULATING_TABLE = "fp32-accumulation"  # id of the FP32-accumulation table
OVERRIDES_TABLE = "overrides"
NEXT_STEPS = "next"
KERNEL_PLAN = "kernel-plan"  # id of the engine's kernel plan table

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
pre { margin: 2px 0 10px; white-space: pre-wrap; overflow-wrap: anywhere; }
footer { margin-top: 40px; color: #888; font-size: 0.85em; }
"""


# --- public -------------------------------------------------------------------------------------------------------


def _silent(text: str) -> None:
    """Says nothing: the stages of a page nobody watches."""



def render(data: dict, sections: Sequence[Callable[[dict], str]] | None = None) -> str:
    """The whole report page for ``data`` (the dict ``report/data.py`` gathers), as one HTML string; ``sections``:
    the sections after the header (default: every one, each absent or empty where ``data`` has nothing for it)."""
    if sections is None:
        sections = (_outputs_section, _node_error_section, _magnitudes_section, _headroom_section,
                    _accumulators_section, _trace_section, _minimum_section, _overrides_section,
                    kernel_plan_section, _next_section)
    title = data.get("title") or "fp16bisect report"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        _header(data),
        *(section(data) for section in sections),
        f"<footer>Written by fp16bisect {esc(__version__)}. Self-contained: no scripts, no network.</footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def write(path, data: dict, say: Callable[[str], None] = _silent,
          sections: Sequence[Callable[[dict], str]] | None = None) -> None:
    """Render ``data`` (with ``sections``, as ``render``) and write it to ``path`` atomically (an unwritable path
    raises UsageError); ``say`` (a listener's ``stage``) is told the seconds the plots and the page took."""
    with timed(say, "report: plots and page"):
        page = render(data, sections)
    write_atomic(Path(path), page.encode("utf-8"))


# --- cells ---------------------------------------------------------------------------------------------------------


def _cosine(x) -> str:
    if x is None:
        return "–"
    x = float(x)
    return num(x, 6)  # 0.999998 stays apart from 1


def _passed(p) -> str:
    if p is None:
        return "<td>–</td>"
    return '<td class="pass">yes</td>' if p else '<td class="fail">no</td>'


# --- sections -----------------------------------------------------------------------------------------------------


def _header(data: dict) -> str:
    model = data.get("model") or {}
    rows = [
        ("model", f"<code>{esc(model.get('path', ''))}</code>"),
        ("sha256", f"<code>{esc(model.get('sha256', ''))}</code>"),
        ("backend", esc(data.get("backend", ""))),
        ("tolerance", esc(data.get("tolerance", ""))),
        ("command", f"<code>{esc(data.get('command', ''))}</code>"),
        ("summary", f'<span class="summary">{esc(data.get("summary", ""))}</span>'),
    ]
    out = ["<header>", f"<h1>{esc(data.get('title') or 'fp16bisect report')}</h1>", "<dl>"]
    out += [f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows]
    out.append("</dl>")
    notes = data.get("notes") or []
    if notes:
        out.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    out.append("</header>")
    return "\n".join(out)


def _metric_cells(m: dict | None) -> str:
    if m is None:
        return '<td colspan="5" class="empty">not run</td>'
    return (f'<td class="num">{num(m.get("max_abs"))}</td><td class="num">{num(m.get("max_rel"))}</td>'
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
        out.append(f'<tr><th rowspan="2">output</th><th colspan="5">all {esc(data.get("precision", "FP16"))}</th>'
                   '<th colspan="5">with overrides</th></tr>')
        out.append(f"<tr>{_METRIC_HEADS}{_METRIC_HEADS}</tr>")
        for o in outputs:
            out.append(f"<tr><td><code>{esc(o.get('output', ''))}</code></td>"
                       f"{_metric_cells(o.get('fp16'))}{_metric_cells(o.get('with_overrides'))}</tr>")
        out.append("</table>")
        out.append('<p class="notes">Each output\'s worst sample against the FP32 reference; '
                   "inf/NaN counts elements that are not finite.</p>")
    out.append("</section>")
    return "\n".join(out)


def _figure(fig_id: str, svg: str | None, caption: str, empty: str = "") -> str:
    body = svg if svg is not None else f'<p class="empty">{esc(empty)}</p>'
    return f'<figure id="{fig_id}">\n{body}\n<figcaption>{caption}</figcaption>\n</figure>'


def _node_error_section(data: dict) -> str:
    nodes = data.get("nodes") or []
    out = ["<section>", "<h2>Per-node error along the graph</h2>"]
    if not nodes:
        out.append(_figure(PLOT_NODE_ERROR, None, "No per-node comparison.", "no candidate nodes to compare"))
    else:
        svg, caption = node_error.plot(data)
        out.append(_figure(PLOT_NODE_ERROR, svg, caption))
        used, of = data.get("node_samples") or (0, 0)
        if used < of:
            out.append(f'<p class="notes">Per-node errors on {used} of {of} samples: the most stressing (the FP32 '
                       "profile's order) and each output's worst; the outputs above are judged on every sample.</p>")
        out.append(_node_table(nodes, esc(data.get("precision", "FP16"))))
    out.append("</section>")
    return "\n".join(out)


def _node_table(nodes: list[dict], low: str = "FP16") -> str:
    plan = any(n.get("with_overrides") is not None for n in nodes)
    head = "<tr><th>#</th><th>node</th><th>op</th><th>FP32</th>" + "".join(
        f"<th>{label}: max abs</th><th>/ max |FP32|</th><th>cosine</th><th>inf/NaN</th><th>pass</th>"
        for label in ([f"all {low}", "with overrides"] if plan else [f"all {low}"])) + "</tr>"
    rows = []
    for i, n in enumerate(nodes):
        cells = ""
        for key in ("fp16", "with_overrides") if plan else ("fp16",):
            m = n.get(key)
            if m is None:
                cells += '<td colspan="5" class="empty">–</td>'
            else:
                cells += (f'<td class="num">{num(m.get("max_abs"))}</td><td class="num">{num(m.get("error"))}</td>'
                          f'<td class="num">{_cosine(m.get("cosine"))}</td>'
                          f'<td class="num">{int(m.get("nonfinite") or 0)}</td>{_passed(m.get("passed"))}')
        rows.append(f"<tr><td class=\"num\">{i}</td><td><code>{esc(n.get('id', ''))}</code></td>"
                    f"<td>{esc(n.get('op_type', ''))}</td><td>{'yes' if n.get('pinned') else ''}</td>{cells}</tr>")
    return ("<details><summary>Per-node numbers (" + plural(len(nodes), "node") + ")</summary>\n"
            '<table class="nodes">' + head + "\n" + "\n".join(rows) + "</table>\n</details>")


def _magnitudes_section(data: dict) -> str:
    tensors = data.get("tensors") or []
    low = esc(data.get("precision", "FP16"))
    out = ["<section>", f"<h2>FP32 magnitudes against the {low} range</h2>"]
    if not tensors:
        out.append(_figure(PLOT_MAGNITUDES, None, "No FP32 profile.", "no float tensors recorded"))
    else:
        svg, caption = magnitudes.plot(data)
        out.append(_figure(PLOT_MAGNITUDES, svg, caption))
        risky = sorted((t for t in tensors if int(t.get("tier", 0)) >= 1), key=lambda t: -int(t.get("tier", 0)))
        if risky:
            rows = "\n".join(
                f"<tr><td><code>{esc(t.get('name', ''))}</code></td><td>{esc(t.get('kind', ''))}</td>"
                f"<td class=\"num\">{int(t.get('tier', 0))}</td><td class=\"num\">{num(t.get('max_abs'))}</td>"
                f"<td class=\"num\">{num(t.get('min_nonzero_abs'))}</td><td>{esc(t.get('reason', ''))}</td></tr>"
                for t in risky)
            out.append(f"<details><summary>Tensors outside the comfortable {low} range (" + plural(len(risky), "tensor")
                       + ")</summary>\n<table><tr><th>tensor</th><th>kind</th><th>tier</th><th>max |x|</th>"
                       "<th>min nonzero |x|</th><th>why</th></tr>\n" + rows + "</table>\n</details>")
    out.append("</section>")
    return "\n".join(out)


def _headroom_section(data: dict) -> str:
    """The FP16 tensors' peaks against 65504 (search and check; absent elsewhere)."""
    tensors = data.get("headroom")
    if tensors is None:
        return ""
    low = esc(data.get("precision", "FP16"))
    out = ["<section>", f"<h2>Headroom of the tensors computed in {low}</h2>"]
    if not tensors:
        out.append(_figure(PLOT_HEADROOM, None, f"No tensor is computed in {low}.", f"no {low} tensors"))
    else:
        svg, caption = headroom_plot.plot(tensors, data.get("precision", "FP16"))
        out.append(_figure(PLOT_HEADROOM, svg, caption))
        out.append("<details><summary>Peaks (" + plural(len(tensors), "tensor") + ")</summary>\n"
                   + headroom_plot.table(tensors, data.get("precision", "FP16")) + "\n</details>")
    out.append("</section>")
    return "\n".join(out)


def _accumulators_section(data: dict) -> str:
    """The summing nodes left in the low precision, their largest partial-sum bound against its max, tightest
    first (search and check; absent elsewhere or when none sums)."""
    rows = data.get("accumulators")
    if not rows:
        return ""
    low = esc(data.get("precision", "FP16"))
    out = ["<section>", f"<h2>Accumulator headroom of the summing nodes left in {low}</h2>",
           f"<p>The largest partial-sum bound in FP32 over the samples, against {low}'s largest value: below 1x, "
           f"the sum overflows where the engine adds in {low} (the verdict assumed FP32 accumulation).</p>",
           "<table><tr><th>node</th><th>op</th><th>terms</th><th>peak</th><th>headroom</th><th>sample</th></tr>"]
    for a in rows:
        room = "-" if a.get("headroom") is None else f"{a['headroom']:.3g}x"
        peak = "not measured" if a.get("peak") is None else f"{a['peak']:.4g}"
        cell = f'<td class="fail">{room}</td>' if a.get("headroom") is not None and a["headroom"] < 1 else \
            f"<td>{room}</td>"
        out.append(f"<tr><td>{esc(a['node'])}</td><td>{esc(a['op_type'])}</td><td>{a.get('terms') or '-'}</td>"
                   f"<td>{peak}</td>{cell}<td>{esc((a.get('sample') or {}).get('source', '-'))}</td></tr>")
    out += ["</table>", "</section>"]
    return "\n".join(out)


def _trace_section(data: dict) -> str:
    """The search's trace; no section at all where no search ran (check, compare)."""
    steps = data.get("trace") or []
    if not steps:
        return ""
    svg, caption = trace.plot(steps)
    return "\n".join(["<section>", "<h2>Search trace</h2>", _figure(PLOT_TRACE, svg, caption), "</section>"])


def _minimum_section(data: dict) -> str:
    """``search --minimum``: the passing sets found, smallest (or cheapest) first, with sizes and estimated costs;
    no section without it."""
    minimum = data.get("minimum")
    if not minimum:
        return ""
    proven = _minimum_claim(minimum)
    costs = minimum.get("objective") == "cost"
    out = ["<section>", "<h2>Passing sets found (--minimum)</h2>",
           f"<p>{esc(str(minimum.get('size')))} node(s) kept, {esc(proven)}; the 1-minimal search kept "
           f"{esc(str(minimum.get('one_minimal')))}; {esc(str(minimum.get('evaluations')))} more evaluation(s) on "
           f"{esc(str(minimum.get('backend')))}.</p>", '<table id="minimum-sets">',
           "<tr><th>nodes</th>" + ("<th>estimated cost (us)</th>" if costs else "") + "<th>kept in FP32</th></tr>"]
    for found in minimum.get("passing") or []:
        cost = f"<td>{esc(str(found.get('cost_us')))}</td>" if costs else ""
        names = ", ".join(f"<code>{esc(n)}</code>" for n in found.get("fp32") or [])
        out.append(f"<tr><td>{esc(str(found.get('size')))}</td>{cost}<td>{names}</td></tr>")
    out += ["</table>", "</section>"]
    return "\n".join(out)


def _minimum_claim(minimum: dict) -> str:
    """What ``search.minimum`` claims, in the console's words (a file written before issue 41 may hold a proof that
    assumed monotone verdicts: said as such)."""
    if minimum.get("proven"):
        return "proven, assuming monotone verdicts (an older file)" if minimum.get("assumes_monotone") else (
            "proven: every smaller set was evaluated and failed")
    if "estimate" not in minimum:  # an older file: its lower_bound assumed monotone verdicts
        return f"not proven: an estimate of {minimum.get('lower_bound')} that assumes monotone verdicts"
    said = "not proven: no smaller set found"
    if minimum.get("smaller_failed"):
        said += (f"; at least {minimum.get('lower_bound')} (every set of {minimum.get('smaller_failed')} or fewer "
                 "nodes was evaluated and failed)")
    count = minimum.get("contradictions") or 0
    return said + (f"; a bound of {minimum.get('estimate')} holds only if keeping more nodes in FP32 never hurts, "
                   + (f"which this model's verdicts contradict {count} time(s)" if count
                      else "an assumption no verdict here contradicts, not a proof"))


def _next_section(data: dict) -> str:
    """After a search: the commands that apply, verify and build its answer (``report/next_steps.py``)."""
    steps = data.get("next") or []
    if not steps:
        return ""
    out = ["<section>", f'<h2 id="{NEXT_STEPS}">Next</h2>', "<dl>"]
    for what, command in steps:
        out.append(f"<dt>{esc(what)}</dt><dd><pre><code>{esc(command)}</code></pre></dd>")
    out += ["</dl>", "</section>"]
    return "\n".join(out)


def _overrides_section(data: dict) -> str:
    overrides, accumulating = data.get("overrides") or [], data.get("fp32_accumulate_nodes") or []
    out = ["<section>", f"<h2>Overrides: nodes kept in FP32 ({len(overrides)})</h2>"]
    if not overrides:
        rest = "the nodes below add in FP32, every other runs in FP16" if accumulating else \
            "every candidate node runs in FP16"
        out.append(f'<p id="{OVERRIDES_TABLE}" class="empty">none: {rest}</p>')
    else:
        out += _entries_table(OVERRIDES_TABLE, overrides, "FP32 profile")
    if accumulating:  # the third state: stored in FP16, adding in FP32 (Casts around the node in the file)
        out.append(f"<h3>Nodes in FP32 accumulation ({len(accumulating)}): FP16 storage, FP32 sums</h3>")
        out += _entries_table(ACCUMULATING_TABLE, accumulating, "why (FP32 run)")
    out.append("</section>")
    return "\n".join(out)


def _entries_table(table_id: str, entries: list, why: str) -> list[str]:
    """A table of override-file node entries: name, op type, outputs and what the FP32 run saw (``why``)."""
    rows = [f'<table id="{table_id}">', f"<tr><th>node</th><th>op type</th><th>outputs</th><th>{why}</th></tr>"]
    for o in entries:
        outs = ", ".join(f"<code>{esc(t)}</code>" for t in o.get("outputs") or [])
        rows.append(f"<tr><td><code>{esc(o.get('name', ''))}</code></td><td>{esc(o.get('op_type', ''))}</td>"
                    f"<td>{outs}</td><td>{esc(o.get('fp32_profile', ''))}</td></tr>")
    return rows + ["</table>"]


def kernel_plan_section(data: dict) -> str:
    """The engine's kernel plan of the answer (``kernels``; ``KernelPlan.to_dict()``): each node's kernel, the
    types it reads and writes, whether the node's output is stored, the nodes it covers, then the findings."""
    plan = data.get("kernel_plan")
    if not plan:
        return ""
    from fp16bisect.diagnose.kernel_plan import types

    out = ["<section>", "<h2>Engine kernel plan</h2>", f"<p>{esc(plan['summary'])}</p>",
           f'<table id="{KERNEL_PLAN}"><tr><th>node</th><th>op</th><th>state</th><th>kernel</th><th>type</th>'
           "<th>reads</th><th>writes</th><th>output</th><th>covers</th><th>all-FP16 kernel</th></tr>"]
    for node in plan["nodes"]:
        head = (f"<td><code>{esc(node['name'])}</code></td><td>{esc(node['op_type'])}</td>"
                f"<td>{esc(node['state'])}</td>")
        before = "<br>".join(f"<code>{esc(k['name'])}</code> {esc(types(k['inputs']))} -&gt; {esc(types(k['outputs']))}"
                             for k in node["fp16_kernels"]) or "no kernel"
        if not node["kernels"]:
            out.append(f'<tr>{head}<td colspan="4" class="empty">no kernel</td><td>{esc(node["output"])}</td>'
                       f"<td></td><td>{before}</td></tr>")
        for k in node["kernels"]:
            casts = f" and {plural(k['casts'], 'Cast')} of fp16bisect" if k["casts"] else ""
            out.append(f"<tr>{head}<td><code>{esc(k['name'])}</code></td><td>{esc(k['layer_type'])}</td>"
                       f"<td>{esc(types(k['inputs']))}</td><td>{esc(types(k['outputs']))}</td>"
                       f"<td>{esc(node['output'])}</td><td>{listing(k['covers'], 50)}{casts}</td><td>{before}</td></tr>")
    out.append("</table>")
    out.append('<ul class="notes">' + "".join(f"<li>{esc(line)}</li>" for line in plan["findings"]) + "</ul>")
    out.append("</section>")
    return "\n".join(out)
