"""``search`` end to end: model + samples -> verified minimal FP32 set -> override JSON."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .backends import make_backend
from .errors import BuildFailed, ToleranceUnreachable, UsageError
from .model.graph import Graph
from .journal import Journal, samples_digest
from .oracle import EXIT_CODE, OUTPUTS, Evaluation, Oracle
from .artifacts.overrides import SCHEMA, autocast_export, node_entry, strongly_typed_export, trtexec_export
from .model.profile import Profile, profile
from .model.samples import add_fp32_references, load_samples
from . import prior as priors
from . import ranking
from .prior import Prior
from .search import SearchResult, Step, search
from .backends.tensorrt.engine import sample_shapes
from .tolerance import Tolerance, compare

from .timing import timed


class Listener:
    """What a long search tells the person waiting (see report.py)."""

    def stage(self, text: str) -> None: ...

    def timed(self, text: str):
        """A stage that takes time: said when it starts, and its seconds when it ends."""
        return timed(self.stage, text)

    def step(self, step: Step, progress: dict) -> None: ...


@dataclass
class Outcome:
    graph: Graph
    tolerance: Tolerance
    backend: str
    result: SearchResult
    oracle: Oracle
    profile: Profile
    seconds: float
    data: dict = field(default_factory=dict)  # the override JSON
    prior: Prior | None = None  # the emulator's search the search on an expensive backend started from

    @property
    def fp16(self) -> Evaluation | None:
        """The all-FP16 plan: on the judging backend, or on the emulator when a prior's witness made that
        build unnecessary (``fp16_backend`` says which)."""
        judged = self.oracle.memo.get(frozenset())
        if judged is None and self.prior is not None and self.prior.fp16:
            return Evaluation.from_json(self.prior.fp16)
        return judged

    @property
    def fp16_backend(self) -> str:
        return self.backend if frozenset() in self.oracle.memo or self.fp16 is None else priors.LABEL

    @property
    def final(self) -> Evaluation:
        return self.oracle.memo[frozenset(self.result.fp32)]


def prepare(model: str, inputs: list[str], references: list[str] | None, backend: str, tolerance: Tolerance,
            listener: Listener, backend_options: dict | None = None, *, repeats: int = 1,
            journal_path: str | None = None, restart: bool = False, parallel=None, workdir: str | None = None,
            defer_references: bool = False):
    """Model, samples, backend and oracle. The FP16 copies of the model's weights are written, when first needed,
    to a temporary work directory in ``workdir`` (default: the system's), removed at exit. ``defer_references``: the caller computes the FP32
    references (with the FP32 profile), unless evaluations run elsewhere (they take the samples now). With ``journal_path``, evaluations are journaled there and a
    journal of the same search is replayed (``restart`` discards it). ``parallel`` (fp16bisect.parallel.Parallel):
    the oracle evaluates independent plans on worker processes or Ray tasks; close it with ``close``."""
    with listener.timed(f"loading {model}"):
        graph = Graph.load(model, workdir)
    outputs = graph.float_output_names()
    if not outputs:
        raise UsageError(
            f"{model!r} has no float32 output, so there is nothing FP16 could make wrong: pass a model with float outputs"
        )
    samples = load_samples(graph, inputs, references)
    given = samples_digest(samples)  # before references are computed: what the user gave
    serial = parallel is None or parallel.serial
    if not references and not (defer_references and serial):  # else the FP32 profile's run gives them
        with listener.timed("computing FP32 references with ONNX Runtime"):
            add_fp32_references(graph, samples)
    for note in notes(graph):
        listener.stage(f"note: {note}")
    options = dict(backend_options or {})
    options.setdefault("input_shapes", sample_shapes([s.inputs for s in samples]))
    options.setdefault("notify", listener.stage)  # tensorrt: ignored FP32 pins, the typing fallback, said once
    options.setdefault("progress", listener.stage)  # the command backend says which command runs on which plan
    options.setdefault("tolerance", tolerance.to_json())  # ... and writes it into each plan's override file
    chosen = make_backend(backend, graph, **options)
    journal = None
    if journal_path:
        # another judge (the command backend: another command) is another search: its verdicts are not replayed
        header = journal_header(graph, getattr(chosen, "journal_name", chosen.name), tolerance, given, repeats)
        journal = Journal(journal_path, header, restart=restart)
        if journal.entries:
            listener.stage(f"resuming: {len(journal.entries)} evaluation(s) replayed from {journal_path}")
    executor = None
    if parallel is not None and not parallel.serial:
        from .parallel import make_executor

        try:
            executor = make_executor(parallel, chosen.name, graph, samples, tolerance, outputs, options, chosen)
        except BaseException:
            close(chosen)
            raise
        if executor is not None:
            listener.stage(f"evaluating up to {executor.width} plan(s) at once on {executor.where}")
    oracle = Oracle(chosen, samples, tolerance, outputs, repeats=repeats, journal=journal, executor=executor)
    return graph, chosen, oracle


def close(backend, oracle=None) -> None:
    """Free the backend's resources and stop the oracle's workers."""
    try:
        if oracle is not None and oracle.executor is not None:
            oracle.executor.close()
    finally:
        if hasattr(backend, "close"):
            backend.close()


def journal_header(graph: Graph, backend: str, tolerance: Tolerance, samples_digest: str, repeats: int) -> dict:
    return {"model_sha256": graph.sha256, "backend": backend, "tolerance": tolerance.to_json(),
            "samples": samples_digest, "repeats": repeats}


def notes(graph: Graph) -> list[str]:
    """What the search does not cover in this model, said up front."""
    found = []
    if graph.skipped:
        names = ", ".join(list(graph.skipped)[:5]) + (", ..." if len(graph.skipped) > 5 else "")
        found.append(f"{len(graph.skipped)} node(s) of custom domains are not searched and run as in the model: {names}")
    if graph.nested:
        inside = sum(graph.nested.values())
        found.append(
            f"{inside} node(s) inside the subgraphs of {len(graph.nested)} control-flow node(s) "
            f"({', '.join(list(graph.nested)[:5])}) are not searched one by one: each control-flow node is one "
            "candidate, and its subgraphs are rounded with it (FP16 inside when it is in FP16)"
        )
    return found


def search_model(
    model: str,
    inputs: list[str],
    references: list[str] | None = None,
    tolerance: Tolerance = Tolerance(),
    backend: str = "auto",
    listener: Listener | None = None,
    output: str | None = None,
    backend_options: dict | None = None,
    repeats: int = 1,
    restart: bool = False,
    parallel=None,
    prior: str = "auto",
) -> Outcome:
    """``output``: where the caller writes the JSON (named in its exports); the journal (resume) and the
    TensorRT timing cache go beside it. ``backend_options``: passed to the backend (TensorRT: optimisation
    level, timing cache, noise policy). ``repeats``: evaluations per plan, all must pass. ``restart``:
    discard the journal of an earlier run instead of resuming it. ``prior``: ``auto`` (the emulator's search
    first whenever the backend is not the emulator and the model runs there), ``emulate`` or ``none``.
    ``parallel``: see ``prepare``."""
    listener = listener or Listener()
    start = time.perf_counter()
    options = dict(backend_options or {})
    noise_ok = options.pop("noise_ok", False)
    if output and not options.get("timing_cache"):
        options["timing_cache"] = str(Path(output).with_suffix(".timing.cache"))
    if output and not options.get("plans_dir"):  # the command backend's plan files: overrides.json -> overrides.plans/
        options["plans_dir"] = str(Path(output).with_suffix(".plans"))
    graph, chosen, oracle = prepare(model, inputs, references, backend, tolerance, listener, options,
                                    repeats=repeats, journal_path=journal_path(output) if output else None,
                                    restart=restart, parallel=parallel,
                                    workdir=str(Path(output).resolve().parent) if output else None,
                                    defer_references=True)
    if prior not in priors.CHOICES:
        raise UsageError(f"unknown prior {prior!r}: use one of {', '.join(priors.CHOICES)}")
    try:
        lacking = [s for s in oracle.samples if s.reference is None]
        also = " and computing the FP32 references" if lacking else ""
        try:
            with listener.timed(f"profiling FP32 activations of {len(graph.candidates)} candidate node(s){also}"):
                prof = profile(graph, oracle.samples)  # its FP32 run gives the references the samples lack
                add_fp32_references(graph, oracle.samples, computed=lacking)
        except UsageError:  # the model does not run, or its FP32 outputs hold NaN: nothing evaluated, no journal
            if oracle.journal is not None:
                oracle.journal.discard_if_unused()
            raise
        found = None
        if priors.wanted(prior, chosen.name):
            found = _prior(graph, oracle, prof, listener, output, prior, restart)
        # with a prior, the noise is measured on its set, the first plan the search evaluates (its build is kept)
        noise = build_noise(chosen, oracle.samples, tolerance, noise_ok, listener, oracle.journal,
                            plan=frozenset(found.fp32) if found is not None else frozenset())
        return _search(graph, chosen, oracle, tolerance, listener, output, noise, prof, found, start)
    finally:
        close(chosen, oracle)


def journal_path(output: str) -> str:
    """Beside the override JSON: overrides.json -> overrides.journal.jsonl."""
    return str(Path(output).with_suffix(".journal.jsonl"))


def build_noise(backend, samples, tolerance: Tolerance, noise_ok: bool, listener: Listener, journal=None,
                plan: frozenset = frozenset()) -> dict:
    """Output -> max abs difference between two builds of one plan (backends that build engines): all-FP16, or
    the prior's set when there is one (the first plan the search builds anyway: one build saved, none of
    all-FP16).

    Verdicts finer than build-to-build noise are coin flips: a tolerance the two builds do not meet
    against each other is refused unless ``noise_ok``.
    """
    if not hasattr(backend, "noise"):
        return {}
    if journal is not None and journal.noise is not None:
        listener.stage("build noise: measured before, read from the journal")
        return journal.noise
    what = f"the engine of the prior's set ({len(plan)} node(s) in FP32)" if plan else "the all-FP16 engine"
    listener.stage(f"building {what} twice to measure build-to-build noise")
    try:
        first, second = backend.noise(samples[0].inputs, plan=plan)
    except BuildFailed as exc:  # the search meets (and records) the same failure
        if plan:  # the all-FP16 engine pins nothing: measure there instead
            listener.stage("build noise: the prior's set did not build as asked (the search reports why); "
                           "measuring on the all-FP16 engine instead")
            return build_noise(backend, samples, tolerance, noise_ok, listener, journal)
        listener.stage(f"could not measure build noise: {exc}")
        return {}
    found = {}
    for name, a in first.items():
        m = compare(second[name], a, tolerance, name, 0)
        found[name] = m.max_abs if not m.nonfinite else float("inf")
        if not m.passed and not noise_ok:
            raise UsageError(
                f"two builds of {what} differ beyond the tolerance ({m.why(tolerance)}): "
                "TensorRT picks kernels per build, so verdicts at this tolerance would be noise; loosen "
                "--atol/--rtol, or pass --noise-ok to search anyway"
            )
    listener.stage("build noise: " + ", ".join(f"{k} {v:.3g}" for k, v in found.items()))
    if journal is not None:
        journal.record_noise({k: (v if v != float("inf") else "inf") for k, v in found.items()})
    return found


def _prior(graph, oracle, prof, listener, output, choice, restart) -> Prior | None:
    """The emulator's search (or its result, read back from this backend's journal when resuming)."""
    journal = oracle.journal
    if journal is not None and journal.prior is not None:
        listener.stage(f"prior: the emulator's result read from {journal.path} (not run again)")
        return Prior.from_json(journal.prior)
    backend = priors.emulator(graph, choice, listener)
    if backend is None:
        return None
    header = dict(journal.header) if journal is not None else {}
    header.pop("schema", None)
    found = priors.run(graph, backend, oracle.samples, oracle.tolerance, oracle.outputs, prof, listener,
                       header=header, path=priors.journal_path(output) if output else None, restart=restart)
    if found is not None and journal is not None:
        journal.record_prior(found.to_json())
    return found


def effect_ranking(graph, chosen, oracle, prof, listener):
    """On the emulate backend: a function ranking every candidate by the output error each causes alone in
    FP16 (ranking.py), which the search calls only when no suspect prefix explains the failure (accumulated
    rounding). None on other backends (there the prior brings the ranking)."""
    from .backends.emulate import EmulateBackend

    if chosen.name != "emulate":
        return None

    def ranked() -> list:
        listener.stage(f"no suspect prefix explains the failure: ranking the {len(prof.order)} candidate(s) by "
                       "the output error each causes alone in FP16")
        # on an emulator of our own unless ``chosen`` is one: these runs are not evaluations of the search
        runner = chosen if isinstance(chosen, EmulateBackend) else EmulateBackend(graph)
        measured = ranking.effects(runner, oracle.samples, oracle.tolerance, oracle.outputs, prof.order)
        return ranking.by_effect(prof.order, measured)

    return ranked


def _search(graph, chosen, oracle, tolerance, listener, output, noise, prof, prior, start) -> Outcome:
    step = lambda step, progress: listener.step(  # noqa: E731
        step, {**progress, "backend": chosen.name, "replayed": step.plan in oracle.replayed})
    common = dict(
        on_step=step,
        recheck=None if getattr(chosen, "deterministic", False) else lambda plan: oracle.evaluate(plan, 1).verdict,
        test_many=oracle.test_many if oracle.width > 1 else None,
        width=oracle.width,
    )
    ids = [n.id for n in graph.candidates]
    if prior is not None:
        listener.stage(f"on the {chosen.name} backend: evaluating the emulator's {len(prior.fp32)} node(s), then "
                       "certifying each (or continuing from them if they fail)")
        result = search(ids, oracle, order=prior.order, start=prior.fp32, alternatives=priors.Alternatives(
            graph, prior, oracle.samples, oracle.tolerance, oracle.outputs, listener), **common)
        listener.stage(_agreement(result, chosen.name))
    else:
        listener.stage(f"searching on the {chosen.name} backend ({prof.suspects} suspect(s) first)")
        result = search(ids, oracle, order=prof.order, suspects=prof.suspects,
                        reorder=effect_ranking(graph, chosen, oracle, prof, listener), **common)
    said = {frozenset(): "the all-FP16 plan", **({frozenset(prior.fp32): "the emulator's set"} if prior else {})}
    for plan, what in said.items():
        evaluation = oracle.memo.get(plan)
        if evaluation is not None and evaluation.reason is not None:
            listener.stage(f"{what} could not be evaluated on the {chosen.name} backend ({evaluation.reason.kind}: "
                           f"{evaluation.error.splitlines()[0]}); the search went on around it, not counting it")
    if result.status == "fp32_fails":
        everything = oracle.memo[frozenset(n.id for n in graph.candidates)]
        if everything.reason is not None:
            what = "evaluated" if chosen.name == "command" else "built"
            raise UsageError(f"the all-FP32 plan could not be {what} on the {chosen.name} backend: {everything.error}")
        if not everything.metrics:  # judged by a command's exit code: no numbers, only what it said
            raise ToleranceUnreachable(
                f"the command judged even the all-FP32 plan failing ({everything.detail}): check the command "
                "(fp16bisect search --keep-plans keeps each plan's files, stdout.txt and stderr.txt to run it by hand)"
            )
        worst = max((m for m in everything.metrics if not m.passed), key=lambda m: m.excess)
        fix = (
            "check --reference and the inputs"
            if worst.nonfinite or worst.excess <= 1  # NaN/inf, or a cosine/mismatch rule failed
            else f"loosen --atol/--rtol by at least {worst.excess:.3g}x or check --reference"
        )
        raise ToleranceUnreachable(
            f"the tolerance is unreachable even in FP32 on the {chosen.name} backend: {worst.why(tolerance)}; {fix}"
        )
    outcome = Outcome(graph, tolerance, chosen.name, result, oracle, prof, time.perf_counter() - start, prior=prior)
    outcome.data = overrides_json(outcome, chosen.versions(), output)
    if hasattr(chosen, "describe"):  # the command backend: the command that judged, and how its verdicts came
        outcome.data["backend"].update(chosen.describe())
        judged = [e for e in oracle.history if not e.error]
        outcome.data["backend"]["verdicts_from"] = {
            kind: sum(e.verdict_from == kind for e in judged) for kind in (OUTPUTS, EXIT_CODE)}
    if noise:
        outcome.data["backend"]["build_noise"] = noise
    if getattr(chosen, "typing", None):  # tensorrt: strong (mixed-precision ONNX) or weak (layer precisions)
        outcome.data["backend"]["typing"] = chosen.typing
    return outcome


def _agreement(result: SearchResult, backend: str) -> str:
    if result.agreed:
        return f"{backend} agrees with the emulator: {result.evaluations} evaluation(s) on {backend}"
    if result.status == "fp32_fails":
        return f"{backend} disagrees with the emulator: even all-FP32 misses the tolerance there"
    said = [f"added {len(result.added)}: {_names(result.added)}" if result.added else "",
            f"dropped {len(result.dropped)}: {_names(result.dropped)}" if result.dropped else ""]
    return (f"{backend} disagrees with the emulator: {'; '.join(s for s in said if s) or 'another set'} "
            f"({result.evaluations} evaluation(s) on {backend})")


def _names(ids, limit: int = 5) -> str:
    ids = list(map(str, ids))
    return ", ".join(ids[:limit]) + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def prior_json(o: Outcome) -> dict | None:
    p, r = o.prior, o.result
    if p is None:
        return None
    return {"backend": "emulate", "status": p.status, "fp32": list(p.fp32), "evaluations": p.evaluations,
            "seconds": round(p.seconds, 3), "minimal": p.minimal, "agreed": bool(r.agreed),
            "added": list(r.added), "dropped": list(r.dropped), "journal": p.journal, "replayed": p.replayed,
            "alternatives": alternatives_json(p, r)}


def alternatives_json(p: Prior, r: SearchResult) -> dict | None:
    """When the prior's set failed on the judge: the emulator's alternatives (made, from how many emulator
    evaluations) and how many were evaluated on the judge; ``used``: the answer came from one of them."""
    tried = [s for s in r.trace if s.phase == "alternative"]
    if not p.alternatives and not tried:
        return None
    return {**p.alternatives, "evaluated": len(tried), "used": any(s.passed for s in tried)}


def ignored_pins(oracle: Oracle) -> list[dict]:
    """Weakly typed TensorRT builds whose FP32 pins TensorRT ignored: node, the engine layer it was fused
    into, and the plan (not counted as evidence). Read from the evaluations' reasons, so a resumed search
    lists those of the replayed evaluations too."""
    return [{"node": node, "layer": layer, "fp32": plan_json(e.plan)}
            for e in oracle.build_failures for node, layer in e.reason.pins]


def conversions_json(graph: Graph, fp32) -> dict:
    """What the all-FP16 plan's file and the answer's file convert beyond rounding, and by which rule."""
    from .artifacts.mixed import conversions
    from .model.fp16 import RULE

    return {"rule": RULE, "all_fp16": [c.to_json() for c in conversions(graph, ())],
            "with_overrides": [c.to_json() for c in conversions(graph, fp32)]}


def unverified(o: Outcome) -> list[dict]:
    """The members of the answer whose removal could not be evaluated, each with the reason."""
    found = []
    for member in o.result.unverified:
        evaluation = o.oracle.memo.get(frozenset(o.result.fp32) - {member})
        reason = evaluation.reason if evaluation is not None and evaluation.reason is not None else None
        found.append({"node": member, "reason": reason.to_json() if reason else {"kind": "unknown", "message": ""}})
    return found


# The override file stays small whatever the search met (pipelines read it, CI stores it): lists of plans are
# capped to their first EXAMPLES entries ("<key>_total" says how many there were), a plan is listed in full up to
# PLAN_IDS ids, the trace to TRACE_LIMIT steps. The journal keeps everything.
EXAMPLES, PLAN_IDS, TRACE_LIMIT = 10, 64, 1000


def plan_json(plan) -> list | dict:
    """A plan's ids, or for a large plan how many it holds."""
    return sorted(plan) if len(plan) <= PLAN_IDS else {"ids": len(plan), "listed_in": "the journal"}


