"""The engine's kernel plan of an answer (``kernels``) as a person sees it: the console table and the HTML page.

Both read the plan's JSON (``KernelPlan.to_dict()``), as the report data hold it; the page's section is
``html.py``'s, so a search's report shows the same section.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fp16bisect.diagnose.kernel_plan import types
from fp16bisect.report import html
from fp16bisect.report.console import _console

STATES = {"fp32": "FP32", "fp32-accumulation": "FP32 acc."}
COVERS_SHOWN = 12  # model nodes of a kernel the console names (the JSON and the page name all)


def covers(kernel: dict, limit: int | None = None) -> str:
    """``11 nodes: o_proj_bias, ln1_sub, ... and 2 Casts of fp16bisect``: the model's nodes a kernel covers (the
    first ``limit``), and the Casts fp16bisect wrote that it covers too."""
    nodes = kernel["covers"]
    shown = nodes if limit is None else nodes[:limit]
    more = f" and {len(nodes) - len(shown)} more" if len(nodes) > len(shown) else ""
    casts = f" and {kernel['casts']} Cast{'s' if kernel['casts'] != 1 else ''} of fp16bisect" if kernel["casts"] else ""
    return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}: {', '.join(shown)}{more}{casts}"


def flow(kernel: dict) -> str:
    """``FP16 -> FP32``: the data types a kernel reads and writes."""
    return f"{types(kernel['inputs'])} -> {types(kernel['outputs'])}"


def print_kernel_plan(plan: dict, console: Console | None = None) -> None:
    """The plan: its summary line, one row per kernel of each node of the answer, what each of those kernels
    covers, then the findings."""
    console = console or _console()
    console.print(escape(f"kernel plan of {plan['model']} with {plan['overrides']}"), highlight=False,
                  soft_wrap=True)
    console.print(escape(plan["summary"]), highlight=False, soft_wrap=True)
    if not plan["nodes"]:
        console.print("the answer keeps no node in FP32 or FP32 accumulation: nothing to place", highlight=False)
    table = Table()
    for column in ("node", "op", "state", "kernel", "type", "reads -> writes", "output", "all-FP16"):
        table.add_column(column, overflow="fold")
    kernels: dict[str, dict] = {}
    for node in plan["nodes"]:
        state = STATES.get(node["state"], node["state"])
        before = "; ".join(flow(k) for k in node["fp16_kernels"]) or "no kernel"
        if not node["kernels"]:
            table.add_row(escape(node["name"]), node["op_type"], state, "-", "-", "-", node["output"], before)
        for kernel in node["kernels"]:
            table.add_row(escape(node["name"]), node["op_type"], state, escape(kernel["name"]), kernel["layer_type"],
                          flow(kernel), node["output"], before)
            before = '"'  # said on the node's first row
            kernels.setdefault(kernel["name"], kernel)
    if plan["nodes"]:
        console.print(table)
    for name, kernel in kernels.items():
        console.print(escape(f"{name} covers {covers(kernel, COVERS_SHOWN)}"), highlight=False, soft_wrap=True)
    for line in plan["findings"]:
        console.print(escape(line), highlight=False, soft_wrap=True)


def write_page(path: str, plan: dict, command: str) -> None:
    """The ``kernels --report`` page: the header and the kernel plan's section."""
    data = {"title": f"fp16bisect kernel plan: {plan['model']}", "model": {"path": plan["model"], "sha256": plan["model_sha256"]},
            "backend": plan["runtime"], "tolerance": "none: the engines are built, not run", "command": command,
            "summary": plan["summary"], "kernel_plan": plan}
    html.write(path, data, sections=(html.kernel_plan_section,))
