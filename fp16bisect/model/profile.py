"""The FP32 profile of a model: every float tensor measured in one FP32 run per sample, and the candidates
ranked by their risk in the low precision.

The precision says what its risk is (``Precision.ranked_by``). By range (FP16): a
candidate's risk is the worst tier (``Precision.tier``) of the tensors it reads (in
FP16 it would read them rounded) and writes. The suspicion order sorts candidates
by risk, worst first, ties in topological order; candidates of tier 2 and 3 are
the suspects the search tries first. This one ranking is what ``scan`` prints and
what the search uses. By rounding (BF16, which has FP32's range): how much each
candidate amplifies relative rounding (``model/relative_rounding.py``).

How the statistics are gathered (the results are those of ``TensorStats.add`` on
every whole tensor): a Constant node's tensor is measured from the model file;
the output of a Reshape, Flatten, Squeeze, Unsqueeze, Transpose or Identity holds
the values of its input, whose statistics it takes. Every other float tensor is
measured inside one FP32 ONNX Runtime run per sample of the model instrumented
with statistics nodes (``model/instrument.py``: O(rows) numbers per tensor, never
the tensor). ONNX Runtime's constant folding is skipped when nothing is
foldable. The rare tensor with NaN or inf (finite values past the FP16 range, an
overflow or a Hugging Face mask's -3.4e38, are counted in the run) is fetched
whole in a second run of the instrumented model (only those tensors; once the
first session is gone, so that the two runs' memory does not add up) and
measured by ``TensorStats.add``. A model the statistics nodes cannot be added to
(opset below 11, or ONNX Runtime refuses the instrumented model or fails to run
it) falls back to fetching every tensor, in chunks.

The same instrumented run measures the accumulators (``model/accumulators.py``): for every candidate that sums,
the largest partial-sum bound and its terms, one number and a few shapes per sample. If ONNX Runtime refuses the
model with those nodes, the statistics are taken without them and the profile's ``accumulators_note`` says so; on
the fallback path (every tensor fetched) no accumulator is measured, and the note says that too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from fp16bisect.errors import UsageError
from fp16bisect.model import weights
from fp16bisect.model.accumulators import Accumulator, Probes, add_probes
from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import accumulates
from fp16bisect.model.instrument import add_rows, split_units, tensor_sizes, with_statistics
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.model.relative_rounding import rank_relative
from fp16bisect.model.runtime import nothing_to_fold, run, session
from fp16bisect.model.signs import non_negative
from fp16bisect.model.statistics import TensorStats, stress_order

VALUE_PRESERVING = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"}


@dataclass
class NodeRisk:
    node: str
    op_type: str
    tier: int
    severity: float
    tensor: str  # the tensor that sets the risk
    reason: str


@dataclass
class Profile:
    tensors: dict[str, TensorStats]
    risks: list[NodeRisk] = field(default_factory=list)  # candidates, most suspicious first
    sample_order: list[int] = field(default_factory=list)  # sample indices, most stressing first
    accumulators: list[Accumulator] = field(default_factory=list)  # summing candidates, highest peak first
    accumulators_note: str = ""  # why no accumulator was measured ("" when they were, or none sums)

    @property
    def order(self) -> list[str]:
        return [r.node for r in self.risks]

    @property
    def suspects(self) -> int:
        return sum(1 for r in self.risks if r.tier >= 2)


def profile(graph: Graph, samples, chunk: int = 256, accumulators: bool = True) -> Profile:
    """Run the model in FP32 on every sample, recording every float tensor and, with ``accumulators`` (only the
    benchmark turns it off), the summing candidates' accumulators (see the module's docstring)."""
    names = [t for n in graph.nodes for t in n.outputs if graph.is_float(t)]
    names = list(dict.fromkeys([*graph.float_output_names(), *names]))
    low = graph.precision
    stats = {t: TensorStats(t, low=low) for t in names}
    for init in graph.model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            s = stats.setdefault(init.name, TensorStats(init.name, initializer=True, low=low))
            s.initializer = True
            s.add(weights.array(init))  # a view of the weight's file
    constants = _constant_values(graph, names)  # the same every run: measured here, once per sample
    for value in constants.values():
        measured = TensorStats(value.name, low=low)
        measured.add(value.array)
        for index in range(len(samples)):
            stats[value.name].merge(measured, index)
    same = _same_values(graph, [t for t in names if t not in constants and t not in graph.initializers])
    computed = [t for t in names if t not in constants and t not in same]
    sizes = tensor_sizes(graph, samples[0].inputs) if samples else {}
    fold = not nothing_to_fold(graph.model)  # the statistics nodes read activations: never foldable
    note = ""
    signs = non_negative(graph)  # measured on x, and x their accumulators' |x|
    for with_accumulators in (True, False)[0 if accumulators else 1:]:  # without them if ONNX Runtime refuses them
        per = _PerSample(computed, len(samples), low)
        built = with_statistics(graph, computed, sizes, signs)
        probes = (add_probes(built[0], graph, graph.opset, signs) if built is not None and with_accumulators
                  else Probes([]))
        sess, why = (None, "") if built is None else _session(built[0], "the model with statistics nodes", fold,
                                                              arena=not graph.large_activations)
        whole, why = (None, why) if sess is None or built is None else _in_run(sess, built, samples, stats, per,
                                                                               probes)
        del sess  # its memory (ONNX Runtime keeps the run's buffers until the session goes) before any other run's
        if whole is not None or not probes.probes:
            break
        note = f"ONNX Runtime refused the model with the accumulator nodes ({why})"
        for t in computed:
            stats[t] = TensorStats(t, low=low)
    if whole is None:
        note = "the model could not be instrumented: every tensor was fetched instead"
        for t in computed:
            stats[t] = TensorStats(t, low=low)
        per = _PerSample(computed, len(samples), low)
        _fetch(graph.runnable_copy(), computed, list(enumerate(samples)), per.into(stats), chunk, low)
    for index, sample, tensors in whole or []:  # from the same instrumented model: the same fusions, values
        assert built is not None  # whole comes from it
        _fetch(built[0], tensors, [(index, sample)], per.into(stats), chunk, low)
    for t, source in same.items():
        stats[t] = replace(stats[source], name=t, initializer=False)
    risks = RANKINGS[low.ranked_by](graph, stats)
    found = probes.results() if whole is not None else []
    summing = any(accumulates(n.op_type, n.domain) for n in graph.candidates)
    note = f"accumulator peaks not measured: {note}" if note and summing else ""
    return Profile(stats, risks, stress_order(per.peaks, per.smallest, low=low), found, note)


class _PerSample:
    """Each sample's peak and smallest non-zero |x| of every computed tensor (a few floats per tensor and
    sample): what orders the samples most stressing first (``statistics.stress_order``)."""

    def __init__(self, names: list[str], count: int, low: Precision):
        self.low = low  # what the fresh measures count against
        self.index = {t: j for j, t in enumerate(names)}
        self.peaks = np.zeros((count, len(names)), dtype=np.float32)
        self.smallest = np.full((count, len(names)), np.inf, dtype=np.float32)

    def add(self, stats: dict[str, TensorStats], fresh: TensorStats, sample: int) -> None:
        """Merge one sample's measures of a tensor into its statistics, and note them."""
        stats[fresh.name].merge(fresh, sample)
        j = self.index.get(fresh.name)
        if j is not None:
            self.peaks[sample, j] = max(float(self.peaks[sample, j]), fresh.max_abs)
            self.smallest[sample, j] = min(float(self.smallest[sample, j]), fresh.min_nonzero)

    def into(self, stats: dict[str, TensorStats]):
        return lambda fresh, sample: self.add(stats, fresh, sample)

    def fresh(self, name: str) -> TensorStats:
        """Empty measures of tensor ``name``, to take one sample's."""
        return TensorStats(name, low=self.low)


