"""Headroom: how close each tensor computed in the low precision, and each sum it adds there, comes to the
precision's largest value on the samples, and ``--headroom F``. One rule for both.

A tensor's headroom is the precision's largest finite value (FP16: 65504) over its FP32 peak |x| over every
sample (the FP32 profile's): how many times its values could still grow before they overflow. Its smallest
non-zero |x| is set against the precision's smallest normal (FP16: 6.1e-5). Each comes with the sample that
reached it. The tensors computed in the low precision under a plan are the float outputs of the candidates the
plan leaves there (a transparent node's output holds its producer's values).

An accumulator's headroom (``model/accumulators.py``) is the same maximum over the largest partial-sum bound of a
summing candidate over the samples (``accumulators_json``): one left in the low precision whose peak passes the
maximum overflows where the engine adds in the low precision, though every stored value fits.

The rule, the same for tensors and sums:

* ``TIGHT`` (4x) is the headroom below which a tensor, or a sum, that the answer leaves in the low precision is
  named after a search, with ``--headroom 4``, the flag that keeps it out of harm: the activations of real
  inputs routinely reach 2-4x the peak of a few calibration samples (a louder recording, a brighter image, a
  longer sequence; docs/precision.md argues the value), so an answer whose tightest tensor or sum has less than
  4x was verified on samples that do not cover its deployment.
* ``--headroom F``: a peak above max/F counts as an overflow. A tensor's: the candidate that writes it and the
  candidates that read it are forced to FP32 in every plan (``forced_nodes``). A sum's: its node is forced to
  FP32 accumulation in every plan (``forced_sums``: its tensors stay in the low precision, its sums in FP32),
  whatever ``--accumulate`` the judge assumes. ``check --headroom F`` fails when a tensor or a sum the plan
  leaves in the low precision passes max/F.

For BF16 (``--precision bf16``) the limit is BF16's largest finite value (about 3.39e38, FP32's range): BF16
does not overflow where FP16 does, so its headroom is against its own maximum (``Graph.precision.max``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fp16bisect import records
from fp16bisect.model.accumulators import Accumulator
from fp16bisect.model.graph import Graph
from fp16bisect.model.plan_states import states
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.model.profile import Profile
from fp16bisect.model.statistics import TensorStats

TIGHT = 4.0  # a tensor or a sum of the answer with less headroom than this is named, with --headroom suggested
LISTED = 16.0  # the JSON lists every FP16 tensor with less headroom than this (at least SHOWN, at most LIMIT)
SHOWN, LIMIT = 3, 100


def factor(value) -> float | None:
    """``--headroom F`` checked, as the command line, the Python API (``headroom=``) and batch manifests take it:
    None, or a finite number above 1 (or its text); anything else is a ``UsageError``, the same line everywhere."""
    return records.real(1, above=True, optional=True, what="e.g. 4: a peak above a quarter of the precision's "
                        "largest value counts as an overflow")(value, "headroom")


def said(value: float, threshold: float | None = None, spec: str = ".3g") -> str:
    """``value`` formatted by ``spec`` (``.3g``: significant digits, ``.1f``: decimals), with more digits where
    fewer would put it on the other side of ``threshold`` than it is: 3.98 against 4 is "3.98", 3.9996 is
    "3.9996", never "4" in a line that says it lacks 4x."""
    digits, kind = int(spec[1:-1]), spec[-1]
    text = format(value, spec)
    while threshold is not None and math.isfinite(value) and digits < 17 and \
            _side(float(text), threshold) != _side(value, threshold):
        digits += 1
        text = format(value, f".{digits}{kind}")
    return text


def _side(value: float, threshold: float) -> int:
    return (value > threshold) - (value < threshold)


@dataclass(frozen=True)
class Headroom:
    """One tensor computed in the low precision: its peak against the largest finite value and its smallest
    non-zero |x| against the smallest normal (FP16: 65504 and 6.1e-5)."""

    tensor: str
    node: str  # the candidate that writes it
    stats: TensorStats
    low: Precision = FP16  # the low precision

    @property
    def limit(self) -> float:
        """The low precision's largest finite value."""
        return self.low.max

    @property
    def factor(self) -> float:
        return self.limit / self.stats.max_abs if self.stats.max_abs > 0 else float("inf")

    @property
    def peak_fraction(self) -> float:
        return self.stats.max_abs / self.limit

    def to_json(self, sources) -> dict:
        s = self.stats
        small = s.min_nonzero if math.isfinite(s.min_nonzero) else None
        return {"tensor": self.tensor, "node": self.node, "peak": s.max_abs, "peak_fraction": round(self.peak_fraction, 6),
                "headroom": round(self.factor, 4) if math.isfinite(self.factor) else None,
                "peak_sample": _source(sources, s.peak_sample),
                "min_nonzero": small, "min_vs_normal": None if small is None else round(small / self.low.smallest_normal, 6),
                "min_sample": _source(sources, s.min_sample) if small is not None else None}

    def describe(self, sources=(), against: float = TIGHT) -> str:
        """The tensor, its peak and headroom, never printed on the other side of ``against`` (a --headroom)."""
        where = _source(sources, self.stats.peak_sample)
        on = f" on {where['source']}" if where else ""
        return (f"{self.tensor!r} (written by {self.node}): peak |x| {self.stats.max_abs:.4g}, "
                f"{said(100 * self.peak_fraction, 100 / against, '.1f')}% of {limit_text(self.limit)} "
                f"({said(self.factor, against)}x headroom){on}")


