"""What to do with a search's answer: the commands that apply, verify and build it (console and HTML report),
and, first, the search again with ``--headroom`` when a tensor or a sum the answer leaves in the low precision has
less than ``model.headroom.TIGHT`` headroom, and the check and search with ``--accumulate fp16`` when a node it
leaves there sums past the precision's max.

Each command is rendered from the search's ``Invocation`` (its model, samples and records): it carries every flag
the search used, changes only what the step is about, and a search writes to a new file beside the answer
(``overrides.headroom4.json``), never over it."""

from __future__ import annotations

import shlex

from fp16bisect.errors import UsageError
from fp16bisect.model.headroom import TIGHT, said
from fp16bisect.model.precision import precision_of
from fp16bisect.run.invocation import PROGRAM, Invocation, beside


def next_steps(data: dict, run: Invocation | None) -> list[tuple]:
    """(what, command) pairs for the override JSON ``data`` the search ``run`` wrote (none when it wrote none):
    the search again with ``--headroom`` if the answer's headroom is tight (``headroom_step``), the check and
    search with FP16 accumulation (``accumulation_step``), the mixed-precision model written and verified on the
    search's samples, its strongly typed build (TensorRT 10 with --stronglyTyped, 11, RTX), and the weakly typed
    trtexec line of TensorRT 10 (the JSON's exports), which cannot express FP32 accumulation: not offered when
    the answer has nodes in it (the mixed-precision file is the only route)."""
    if run is None or run.output is None:
        return []
    first = headroom_step(data, run) + accumulation_step(data, run)
    model = data["model"]["path"]
    marked = [n["name"] for n in data.get("fp32_accumulate_nodes") or []]
    if not data["fp32_nodes"] and not marked:
        return first + [("nothing needs FP32: build the model in FP16",
                         shlex.join(["trtexec", f"--onnx={model}", "--fp16"]))]
    exports = data["exports"]
    strong = exports["strongly_typed"]["trtexec"]
    mixed = next(a.split("=", 1)[1] for a in shlex.split(strong) if a.startswith("--onnx="))
    return first + [
        ("write the mixed-precision model and verify it on the samples", _apply(run, model, mixed)),
        ("build it strongly typed (TensorRT 10 and 11, TensorRT-RTX)", strong),
    ] + ([] if marked else [
        ("or build the original weakly typed (TensorRT 10; the flags are in the JSON's exports.trtexec)",
         exports["trtexec"]["command"])])


def _apply(run: Invocation, model: str, mixed: str) -> str:
    """``apply`` of the answer, verified on the search's samples (the tolerance, precision and accumulation: the
    file's, which are the search's)."""
    output = str(run.output)
    if run.typed:
        return shlex.join([PROGRAM, "apply", model, output, "-o", mixed, "--verify", *run.samples()])
    reference = "" if run.references == () else ", reference=reference"
    samples = repr(list(run.inputs)) if run.inputs is not None else "samples"
    return (f"{PROGRAM}.apply({repr(run.model) if run.model else 'model'}, {output!r}, {mixed!r}, verify=True, "
            f"samples={samples}{reference})")


def headroom_step(data: dict, run: Invocation) -> list[tuple]:
    """The search again with ``--headroom TIGHT`` (and every other flag it was given), writing beside the answer,
    naming the tensors and the sums of the answer with less headroom (each with its own; sums past the max are
    ``accumulation_step``'s); nothing when none has less."""
    section = data.get("headroom") or {}
    tight = [t for t in section.get("tensors", []) if t.get("headroom") is not None and t["headroom"] < TIGHT]
    sums = [a for a in data.get("accumulators") or [] if a.get("headroom") is not None
            and (section.get("flag") or 1) <= a["headroom"] < TIGHT]
    if not tight and not sums:
        return []
    low = precision_of(data.get("precision")).label
    said_of = [(f"{len(found)} {what} left in {low} have less than {TIGHT:g}x {kind}headroom: "
                + ", ".join(f"{a[key]!r} ({said(a['headroom'], TIGHT)}x)" for a in found[:3])
                + (f" and {len(found) - 3} more" if len(found) > 3 else ""))
               for found, what, kind, key in ((tight, "tensor(s)", "", "tensor"), (sums, "sum(s)", "accumulator ", "node"))
               if found]
    keeps = "; ".join(k for k, found in (("tensors in FP32", tight), ("sums in FP32 accumulation", sums)) if found)
    again = run.but(beside(str(run.output), f"headroom{TIGHT:g}"), headroom=TIGHT)
    what = (f"{'; '.join(said_of)}; real inputs may overflow them: search again with --headroom {TIGHT:g} to keep "
            f"them out of {low} ({keeps}; written to {again.output}, beside this answer)")
    return [(what, again.shown())]


def accumulation_step(data: dict, run: Invocation) -> list[tuple]:
    """When a node the answer leaves in the low precision sums past its max (max/F with ``--headroom F``) and the
    search assumed FP32 accumulation: the check that judges the answer with FP16 accumulation, and the search
    that would put such nodes in FP32 accumulation (beside the answer); nothing otherwise (an answer searched
    with ``--accumulate fp16`` was judged with those sums)."""
    flag = (data.get("headroom") or {}).get("flag")
    over = [a for a in data.get("accumulators") or [] if a.get("headroom") is not None and a["headroom"] < (flag or 1)]
    if not over or data.get("accumulate", "fp32") != "fp32":
        return []
    low = precision_of(data.get("precision"))
    bound = f"{low.max:g}" + (f"/{flag:g}" if flag else "")
    named = ", ".join(f"{a['node']!r} ({a['op_type']}, peak {a['peak']:.4g})" for a in over[:3])
    more = f" and {len(over) - 3} more" if len(over) > 3 else ""
    output = str(run.output)
    steps = [(f"{len(over)} node(s) left in {low.label} sum past {bound}: {named}{more}; this answer assumed FP32 "
              f"accumulation: check it with {low.label} accumulation (exit 1 if they overflow there)",
              run.checking(output, accumulate="fp16").shown())]
    try:
        search = run.but(beside(output, "accumulate-fp16"), accumulate="fp16")
    except UsageError:  # a mode that does not combine with --accumulate fp16 (--group-by): no such search
        return steps
    return steps + [(f"or search again with --accumulate fp16: such nodes go to FP32 accumulation ({low.label} "
                     f"storage, FP32 sums) where that suffices (written to {search.output})",
                     search.shown())]