def _in_run(sess, built: tuple[onnx.ModelProto, list], samples, stats: dict[str, TensorStats],
            per: _PerSample, probes: Probes) -> tuple[list | None, str]:
    """Add every sample's statistics from the instrumented model's runs, but for the tensors with NaN/inf or rows
    too long to count, to be measured whole: returns them, [(index, sample, tensors)], so that
    they are fetched once the session is gone, and "". (None, what ONNX Runtime said) if it fails to run the model
    (the caller then starts over by fetching every tensor, which reports the model's own error if it has one)."""
    instrumented, units = built
    outputs = [o.name for o in instrumented.graph.output]  # the model's own, then the statistics
    statistics = {o for _, outs in units for o in outs} | probes.outputs
    whole = []
    for index, sample in enumerate(samples):
        try:
            values = dict(zip(outputs, run(sess, outputs, sample.inputs, "the model with statistics nodes")))
        except UsageError as e:
            return None, _said(e)
        model_outputs = {name: values.pop(name) for name in outputs if name not in statistics}
        if getattr(sample, "reference", False) is None:  # the FP32 references come with the run: no run of their own
            sample.reference = model_outputs
        tensors = []
        for members, outs in units:
            for t, row_stats in split_units(members, [values.pop(o) for o in outs]):
                fresh = per.fresh(t)
                if add_rows(fresh, row_stats):
                    per.add(stats, fresh, index)
                else:
                    tensors.append(t)
        probes.take(values, index)
        del values
        if tensors:
            whole.append((index, sample, tensors))
    return whole, ""


@dataclass
class _Constant:
    name: str
    array: np.ndarray