def capped(key: str, items: list, limit: int = EXAMPLES) -> dict:
    """``key``: the first ``limit`` items; ``<key>_total``: how many there were, when some were left out."""
    return {key: items} if len(items) <= limit else {key: items[:limit], f"{key}_total": len(items)}


def contradictions_json(found: list) -> dict:
    """How often the judge contradicted monotonicity, and the first examples as node-id differences: a plan that
    passed and what its failing superset added (nothing: the same plan failed when evaluated again)."""
    return {"count": len(found), "examples": [
        {"passed_ids": len(small), "failed_adding": sorted(big - small), "same_plan_failed_again": small == big}
        for small, big in found[:EXAMPLES]]}


def overrides_json(o: Outcome, versions: dict, output: str | None = None) -> dict:
    graph, result = o.graph, o.result
    reasons = {r.node: r.reason for r in o.profile.risks}
    nodes = [graph.by_id[i] for i in result.fp32]
    everything = frozenset(n.id for n in graph.candidates)

    def worst(plan) -> dict | None:
        """Per output, the worst sample; {} when the plan was not evaluated, None when its verdict was a
        command's exit code (no outputs to measure). The all-FP16 plan may come from the prior (o.fp16)."""
        evaluation = o.fp16 if not plan else o.oracle.memo.get(frozenset(plan))
        if evaluation is not None and evaluation.verdict_from == EXIT_CODE:
            return None
        return {k: m.to_json() for k, m in evaluation.worst().items()} if evaluation else {}

    return {
        "schema": SCHEMA,
        "model": {"path": str(graph.path), "sha256": graph.sha256},
        "backend": {"name": o.backend, "versions": {"fp16bisect": __version__, **versions}},
        "tolerance": o.tolerance.to_json(),
        "fp32_nodes": [node_entry(n, reasons.get(n.id, "")) for n in nodes],
        "search": {
            "status": result.status,
            "candidates": len(graph.candidates),
            "evaluations": result.evaluations,
            "evaluations_run": o.oracle.runs,
            "rounds": result.rounds,  # batches that waited on each other (== evaluations with --jobs 1)
            "jobs": o.oracle.width,  # plans evaluated at once
            "repeats": o.oracle.repeats,
            **capped("flaky", [plan_json(e.plan) for e in o.oracle.flaky]),
            "minimal": result.minimal,
            "minimality": result.minimality,
            # members kept because their removal could not be evaluated: why, from that evaluation
            "unverified": unverified(o),
            "unevaluable": len(o.oracle.build_failures),
            "verified": result.passed,
            "contradictions": contradictions_json(result.contradictions),
            "seconds": round(o.seconds, 3),
            **capped("trace", [{"fp32": len(s.plan), "passed": s.passed, "phase": s.phase, "round": s.round}
                               for s in result.trace], TRACE_LIMIT),
            **capped("build_failures", [{"fp32": plan_json(e.plan), "error": e.error}
                                        for e in o.oracle.build_failures]),
            **capped("ignored_pins", ignored_pins(o.oracle)),
            # every evaluation in full (plans, verdicts, errors, metrics): the journal, when -o was given
            "journal": journal_path(output) if output else None,
        },
        "prior": prior_json(o),
        # fp32 is null when the search never needed the all-FP32 plan (a passing plan implies it); fp16 comes
        # from the emulator (fp16_backend says so) when a prior's witness made the all-FP16 build unnecessary
        "metrics": {"fp32": worst(everything) or None, "fp16": worst(()), "fp16_backend": o.fp16_backend,
                    "with_overrides": worst(result.fp32)},
        "skipped_nodes": graph.skipped,
        "notes": notes(graph),
        # constants read in FP16 that FP16 cannot hold (the writer stores them by the rule; so does the emulator)
        "conversions": conversions_json(graph, result.fp32),
        "exports": {  # the strongly typed route first: it is the one TensorRT must honour (10.x included)
            "strongly_typed": strongly_typed_export(graph, output),
            "trtexec": trtexec_export(graph, nodes),
            "modelopt_autocast": autocast_export(graph, nodes),
        },
    }