def limit_text(limit: float) -> str:
    """65504 as it is, BF16's 3.39e38 in three digits."""
    return f"{limit:g}" if limit < 1e6 else f"{limit:.3g}"


def _source(sources, index: int) -> dict | None:
    if index < 0:
        return None
    return {"index": index, "source": str(sources[index]) if index < len(sources) else f"sample {index}"}


def fp16_tensors(graph: Graph, prof: Profile, fp32) -> list[Headroom]:
    """The tensors computed in FP16 when ``fp32`` stays in FP32, tightest (least headroom) first."""
    keep = set(fp32)
    found = []
    for node in graph.candidates:
        if node.id in keep:
            continue
        for t in graph.float_outputs(node):
            s = prof.tensors.get(t)
            if s is not None and not s.sentinel:
                found.append(Headroom(t, node.id, s, graph.precision))
    return sorted(found, key=lambda h: (-h.stats.max_abs, h.tensor))


def tight(found: list[Headroom], factor: float = TIGHT) -> list[Headroom]:
    """Those with less than ``factor`` headroom (peak above max/factor)."""
    return [h for h in found if h.stats.max_abs > h.limit / factor]


def headroom_json(found: list[Headroom], sources, factor: float | None, forced: list[Forced],
                  low: Precision = FP16) -> dict:
    """The override JSON's ``headroom``: bounded on any model (every tensor below LISTED x, at least SHOWN);
    ``limit`` and ``min_normal``: the low precision's largest finite value and smallest normal."""
    listed = [h for i, h in enumerate(found) if i < SHOWN or h.factor < LISTED][:LIMIT]
    return {"limit": low.max, "min_normal": low.smallest_normal, "flag": factor, "fp16_tensors": len(found),
            "listed_below": LISTED, "tensors": [h.to_json(sources) for h in listed],
            "forced": [f.to_json(sources) for f in forced]}


@dataclass(frozen=True)
class Forced:
    """A node ``--headroom F`` keeps in FP32: it writes or reads ``tensor``, whose peak exceeds max/F."""

    node: str
    tensor: str
    role: str  # writes | reads
    stats: TensorStats
    factor: float
    limit: float = FP16.max  # the low precision's largest finite value

    def reason(self, sources=()) -> str:
        where = _source(sources, self.stats.peak_sample)
        on = f" on {where['source']}" if where else ""
        share = said(100 * self.stats.max_abs / self.limit, 100 / self.factor, ".1f")
        return (f"forced by --headroom {self.factor:g}: {self.role} tensor {self.tensor!r}, peak |x| "
                f"{said(self.stats.max_abs, self.limit / self.factor, '.4g')} > {limit_text(self.limit)}/"
                f"{self.factor:g} ({share}% of {limit_text(self.limit)}){on}")

    def to_json(self, sources) -> dict:
        return {"node": self.node, "tensor": self.tensor, "role": self.role, "peak": self.stats.max_abs,
                "peak_fraction": round(self.stats.max_abs / self.limit, 6), "peak_sample": _source(sources,
                                                                                           self.stats.peak_sample)}