def _constant_values(graph: Graph, names: list[str]) -> dict[str, _Constant]:
    """The float tensors of ``names`` that Constant nodes hold as a tensor (weights, in many exported models)."""
    wanted = set(names)
    found = {}
    for node in graph.model.graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or node.output[0] not in wanted:
            continue
        attr = next((a for a in node.attribute if a.name == "value"), None)
        if attr is not None and attr.t.data_type == onnx.TensorProto.FLOAT and not attr.t.data_location:
            found[node.output[0]] = _Constant(node.output[0], onnx.numpy_helper.to_array(attr.t))
    return found


def _same_values(graph: Graph, names: list[str]) -> dict[str, str]:
    """The tensors of ``names`` that hold exactly the values of another recorded tensor (the output of a
    Reshape, Transpose, Identity... of it), each with the tensor it takes its values from: their statistics
    are copied, not computed again."""
    recorded = set(names)
    source: dict[str, str] = {}
    for node in graph.nodes:  # topological order: a source's own source is known first
        if node.op_type not in VALUE_PRESERVING or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        out, src = node.outputs[0], node.inputs[0] if node.inputs else ""
        if out in recorded and src in recorded:
            source[out] = source.get(src, src)
    return source


def _session(model: onnx.ModelProto, what: str, fold_constants: bool = True, arena: bool = True):
    """In producer order, so each tensor is freed once its statistics are taken (ONNX Runtime's default order
    keeps them alive to the end of the run), and ""; (None, what ONNX Runtime said) if it refuses the model. (Its
    equal small constants are one already: ``instrument.share_constants`` and ``SmallConstants``.)"""
    try:
        return session(model, what, producer_order=True, fold_constants=fold_constants, arena=arena), ""
    except UsageError as e:
        return None, _said(e)


def _said(error: UsageError) -> str:
    """What ONNX Runtime said, from the one line ``runtime`` made of it (without our advice after it)."""
    text = str(error)
    text = text.split(": ", 1)[1] if ": " in text else text
    return text.rsplit("; check ", 1)[0]


def _fetch(model: onnx.ModelProto, names: list[str], samples, add, chunk: int, low: Precision = FP16) -> None:
    """Fetch the tensors themselves, ``chunk`` per run, and measure each whole (``TensorStats.add``, counted
    against ``low``) on each of ``samples`` ([(index, sample)]); ``add(fresh, index)`` takes one sample's
    measures of one tensor."""
    model = _copy(model)
    declared = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in names if t not in declared)
    sess = session(model, "the model with every float tensor as an output", producer_order=True)
    for index, sample in samples:
        for start in range(0, len(names), chunk):
            part = names[start : start + chunk]
            values = run(sess, part, sample.inputs, "the model in FP32")
            for t, v in zip(part, values):
                fresh = TensorStats(t, low=low)
                if isinstance(v, np.ndarray) and v.dtype == np.float32:
                    fresh.add(v)
                add(fresh, index)
            del values


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def rank(graph: Graph, stats: dict[str, TensorStats]) -> list[NodeRisk]:
    """The candidates, most suspicious first, each with the tensor that sets its risk (see the module's docstring)."""
    risks = []
    for node in graph.candidates:
        touched = [t for _, t in graph.rounded_inputs(node)] + graph.float_outputs(node)
        masks = [t for t in touched if t in stats and stats[t].sentinel]  # not a risk: see TensorStats.sentinel
        best = None
        for t in [t for t in touched if t not in masks]:
            s = stats.get(t)
            if s is not None and (best is None or (s.tier, s.severity) > (best.tier, best.severity)):
                best = s
        if best is None:
            said = f"tensor {masks[0]!r}: {stats[masks[0]].describe()}" if masks else "no float tensor recorded"
            risks.append(NodeRisk(node.id, node.op_type, 0, 0.0, masks[0] if masks else "", said))
            continue
        role = "reads" if best.name not in node.outputs else "writes"
        what = "weight" if best.initializer else "tensor"
        reason = f"{role} {what} {best.name!r}: {best.describe()}"
        if masks:
            reason += f"; {masks[0]!r} holds +-3.4e38, a mask value, not counted"
        risks.append(NodeRisk(node.id, node.op_type, best.tier, best.severity, best.name, reason))
    position = {n.id: i for i, n in enumerate(graph.candidates)}
    risks.sort(key=lambda r: (-r.tier, -r.severity if r.tier >= 2 else 0.0, position[r.node]))
    return risks


def _rank_rounding(graph: Graph, stats: dict[str, TensorStats]) -> list[NodeRisk]:
    return [NodeRisk(*row) for row in rank_relative(graph, stats)]


RANKINGS = {"range": rank, "rounding": _rank_rounding}  # by ``Precision.ranked_by``
