"""The Python API of ``compare``, ``migrate`` and ``--report``: ``compare``, ``migrate`` and ``write_report``,
what the command line runs (it has nothing the API lacks). As ``functions.py``: typed results, ``UsageError``
for bad input, never ``SystemExit``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from fp16bisect import records
from fp16bisect.api import inputs
from fp16bisect.api.functions import Given, ToleranceGiven, _own_work_directories, _references, apply
from fp16bisect.api.inputs import Model, OverridesGiven, Progress, Samples
from fp16bisect.api.results import ApplyResult, CheckResult, SearchResult, _names, _nodes
from fp16bisect.errors import UsageError
from fp16bisect.records import COMPARE
from fp16bisect.run.options import Space
from fp16bisect.tolerance import GivenTolerance, Tolerance

if TYPE_CHECKING:
    from fp16bisect.artifacts.migrate import Mapping, Pins
    from fp16bisect.artifacts.mixed import Mixed
    from fp16bisect.diagnose.layerwise import Layerwise, LayerwiseRunner, NodeError
    from fp16bisect.evaluation.oracle import Evaluation

__all__ = ["CompareResult", "MigrateResult", "compare", "migrate", "write_report"]


@dataclass
class CompareResult:
    """Each candidate node's output in FP16 (or BF16) against FP32, in topological order (``fp16bisect.compare``).

    Attributes:
        nodes: Per candidate, its worst output and sample (``diagnose.layerwise.NodeError``: ``node``,
            ``op_type``, ``pinned``, ``failed``, ``metrics``).
        first_failing: The first node that fails the layer-wise rule (where the error is born), or None.
        passed: Whether the model's outputs meet ``tolerance`` (emulated, with the override nodes in FP32).
        tolerance: The tolerance the outputs were judged with.
    """

    nodes: list[NodeError]
    first_failing: NodeError | None
    passed: bool
    tolerance: Tolerance
    layerwise: Layerwise = field(kw_only=True, repr=False)  # every node's errors (console, CSV, report)
    outputs: Evaluation = field(kw_only=True, repr=False)  # the model's outputs judged
    runner: LayerwiseRunner = field(kw_only=True, repr=False, compare=False)  # the emulation (the report reruns it)

    def __repr__(self) -> str:
        """One line: ``CompareResult(41 nodes, 3 failing, the first ln1_square (Mul); 0 FP32 nodes; outputs FAILED)``."""
        failing = sum(n.failed for n in self.nodes)
        first = self.first_failing
        where = f", the first {_names([first.node])} ({first.op_type})" if first is not None else ""
        return (f"CompareResult({len(self.nodes)} node{'' if len(self.nodes) == 1 else 's'}, {failing} failing{where}; "
                f"{_nodes([n.node for n in self.nodes if n.pinned])}; outputs {'passed' if self.passed else 'FAILED'})")

    def write_csv(self, path: str | Path) -> None:
        """Every node's row as CSV (``fp16bisect compare --csv``)."""
        from fp16bisect.diagnose.layerwise import write_csv

        write_csv(path, self.layerwise)


def compare(model: Model, samples: Samples, *, reference: Samples | None = None, overrides: OverridesGiven = None,
            tolerance: ToleranceGiven = None, space: Given[Space] = None, max_error: float | None = None,
            progress: Progress = None) -> CompareResult:
    """Compare every node's output in FP16 with FP32 (emulated) and name the first node that fails.

    Args:
        model: The FP32 ONNX model: a path or an ``onnx.ModelProto``.
        samples: The inputs, in the forms ``search`` takes.
        reference: Expected outputs, one per sample (default: an FP32 ONNX Runtime run).
        overrides: Keep these nodes in FP32: an override JSON path, a ``SearchResult`` or its ``to_dict()``.
        tolerance: What the model's outputs are judged with, in ``check``'s forms: each value not given is the
            override file's, else the default (0.01, 0.01, none, 0).
        space: The precision and accumulation (``Space``: those two; each None: the override file's, else fp16
            and fp32).
        max_error: A node fails when its max abs error exceeds this fraction of its max |FP32 value|, a finite
            number >= 0 (None: 256 unit roundoffs of the precision, 0.125 for FP16).
        progress: A function receiving one line of text per event, or a ``Listener``.

    Returns:
        The per-node errors, the first failing node and the outputs' verdict (``CompareResult``).

    Raises:
        UsageError: Bad input.

    Examples:
        >>> import fp16bisect
        >>> found = fp16bisect.compare("sample_models/transformer_block.onnx", "sample_models/transformer_block.npz")
        >>> found.first_failing.node, found.passed
        ('ln1_square', False)
    """
    from fp16bisect.diagnose.layerwise import compare_model, max_error_of, outputs_against
    from fp16bisect.diagnose.preflight import recorded
    from fp16bisect.run.options import CheckOptions

    asked = CheckOptions.given(tolerance, "emulate", Space.of(space, "space").taken_by(COMPARE))
    max_error = max_error_of(max_error)
    entries = inputs.sample_entries(samples)
    references = _references(reference, entries)
    listener = inputs.listener(progress)
    with _own_work_directories(), inputs.model_file(model) as path, inputs.overrides_file(overrides) as file:
        judged, _ = asked.judged_with(recorded(file) if file else None)  # check's rule: given, else the file's
        tolerance = judged.tolerance
        runner, result = compare_model(path, entries, references, file, max_error, listener,
                                       precision=judged.precision, accumulate=judged.accumulate)
        outputs = outputs_against(runner, result.plan, tolerance)
        for sample in runner.samples:  # the result outlives the work directory (the report reruns them): kept
            sample.keep()
    return CompareResult(nodes=list(result.nodes), first_failing=result.first_failing, passed=outputs.passed,
                         tolerance=tolerance, layerwise=result, outputs=outputs, runner=runner)


