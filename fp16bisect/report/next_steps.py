"""What to do with a search's answer: the commands that apply, verify and build it (console and HTML report),
and, first, the search again with ``--headroom`` when a tensor or a sum the answer leaves in the low precision has
less than ``model.headroom.TIGHT`` headroom, and the check and search with ``--accumulate fp16`` when a node it leaves
there sums past the precision's max."""

from __future__ import annotations

import shlex

from fp16bisect.model.headroom import TIGHT, said
from fp16bisect.model.precision import precision_of
from fp16bisect.tolerance import DEFAULT_ATOL, DEFAULT_RTOL


def next_steps(data: dict, output: str, inputs: list[str], references: list[str] | None = None) -> list[tuple]:
    """(what, command) pairs for the override JSON ``data`` written to ``output``, searched on ``inputs``: the
    search again with ``--headroom`` if the answer's headroom is tight (``headroom_step``), the mixed-precision
    model written and verified on those samples, its strongly typed build (TensorRT 10 with --stronglyTyped, 11,
    RTX), and the weakly typed trtexec line of TensorRT 10 (the JSON's exports), which cannot express FP32
    accumulation: not offered when the answer has nodes in it (the mixed-precision file is the only route)."""
    model = data["model"]["path"]
    first = headroom_step(data, output, inputs, references) + accumulation_step(data, output, inputs, references)
    marked = [n["name"] for n in data.get("fp32_accumulate_nodes") or []]
    if not data["fp32_nodes"] and not marked:
        return first + [("nothing needs FP32: build the model in FP16",
                         shlex.join(["trtexec", f"--onnx={model}", "--fp16"]))]
    exports = data["exports"]
    strong = exports["strongly_typed"]["trtexec"]
    mixed = next(a.split("=", 1)[1] for a in shlex.split(strong) if a.startswith("--onnx="))
    samples = [x for i in inputs for x in ("--inputs", i)] + [x for r in references or () for x in ("--reference", r)]
    return first + [
        ("write the mixed-precision model and verify it on the samples",
         shlex.join(["fp16bisect", "apply", model, output, "-o", mixed, "--verify", *samples])),
        ("build it strongly typed (TensorRT 10 and 11, TensorRT-RTX)", strong),
    ] + ([] if marked else [
        ("or build the original weakly typed (TensorRT 10; the flags are in the JSON's exports.trtexec)",
         exports["trtexec"]["command"])])


def headroom_step(data: dict, output: str, inputs: list[str], references: list[str] | None = None) -> list[tuple]:
    """The search again with ``--headroom TIGHT``, naming the tensors and the sums of the answer with less
    headroom (each with its own; sums past the max are ``accumulation_step``'s), or nothing when none has less."""
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
    what = (f"{'; '.join(said_of)}; real inputs may overflow them: search again with --headroom {TIGHT:g} (and "
            f"your other flags) to keep them out of {low} ({keeps})")
    return [(what, shlex.join(_search_command(data, output, inputs, references)))]


def accumulation_step(data: dict, output: str, inputs: list[str], references: list[str] | None = None) -> list[tuple]:
    """When a node the answer leaves in the low precision sums past its max (max/F with ``--headroom F``): the check
    that judges the answer with FP16 accumulation, and the search that would put such nodes in FP32 accumulation;
    nothing otherwise. The answer's verdict (FP32 accumulation, the default) stands either way."""
    flag = (data.get("headroom") or {}).get("flag")
    over = [a for a in data.get("accumulators") or [] if a.get("headroom") is not None and a["headroom"] < (flag or 1)]
    if not over:
        return []
    low = precision_of(data.get("precision"))
    bound = f"{low.max:g}" + (f"/{flag:g}" if flag else "")
    named = ", ".join(f"{a['node']!r} ({a['op_type']}, peak {a['peak']:.4g})" for a in over[:3])
    more = f" and {len(over) - 3} more" if len(over) > 3 else ""
    samples = [x for i in inputs for x in ("--inputs", str(i))] + [x for r in references or () for x in
                                                                      ("--reference", str(r))]
    check = ["fp16bisect", "check", data["model"]["path"], *samples, "--overrides", str(output), "--accumulate", "fp16"]
    search = _search_command(data, output, inputs, references, ["--accumulate", "fp16"])
    return [(f"{len(over)} node(s) left in {low.label} sum past {bound}: {named}{more}; this answer assumed FP32 "
             f"accumulation: check it with {low.label} accumulation (exit 1 if they overflow there)", shlex.join(check)),
            ("or search again with --accumulate fp16 (and your other flags): such nodes go to FP32 accumulation "
             f"({low.label} storage, FP32 sums) where that suffices", shlex.join(search))]


def _search_command(data: dict, output: str, inputs: list[str], references: list[str] | None,
                    flags: list[str] | None = None) -> list[str]:
    """The search that wrote ``data``, as far as the file says (model, samples, precision, tolerance), with
    ``flags`` (``--headroom TIGHT`` when not given)."""
    command = ["fp16bisect", "search", data["model"]["path"], *[x for i in inputs for x in ("--inputs", str(i))],
               *[x for r in references or () for x in ("--reference", str(r))], "-o", str(output)]
    tolerance = data.get("tolerance") or {}
    defaults = {"atol": DEFAULT_ATOL, "rtol": DEFAULT_RTOL, "min_cosine": None, "max_mismatch": 0.0}
    for key, default in defaults.items():
        value = tolerance.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value != default:
            command += [f"--{key.replace('_', '-')}", f"{value:g}"]
    if data.get("precision") not in (None, "fp16"):
        command += ["--precision", str(data["precision"])]
    flags = flags if flags is not None else ["--headroom", f"{TIGHT:g}"]
    if data.get("accumulate") not in (None, "fp32") and "--accumulate" not in flags:
        command += ["--accumulate", str(data["accumulate"])]
    return command + flags