def forced_nodes(graph: Graph, prof: Profile, factor: float | None) -> list[Forced]:
    """The candidates ``--headroom factor`` forces to FP32, each once (with the tightest tensor that forced it),
    in topological order. None or no factor: none."""
    if not factor:
        return []
    limit = graph.precision.max / factor
    over = {t for t, s in prof.tensors.items() if not s.initializer and not s.sentinel and s.max_abs > limit}
    found: dict[str, Forced] = {}
    for node in graph.candidates:
        touched = [(t, "writes") for t in graph.float_outputs(node)] + [(t, "reads") for _, t in
                                                                         graph.rounded_inputs(node)]
        hits = [(t, role) for t, role in touched if t in over]
        if hits:
            t, role = max(hits, key=lambda h: prof.tensors[h[0]].max_abs)
            found[node.id] = Forced(node.id, t, role, prof.tensors[t], factor, graph.precision.max)
    return list(found.values())


def fp16_accumulators(prof: Profile, plan) -> list[Accumulator]:
    """The accumulators of the candidates ``plan`` leaves in the low precision, tightest first: a candidate in
    FP32 or in FP32 accumulation sums in FP32 (dropped)."""
    fp32, accumulate = states(plan)
    return [a for a in prof.accumulators if a.node not in fp32 and a.node not in accumulate]


def accumulators_json(found: list[Accumulator], sources, low: Precision = FP16) -> list[dict]:
    """The JSON's ``accumulators`` (tightest first): every one with less than LISTED x headroom, at least SHOWN,
    at most LIMIT; each ``{"node", "op_type", "peak", "terms", "sample", "headroom"}`` (``peak`` and
    ``headroom`` null when not measured, ``sample`` the sample that reached the peak as ``{"index", "source"}``)."""
    listed = [a for i, a in enumerate(found) if i < SHOWN or (a.headroom(low) or math.inf) < LISTED][:LIMIT]
    return [accumulator_json(a, sources, low) for a in listed]


def forced_sums(prof: Profile, factor: float | None, low: Precision = FP16) -> list[Accumulator]:
    """The summing candidates ``--headroom factor`` forces to FP32 accumulation in every plan: their peak passes
    max/factor, tightest first. None or no factor: none."""
    if not factor:
        return []
    return [a for a in prof.accumulators if a.over(low, factor)]


def tight_sums(found: list[Accumulator], low: Precision = FP16, factor: float = TIGHT) -> list[Accumulator]:
    """Those of ``found`` with less than ``factor`` accumulator headroom (peak above max/factor)."""
    return [a for a in found if a.over(low, factor)]


def accumulator_reason(a: Accumulator, sources, low: Precision = FP16, factor: float | None = None) -> str:
    """Why a node is in FP32 accumulation, as its entry's ``fp32_profile`` says: its sum's peak against the
    precision's max (max/``factor`` when ``--headroom factor`` forced it), and the sample that reached it ('' when
    not measured)."""
    room = a.headroom(low)
    if a.peak is None or room is None:
        return ""
    where = _source(sources, a.sample)
    terms = f"{a.terms} terms" if a.terms is not None else "its terms"
    limit = low.max_text or format(low.max, "g")
    if factor and a.over(low, factor):
        return (f"forced by --headroom {factor:g}: sums {terms} to a peak of "
                f"{said(a.peak, low.max / factor, '.4g')} > {limit}/{factor:g} ({said(room, factor)}x headroom)"
                + (f" on {where['source']}" if where else ""))
    side = ">" if a.peak > low.max else "<="
    return (f"sums {terms} to a peak of {a.peak:.4g} {side} {limit} "
            f"({said(room, 1.0)}x headroom)" + (f" on {where['source']}" if where else ""))


def accumulator_json(a: Accumulator, sources, low: Precision = FP16) -> dict:
    room = a.headroom(low)
    return {"node": a.node, "op_type": a.op_type,
            "peak": a.peak if a.peak is not None and math.isfinite(a.peak) else None, "terms": a.terms,
            "sample": _source(sources, a.sample),
            "headroom": round(room, 4) if room is not None and math.isfinite(room) else None}