@dataclass
class MigrateResult:
    """What ``fp16bisect.migrate`` read, mapped and wrote.

    Attributes:
        pins: The FP32 layer pins read (``artifacts.migrate.Pins``: ``fp32``, ``source``).
        mapping: Each layer's node (``artifacts.migrate.Mapping``: ``nodes``, ``unmapped``, ``not_candidates``).
        overrides: The override JSON written.
        applied: The mixed-precision model written and, with ``verify``, its verification (``ApplyResult``).
    """

    pins: Pins
    mapping: Mapping
    overrides: Path
    applied: ApplyResult

    def __repr__(self) -> str:
        """One line: ``MigrateResult(2 FP32 layer pins -> 2 FP32 nodes: a, b; m.overrides.json; not verified)``."""
        pins, unmapped = len(self.pins.fp32), len(self.mapping.unmapped) + len(self.mapping.not_candidates)
        verified = "not verified" if self.passed is None else f"verified: {'passed' if self.passed else 'FAILED'}"
        return (f"MigrateResult({pins} FP32 layer pin{'' if pins == 1 else 's'} -> {_nodes(self.mapping.nodes)}"
                f"{f' ({unmapped} not mapped to a candidate)' if unmapped else ''}; {_names([self.overrides.name])}; "
                f"{verified})")

    @property
    def passed(self) -> bool | None:
        """With ``verify``: whether the written model meets the tolerance; else None."""
        return self.applied.passed


def migrate(  # noqa: PLR0913  the public API: the files, then keywords, each one of `migrate`'s flags
        model: str | Path, output: str | Path, *, trtexec_args: str | None = None,
        layer_precisions: str | Path | None = None, overrides_out: str | Path | None = None,
        verify: bool | str = False, samples: Samples | None = None, reference: Samples | None = None,
        tolerance: ToleranceGiven = None, fp16_io: bool = False, progress: Progress = None,
        shown: Callable[[Mixed], object] | None = None) -> MigrateResult:
    """Turn TensorRT 10 FP32 layer pins into an override JSON and the strongly typed mixed-precision model.

    Args:
        model: The FP32 ONNX model the pins were made for (a path).
        output: Where the mixed-precision model goes (``.onnx``).
        trtexec_args: The TensorRT 10 trtexec arguments (``"--fp16 --layerPrecisions=a:fp32,b:fp32"``); or
        layer_precisions: A text file of ``LAYER:PRECISION`` entries (Polygraphy's ``--layer-precisions``).
        overrides_out: Where the override JSON goes (default: beside ``output``, ``*.overrides.json``).
        verify: Run the written model on ``samples`` against the references (as ``apply``'s: ``True`` or
            ``"storage"``, ``"strict"``); once verified, the override file records where (its ``environment``).
        samples: The inputs for ``verify``, in the forms ``search`` takes.
        reference: Expected outputs, one per sample (default: an FP32 ONNX Runtime run).
        tolerance: The tolerance recorded in the override file and verified, in ``search``'s forms (None: atol
            and rtol 0.01).
        fp16_io: Make the float graph inputs and outputs FP16.
        progress: A function receiving one line of text per event, or a ``Listener``.
        shown: Called with the written model's description (``Mixed``) once it is written.

    Returns:
        The pins, their nodes, the override file and the written model (``MigrateResult``).

    Raises:
        UsageError: Bad input (no pins or both kinds, a layer no node matches, an unreadable file).
    """
    from fp16bisect.artifacts import migrate as pins_of
    from fp16bisect.artifacts.files import check_writable, write_json
    from fp16bisect.model.graph import Graph

    tolerance = GivenTolerance.of(tolerance).over(Tolerance())
    if verify not in (False, True, "storage", "strict"):
        raise UsageError(f"verify={verify!r}: use True (or 'storage'), 'strict' or False")
    inputs.listener(progress)  # said before any file is written (apply takes it)
    trtexec_args = records.given(records.text(), trtexec_args, "trtexec_args")
    for name, path in (("model", model), ("layer_precisions", layer_precisions), ("overrides_out", overrides_out)):
        if not (path is None and name != "model" or inputs.is_path(path)):
            raise UsageError(f"{name} is a {type(path).__name__}: pass a path")
    if (trtexec_args is None) == (layer_precisions is None):
        raise UsageError("migrate needs the pins: pass trtexec_args (--trtexec-args) or layer_precisions "
                         "(--layer-precisions), one of them")
    if not inputs.is_path(output) or not str(output).endswith(".onnx"):
        raise UsageError(f"output {str(output)!r} would hold an ONNX model: give a path ending in .onnx")
    if verify and samples is None:
        raise UsageError("verify needs samples: pass samples= (--inputs X.npz)")
    overrides = Path(overrides_out or Path(output).with_suffix(".overrides.json"))
    check_writable(str(output))
    check_writable(str(overrides))
    if layer_precisions is not None:
        pins = pins_of.pins_from_list(_text(layer_precisions), str(layer_precisions))
    else:
        assert trtexec_args is not None  # one of the two (checked above)
        pins = pins_of.pins_from_trtexec(trtexec_args)
    with _own_work_directories():
        graph = Graph.load(str(model))
        mapping = pins_of.map_layers(graph, pins.fp32)
        write_json(str(overrides), pins_of.migration(graph, pins, mapping, tolerance.to_json(), str(overrides)))
    applied = apply(model, str(overrides), output, verify=verify, samples=samples, reference=reference,
                    fp16_io=fp16_io, progress=progress, shown=shown)
    if applied.verification is not None and applied.passed:  # verified here: the file says where
        _record_environment(overrides)
    return MigrateResult(pins=pins, mapping=mapping, overrides=overrides, applied=applied)


