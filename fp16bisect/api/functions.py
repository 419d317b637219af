"""The Python API's functions: ``search``, ``check``, ``scan`` and ``apply``, what the command line runs.

Each takes a model (a path or an ``onnx.ModelProto``) and samples (an ``.npz`` path, a directory of them, a dict
of arrays, or a list or iterable of those), returns a typed result (``results.py``) and raises
``fp16bisect.Error`` subclasses (``UsageError`` for bad input), never ``SystemExit``. ``run_search`` and
``run_check`` take the options already typed (``SearchOptions``, ``CheckOptions``): the command line and batch
call those. ``compare``, ``migrate``, ``write_report`` (``tools.py``) and ``batch`` (``manifest.py``) complete
what the command line has.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from fp16bisect import records
from fp16bisect.api import inputs
from fp16bisect.api.inputs import Model, OverridesGiven, Progress, Samples
from fp16bisect.api.results import ApplyResult, CheckResult, Node, ScanNode, ScanResult, ScanRow, SearchResult
from fp16bisect.algorithm.budget import INTERRUPT
from fp16bisect.errors import Interrupted, UsageError
from fp16bisect.model import weights
from fp16bisect.model.plan_states import is_mark
from fp16bisect.model.precision import precision_of
from fp16bisect.parallel import Parallel
from fp16bisect.records import APPLY
from fp16bisect.run.invocation import Invocation
from fp16bisect.run.options import (CheckOptions, Given, Journaling, Judge, SearchOptions, Space, Strategy,
                                    ToleranceGiven)
from fp16bisect.run.outcome import Outcome
from fp16bisect.tolerance import GivenTolerance

if TYPE_CHECKING:
    from fp16bisect.artifacts.mixed import Mixed

__all__ = ["apply", "check", "run_check", "run_search", "scan", "search"]


def search(  # noqa: PLR0913  the public API: the data, then one keyword per concern (a record each, as the CLI)
        model: Model, samples: Samples, *, reference: Samples | None = None, tolerance: ToleranceGiven = None,
        judge: Given[Judge] = None, space: Given[Space] = None, strategy: Given[Strategy] = None,
        parallel: Given[Parallel] = None, journal: Given[Journaling] = None, output: str | Path | None = None,
        progress: Progress = None) -> SearchResult:
    """Find the smallest set of nodes to keep in FP32 so that the model, the rest in FP16, meets the tolerance.

    Each option is one record (``fp16bisect.Judge``, ``Space``, ``Strategy``, ``Parallel``, ``Journaling``;
    ``Tolerance``), its fields the command line's flags (``opt_level`` is ``--opt-level``). Each takes the record,
    a dict of its fields, or its shorthand, and None is every field's default; a bad value is a ``UsageError``.

    Args:
        model: The FP32 ONNX model: a path, or an ``onnx.ModelProto`` (saved to a temporary file for the search,
            removed after; the override JSON then names it ``model.onnx``).
        samples: The inputs: an ``.npz`` path (one array per model input), a directory (every ``*.npz`` in it,
            sorted by name), a dict ``{input name: array}`` (one sample), or a list or iterable of those.
        reference: Expected outputs, one per sample, in the same forms (default: an FP32 ONNX Runtime run).
        tolerance: How outputs are judged: a ``Tolerance``, a ``GivenTolerance`` or a dict of its values
            (``{"atol": 0.05, "rtol": {"logits": 0.1}}``: each a value, a dict per output or the flags'
            ``"[OUTPUT:]VALUE"`` strings; ``accept``: a function ``(outputs, reference) -> bool``, ANDed). None:
            atol and rtol 0.01 (docs/tolerance.md).
        judge: What judges a plan (``Judge``): its backend (the shorthand: ``judge="emulate"``; default
            ``"auto"``: TensorRT when TensorRT, Polygraphy and a GPU are present, else the emulator), the
            command of ``backend="command"``, TensorRT's settings, the deployment's shapes, ``repeats``.
        space: The plan space (``Space``): the low precision (the shorthand: ``space="bf16"``), ``accumulate``,
            ``headroom``, ``keep_fp32``/``keep_fp16`` patterns, ``group_by``.
        strategy: How the search chooses (``Strategy``): the emulator ``prior``, ``minimum`` (then the smallest
            passing set; ``"auto"`` or a number of evaluations) and its ``objective``; a budget (``max_evaluations``,
            ``time_limit``) that ends it with the smallest set seen to pass (``SearchResult.stopped``).
        parallel: Plans evaluated at once (``Parallel``; the shorthand: ``parallel=4`` jobs), the GPUs (``devices``),
            Ray (``ray``: an address, ``""`` a local instance); ``accept`` must then be picklable.
        journal: With ``output``: resuming a journaled search (``Journaling``: ``restart``, ``retry_crashed``,
            ``keep_journal``).
        output: Write the override JSON there, and journal the evaluations beside it, so the same search run
            again after an interruption resumes (as ``fp16bisect search -o``). None: nothing written.
        progress: A function receiving one line of text per event (e.g. ``print``), or a ``Listener``.

    Returns:
        The nodes to keep in FP32 and how the search knows (``SearchResult``).

    Raises:
        UsageError: Bad input (a missing file, a sample that does not fit the model, a bad option value).
        ToleranceUnreachable: Even the all-FP32 plan misses the tolerance.
        Interrupted: Ctrl-C (a ``KeyboardInterrupt``), the smallest set seen to pass written: ``result`` holds it.

    Examples:
        >>> import fp16bisect
        >>> result = fp16bisect.search("sample_models/transformer_block.onnx",
        ...                            "sample_models/transformer_block.npz", judge="emulate")
        >>> sorted(n.name for n in result.fp32_nodes)
        ['ln1_square', 'ln1_var']
    """
    options = SearchOptions.given(tolerance, judge, space, strategy, parallel, journal, output)
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
        remove_journals(outcome.oracle.journal, outcome.prior, stopped=outcome.result.stopped is not None)
    result = _search_result(outcome)
    stop = outcome.result.stopped
    if stop is not None and stop.cause == INTERRUPT:  # Ctrl-C stays an interrupt, with the answer written
        raise Interrupted(result)
    return result


def _references(reference: Samples | None, entries: list) -> list | None:
    if reference is None:
        return None
    return inputs.sample_entries(reference, "reference")  # matched to the samples by load_samples


def _search_result(outcome: Outcome) -> SearchResult:
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


def check(  # noqa: PLR0913  the public API: the data, then one keyword per concern (each a record, as search's)
        model: Model, samples: Samples, overrides: OverridesGiven = None, *, reference: Samples | None = None,
        tolerance: ToleranceGiven = None, judge: Given[Judge] = None, space: Given[Space] = None,
        parallel: Given[Parallel] = None, progress: Progress = None) -> CheckResult:
    """Does the model meet the tolerance in FP16, with the override nodes (if any) kept in FP32? A CI gate.

    A failing check is a result (``passed`` False), not an exception. The options are ``search``'s records; each
    value not given is the one ``overrides`` records (the tolerance, precision, accumulation and headroom its
    search had), else the default.

    Args:
        model: The FP32 ONNX model: a path or an ``onnx.ModelProto``.
        samples: The inputs, in the forms ``search`` takes.
        overrides: The nodes to keep in FP32: an override JSON path, a ``SearchResult``, or the JSON as a dict
            (None: all-FP16). A file made for another version of the model is checked with the nodes that still
            exist.
        reference: Expected outputs, one per sample (default: an FP32 ONNX Runtime run).
        tolerance: The tolerance values given, in ``search``'s forms (a ``GivenTolerance``, a dict, or a
            ``Tolerance``: every value given); each value not given is the override file's, else the default
            (``CheckResult.tolerance_from`` says which). ``accept`` is never read from the file.
        judge: What judges the plan (``Judge``, as in ``search``); ``strict_environment``: fail (``passed`` False)
            when the override file was verified on another backend, GPU or TensorRT version (see
            ``CheckResult.drift``), or records no environment; it needs ``overrides``.
        space: The precision, accumulation and headroom (``Space``: those three; a check judges the plan the file
            gives, so not a search's ``keep_fp32``, ``keep_fp16`` or ``group_by``). An override file made for the
            other precision is refused. ``headroom``: fail when a tensor computed in FP16 has an FP32 peak above
            65504/F on any sample.
        parallel: Plans evaluated at once (``Parallel``; 2 evaluates the all-FP32 plan alongside).
        progress: A function receiving one line of text per event, or a ``Listener``.

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
    options = CheckOptions.given(tolerance, judge, space, parallel)
    with _own_work_directories():
        result = run_check(model, samples, options, overrides=overrides, reference=reference, progress=progress)
        for sample in result.outcome.samples:  # the result outlives the work directory: its samples too
            sample.keep()
        return result


def run_check(model: Model, samples: Samples, options: CheckOptions, *, overrides: OverridesGiven = None,
              reference: Samples | None = None, progress: Progress = None, as_command: bool = False) -> CheckResult:
    """``check`` with its options typed (``CheckOptions``: the tolerance given, the backend, its options,
    parallel, headroom, precision, strict_environment), as the command line and batch build them.

    ``as_command``: the verdict line suggests the search as a command line (the command line's, batch's), not
    as a Python call; either is rendered from what the check judged with.
    """
    from fp16bisect.diagnose.preflight import check_model, verdict

    entries = inputs.sample_entries(samples)
    references = _references(reference, entries)
    if not inputs.is_path(model):  # its commands name it model.onnx, not the temporary file
        options = replace(options, model_name=inputs.IN_MEMORY_MODEL)
    asked = Invocation.of(model, entries, references, options, overrides)  # as given: what its hint names
    with inputs.model_file(model) as path, inputs.overrides_file(overrides) as file:
        outcome = check_model(path, entries, references, file, options, inputs.listener(progress), asked)
    use = outcome.overrides
    return CheckResult(
        passed=outcome.passed, outputs=outcome.evaluation.worst(), metrics=list(outcome.evaluation.metrics),
        fp32_passes=None if outcome.fp32 is None else outcome.fp32.passed,
        nodes=[Node.of(outcome.graph.by_id[n]) for n in use.nodes] if use else [],
        accumulating=[Node.of(outcome.graph.by_id[n]) for n in use.accumulating] if use else [],
        missing=list(use.missing) if use else [], backend=outcome.backend, tolerance=outcome.tolerance,
        tolerance_from=outcome.tolerance_from, verdict=verdict(outcome, as_command),
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


def apply(  # noqa: PLR0913  the public API: the data, then keywords, each a record or one of `apply`'s flags
        model: Model, overrides: OverridesGiven, output: str | os.PathLike, *, verify: bool | str = False,
        samples: Samples | None = None, reference: Samples | None = None, tolerance: ToleranceGiven = None,
        space: Given[Space] = None, fp16_io: bool = False, force: bool = False, keep_fp32: Iterable[str] = (),
        progress: Progress = None, shown: Callable[[Mixed], object] | None = None) -> ApplyResult:
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
        tolerance: The verification's tolerance, in ``check``'s forms: each value not given is the override
            file's.
        space: The precision and accumulation (``Space``: those two; each None: the override file's; a different
            precision is a usage error). ``verify`` runs the written file on ONNX Runtime, which adds in FP32;
            under ``accumulate="fp16"`` it also judges the file's plan with FP16 sums on the emulator, which models
            this file (``ApplyResult.fp16_sums``, a ``CheckResult``).
        fp16_io: Make the float graph inputs and outputs FP16 (default FP32).
        force: Apply even if the override file was made for another version of the model.
        keep_fp32: More node ids to keep in FP32.
        progress: A function receiving one line of text per event, or a ``Listener``.
        shown: Called with the written model's description (``Mixed``) once it is written.

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

    given, chosen = GivenTolerance.of(tolerance), Space.of(space, "space").taken_by(APPLY)
    shows = inputs.listener(progress)
    if shown is not None and not callable(shown):
        raise UsageError(f"shown is a {type(shown).__name__}: pass a function taking the written model, or None")
    if overrides is None:
        raise UsageError("apply needs overrides: pass an override JSON path or a search result")
    if verify not in (False, True, "storage", "strict"):
        raise UsageError(f"verify={verify!r}: use True (or 'storage'), 'strict' or False")
    if verify and samples is None:
        raise UsageError("verify needs samples: pass samples= (the ones given to search)")
    written_to = mixed_path(output)
    check_writable(written_to)
    entries = None if samples is None else inputs.sample_entries(samples)  # their forms checked, used to verify
    references = _references(reference, entries or [])
    options = ApplyOptions(
        fp16_io=records.given(records.boolean, fp16_io, "fp16_io"), force=records.given(records.boolean, force, "force"),
        keep_fp32=records.given(records.strings, keep_fp32, "keep_fp32"), inputs=entries if verify else None,
        precision=chosen.precision, references=references if verify else None, strict_mode=verify == "strict",
        tolerance=given)
    with _own_work_directories(), inputs.model_file(model) as path, inputs.overrides_file(overrides) as file:
        assert file is not None  # overrides was given (refused above when None)
        written = apply_to_file(file, path, written_to, shows, options, shown=shown)
        summed = None
        if verify and samples is not None and (chosen.accumulate or written.accumulate) == "fp16":
            # the file's plan, judged with FP16 sums
            summed = check(path, samples, overrides=file, reference=reference, tolerance=given, judge="emulate",
                           space=chosen.replace(accumulate="fp16"), progress=progress)
    return ApplyResult(path=Path(written_to), fp32_nodes=list(written.fp32_nodes), verification=written.verification,
                       fp32_accumulate_nodes=list(written.fp32_accumulate_nodes),
                       mixed=written.mixed, fp16_sums=summed)


def mixed_path(output: object) -> str:
    """Where a mixed-precision model goes: a path (a string or a ``PathLike``), not one ending in ``.json``."""
    if not inputs.is_path(output):
        raise UsageError(f"output is a {type(output).__name__}: pass the path of the .onnx file to write")
    if str(output).endswith(".json"):
        raise UsageError(f"output {str(output)!r} would hold an ONNX model: give a path ending in .onnx")
    return str(output)


class _own_work_directories:
    """The work directories of the models a call loads are removed when it returns."""

    def __enter__(self) -> None:
        self.count = weights.alive()

    def __exit__(self, *exc: object) -> None:
        weights.close_since(self.count)
