"""``check``: does the model meet the tolerance in FP16 (with an override file, if given)? A CI gate.

An override file made for another version of the model (its sha256 differs) is
not refused: the check runs with the nodes it names that still exist, and says
so. That is the case of a model retrained on more data: the old overrides may
still suffice, or the check fails and tells the user to search again. A file
none of whose nodes is in the model was made for another model: refused (exit 2).

On a data set the check runs every sample (no early stop: it reports how many pass and names the worst, with
each output's max abs error and the sample's source) and measures the FP32 profile for the headroom of the
tensors computed in FP16. ``--headroom F`` fails the check (exit 1) when one of them peaks above 65504/F.

With an override file, the check compares where its answer was verified (the file's ``environment``) with where
it runs (``drift.py``): it says what changed and the command to verify again; ``--strict-environment`` fails the
check (exit 1) on a change of backend, GPU or TensorRT (and more: see ``drift.py``) or when none is recorded.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

from fp16bisect import __version__
from fp16bisect.backends import declared
from fp16bisect.diagnose.drift import Drift, again_line, compare
from fp16bisect.errors import UsageError, shown
from fp16bisect.model.graph import Graph
from fp16bisect.model.headroom import (Headroom, accumulator_reason, accumulators_json, fp16_accumulators,
                                       fp16_tensors, headroom_json, tight_sums,
                                       tight)
from fp16bisect.model.profile import profile
from fp16bisect.evaluation.oracle import Evaluation
from fp16bisect.artifacts.accumulation import checked_states
from fp16bisect.artifacts.overrides import followed, read, recorded_tolerance, refuse_other_precision
from fp16bisect.model.plan_states import plan_of, states
from fp16bisect.model.precision import precision_of
from fp16bisect.model.samples import add_fp32_references
from fp16bisect.run.outcome import Listener
from fp16bisect.run.invocation import Invocation, beside
from fp16bisect.artifacts.overrides import Recorded
from fp16bisect.run.options import CheckOptions, SearchOptions
from fp16bisect.run.pipeline import prepare, unreachable
from fp16bisect.tolerance import Tolerance

SCHEMA = "fp16bisect.check/1"
WORST = 5  # the worst samples a check names


@dataclass
class OverrideUse:
    path: str
    made_for: str  # the sha256 recorded in the file
    same_model: bool
    nodes: list[str]  # pinned: named in the file and present in this model
    missing: list[str] = field(default_factory=list)  # named in the file, not in this model (or not float)
    environment: dict | None = None  # where the file's answer was verified (None: the file records none)
    accumulating: list[str] = field(default_factory=list)  # in FP32 accumulation: named in the file, in this model


@dataclass
class CheckOutcome:
    """What a check found, as the console, the HTML report and ``check --json`` show it: the verdict's evaluation
    (every sample's metrics), the override nodes used, the all-FP32 evaluation when the check failed, the
    headroom, where the override file was verified, and where the tolerance came from."""

    graph: Graph
    tolerance: Tolerance
    backend: str
    versions: dict
    evaluation: Evaluation
    overrides: OverrideUse | None
    fp32: Evaluation | None  # evaluated when the check fails: is the tolerance reachable at all?
    seconds: float
    samples: list = field(default_factory=list)
    backend_details: dict = field(default_factory=dict)  # the command backend: its command
    headroom: dict | None = None  # the headroom section of the FP16 tensors (None: the profile did not run)
    lacking: list = field(default_factory=list)  # Headroom: low-precision tensors peaking above max/--headroom
    drift: Drift | None = None  # with an override file: where it was verified against here
    tolerance_from: str = "defaults"  # "given", "defaults", or "from <override file>" (CheckOptions.judged_with)
    accumulators: list = field(default_factory=list)  # JSON rows: the plan's low-precision accumulators, tightest first
    run: Invocation | None = None  # the check as asked: its model, samples, override file and records
    judged: SearchOptions = field(default_factory=SearchOptions)  # what it judged with (CheckOptions.judged_with)
    judged_from: dict = field(default_factory=dict)  # precision, accumulate, headroom: "given", "from F", "default"
    lacking_sums: list = field(default_factory=list)  # Accumulator: low-precision sums peaking above max/--headroom

    @property
    def accumulate(self) -> str:
        """What the nodes the plan leaves in the low precision were judged adding in: fp32 or fp16."""
        return self.judged.accumulate

    @property
    def passed(self) -> bool:
        return (self.evaluation.passed and not self.lacking and not self.lacking_sums
                and not (self.drift is not None and self.drift.fails))

    def per_sample(self) -> list[dict]:
        """Each sample that ran: whether it passed and, per output, its max abs error; the worst first."""
        found: dict[int, dict] = {}
        for m in self.evaluation.metrics:
            entry = found.setdefault(m.sample, {"index": m.sample, "source": _source(self.samples, m.sample),
                                                "passed": True, "excess": 0.0, "max_abs": {}})
            entry["passed"] &= m.passed
            entry["excess"] = max(entry["excess"], float("inf") if m.nonfinite else m.excess)
            entry["max_abs"][m.output] = max(entry["max_abs"].get(m.output, 0.0), m.max_abs)
        return sorted(found.values(), key=lambda e: (e["passed"], -e["excess"], e["index"]))

    def data(self) -> dict:
        return {
            "schema": SCHEMA,
            "model": {"path": str(self.graph.path), "sha256": self.graph.sha256},
            "backend": {"name": self.backend, "versions": {"fp16bisect": __version__, **self.versions},
                        **self.backend_details},
            "verdict_from": self.evaluation.verdict_from,  # outputs (metrics below) or exit_code (none)
            "tolerance": self.tolerance.to_json(),
            "tolerance_from": self.tolerance_from,
            "precision": self.graph.precision.name,
            "precision_from": self.judged_from.get("precision", "default"),
            "accumulate": self.accumulate,
            "accumulate_from": self.judged_from.get("accumulate", "default"),
            "overrides": None if self.overrides is None else {
                "path": self.overrides.path, "made_for_sha256": self.overrides.made_for,
                "same_model": self.overrides.same_model, "nodes": self.overrides.nodes,
                "missing": self.overrides.missing, "accumulating": self.overrides.accumulating,
            },
            "passed": self.passed,
            "error": self.evaluation.error,
            "outputs": {k: m.to_json() for k, m in self.evaluation.worst().items()},
            "samples": [m.to_json() for m in self.evaluation.metrics],
            "samples_passed": sum(e["passed"] for e in self.per_sample()),
            "samples_total": len(self.samples),
            "worst_samples": [_worst_json(e) for e in self.per_sample()[:WORST]],
            "headroom": self.headroom,
            "lacking_headroom": [h.tensor for h in self.lacking],
            "lacking_accumulator_headroom": [a.node for a in self.lacking_sums],
            "accumulators": self.accumulators,
            "fp32_passes": None if self.fp32 is None else self.fp32.passed,
            "environment": None if self.drift is None else self.drift.to_json(),
            "seconds": round(self.seconds, 3),
        }


def use_overrides(graph: Graph, path: str, say=None) -> OverrideUse:
    """The file's nodes present in this model. A file made for another version of the model (its sha256
    differs) may name nodes that are gone: those are listed, not refused; but one none of whose nodes is in the
    model belongs to another model: refused (``overrides.refuse_foreign``). A file made for this very model
    that names a node it does not have is damaged or hand-edited: refused. A node that is no candidate is
    followed to its producers, ``say`` saying so, or refused (``overrides.followed``)."""
    data = read(path, graph=graph)  # schema checked; another model's file refused; the hash compared here
    refuse_other_precision(data, path, graph.precision.name, "run")
    names, note = followed(graph, data.names, path)
    if note and say is not None:
        say(f"note: {note}")
    usable = [n for n in names if n in graph.by_id]
    made_for = data.model_sha256
    same_model = made_for == graph.sha256
    missing = [n for n in names if n not in usable]
    if same_model and missing:
        lacking = ", ".join(shown(n) for n in missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise UsageError(
            f"{path!r} was made for this model (same sha256) but names {len(missing)} node(s) that it lacks or "
            f"that compute no float: {lacking}; the file is damaged or was edited: rerun 'fp16bisect search'"
        )
    marked = [n.name for n in data.fp32_accumulate_nodes]
    checked_states(graph, plan_of((), [n for n in marked if n in graph.by_id]))  # a mark on a node that sums
    return OverrideUse(str(path), made_for, same_model, usable, missing + [n for n in marked if n not in graph.by_id],
                       data.environment, [n for n in marked if n in graph.by_id])


def recorded(path: str) -> Recorded:
    """What the override file at ``path`` says a check judges with (read before the model: its precision decides
    how the model loads)."""
    data = read(path)
    flag = (data.headroom or {}).get("flag")
    return Recorded(str(path), recorded_tolerance(data, path), precision_of(data.precision),
                    None if flag is None else float(flag), data.accumulate)


def check_model(model: str, inputs: list[str], references: list[str] | None = None, overrides: str | None = None,
                options: CheckOptions | None = None, listener: Listener | None = None,
                asked: Invocation | None = None) -> CheckOutcome:
    """``options``: the tolerance, precision and headroom (each not given: ``overrides``'s recorded one, else the
    default; said on the console and in the JSON), the backend, its options, ``parallel`` with room for two: the
    plan and the all-FP32 plan (needed only when the plan fails) are evaluated together, one round instead of
    two. With ``overrides``, the file's environment is compared with the backend's here (``drift.py``);
    ``strict_environment``: a change of GPU or TensorRT fails the check. ``asked``: the check as the caller gave
    it (what its printed commands name; default: these files)."""
    given = options or CheckOptions()
    if given.judge.strict_environment and not overrides:
        raise UsageError("--strict-environment compares where an override file was verified with here: "
                         "give the file with --overrides O.json, or drop --strict-environment")
    listener = listener or Listener()
    record = recorded(overrides) if overrides else None
    judged, source = given.judged_with(record)
    asked = asked or Invocation.of(model, inputs, references, given, overrides)
    tolerance = judged.tolerance
    listener.stage(f"tolerance: {tolerance} ({source})")
    if overrides and tolerance.accept is None and "accept" in (read(overrides).data.get("tolerance") or {}):
        listener.stage("warning: the search also ran a Python accept function, which a file cannot hold: this "
                       "check does not; pass it again (fp16bisect.check(..., accept=...)) to judge by it too")
    start = time.perf_counter()
    # the references, where not given, come from the FP32 profile's run, as in a search: a check and a search
    # judge a plan against the same numbers (at atol 0 too)
    graph, chosen, oracle = prepare(model, inputs, references, judged, listener, defer_references=True,
                                    stop_early=False)  # a check reports every sample
    with chosen, oracle:
        use = use_overrides(graph, overrides, listener.stage) if overrides else None
        if use is not None and not use.same_model:
            listener.stage(f"note: {overrides} was made for another version of this model "
                           f"(sha256 {use.made_for[:12]}..., this one {graph.sha256[:12]}...): checking it anyway")
        plan = plan_of(use.nodes, use.accumulating) if use else frozenset()  # the file's whole plan, marks included
        drift = None
        if use is not None:
            drift = compare(use.path, use.environment, chosen.environment(), given.judge.strict_environment)
            drift.again = again_line(drift, asked, judged)
        lacking = [s for s in oracle.samples if s.reference is None]
        section, tight_ones, accumulators, sums = _headroom(graph, oracle.samples, plan, judged.headroom, listener)
        add_fp32_references(graph, oracle.samples, computed=lacking)  # those the profile did not give
        listener.stage(f"checking on the {chosen.name} backend: {len(states(plan)[0])} node(s) in FP32"
                       f"{accumulating_shown(use)}, the rest in {graph.precision.label}")
        everything = frozenset(n.id for n in graph.candidates)
        if oracle.width > 1:
            oracle.evaluate_many([plan, everything])
        evaluation = oracle.evaluate(plan)
        fp32 = None
        if not evaluation.passed:
            fp32 = oracle.evaluate(everything)
        return CheckOutcome(graph, tolerance, chosen.name, chosen.versions(), evaluation, use, fp32,
                            time.perf_counter() - start, oracle.samples,
                            chosen.describe(), section, tight_ones, drift, source, accumulators, asked, judged,
                            given.space_from(record), lacking_sums=sums)


def accumulating_shown(use: OverrideUse | None) -> str:
    count = len(use.accumulating) if use else 0
    return f", {count} in FP32 accumulation" if count else ""


def _headroom(graph: Graph, samples, plan, factor: float | None,
              listener) -> tuple[dict | None, list[Headroom], list[dict], list]:
    """The headroom of the tensors the plan computes in FP16 (one FP32 run per sample), those that lack
    ``factor``, the accumulators of the nodes it leaves in FP16 (JSON rows), and those that lack ``factor``
    (``model/headroom.py``: one rule); (None, [], [], []) when the model does not run on ONNX Runtime CPU (then
    --headroom cannot be checked)."""
    try:
        with listener.timed(f"measuring the FP32 headroom on {len(samples)} sample(s)"):
            prof = profile(graph, samples)
    except UsageError:
        if factor:
            raise
        return None, [], [], []
    found = fp16_tensors(graph, prof, plan)
    sources = [s.source for s in samples]
    section = headroom_json(found, sources, factor, [], graph.precision)
    sums = fp16_accumulators(prof, plan)
    accumulators = accumulators_json(sums, sources, graph.precision)
    return (section, tight(found, factor) if factor else [], accumulators,
            tight_sums(sums, graph.precision, factor) if factor else [])


def _worst_json(entry: dict) -> dict:
    """A sample of ``per_sample`` as JSON: errors that are not finite written as strings, as in the metrics."""
    errors = {k: v if math.isfinite(v) else str(v) for k, v in entry["max_abs"].items()}
    return {"index": entry["index"], "source": entry["source"], "passed": entry["passed"], "max_abs": errors}


def _source(samples, index: int) -> str:
    return str(samples[index].source) if 0 <= index < len(samples) else f"sample {index}"


def suggested_search(o: CheckOutcome) -> Invocation | None:
    """The search of what the check judged (its tolerance, judge, plan space and parallel evaluation: every flag
    it was given or read from the override file), on its model and samples, writing a new file: beside the
    override file it checked (``O.new.json``), else ``<model>.overrides.json`` here; None without the check's
    invocation."""
    if o.run is None:
        return None
    if o.run.overrides:
        output = beside(o.run.overrides, "new")
    else:
        output = os.path.splitext(os.path.basename(o.run.model or "model"))[0] + ".overrides.json"
    return o.run.searching(o.judged).but(output)


def search_call(o: CheckOutcome, as_command: bool = False) -> str:
    """``suggested_search`` as a command line (``as_command``, when the model and samples are files) or as the
    Python call (``fp16bisect.search(...)``)."""
    found = suggested_search(o)
    if found is None:
        return f"fp16bisect search {o.graph.path}" if as_command else "fp16bisect.search(model, samples)"
    return found.shown() if as_command else found.call()


def kept_said(o: CheckOutcome) -> str:
    """What the check's plan keeps out of the low precision: its FP32 pins and its FP32-accumulation marks."""
    use = o.overrides
    if use is None:
        return f" in all-{o.graph.precision.label}"
    marks = f" and {len(use.accumulating)} in FP32 accumulation" if use.accumulating else ""
    return f" with {len(use.nodes)} override node(s) in FP32{marks}"


