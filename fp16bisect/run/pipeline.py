"""``search`` end to end: model + samples -> backend and oracle -> (the prior) -> search -> ``Outcome``.

Orchestration only: how it runs comes typed in ``SearchOptions`` (``run/options.py``); the search order from
``ranking.py``, the build-noise policy from ``build_noise.py``, the override JSON from ``override_json.py`` (built
from the ``Outcome``), the prior from ``prior.py``.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from fp16bisect.strategy import prior as priors
from fp16bisect.strategy import improve
from fp16bisect.strategy import minimum as minima
from fp16bisect.strategy import blocks, constraints, hitting_solver, prior_choice, ranking
from fp16bisect.strategy.agreement import agreement
from fp16bisect.strategy.alternatives import Alternatives
from fp16bisect.run.coverage import prepare_samples, searched, with_forced
from fp16bisect.run.override_json import overrides_json
from fp16bisect.run.paths import journal_path
from fp16bisect.run.two_states import stepper, two_states
from fp16bisect.backends import Options, PlanJudge, make_backend
from fp16bisect.strategy.build_noise import build_noise
from fp16bisect.errors import ToleranceUnreachable, UsageError
from fp16bisect.evaluation.journal import Journal, journal_key, samples_digest
from fp16bisect.model.graph import Graph, notes
from fp16bisect.model.plan_states import is_mark
from fp16bisect.model import shapes
from fp16bisect.model.profile import profile
from fp16bisect.model.samples import sample_shapes, add_fp32_references, load_samples
from fp16bisect.evaluation.oracle import EXIT_CODE, OUTPUTS, Oracle
from fp16bisect.run.options import SearchOptions
from fp16bisect.run.outcome import Listener, Outcome
from fp16bisect.strategy.prior import LABEL, Prior
from fp16bisect.algorithm.progress import Phase
from fp16bisect.algorithm.search import Hooks, SearchResult, Step, search
from fp16bisect.tolerance import Tolerance

__all__ = ["Listener", "Outcome", "prepare", "search_model"]


def prepare(model: str, inputs: list[str], references: list[str] | None, options: SearchOptions,
            listener: Listener | None = None, *, defer_references: bool = False):
    """Model, samples, backend and oracle, as ``options`` say. With ``options.output``, the FP16 copies of the
    model's weights are written, when first needed, to a temporary work directory beside it (default: the
    system's temporary directory), removed at exit; and evaluations are journaled beside it, a journal of the
    same search replayed (``restart`` discards it; a plan the process died evaluating is not run again, it counts
    as could-not-evaluate, unless ``retry_crashed``). ``defer_references``: the caller computes the FP32
    references (with the FP32 profile), unless evaluations run elsewhere (they take the samples now).
    ``parallel``: the oracle evaluates independent plans on worker processes or Ray tasks. Use both as
    ``with backend, oracle:``: the backend frees what it holds, the oracle stops its workers."""
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
        raise
    oracle = Oracle(chosen, samples, tolerance, graph.judged_output_names(), repeats=options.repeats, journal=journal,
                    executor=executor)
    return graph, chosen, oracle


def _shared(options: Options, samples, tolerance: Tolerance, listener: Listener) -> Options:
    """``options`` with what every backend may use, where the caller did not set it."""
    shared: dict[str, Any] = {
        "input_shapes": sample_shapes(samples),
        "notify": listener.stage,  # tensorrt: ignored FP32 pins, the typing fallback, said once
        "progress": listener.stage,  # the command backend says which command runs on which plan
        "tolerance": tolerance.to_json(),  # ... and writes it into each plan's override file
    }
    return replace(options, **{k: v for k, v in shared.items() if getattr(options, k) is None})


def _journal(graph, chosen, given: str, options: SearchOptions, listener: Listener) -> Journal | None:
    """The journal of this search beside ``options.output`` (None: not journaled), replayed when it holds
    evaluations."""
    if not options.output:
        return None
    # another judge (the command backend: another command) is another search: its verdicts are not replayed
    header = journal_header(graph, chosen.journal_name, options.tolerance, given, options.repeats,
                            headroom=options.headroom, profile=options.backend_options.input_shapes,
                            accumulate=options.accumulate)
    if graph.precision.name != "fp16":  # another precision is another search (FP16 journals keep their header)
        header["precision"] = graph.precision.name
    if options.keep_fp32 or options.keep_fp16:  # another search's plans (and prior) are over other candidates
        header["constraints"] = {"keep_fp32": list(options.keep_fp32), "keep_fp16": list(options.keep_fp16)}
    # keyed by what the search is: another search at this -o journals beside it; one journaled before journals
    # were keyed resumes from its old file
    path = journal_path(options.output, journal_key(header))
    if not Path(path).exists() and Journal.belongs(journal_path(options.output), header):
        path = journal_path(options.output)
    journal = Journal(path, header, restart=options.restart, retry_crashed=options.retry_crashed,
                      keep=options.keep_journal)
    if journal.entries:
        listener.stage(f"resuming: {len(journal.entries)} evaluation(s) replayed from {path}")
    if journal.crashed and not options.retry_crashed:
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
    if options.prior not in prior_choice.CHOICES:
        raise UsageError(f"unknown prior {options.prior!r}: use one of {', '.join(prior_choice.CHOICES)}")
    listener = listener or Listener()
    start = time.perf_counter()
    options = options.beside_output()
    graph, chosen, oracle = prepare(model, inputs, references, options, listener, defer_references=True)
    with chosen, oracle:  # the backend's resources and the oracle's workers live until the search ends
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
        forced = prepare_samples(graph, oracle, prof, options.headroom, listener)
        steer = constraints.resolve(graph, options.keep_fp32, options.keep_fp16)
        # the candidates the search orders: the forced and the constrained nodes are not searched
        order = constraints.steer(oracle, searched(prof, forced), steer, listener.stage)
        found, picked, least = None, None, None
        if prior_choice.wanted(options.prior, chosen) and options.group_by is None:
            found = _prior(graph, oracle, order, listener, options)
        # with a prior, the noise is measured on its set, the first plan the search evaluates (its build is kept)
        noise = build_noise(chosen, oracle.samples, options.tolerance, options.noise_ok, listener, oracle.journal,
                            plan=frozenset(found.fp32) if found is not None else frozenset())
        wanted = _wanted(graph, prof, options, chosen, oracle.samples, listener)
        try:
            if options.accumulate == "fp16":
                result, least = two_states(graph, chosen, oracle, listener, order, found, wanted, _search)
            elif options.group_by is not None:
                result, picked = _grouped(graph, chosen, oracle, listener, order, options.group_by)
            else:
                result, least = _search(graph, chosen, oracle, listener, order, found, wanted)
        except ToleranceUnreachable as e:
            raise constraints.unreachable(steer, e) from None
        result = with_forced(constraints.constrained(result, steer), forced)
        info = _backend_info(chosen, oracle, noise)
        outcome = Outcome(graph, options.tolerance, chosen.name, result, oracle, prof, time.perf_counter() - start,
                          prior=found, output=options.output, backend_info=info, forced=forced,
                          environment=chosen.environment(), evaluation_word=chosen.evaluation_word,
                          headroom=options.headroom, accumulate=options.accumulate, minimum=least,
                          constraints=steer, blocks=picked,
                          shapes=shapes.coverage(graph, oracle.samples, options.backend_options.input_shapes))
        outcome.overrides = overrides_json(outcome)
        return outcome


def _prior(graph, oracle, prof, listener, options: SearchOptions) -> Prior | None:
    """The emulator's search (or its result, read back from this backend's journal when resuming)."""
    journal = oracle.journal
    if journal is not None and journal.prior is not None:
        listener.stage(f"prior: the emulator's result read from {journal.path} (not run again)")
        return Prior.from_json(journal.prior)
    backend = prior_choice.emulator(graph, options.prior, listener)
    if backend is None:
        return None
    output, journaled = options.output, None
    if output:
        journaled = priors.PriorJournal(lambda header: journal_path(output, journal_key(header), prior=True),
                                        options.restart, options.retry_crashed)
    found = priors.run(graph, backend, oracle, prof, listener, journaled)
    if found is not None and options.minimum is None and options.objective == "nodes":  # the default step there
        ids = [n.id for n in graph.candidates if n.id in set(prof.order) and n.id not in oracle.forced]
        found.improvement = improve.on_prior(ids, found, frozenset(prof.order[:prof.suspects]), listener.stage)
    if found is not None and journal is not None:  # with the step's set: a resumed search starts there too
        journal.record_prior(found.to_json())
    return found


def _wanted(graph, prof, options: SearchOptions, chosen, samples, listener) -> minima.Wanted | None:
    """What ``--minimum`` and ``--objective`` ask (None: neither); ``--objective cost`` alone implies ``--minimum``."""
    if options.minimum is None and options.objective == "nodes":
        return None
    return minima.wanted(minima.AUTO if options.minimum is None else options.minimum, options.objective, graph, prof,
                         chosen, samples, listener.stage)


def _search(graph, chosen, oracle, listener, prof, prior, minimum: minima.Wanted | None = None):
    """The search's result (and, with ``minimum``, the smallest set's search: ``_least``); an all-FP32 plan that
    fails or cannot be evaluated is an error said here."""
    step = stepper(chosen, oracle, listener)
    recheck = None if chosen.deterministic else lambda plan: oracle.evaluate(plan, 1).verdict
    common = dict(
        test_many=oracle.test_many if oracle.width > 1 else None,
        width=oracle.width,
    )
    free = set(prof.order)  # without the --keep-fp16 nodes (and the forced ones)
    ids = [n.id for n in graph.candidates if n.id in free and n.id not in oracle.forced]
    if minimum is not None:  # said before the search, not after it
        hitting_solver.require_solver(len(ids))
    least = None
    if prior is not None:
        evidence = improve.Evidence(prior.order, frozenset(prof.order[:prof.suspects]), prior.measured)
        least = _least_on_prior(ids, prior, minimum, evidence, chosen.name, listener)
        start = tuple(least.fp32) if least is not None else prior.fp32
        listener.stage(f"on the {chosen.name} backend: evaluating the emulator's {len(start)} node(s), then "
                       "certifying each (or continuing from them if they fail)")
        result = search(ids, oracle, order=prior.order, start=start, hooks=Hooks(
            alternatives=Alternatives(graph, prior, oracle, listener), recheck=recheck, on_step=step),
            **common)
        listener.stage(agreement(result, chosen.name))
    else:
        listener.stage(f"searching on the {chosen.name} backend ({prof.suspects} suspect(s) first)")
        reorder = ranking.reorder_by_effect(graph, chosen, oracle, prof, listener)
        result = search(ids, oracle, order=prof.order, suspects=prof.suspects,
                        hooks=Hooks(reorder=reorder, recheck=recheck, on_step=step), **common)
        if result.status == "found":  # --minimum's search, else the default step (strategy/improve.py)

            def certify(start, seen) -> SearchResult:  # steps already evaluated are not said again
                def said(s: Step, progress: dict) -> None:
                    if s.plan | oracle.forced not in seen:
                        step(s, progress)

                return search(ids, oracle, order=prof.order, start=start,
                              hooks=Hooks(recheck=recheck, on_step=said), **common)

            evidence = improve.Evidence(getattr(reorder, "order", None) or prof.order,
                                        frozenset(prof.order[:prof.suspects]), getattr(reorder, "measured", None))
            result, least = _least(ids, oracle, result, minimum, evidence, chosen.name, listener, certify)
    said = {frozenset(m for m in oracle.forced if is_mark(m)): "the all-FP16 plan",
            **({frozenset(prior.fp32): "the emulator's set"} if prior else {})}
    for plan, what in said.items():
        evaluation = oracle.memo.get(plan)
        if evaluation is not None and evaluation.reason is not None:
            listener.stage(f"{what} could not be evaluated on the {chosen.name} backend ({evaluation.reason.kind}: "
                           f"{evaluation.error.splitlines()[0]}); the search went on around it, not counting it")
    if result.status == "fp32_fails":
        _refuse_fp32_fails(ids, chosen, oracle)
    return result, least


def _grouped(graph, chosen, oracle, listener, prof, how: blocks.Grouping):
    """``--group-by``: the blocks to keep in FP32, then the nodes inside them (``strategy/blocks.py``)."""
    free = set(prof.order)
    ids = [n.id for n in graph.candidates if n.id in free and n.id not in oracle.forced]
    grouped = blocks.blocks(graph, ids, how)
    lone = sum(1 for b, nodes in grouped.items() if nodes == (b,))
    listener.stage(f"--group-by {how}: {len(ids)} candidate(s) in {len(grouped)} block(s)"
                   + (f" ({lone} node(s) {'outside any function call' if how.kind == blocks.FUNCTION else 'with no scope'}, "
                      "each its own block)" if lone else "")
                   + "; searching the blocks to keep in FP32, then the nodes inside them")
    step = stepper(chosen, oracle, listener)
    result, picked = blocks.search_blocks(grouped, oracle, prof.order, prof.suspects, step, width=oracle.width,
                                          reorder=ranking.reorder_by_effect(graph, chosen, oracle, prof, listener),
                                          test_many=oracle.test_many if oracle.width > 1 else None)
    if result.status == "fp32_fails":
        _refuse_fp32_fails(ids, chosen, oracle)
    return result, picked


def _least_on_prior(ids, prior: Prior, minimum: minima.Wanted | None, evidence: improve.Evidence, judge: str,
                    listener):
    """On an expensive judge: ``--minimum``'s search on the emulator's oracle, its set the start set the judge
    certifies (else the default step's, which ran with the prior: ``_prior``)."""
    if minimum is None:
        return improve.Improvement.from_json(prior.improvement, judge) if prior.improvement else None
    if prior.oracle is None or prior.status != "found":
        if prior.oracle is None:
            listener.stage("--minimum: the emulator's evaluations were read back, not kept (resuming): the judge "
                           "certifies the emulator's 1-minimal set; rerun with --restart to search the minimum")
        return None
    listener.stage(f"--minimum: searching the {_what(minimum)} passing set on the emulator (up to "
                   f"{minima.budget(minimum.setting, prior.evaluations)} evaluation(s))")
    return minima.least(ids, prior.oracle, prior.fp32, minimum, evidence, on=(LABEL, judge),
                        evaluations=prior.evaluations, say=listener.stage)


def _what(minimum: minima.Wanted) -> str:
    return "cheapest (estimated cost)" if minimum.costs else "smallest"


def _least(ids, oracle, first: SearchResult, minimum: minima.Wanted | None, evidence: improve.Evidence, judge: str,
           listener, certify):
    """``--minimum`` on the judge itself: its search on the judge's oracle, seeded with the search's evaluations
    (else the default step, ``improve.py``); a smaller set is certified (``certify(start)``: each single removal
    evaluated). The result counts every evaluation."""
    before = len(oracle.history)
    phase: Phase = "minimum" if minimum is not None else "improve"
    least: minima.Least | improve.Improvement | None
    if minimum is None:
        least = improve.step(ids, oracle, first.fp32, evidence, evaluations=first.evaluations, on=(judge, judge),
                             say=listener.stage)
    else:
        listener.stage(f"--minimum: searching the {_what(minimum)} passing set (up to "
                       f"{minima.budget(minimum.setting, first.evaluations)} evaluation(s))")
        least = minima.least(ids, oracle, first.fp32, minimum, evidence, on=(judge, judge),
                             evaluations=first.evaluations, say=listener.stage)
    result, phases, looped = first, {}, len(oracle.history) - before
    if least is not None and least.fp32 != frozenset(first.fp32):
        again = certify(least.fp32, set(oracle.memo))
        least = least.certified(again.fp32)  # a removal passing refutes the loop's proof
        phases = {s.plan: s.phase for s in again.trace}
        result = replace(again, contradictions=first.contradictions + again.contradictions, agreed=None, added=(),
                         dropped=())
    steps = [Step(len(first.trace) + i, e.plan - oracle.forced, e.verdict, phase if i <= looped else
                  phases.get(e.plan - oracle.forced, "minimality"), first.rounds + i)
             for i, e in enumerate(oracle.history[before:], 1)]  # the loop's and the certification's, in order
    return replace(result, trace=first.trace + steps, evaluations=first.evaluations + len(steps),
                   rounds=first.rounds + len(steps)), least


def _refuse_fp32_fails(ids, chosen, oracle) -> None:
    """The all-FP32 plan (of the searched ``ids``) failed: bad input (it could not be evaluated), or a tolerance
    even FP32 misses."""
    everything = oracle.memo[frozenset(ids) | oracle.forced]
    if everything.reason is not None:
        raise UsageError(f"the all-FP32 plan could not be {chosen.evaluation_word} on the {chosen.name} backend: "
                         f"{everything.error}")
    if not everything.metrics:  # judged by a command's exit code: no numbers, only what it said
        raise ToleranceUnreachable(
            f"the command judged even the all-FP32 plan failing ({everything.detail}): check the command "
            "(fp16bisect search --keep-plans keeps each plan's files, stdout.txt and stderr.txt to run it by hand)"
        )
    raise ToleranceUnreachable(unreachable(chosen.name, everything, oracle.tolerance))


def unreachable(backend: str, everything, tolerance) -> str:
    """What a search and a check say when the all-FP32 plan (``everything``, with metrics) misses the tolerance."""
    worst = max((m for m in everything.metrics if not m.passed), key=lambda m: m.excess)
    fix = (
        "check --reference and the inputs"
        if worst.nonfinite or worst.excess <= 1  # NaN/inf, or a cosine/mismatch rule failed
        else "give --atol above 0 or check --reference" if math.isinf(worst.excess)  # FP32 differs where it is 0
        else f"loosen --atol/--rtol by at least {worst.excess:.3g}x or check --reference"
    )
    return f"the tolerance is unreachable even in FP32 on the {backend} backend: {worst.why(tolerance)}; {fix}"


def _backend_info(chosen, oracle, noise) -> dict:
    """The override JSON's "backend", beyond its name: versions, what it says of itself, build noise."""
    info = {"versions": chosen.versions(), **chosen.describe()}
    if isinstance(chosen, PlanJudge):  # how its verdicts came: from outputs compared here, or bare (an exit code)
        judged = [e for e in oracle.history if not e.error]
        info["verdicts_from"] = {kind: sum(e.verdict_from == kind for e in judged) for kind in (OUTPUTS, EXIT_CODE)}
    if noise:
        info["build_noise"] = noise
    return info
