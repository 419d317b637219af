"""``search`` end to end: model + samples -> backend and oracle -> (the prior) -> search -> ``Outcome``.

Orchestration only: how it runs comes typed in ``SearchOptions`` (``run/options.py``); the search order from
``ranking.py``, the build-noise policy from ``build_noise.py``, the override JSON from ``override_json.py`` (built
from the ``Outcome``), the prior from ``prior.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from fp16bisect.strategy import prior as priors
from fp16bisect.strategy import minimum as minima
from fp16bisect.strategy import blocks, constraints, improve, prior_choice, rounding
from fp16bisect.run import two_states
from fp16bisect.run.coverage import forcing, sample_order, with_forced
from fp16bisect.run.invocation import Invocation
from fp16bisect.run.paths import journal_path
from fp16bisect.run.searches import fp32_set, unreachable
from fp16bisect.run.stopping import STOPS, budget_of, stopped
from fp16bisect.backends import Backend, Options, PlanJudge, make_backend
from fp16bisect.strategy.build_noise import build_noise
from fp16bisect.errors import ToleranceUnreachable, UsageError
from fp16bisect.evaluation.journal import Journal, journal_key, samples_digest
from fp16bisect.evaluation.space import PlanSpace, View
from fp16bisect.model.graph import Graph, notes
from fp16bisect.model import shapes
from fp16bisect.model.profile import Profile, profile
from fp16bisect.model.samples import Sample, sample_shapes, add_fp32_references, load_samples
from fp16bisect.evaluation.oracle import EXIT_CODE, OUTPUTS, Oracle
from fp16bisect.parallel import one_line_at_a_time
from fp16bisect.run.options import SearchOptions
from fp16bisect.run.outcome import Listener, Outcome
from fp16bisect.strategy.blocks import Chosen
from fp16bisect.strategy.prior import Prior
from fp16bisect.algorithm.search import SearchResult
from fp16bisect.tolerance import Tolerance

__all__ = ["Listener", "Outcome", "prepare", "search_model", "unreachable"]


def prepare(model: str, inputs: list[str], references: list[str] | None, options: SearchOptions,
            listener: Listener | None = None, *, defer_references: bool = False,
            stop_early: bool = True) -> tuple[Graph, Backend, Oracle]:
    """Model, samples, backend and oracle, as ``options`` say. With ``options.output``, the FP16 copies of the
    model's weights are written, when first needed, to a temporary work directory beside it (default: the
    system's temporary directory), removed at exit; and evaluations are journaled beside it, a journal of the
    same search replayed (``restart`` discards it; a plan the process died evaluating is not run again, it counts
    as could-not-evaluate, unless ``retry_crashed``). ``defer_references``: the caller computes the FP32
    references (with the FP32 profile), unless evaluations run elsewhere (they take the samples now).
    ``parallel``: the oracle evaluates independent plans on worker processes or Ray tasks. ``stop_early`` False (a
    check): every plan runs every sample. Use both as ``with backend, oracle:``: the backend frees what it holds, the
    oracle stops its workers."""
    listener = listener or Listener()
    output = options.output
    with listener.timed(f"loading {model}"):
        graph = Graph.load(model, str(Path(output).resolve().parent) if output else None, precision=options.precision)
    graph.name = options.model_name
    options.tolerance.outputs_named([o.name for o in graph.outputs])  # exit 2 listing the outputs
    outputs = graph.float_output_names()
    if not outputs:
        raise UsageError(
            f"{model!r} has no float32 output, so there is nothing FP16 could make wrong: pass a model with float outputs"
        )
    samples = load_samples(graph, inputs, references)
    given = samples_digest(samples)  # before references are computed: what the user gave
    parallel = options.parallel
    serial = parallel is None or parallel.serial
    if not references and not (defer_references and serial):  # else the FP32 profile's run gives them
        with listener.timed("computing FP32 references with ONNX Runtime"):
            add_fp32_references(graph, samples)
    for note in notes(graph):
        listener.stage(f"note: {note}")
    tolerance = options.tolerance
    if options.accumulate != "fp32":
        listener.stage(f"accumulation: FP16 nodes also add in {graph.precision.label} (--accumulate "
                       f"{options.accumulate}: a node in FP32 or FP32 accumulation adds in FP32)")
    backend_options = replace(options.backend_options, precision=graph.precision.name, accumulate=options.accumulate)
    if backend_options.input_shapes is not None:  # the deployment's profile (--min/--max-shapes): checked here
        backend_options = replace(backend_options, input_shapes=shapes.deployment_profile(
            graph, backend_options.input_shapes, samples))
    backend_options = _shared(backend_options, samples, tolerance, listener)
    chosen = make_backend(options.backend, graph, backend_options)
    journal = None
    try:  # a journal of another search, workers that do not start: the backend is freed before the error
        journal = _journal(graph, chosen, given, options, listener)
        executor = None
        if parallel is not None and not parallel.serial:
            from fp16bisect.parallel import make_executor

            tolerance.shippable()
            executor = make_executor(parallel, chosen, graph, samples, tolerance, graph.judged_output_names(),
                                     backend_options)
            if executor is not None:
                listener.stage(f"evaluating up to {executor.width} plan(s) at once on {executor.where}")
    except BaseException:
        chosen.close()
        if journal is not None:  # evaluated nothing: leaves none
            journal.discard_if_unused()
        raise
    oracle = Oracle(chosen, samples, tolerance, graph.judged_output_names(), repeats=options.judge.repeats,
                    journal=journal, executor=executor, stop_early=stop_early)
    return graph, chosen, oracle


def _shared(options: Options, samples: list[Sample], tolerance: Tolerance, listener: Listener) -> Options:
    """``options`` with what every backend may use, where the caller did not set it."""
    shared: dict[str, Any] = {
        "input_shapes": sample_shapes(samples),
        "notify": listener.stage,  # tensorrt: ignored FP32 pins, the typing fallback, said once
        # the command backend says which command runs on which plan (from several threads with --jobs)
        "progress": one_line_at_a_time(listener.stage),
        "tolerance": tolerance.to_json(),  # ... and writes it into each plan's override file
    }
    return replace(options, **{k: v for k, v in shared.items() if getattr(options, k) is None})


def _journal(graph: Graph, chosen: Backend, given: str, options: SearchOptions, listener: Listener) -> Journal | None:
    """The journal of this search beside ``options.output`` (None: not journaled), replayed when it holds
    evaluations."""
    if not options.output:
        return None
    # another judge (the command backend: another command) is another search: its verdicts are not replayed
    header = journal_header(graph, chosen.journal_name, options.tolerance, given, options.judge.repeats,
                            headroom=options.headroom, profile=options.backend_options.input_shapes,
                            accumulate=options.accumulate)
    if graph.precision.name != "fp16":  # another precision is another search (FP16 journals keep their header)
        header["precision"] = graph.precision.name
    space = options.space
    if space.keep_fp32 or space.keep_fp16:  # another search's plans (and prior) are over other candidates
        header["constraints"] = {"keep_fp32": list(space.keep_fp32), "keep_fp16": list(space.keep_fp16)}
    # keyed by what the search is: another search at this -o journals beside it; one journaled before journals
    # were keyed resumes from its old file
    path = journal_path(options.output, journal_key(header))
    if not Path(path).exists() and Journal.belongs(journal_path(options.output), header):
        path = journal_path(options.output)
    kept = options.journal
    journal = Journal(path, header, restart=kept.restart, retry_crashed=kept.retry_crashed, keep=kept.keep_journal)
    if journal.entries:
        listener.stage(f"resuming: {len(journal.entries)} evaluation(s) replayed from {path}")
    if journal.crashed and not kept.retry_crashed:
        listener.stage(f"{len(journal.crashed)} plan(s) killed the process evaluating them before: counted as "
                       "could not evaluate, not run again (--retry-crashed evaluates them)")
    return journal


def journal_header(graph: Graph, backend: str, tolerance: Tolerance, samples_digest: str, repeats: int, *,
                   headroom: float | None = None, profile: dict | None = None, accumulate: str = "fp32") -> dict:
    """What the search is, as its journal's first line (and key) says. ``headroom`` (the nodes --headroom forces
    are in every plan), the deployment's shape ``profile`` (the engines a plan is judged on) and ``accumulate``
    fp16 (what FP16 nodes add in) change what a verdict means, so they are part of it when given (absent
    otherwise: a journal from before them resumes)."""
    header = {"model_sha256": graph.sha256, "backend": backend, "tolerance": tolerance.to_json(),
              "samples": samples_digest, "repeats": repeats}
    if headroom is not None:
        header["headroom"] = float(headroom)
    if profile:
        header["shapes"] = {name: [list(map(int, dims)) for dims in ranges] for name, ranges in sorted(profile.items())}
    if accumulate != "fp32":
        header["accumulate"] = accumulate
    return header


def search_model(model: str, inputs: list[str], references: list[str] | None = None,
                 options: SearchOptions | None = None, listener: Listener | None = None) -> Outcome:
    """The smallest set of nodes to keep in FP32 for ``model`` on these samples, as ``options`` say (see
    ``SearchOptions``: tolerance, backend, output, resuming, parallel evaluation, the prior)."""
    options = options or SearchOptions()
    listener = listener or Listener()
    start = time.perf_counter()
    budget = budget_of(options.strategy)  # its time runs from here
    graph, chosen, oracle = prepare(model, inputs, references, options, listener, defer_references=True)
    with chosen, oracle:  # the backend's resources and the oracle's workers live until the search ends
        prof = _profiled(graph, oracle, listener)
        stress = sample_order(oracle.samples, prof, listener.stage)
        # the plan space: the nodes --headroom forces and --keep-fp32 keeps in every plan, --keep-fp16's in none,
        # the blocks of --group-by; the search's view of the judge adds its fixed members to each plan
        space, forced = forcing(graph, PlanSpace.of(graph), prof, options.headroom, oracle.samples, listener.stage)
        steer = constraints.resolve(graph, options.space.keep_fp32, options.space.keep_fp16)
        space = constraints.steered(space, steer, listener.stage)
        if options.space.grouping is not None:
            space = blocks.grouped(graph, space, options.space.grouping, listener.stage)
        judge, order = View(oracle, space, stress, budget), space.ranked(prof)
        try:
            done = _searched(graph, judge, order, prof, options, listener,
                             Invocation.of(model, inputs, references, options))
        except ToleranceUnreachable as e:
            raise constraints.unreachable(steer, e) from None
        result = with_forced(constraints.constrained(done.result, steer), forced, space.fixed)
        info = _backend_info(chosen, oracle, done.noise)
        return Outcome(graph, options.tolerance, chosen.name, result, oracle, prof, time.perf_counter() - start,
                       prior=done.prior, output=options.output, backend_info=info, forced=forced,
                       environment=chosen.environment(), evaluation_word=chosen.evaluation_word,
                       headroom=options.headroom, accumulate=options.accumulate, minimum=done.least,
                       constraints=steer, blocks=done.blocks, run=done.run, diagnosis=done.said,
                       shapes=shapes.coverage(graph, oracle.samples, options.backend_options.input_shapes))


@dataclass(frozen=True)
class Searched:
    """What the searches of one plan space found: the prior (None: none), the build noise, the answer, ``--minimum``'s
    search, the blocks the block search kept, the search as asked (``run``) and what its diagnosis said."""

    prior: Prior | None
    noise: dict
    result: SearchResult
    least: minima.Least | improve.Improvement | None
    blocks: Chosen | None
    run: Invocation
    said: dict | None


def _searched(graph: Graph, judge: View, order: Profile, prof: Profile, options: SearchOptions, listener: Listener,
              run: Invocation) -> Searched:
    """The prior (when the judge takes one), the build noise, and the FP32 set's search over ``judge`` (``order``: the
    FP32 profile over its candidates; ``--accumulate fp16``: then the accumulators), with ``--minimum``'s set and the
    blocks kept, followed by the rounding diagnosis; a budget or Ctrl-C ends it with the smallest set seen to pass
    (``stopping.py``)."""
    chosen, found, noise, diagnosis = judge.backend, None, {}, None
    try:
        if prior_choice.wanted(options.strategy.prior, chosen) and not judge.space.blocks:
            found = _prior(graph, judge, order, listener, options)
        # with a prior, the noise is measured on its set, the first plan the search evaluates (its build is kept)
        noise = build_noise(chosen, judge.samples, options.tolerance, options.judge.noise_ok, listener, judge.journal,
                            plan=frozenset(found.fp32) if found is not None else frozenset())
        wanted = _wanted(graph, prof, options, chosen, judge.samples, listener)
        # said when all-FP16 fails by rounding, following the FP32 set's search over its view of the judge
        diagnosing = partial(rounding.Diagnosis, graph, order, run=run, listener=listener,
                             accumulate=options.accumulate, prior=found, ranks=chosen.ranks_by_effect and found is None)
        if options.accumulate == "fp16":  # the FP32 set with the accumulators' marks fixed, then the marks
            stage = judge.over(two_states.stored(graph, judge.space, listener.stage))
            diagnosis = diagnosing(stage)
            first, least, picked = fp32_set(graph, stage, listener, order, found, wanted, diagnosis)
            result = two_states.summed(graph, judge, first, listener, order)
        else:
            diagnosis = diagnosing(judge)
            result, least, picked = fp32_set(graph, judge, listener, order, found, wanted, diagnosis)
    except STOPS as stop:
        result, least, picked = stopped(judge, stop, order.order, listener.stage), None, None
    return Searched(found, noise, result, least, picked, run, diagnosis.to_json() if diagnosis is not None else None)


def _profiled(graph: Graph, oracle: Oracle, listener: Listener) -> Profile:
    """The FP32 profile, its run giving the references the samples lack; a model that does not run (or whose FP32
    outputs hold NaN) is a ``UsageError`` (the oracle's exit then leaves no journal: nothing was evaluated)."""
    lacking = [s for s in oracle.samples if s.reference is None]
    also = " and computing the FP32 references" if lacking else ""
    with listener.timed(f"profiling FP32 activations of {len(graph.candidates)} candidate node(s){also}"):
        prof = profile(graph, oracle.samples)  # its FP32 run gives the references the samples lack
        add_fp32_references(graph, oracle.samples, computed=lacking)
    return prof


def _prior(graph: Graph, judge: View, prof: Profile, listener: Listener, options: SearchOptions) -> Prior | None:
    """The emulator's search (or its result, read back from this backend's journal when resuming)."""
    journal = judge.journal
    if journal is not None and journal.prior is not None:
        listener.stage(f"prior: the emulator's result read from {journal.path} (not run again)")
        return Prior.from_json(journal.prior)
    backend = prior_choice.emulator(graph, options.strategy.prior, listener)
    if backend is None:
        return None
    output, journaled = options.output, None
    if output:
        journaled = priors.PriorJournal(lambda header: journal_path(output, journal_key(header), prior=True),
                                        options.journal.restart, options.journal.retry_crashed)
    found = priors.run(graph, backend, judge, prof, listener, journaled)
    strategy = options.strategy
    if found is not None and strategy.minimum is None and strategy.objective == "nodes":  # the default step there
        found = replace(found, improvement=improve.on_prior(list(judge.space.candidates), found,
                                                            frozenset(prof.order[:prof.suspects]), listener.stage))
    if found is not None and journal is not None:  # with the step's set: a resumed search starts there too
        journal.record_prior(found.to_json())
    return found


def _wanted(graph: Graph, prof: Profile, options: SearchOptions, chosen: Backend, samples: list[Sample],
            listener: Listener) -> minima.Wanted | None:
    """What ``--minimum`` and ``--objective`` ask (None: neither); ``--objective cost`` alone implies ``--minimum``."""
    strategy = options.strategy
    if strategy.minimum is None and strategy.objective == "nodes":
        return None
    return minima.wanted(minima.AUTO if strategy.minimum is None else strategy.minimum, strategy.objective, graph, prof,
                         chosen, samples, listener.stage)


def _backend_info(chosen: Backend, oracle: Oracle, noise: dict) -> dict:
    """The override JSON's "backend", beyond its name: versions, what it says of itself, build noise."""
    info = {"versions": chosen.versions(), **chosen.describe()}
    if isinstance(chosen, PlanJudge):  # how its verdicts came: from outputs compared here, or bare (an exit code)
        judged = [e for e in oracle.history if not e.error]
        info["verdicts_from"] = {kind: sum(e.verdict_from == kind for e in judged) for kind in (OUTPUTS, EXIT_CODE)}
    if noise:
        info["build_noise"] = noise
    return info
