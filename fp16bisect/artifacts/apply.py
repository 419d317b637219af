"""``apply``: an override file + its model -> a checked mixed-precision ONNX, optionally verified."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from fp16bisect.artifacts.verify import Check, strict, verify
from fp16bisect.model.graph import Graph
from fp16bisect.artifacts.mixed import Mixed, convert
from fp16bisect.artifacts.files import write_atomic
from fp16bisect.artifacts.overrides import Node, Overrides, file_precision, followed, read, recorded_tolerance
from fp16bisect.errors import UsageError
from fp16bisect.model import weights
from fp16bisect.model.plan_states import plan_of
from fp16bisect.model.precision import precision_of
from fp16bisect.model.samples import add_fp32_references, load_samples
from fp16bisect.tolerance import GivenTolerance, Tolerance


def apply(overrides: str | Path, model: str | Path, *, fp16_io: bool = False, force: bool = False,
          keep_fp32: tuple = (), graph: Graph | None = None) -> tuple[Mixed, Overrides]:
    """The mixed model an override file describes (its FP32 nodes and its FP32-accumulation nodes), plus
    ``keep_fp32`` nodes (and the file, read).

    Refuses an override file made for another version of the model unless ``force``, and one none of whose
    nodes is in the model always (``overrides.refuse_foreign``).
    """
    graph = graph or Graph.load(model)
    data = read(overrides, model, force=force, graph=graph)  # another model's file: refused even with --force
    pinned, note = followed(graph, data.names, overrides)  # a transparent node: its producers
    mixed = convert(graph, plan_of(pinned, (p.node.name for p in data.accumulating)) | set(keep_fp32),
                    fp16_io=fp16_io)
    mixed.notes[:0] = [note] if note else []
    try:
        onnx.checker.check_model(weights.checkable(mixed.model), full_check=True)
    except onnx.checker.ValidationError as exc:  # our bug, not the user's input
        raise RuntimeError(f"the mixed-precision model fails onnx.checker: {str(exc).splitlines()[0]}") from None
    return mixed, data


def save(model: onnx.ModelProto, path: str | Path, external: bool = False) -> None:
    """Write atomically: the file is either the old one or the whole new one. Over 2 GB, or ``external`` (the
    model came with external data), the weights go to ``<name>.data`` beside it (streamed from where they are,
    renamed into place before the model that points to it is written)."""
    weights.save(model, path, write_atomic, external=external)


@dataclass
class Verification:
    tolerance: Tolerance
    with_overrides: Check
    all_fp16: Check  # the contrast: the same conversion with nothing pinned
    strict: list[Check] = field(default_factory=list)  # [with overrides, all FP16] under --verify strict
    label: str = "FP16"  # the low precision, as messages say it (BF16 for a BF16 file)

    @property
    def passed(self) -> bool:
        return self.with_overrides.passed


def verify_mixed(graph: Graph, mixed: onnx.ModelProto, inputs: list[str], references: list[str] | None = None,
                 tolerance: Tolerance = Tolerance(), *, fp16_io: bool = False, strict_mode: bool = False,
                 keep_fp32: tuple = ()) -> Verification:
    """Run the mixed model (FP16 storage honoured) and the all-FP16 one on the samples, against the references.

    The all-FP16 contrast keeps ``keep_fp32`` nodes in FP32 too: those a user pinned because FP16 cannot hold them.
    """
    tolerance.outputs_named([o.name for o in graph.outputs])  # exit 2 listing the outputs
    samples = load_samples(graph, inputs, references)
    add_fp32_references(graph, samples)
    outputs = graph.judged_output_names()
    contrast = convert(graph, keep_fp32, fp16_io=fp16_io).model
    result = Verification(
        tolerance,
        verify(mixed, samples, tolerance, outputs, "the mixed-precision model"),
        verify(contrast, samples, tolerance, outputs, f"the all-{graph.precision.label} model"),
        label=graph.precision.label,
    )
    if strict_mode:
        result.strict = [strict(graph.model, m, samples, tolerance, outputs) for m in (mixed, contrast)]
    return result


@dataclass(frozen=True)
class ApplyOptions:
    """How ``apply_to_file`` writes and verifies. ``inputs``: verify the written model on these samples (None:
    no verification); ``tolerance``: the values given to verify with, the others the override file's (a file
    that records none needs atol and rtol given; the rest are then the defaults)."""

    fp16_io: bool = False
    force: bool = False
    keep_fp32: tuple = ()
    inputs: list[str] | None = None
    references: list[str] | None = None
    strict_mode: bool = False
    precision: str | None = None  # --precision: None takes the override file's; another one is a usage error
    tolerance: GivenTolerance = field(default_factory=GivenTolerance)


@dataclass(frozen=True)
class Written:
    """What ``apply_to_file`` wrote: the mixed model, the nodes it keeps in FP32 (graph order), with ``inputs``
    its verification (else None), the nodes it writes in FP32 accumulation (graph order), and what the file says
    its judge assumed FP16 nodes add in (``accumulate``)."""

    mixed: Mixed
    fp32_nodes: tuple[Node, ...]
    verification: Verification | None = None
    fp32_accumulate_nodes: tuple[Node, ...] = ()
    accumulate: str = "fp32"


def apply_to_file(overrides: str, model: str, output: str, listener, options: ApplyOptions = ApplyOptions(),
                  shown=None) -> Written:
    """``apply``: the mixed-precision model of ``overrides`` written to ``output`` (external data when the model has
    it), then, with ``options.inputs``, verified on them. ``shown(mixed)``: said once it is written."""
    inputs, references, keep_fp32 = options.inputs, options.references, options.keep_fp32
    made = file_precision(overrides)
    if options.precision is not None and options.precision != made:
        raise UsageError(f"{overrides!r} was searched for {made.upper()}: apply writes the file's precision, so "
                         f"--precision {options.precision} conflicts with it; drop --precision (or search again "
                         f"with --precision {options.precision})")
    graph = Graph.load(model, precision=precision_of(made))
    mixed, data = apply(overrides, model, fp16_io=options.fp16_io, force=options.force, keep_fp32=keep_fp32,
                        graph=graph)
    if inputs:
        load_samples(graph, inputs, references)  # a bad sample is said before anything is written
    with listener.timed(f"writing {output}"):  # from here on the input is known good: stages said
        save(mixed.model, output, external=graph.external_data)
    if shown is not None:
        shown(mixed)
    nodes = tuple(Node.of(graph.by_id[i]) for i in mixed.pinned)
    accumulating = tuple(Node.of(graph.by_id[i]) for i in mixed.accumulating)
    if not inputs:
        return Written(mixed, nodes, None, accumulating, data.accumulate)

    given = options.tolerance
    try:
        chosen = given.over(recorded_tolerance(data, overrides))
    except UsageError:
        if given.atol is None or given.rtol is None:
            raise
        chosen = given.over(Tolerance())
    with listener.timed("verifying the written model and the all-FP16 one on the samples"):
        verification = verify_mixed(graph, mixed.model, inputs, references, chosen, fp16_io=options.fp16_io,
                                     strict_mode=options.strict_mode, keep_fp32=keep_fp32)
    return Written(mixed, nodes, verification, accumulating, data.accumulate)
