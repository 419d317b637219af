"""The Python API's functions: ``search``, ``check``, ``scan`` and ``apply``, what the command line runs.

Each takes a model (a path or an ``onnx.ModelProto``) and samples (an ``.npz`` path, a directory of them, a dict
of arrays, or a list or iterable of those), returns a typed result (``results.py``) and raises
``fp16bisect.Error`` subclasses (``UsageError`` for bad input), never ``SystemExit``. ``run_search`` and
``run_check`` take the options already typed (``SearchOptions``, ``CheckOptions``): the command line and batch
call those. ``compare``, ``migrate``, ``write_report`` (``tools.py``) and ``batch`` (``manifest.py``) complete
what the command line has.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Union

from fp16bisect.api import inputs
from fp16bisect.api.results import ApplyResult, CheckResult, Node, ScanNode, ScanResult, ScanRow, SearchResult
from fp16bisect.algorithm.budget import INTERRUPT
from fp16bisect.errors import Interrupted, UsageError
from fp16bisect.model import weights
from fp16bisect.model.plan_states import accumulation, is_mark
from fp16bisect.model.precision import precision_of
from fp16bisect.run.options import CheckOptions, SearchOptions
from fp16bisect.run.outcome import Listener
from fp16bisect.tolerance import DEFAULT_ATOL, DEFAULT_RTOL, Accept, GivenTolerance, PerOutput

if TYPE_CHECKING:
    import onnx  # only when a ModelProto is given (inputs.model_file)

Model = Union[str, Path, "onnx.ModelProto"]
Samples = Union[str, Path, Mapping, Iterable]
Shapes = Union[str, Mapping, None]  # trtexec's "name:1x3x224x224,..." or {input name: shape}
Progress = Union[Callable[[str], None], Listener, None]

__all__ = ["apply", "check", "run_check", "run_search", "scan", "search"]


def search(model: Model, samples: Samples, *, reference: Samples | None = None, atol: PerOutput = DEFAULT_ATOL,
           rtol: PerOutput = DEFAULT_RTOL, min_cosine: PerOutput = None, max_mismatch: PerOutput = 0.0,
           error_stat: PerOutput = None, argmax: PerOutput = None, topk: PerOutput = None, accept: Accept = None,
           backend: str = "auto", check: str | None = None, keep_plans: bool = False, typing: str = "strong",
           opt_level: int | None = None, timing_cache: str | None = None, noise_ok: bool = False,
           output: str | Path | None = None, jobs: int = 1, devices: str | list | None = None,
           ray: str | None = None, repeats: int = 1, prior: str = "auto", restart: bool = False,
           retry_crashed: bool = False, headroom: float | None = None, min_shapes: Shapes = None,
           opt_shapes: Shapes = None, max_shapes: Shapes = None, precision: str = "fp16", objective: str = "nodes",
           progress: Progress = None, keep_journal: bool = False, minimum: int | str | None = None,
           accumulate: str = "fp32", keep_fp32: Iterable[str] = (), keep_fp16: Iterable[str] = (),
           group_by: str | None = None) -> SearchResult:
    """Find the smallest set of nodes to keep in FP32 so that the model, the rest in FP16, meets the tolerance.

    Args:
        model: The FP32 ONNX model: a path, or an ``onnx.ModelProto`` (saved to a temporary file for the search,
            removed after; the override JSON then names it ``model.onnx``).
        samples: The inputs: an ``.npz`` path (one array per model input), a directory (every ``*.npz`` in it,
            sorted by name), a dict ``{input name: array}`` (one sample), or a list or iterable of those.
        reference: Expected outputs, one per sample, in the same forms (default: an FP32 ONNX Runtime run).
        atol: Absolute tolerance per element, ``|a - b| <= atol + rtol * |b|``; it, ``rtol``, ``min_cosine``,
            ``max_mismatch``, ``error_stat``, ``argmax`` and ``topk`` as the flags: a value, a dict ``{output:
            value}`` (key None: every output) or the flags' strings (docs/tolerance.md); ``accept``: a function
            ``(outputs, reference) -> bool`` run per sample, ANDed (picklable for ``jobs``/``ray``).
        backend: ``"auto"`` (the default, as on the command line: ``"tensorrt"`` when TensorRT, Polygraphy and a
            GPU are present, else ``"emulate"``), ``"emulate"`` (FP16 emulated on ONNX Runtime CPU),
            ``"tensorrt"`` or ``"command"``.
        check: With ``backend="command"``: the shell command that judges a plan (see ``fp16bisect search --help``).
        keep_plans: With ``backend="command"``: keep each plan's files. typing: TensorRT: ``"strong"`` or ``"weak"``.
        opt_level: TensorRT builder optimisation level, 0 to 5; timing_cache: its file (default: beside ``output``).
        noise_ok: Search even if two builds of the all-FP16 engine differ beyond the tolerance.
        output: Write the override JSON there, and journal the evaluations beside it, so the same search run
            again after an interruption resumes (as ``fp16bisect search -o``). None: nothing written.
        jobs: Plans evaluated at once; devices: GPU ids, one worker each (``"0,1"`` or ``[0, 1]``).
        ray: Evaluate as Ray tasks on the cluster at this address (``""``: a local Ray instance).
        repeats: Evaluations per plan; all must pass.
        prior: ``"auto"``, ``"emulate"`` or ``"none"``: search on the emulator first, then certify on ``backend``.
        restart: Discard an earlier run's journal instead of resuming it; retry_crashed: rerun plans it died on.
        keep_journal: Keep the journal once the search has finished (else removed when the JSON is written).
        headroom: As ``--headroom F``: a tensor whose FP32 peak on any sample exceeds 65504/F counts as an
            overflow; its writer and readers stay in FP32 in every plan, and the search minimises the rest.
        min_shapes: As ``--min-shapes``: the deployment's smallest input shapes, trtexec's text
            (``"x:1x8x64"``) or a dict ``{input name: shape}``; with ``max_shapes`` (and ``opt_shapes``), the
            profile the tensorrt backend builds with.
        opt_shapes: As ``--opt-shapes``: the deployment's most frequent input shapes (``max_shapes``: largest).
        precision: The low precision, ``"fp16"`` or ``"bf16"`` (bfloat16: FP32's range, 8 significant bits).
        progress: A function receiving one line of text per event (e.g. ``print``), or a ``Listener``.
        minimum: As ``--minimum [N]`` (``True``: its default budget); ``objective``: as ``--objective nodes|cost``.
        accumulate: As ``--accumulate``: ``"fp32"`` (the default) or ``"fp16"`` (FP16 nodes add in FP16 too).
        keep_fp32: As ``--keep-fp32`` (patterns); ``keep_fp16``, ``group_by``: as ``--keep-fp16``, ``--group-by``.

    Returns:
        The nodes to keep in FP32 and how the search knows (``SearchResult``).

    Raises:
        UsageError: Bad input (a missing file, a sample that does not fit the model, a bad keyword value).
        ToleranceUnreachable: Even the all-FP32 plan misses the tolerance.
        Interrupted: Ctrl-C (a ``KeyboardInterrupt``), the smallest set seen to pass written: ``result`` holds it.

    Examples:
        >>> import fp16bisect
        >>> result = fp16bisect.search("sample_models/transformer_block.onnx",
        ...                            "sample_models/transformer_block.npz")
        >>> sorted(n.name for n in result.fp32_nodes)
        ['ln1_square', 'ln1_var']
    """
    options = SearchOptions.of(
        atol=atol, rtol=rtol, min_cosine=min_cosine, max_mismatch=max_mismatch, error_stat=error_stat,
        argmax=argmax, topk=topk, accept=accept, backend=backend, check=check, keep_plans=keep_plans, typing=typing,
        opt_level=opt_level, timing_cache=timing_cache, min_shapes=min_shapes, opt_shapes=opt_shapes,
        max_shapes=max_shapes, noise_ok=noise_ok, repeats=repeats, jobs=jobs, devices=devices, ray=ray,
        output=None if output is None else str(output), restart=restart, retry_crashed=retry_crashed,
        keep_journal=keep_journal, prior=prior, headroom=headroom, precision=precision, objective=objective,
        minimum=minimum, accumulate=accumulate, keep_fp32=keep_fp32, keep_fp16=keep_fp16, group_by=group_by)
    with _own_work_directories():
        return _outliving(lambda: run_search(model, samples, options, reference=reference, progress=progress))


def _outliving(searched: Callable[[], SearchResult]) -> SearchResult:
    """``searched()``'s result (or the one an ``Interrupted`` holds), its samples kept: it outlives the work
    directory the search ran in."""
    result: SearchResult | None = None
    try:
        result = searched()
        return result
    except Interrupted as stop:
        result = stop.result
        raise
    finally:
        for sample in result.outcome.oracle.samples if result is not None else ():
            sample.keep()


def run_search(model: Model, samples: Samples, options: SearchOptions, *, reference: Samples | None = None,
               progress: Progress = None) -> SearchResult:
    """``search`` with its options typed (``SearchOptions``), as the command line builds them.

    With ``options.output``, the override JSON is written there once the search ends (then its journals are
    removed, unless ``options.keep_journal`` or a budget ended it early: the same call resumes from them). Ctrl-C
    ends the search with the smallest set seen to pass, written, then raises ``Interrupted`` (a
    ``KeyboardInterrupt``) holding the result.
    """
    from fp16bisect.artifacts.files import check_writable, write_json
    from fp16bisect.run import pipeline
    from fp16bisect.run.paths import remove_journals

    if options.output:
        check_writable(options.output)  # before the search, not after an hour of it
    entries = inputs.sample_entries(samples)
    references = _references(reference, entries)
    if not inputs.is_path(model):  # the override JSON and its commands name it model.onnx, not the temporary file
        options = replace(options, model_name=inputs.IN_MEMORY_MODEL)
    with inputs.model_file(model) as path:
        outcome = pipeline.search_model(path, entries, references, options, inputs.listener(progress))
    if options.output:
        write_json(options.output, outcome.overrides.to_json())
        remove_journals(outcome)
    result = _search_result(outcome)
    stop = outcome.result.stopped
    if stop is not None and stop.cause == INTERRUPT:  # Ctrl-C stays an interrupt, with the answer written
        raise Interrupted(result)
    return result


def _references(reference, entries: list) -> list | None:
    if reference is None:
        return None
    return inputs.sample_entries(reference, "reference")  # matched to the samples by load_samples


def _search_result(outcome) -> SearchResult:
    graph, result = outcome.graph, outcome.result
    fp16 = outcome.fp16
    return SearchResult(
        fp32_nodes=[Node.of(graph.by_id[i]) for i in result.fp32 if not is_mark(i)],
        fp32_accumulate_nodes=list(outcome.overrides.fp32_accumulate_nodes),
        minimal=result.minimal, evaluations=result.evaluations, passed=outcome.final.passed, status=result.status,
        backend=outcome.backend, tolerance=outcome.tolerance, with_overrides=outcome.final.worst(),
        all_fp16=fp16.worst() if fp16 is not None else {}, seconds=outcome.seconds, output=outcome.output,
        stopped=result.stopped.label if result.stopped is not None else None, outcome=outcome,
        overrides=outcome.overrides)


def check(model: Model, samples: Samples, overrides=None, *, reference: Samples | None = None,
          atol: PerOutput = None, rtol: PerOutput = None, min_cosine: PerOutput = None,
          max_mismatch: PerOutput = None, error_stat: PerOutput = None, argmax: PerOutput = None, topk: PerOutput = None, accept: Accept = None,
          backend: str = "auto", check: str | None = None, keep_plans: bool = False,
          typing: str = "strong", opt_level: int | None = None, timing_cache: str | None = None, jobs: int = 1,
          devices: str | list | None = None, ray: str | None = None, headroom: float | None = None,
          min_shapes: Shapes = None, opt_shapes: Shapes = None, max_shapes: Shapes = None,
          precision: str | None = None, progress: Progress = None, strict_environment: bool = False,
          accumulate: str | None = None) -> CheckResult:
    """Does the model meet the tolerance in FP16, with the override nodes (if any) kept in FP32? A CI gate.

    A failing check is a result (``passed`` False), not an exception.

    Args:
        model: The FP32 ONNX model: a path or an ``onnx.ModelProto``.
        samples: The inputs, in the forms ``search`` takes.
        overrides: The nodes to keep in FP32: an override JSON path, a ``SearchResult``, or the JSON as a dict
            (None: all-FP16). A file made for another version of the model is checked with the nodes that still
            exist.
        reference: Expected outputs, one per sample (default: an FP32 ONNX Runtime run).
        atol: Absolute tolerance; ``rtol``, ``min_cosine``, ``max_mismatch`` as in ``search``. Each left None is
            the one ``overrides`` records (the tolerance its search met), else the default (0.01, 0.01, none, 0);
            ``CheckResult.tolerance_from`` says which.
        rtol: Relative tolerance.
        min_cosine: Also require this cosine similarity per output.
        max_mismatch: Fraction of elements allowed outside the tolerance.
        error_stat: As in ``search`` (so are ``argmax``, ``topk``, ``accept``; and each of the tolerance's values
            may be per output, as there). ``accept`` is never read from the override file.
        backend: ``"auto"`` (the default), ``"emulate"``, ``"tensorrt"`` or ``"command"``.
        check: With ``backend="command"``: the shell command that judges the plan.
        keep_plans: With ``backend="command"``: keep the plan's files.
        typing: TensorRT: ``"strong"`` or ``"weak"``.
        opt_level: TensorRT builder optimisation level, 0 to 5.
        timing_cache: TensorRT timing cache file.
        jobs: Plans evaluated at once (2 evaluates the all-FP32 plan alongside).
        devices: GPU ids, one worker each.
        ray: Evaluate as Ray tasks on the cluster at this address.
        headroom: As ``--headroom F``: fail when a tensor computed in FP16 has an FP32 peak above 65504/F on any
            sample (None: the ``--headroom`` the override file's search was given, else none).
        min_shapes: The deployment's input shape profile, as in ``search``; ``opt_shapes``, ``max_shapes`` too.
        opt_shapes: As ``--opt-shapes``.
        max_shapes: As ``--max-shapes``.
        precision: ``"fp16"`` or ``"bf16"`` (None: the override file's, else fp16); an override file made for
            the other one is refused.
        progress: A function receiving one line of text per event, or a ``Listener``.
        strict_environment: Fail (``passed`` False) when the override file was verified on another backend,
            GPU or TensorRT version (see ``CheckResult.drift``), or records no environment; needs ``overrides``.
        accumulate: ``"fp32"`` or ``"fp16"``, as ``--accumulate`` (None: the override file's, else fp32).

    Returns:
        The verdict and the metrics per output (``CheckResult``).

    Raises:
        UsageError: Bad input, or an override file made for another model.

    Examples:
        >>> import fp16bisect
        >>> model, data = "sample_models/transformer_block.onnx", "sample_models/transformer_block.npz"
        >>> fp16bisect.check(model, data).passed
        False
        >>> fp16bisect.check(model, data, overrides=fp16bisect.search(model, data)).passed
        True
    """
    options = CheckOptions.of(
        atol=atol, rtol=rtol, min_cosine=min_cosine, max_mismatch=max_mismatch, error_stat=error_stat,
        argmax=argmax, topk=topk, accept=accept, backend=backend, check=check, keep_plans=keep_plans, typing=typing,
        opt_level=opt_level, timing_cache=timing_cache, min_shapes=min_shapes, opt_shapes=opt_shapes,
        max_shapes=max_shapes, jobs=jobs, devices=devices, ray=ray, headroom=headroom, precision=precision,
        strict_environment=strict_environment, accumulate=accumulate)
    with _own_work_directories():
        result = run_check(model, samples, options, overrides=overrides, reference=reference, progress=progress)
        for sample in result.outcome.samples:  # the result outlives the work directory: its samples too
            sample.keep()
        return result


def run_check(model: Model, samples: Samples, options: CheckOptions, *, overrides=None,
              reference: Samples | None = None, progress: Progress = None, hint: str | None = None) -> CheckResult:
    """``check`` with its options typed (``CheckOptions``: the tolerance given, the backend, its options,
    parallel, headroom, precision, strict_environment), as the command line and batch build them.

    ``hint``: the search command the verdict line suggests when the check fails.
    """
    from fp16bisect.diagnose.preflight import check_model, verdict

    entries = inputs.sample_entries(samples)
    references = _references(reference, entries)
    with inputs.model_file(model) as path, inputs.overrides_file(overrides) as file:
        outcome = check_model(path, entries, references, file, options, inputs.listener(progress))
    use = outcome.overrides
    return CheckResult(
        passed=outcome.passed, outputs=outcome.evaluation.worst(), metrics=list(outcome.evaluation.metrics),
        fp32_passes=None if outcome.fp32 is None else outcome.fp32.passed,
        nodes=[Node.of(outcome.graph.by_id[n]) for n in use.nodes] if use else [],
        accumulating=[Node.of(outcome.graph.by_id[n]) for n in use.accumulating] if use else [],
        missing=list(use.missing) if use else [], backend=outcome.backend, tolerance=outcome.tolerance,
        tolerance_from=outcome.tolerance_from, verdict=verdict(outcome, hint or "fp16bisect.search(model, samples)"),
        drift=outcome.drift, outcome=outcome)


def scan(model: Model, samples: Samples, *, precision: str = "fp16", progress: Progress = None) -> ScanResult:
    """Rank the tensors and weights FP16 would overflow or flush, from one FP32 run (seconds; no search).

    Args:
        model: The FP32 ONNX model: a path or an ``onnx.ModelProto``.
        samples: The inputs, in the forms ``search`` takes.
        precision: ``"fp16"`` or ``"bf16"``: whose limits the headroom is measured against.
        progress: A function receiving one line of text per event, or a ``Listener``.

    Returns:
        The risky tensors and the candidates in the order the search would suspect them (``ScanResult``).

    Raises:
        UsageError: Bad input.

    Examples:
        >>> import fp16bisect
        >>> found = fp16bisect.scan("sample_models/transformer_block.onnx", "sample_models/transformer_block.npz")
        >>> [n.name for n in found.nodes[:2]]
        ['ln1_square', 'ln1_var']
    """
    from fp16bisect.diagnose.scan import scan_model

    entries = inputs.sample_entries(samples)
    with _own_work_directories(), inputs.model_file(model) as path:
        graph, data = scan_model(path, entries, inputs.listener(progress), precision=precision_of(precision))
    return ScanResult(rows=[ScanRow.from_json(row) for row in data["tensors"]],
                      nodes=[ScanNode.from_json(n) for n in data["nodes"]], suspects=data["suspects"], _data=data,
                      graph=graph)


def apply(model: Model, overrides, output: str | Path, *, verify: bool | str = False, samples: Samples | None = None,
          reference: Samples | None = None, atol: PerOutput = None, rtol: PerOutput = None,
          min_cosine: PerOutput = None, max_mismatch: PerOutput = None, fp16_io: bool = False,
          error_stat: PerOutput = None, argmax: PerOutput = None, topk: PerOutput = None, accept: Accept = None,
          force: bool = False, keep_fp32: Iterable[str] = (), precision: str | None = None,
          progress: Progress = None, shown: Callable | None = None, accumulate: str | None = None) -> ApplyResult:
    """Write the mixed-precision ONNX model the overrides describe (for strongly typed TensorRT builds).

    The file is checked with ``onnx.checker`` (full check) before it is returned.

    Args:
        model: The FP32 ONNX model the overrides were searched on: a path or an ``onnx.ModelProto``.
        overrides: An override JSON path, a ``SearchResult``, or the JSON as a dict.
        output: Where to write the mixed model (``.onnx``).
        verify: ``True`` (or ``"storage"``): run the written model on ``samples`` against the references;
            ``"strict"``: also run the file in ``onnx.reference`` (FP16 outputs, sums in FP32: a second opinion).
        samples: The inputs for ``verify``, in the forms ``search`` takes.
        reference: Expected outputs, one per sample (default: an FP32 ONNX Runtime run).
        atol: Tolerance of the verification; each of ``atol``, ``rtol``, ``min_cosine``, ``max_mismatch`` left
            None is the one recorded in the override file.
        rtol: Relative tolerance.
        min_cosine: Cosine similarity required per output.
        max_mismatch: Fraction of elements allowed outside the tolerance.
        error_stat: As in ``search`` (so are ``argmax``, ``topk``, ``accept``, and per-output values).
        fp16_io: Make the float graph inputs and outputs FP16 (default FP32).
        force: Apply even if the override file was made for another version of the model.
        keep_fp32: More node ids to keep in FP32.
        precision: ``"fp16"`` or ``"bf16"``; None: the override file's (a different one is a usage error).
        progress: A function receiving one line of text per event, or a ``Listener``.
        shown: Called with the written model's description (``Mixed``) once it is written.
        accumulate: ``"fp32"`` or ``"fp16"``; None: the override file's. ``verify`` runs the written file on ONNX
            Runtime, which adds in FP32; under ``"fp16"`` it also judges the file's plan with FP16 sums on the
            emulator, which models this file (``ApplyResult.fp16_sums``, a ``CheckResult``).

    Returns:
        The path written and, with ``verify``, the verification (``ApplyResult``).

    Raises:
        UsageError: Bad input, or an override file made for another model (without ``force``).

    Examples:
        >>> import fp16bisect, onnx
        >>> model, data = "sample_models/transformer_block.onnx", "sample_models/transformer_block.npz"
        >>> found = fp16bisect.search(model, data)
        >>> applied = fp16bisect.apply(model, found, "transformer_block.mixed.onnx", verify=True, samples=data)
        >>> applied.passed
        True
    """
    from fp16bisect.artifacts.apply import ApplyOptions, apply_to_file
    from fp16bisect.artifacts.files import check_writable

    if overrides is None:
        raise UsageError("apply needs overrides: pass an override JSON path or a search result")
    if verify not in (False, True, "storage", "strict"):
        raise UsageError(f"verify={verify!r}: use True (or 'storage'), 'strict' or False")
    if verify and samples is None:
        raise UsageError("verify needs samples: pass samples= (the ones given to search)")
    if accumulate is not None:
        accumulation(accumulate)
    if str(output).endswith(".json"):
        raise UsageError(f"output {str(output)!r} would hold an ONNX model: give a path ending in .onnx")
    check_writable(output)
    entries = inputs.sample_entries(samples) if verify else None
    options = ApplyOptions(
        fp16_io=fp16_io, force=force, keep_fp32=tuple(keep_fp32), inputs=entries,
        precision=None if precision is None else precision_of(precision).name,
        references=None if entries is None else _references(reference, entries), strict_mode=verify == "strict",
        tolerance=GivenTolerance(atol, rtol, min_cosine, max_mismatch, error_stat, argmax, topk, accept=accept))
    with _own_work_directories(), inputs.model_file(model) as path, inputs.overrides_file(overrides) as file:
        assert file is not None  # overrides was given (refused above when None)
        written = apply_to_file(file, path, str(output), inputs.listener(progress), options, shown=shown)
        summed = None
        if verify and samples is not None and (accumulate or written.accumulate) == "fp16":  # the file's plan, judged with FP16 sums
            summed = check(path, samples, reference=reference, overrides=file, backend="emulate", precision=precision,
                           progress=progress, accumulate="fp16", **options.tolerance.values())
    return ApplyResult(path=Path(output), fp32_nodes=list(written.fp32_nodes), verification=written.verification,
                       fp32_accumulate_nodes=list(written.fp32_accumulate_nodes),
                       mixed=written.mixed, fp16_sums=summed)


class _own_work_directories:
    """The work directories of the models a call loads are removed when it returns."""

    def __enter__(self):
        self.count = weights.alive()

    def __exit__(self, *exc):
        weights.close_since(self.count)