def verdict(o: CheckOutcome, as_command: bool = False) -> str:
    """One line: what the check found and what to do (the search to run: ``search_call``, a command line with
    ``as_command``, else the Python call)."""
    command_hint = search_call(o, as_command)
    use = o.overrides
    with_what = kept_said(o)
    if o.evaluation.error:
        judge = declared(o.backend)
        what = f"the {judge.evaluated_thing} could not be {judge.evaluation_word}"
        return f"FAIL: {what}{with_what}: {o.evaluation.error}"
    if not o.evaluation.metrics:  # a command's exit code judged: no numbers to show
        verdict = "PASS" if o.passed else "FAIL"
        text = f"{verdict}: the command judged the model{with_what} {'passing' if o.passed else 'failing'} " \
               f"({o.evaluation.detail})"
        if o.fp32 is not None and not o.fp32.passed:
            return text + f"; it judges all-FP32 failing too ({o.fp32.detail}): check the command"
        return text if o.passed else text + f"; find the nodes to keep in FP32 with '{command_hint}'"
    if o.evaluation.passed and (o.lacking or o.lacking_sums):
        factor = o.headroom["flag"] if o.headroom else 0
        sources = [s.source for s in o.samples]
        lacking = [h.describe(sources, factor) for h in o.lacking] + [
            f"{a.node!r} ({a.op_type}) {accumulator_reason(a, sources, o.graph.precision, factor).split(': ', 1)[1]}"
            for a in o.lacking_sums]
        more = f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""
        what = " and ".join(f"{len(found)} {kind}" for found, kind in ((o.lacking, "tensor(s)"),
                                                                       (o.lacking_sums, "sum(s)")) if found)
        return (f"FAIL{with_what}: every sample meets the tolerance, but {what} computed in "
                f"{o.graph.precision.label} lack {factor:g}x headroom: {', '.join(lacking[:3])}{more}; keep them out "
                f"of {o.graph.precision.label} with '{command_hint}'")
    if o.evaluation.passed and not o.lacking and o.drift is not None and o.drift.fails:
        return f"FAIL{with_what}: every sample meets the tolerance, but {o.drift.reason()}; verify it again: " \
               f"{o.drift.again}"
    if o.passed:
        text = f"PASS: every output of every sample meets the tolerance{with_what}"
        if use and not use.same_model:
            text += "; the override file was made for another version of this model and still suffices"
        return text
    if o.fp32 is not None and not o.fp32.passed and o.fp32.metrics:  # what a search says then, word for word
        return f"FAIL: {unreachable(o.backend, o.fp32, o.tolerance)}"
    bad = min((m for m in o.evaluation.metrics if not m.passed), key=lambda m: (-m.nonfinite, -m.excess))
    text = f"FAIL{with_what}: {bad.why(o.tolerance)}"
    if use and not use.same_model:
        return (text + f"; the model changed since {use.path} was made and its overrides no longer suffice: "
                f"rerun '{command_hint}'")
    if use:
        return text + f"; the overrides do not suffice on these samples: rerun '{command_hint}' with them"
    return text + f"; find the nodes to keep in FP32 with '{command_hint}'"