def _text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --layer-precisions {str(path)!r} ({exc}): pass a text file of "
                         "LAYER:PRECISION entries") from None


def _record_environment(overrides: Path) -> None:
    """The override file, with where it was verified (the emulator's environment), in the builder's key order."""
    from fp16bisect.artifacts.files import write_json
    from fp16bisect.artifacts.overrides import read
    from fp16bisect.backends.emulate.backend import environment_here

    write_json(str(overrides), read(overrides).replaced(environment=environment_here()).to_json())


def write_report(result: SearchResult | CheckResult | CompareResult, path: str | Path, *,
                 next_steps: list[tuple] | None = None, progress: Progress = None) -> Path:
    """Write the self-contained HTML report of a search, a check or a comparison (``--report FILE.html``).

    It runs what the result lacks (the layer-wise comparisons, the FP32 profile: seconds on the emulator).

    Args:
        result: What ``search``, ``check`` or ``compare`` returned.
        path: The ``.html`` file to write.
        next_steps: A search's (what, command) pairs shown last (default: those of its override file, when the
            search wrote one).
        progress: A function receiving one line of text per stage (what it runs, with its seconds), or a
            ``Listener``.

    Returns:
        The path written.

    Examples:
        >>> import fp16bisect
        >>> model, data = "sample_models/transformer_block.onnx", "sample_models/transformer_block.npz"
        >>> fp16bisect.write_report(fp16bisect.check(model, data), "check.html").name
        'check.html'
    """
    from fp16bisect.artifacts.files import check_writable
    from fp16bisect.diagnose import report_runs
    from fp16bisect.report import data as report_data
    from fp16bisect.report.html import write

    if not inputs.is_path(path):
        raise UsageError(f"path is a {type(path).__name__}: pass the .html file to write")
    if next_steps is not None and not (isinstance(next_steps, list) and all(
            isinstance(s, (tuple, list)) and len(s) == 2 and all(isinstance(w, str) for w in s) for s in next_steps)):
        raise UsageError(f"next_steps {next_steps!r}: give a list of (what, command) pairs of strings, or None")
    check_writable(str(path))
    say = inputs.listener(progress).stage
    if isinstance(result, SearchResult):
        steps = next_steps if next_steps is not None else _next_steps(result)
        page = report_data.search_report(result.outcome, report_runs.search_runs(result.outcome, say), steps)
    elif isinstance(result, CheckResult):
        page = report_data.check_report(result.outcome, result.verdict, report_runs.check_runs(result.outcome, say))
    elif isinstance(result, CompareResult):
        runs = report_runs.compare_runs(result.runner, result.layerwise, result.tolerance, say)
        page = report_data.compare_report(result.runner, result.layerwise, result.tolerance, runs)
    else:
        raise UsageError(f"result is a {type(result).__name__}: pass what search, check or compare returned")
    write(str(path), page, say)
    return Path(path)


def _next_steps(result: SearchResult) -> list[tuple]:
    from fp16bisect.report.next_steps import next_steps

    return next_steps(result.to_dict(), result.outcome.run)
