"""The error metrics of one output against its reference, judged by a ``Tolerance`` (``values.py``): max abs and
relative error, cosine, mismatched elements, NaN/inf where the reference is finite, the task metrics; and the
worst per output."""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, replace

import numpy as np

from fp16bisect.errors import UsageError

from fp16bisect.tolerance.rules import argmax_differs, statistic, topk_differs
from fp16bisect.tolerance.values import TIE, Tolerance

METRICS_ONLY = Tolerance(atol=sys.float_info.max, rtol=0.0)
EXACT = Tolerance(atol=0.0, rtol=0.0)  # integer and boolean outputs


@dataclass(frozen=True)
class OutputMetrics:
    output: str
    sample: int
    # with NaN/inf where the reference is finite (nonfinite > 0): max_abs and max_rel are inf (an inf there) or NaN
    # (NaN only), cosine NaN; else over the pairs:
    max_abs: float  # max |a - b|
    max_rel: float  # max |a - b| / |b| where b != 0
    cosine: float
    mismatch: float  # fraction of elements outside atol + rtol*|b| (non-finite ones included)
    nonfinite: int  # NaN or inf where the reference is finite
    excess: float  # max |a - b| / (atol + rtol*|b|): above 1 fails the elementwise rule (with ``rule`` a
    # statistic: that statistic of it; argmax/topk: the share of positions that differ)
    passed: bool
    rule: str = ""  # "": every element (max); mean|median|pNN: that statistic; argmax|topk|exact|accept

    def to_json(self) -> dict:
        return {k: _json_float(v) if isinstance(v, float) else v for k, v in asdict(self).items()
                if k != "rule" or v}

    def ratio(self) -> str:
        """The worst error against its allowance, in words where it is no finite number."""
        if self.rule in ("argmax", "topk", "accept"):
            return f"{self.rule} {'holds' if self.passed else 'fails'}"
        if self.rule not in ("", "exact") and not self.nonfinite:
            return f"its {self.rule} error {self.excess:.3g}x the allowance"
        if self.nonfinite:
            return "NaN/inf where the reference is finite"
        if math.isinf(self.excess):
            return "where the allowance is 0: atol 0 and rtol*|ref| 0"
        return f"{self.excess:.3g}x the allowance"

    def why(self, tol: Tolerance) -> str:
        """Why it failed, with numbers and units."""
        where = f"on output {self.output!r} (sample {self.sample})"
        tol = tol.for_output(self.output)
        if self.rule == "accept":
            return f"the accept function returned False on sample {self.sample}"
        if self.rule in ("argmax", "topk") and not self.passed and not self.nonfinite:
            return f"its {self.rule} differs from the reference's at {self.mismatch:.2%} of positions {where}"
        if self.rule == "exact" and not self.passed:
            return f"{self.mismatch:.2%} of its integers differ (max |a - b| {self.max_abs:g}) {where}"
        if self.rule not in ("", "exact", "argmax", "topk") and self.excess > 1 and not self.nonfinite:
            return (f"the {self.rule} of its error is {self.excess:.3g}x the allowance atol {tol.atol:g} + "
                    f"rtol {tol.rtol:g}*|ref| {where}")
        if self.nonfinite:
            return f"{self.nonfinite} NaN/inf value(s) where the reference is finite {where}"
        if self.mismatch > tol.max_mismatch:
            return (
                f"max abs error {self.max_abs:.3g} exceeds atol {tol.atol:g} + rtol {tol.rtol:g}*|ref| "
                f"({self.ratio()}) {where}"
            )
        if tol.min_cosine is not None and self.cosine < tol.min_cosine:
            return f"cosine {self.cosine:.6f} < {tol.min_cosine:g} {where}"
        return f"passes {where}"


def compare(actual: np.ndarray, reference: np.ndarray, tol: Tolerance, output: str, sample: int) -> OutputMetrics:
    return compare_many([(output, actual, reference)], tol, sample)[0]


def compare_many(pairs, tol: Tolerance, sample: int) -> list[OutputMetrics]:
    """``compare`` of each (output, actual, reference) in ``pairs``, each by its own values (``for_output``);
    integer and boolean outputs exactly, an output with ``argmax`` or ``topk`` by its indices."""
    pairs = [(output, np.asarray(x), np.asarray(y)) for output, x, y in pairs]
    if not tol.per_output and tol.argmax is None and tol.topk is None and all(_floating(y) for _, _, y in pairs):
        return _compare_values(pairs, tol, sample)
    return [_compare_one(output, x, y, tol.for_output(output), sample) for output, x, y in pairs]


def _floating(y: np.ndarray) -> bool:
    return y.dtype.kind in "fc" or y.dtype == object


def _compare_one(output: str, x: np.ndarray, y: np.ndarray, tol: Tolerance, sample: int) -> OutputMetrics:
    if x.shape != y.shape:
        raise ValueError(f"output {output!r} has shape {x.shape}, its reference {y.shape}")
    if not _floating(y):  # integers and booleans: exactly
        m = _compare_values([(output, x.astype(np.float64), y.astype(np.float64))], EXACT, sample)[0]
        return replace(m, rule="exact")
    m = _compare_values([(output, x, y)], tol, sample)[0]
    if tol.argmax is None and tol.topk is None:
        return m
    rule, axis = ("topk", tol.topk[1]) if tol.topk is not None else ("argmax", int(tol.argmax or 0))
    if not -y.ndim <= axis < y.ndim:
        raise UsageError(f"{rule} on output {output!r}: it has {y.ndim} axes, so axis {axis} is none of them: give "
                         f"an axis from {-y.ndim} to {y.ndim - 1}" if y.ndim else f"{rule} on output {output!r}: it "
                         "is a scalar: judge it by atol and rtol")
    differs, positions = (topk_differs(x, y, tol.topk[0], axis, TIE) if tol.topk is not None
                          else argmax_differs(x, y, axis, TIE))
    share = differs / max(positions, 1)
    return replace(m, mismatch=share, excess=share, passed=differs == 0 and m.nonfinite == 0,
                   rule=rule)


def accepted(tol: Tolerance, outputs: dict, reference: dict, sample: int) -> OutputMetrics | None:
    """The ``accept`` function's verdict on one sample, as a metric of the pseudo-output ``accept()`` (None
    without one)."""
    if tol.accept is None:
        return None
    try:
        ok = bool(tol.accept(dict(outputs), dict(reference)))
    except Exception as exc:
        raise UsageError(f"the accept function raised {type(exc).__name__} on sample {sample}: {exc}") from exc
    return OutputMetrics(output=ACCEPT, sample=sample, max_abs=0.0, max_rel=0.0, cosine=1.0,
                         mismatch=0.0 if ok else 1.0, nonfinite=0, excess=0.0 if ok else 1.0, passed=ok,
                         rule="accept")


ACCEPT = "accept()"  # the pseudo-output the accept function's verdicts are metrics of


def _compare_values(pairs, tol: Tolerance, sample: int) -> list[OutputMetrics]:
    """Each (output, actual, reference) in ``pairs`` by ``tol``'s values: their elements in one array, each step
    one NumPy pass over them all and one ``reduceat`` per tensor (the report's per-node errors compare thousands
    of small tensors, where the calls cost, not the elements)."""
    actual, reference, bounds = [], [], [0]
    for output, x, y in pairs:
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            raise ValueError(f"output {output!r} has shape {x.shape}, its reference {y.shape}")
        actual.append(x.ravel())
        reference.append(y.ravel())
        bounds.append(bounds[-1] + x.size)
    a, b = (np.concatenate(v or [np.zeros(0)], dtype=np.float64) for v in (actual, reference))
    e = _Elementwise.finite(a, b, tol) if np.isfinite(a).all() and np.isfinite(b).all() else _Elementwise(a, b, tol)
    with np.errstate(over="ignore", invalid="ignore"):
        aa, bb, ab = (per_tensor(v, bounds, np.add) for v in (e.a * e.a, e.b * e.b, e.a * e.b))
    nonfinite, wrong, infinite = (per_tensor(v.astype(np.intp), bounds, np.add) if v is not None
                                  else np.zeros(len(pairs), dtype=np.intp) for v in (e.bad, ~e.ok, e.inf))
    max_abs, max_rel, max_excess = (per_tensor(v, bounds, np.maximum) for v in (e.diff, e.rel, e.excess))
    found = []
    for i, (output, _, _) in enumerate(pairs):
        bad, size = int(nonfinite[i]), bounds[i + 1] - bounds[i]
        mismatch = float(wrong[i]) / max(size, 1)
        cosine = cosine_of(float(aa[i]), float(bb[i]), float(ab[i]))
        worst, worst_rel = float(max_abs[i]), float(max_rel[i])
        if bad:  # the error there is unbounded: never 0 and cosine 1 from the finite pairs alone
            worst = worst_rel = float(np.inf if infinite[i] else np.nan)
            cosine = float("nan")
        passed = bad == 0 and mismatch <= tol.max_mismatch
        excess = float(np.inf if bad else max_excess[i])
        if tol.error_stat != "max":  # that statistic of the error against its allowance, not every element's
            excess = float(np.inf) if bad else statistic(e.excess[bounds[i]:bounds[i + 1]], tol.error_stat)
            passed = bad == 0 and excess <= 1
        if tol.min_cosine is not None and cosine < tol.min_cosine:
            passed = False
        found.append(OutputMetrics(output=output, sample=sample, max_abs=worst, max_rel=worst_rel, cosine=cosine,
                                   mismatch=mismatch, nonfinite=bad, excess=excess, passed=passed,
                                   rule="" if tol.error_stat == "max" else tol.error_stat))
    return found


class _Elementwise:
    """Per element: the pairs compared (``a``, ``b``: 0 where either is not finite or the reference is not), their
    |a - b| (``diff``), relative error, share of the allowance (``excess``), whether it holds (``ok``), and
    where a NaN or inf stands for a finite reference (``bad``), an inf one (``inf``; both None when all is finite)."""

    def __init__(self, a: np.ndarray, b: np.ndarray, tol: Tolerance):
        finite_ref = np.isfinite(b)
        both = finite_ref & np.isfinite(a)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf outside ``both`` is never read
            self.diff = np.abs(a - b, where=both, out=np.zeros_like(a))
        allowed = tol.atol + tol.rtol * np.abs(np.where(finite_ref, b, 0.0))
        self.ok = np.where(finite_ref, both & (self.diff <= allowed), (a == b) | (np.isnan(a) & np.isnan(b)))
        with np.errstate(divide="ignore", invalid="ignore"):
            self.rel = np.where(both & (b != 0), self.diff / np.abs(b), 0.0)
            self.excess = np.where(both & (self.diff > 0), self.diff / allowed, 0.0)  # exact: within any allowance
        self.a, self.b = np.where(both, a, 0.0), np.where(both, b, 0.0)
        self.bad, self.inf = finite_ref & ~both, finite_ref & np.isinf(a)

    @classmethod
    def finite(cls, a: np.ndarray, b: np.ndarray, tol: Tolerance) -> "_Elementwise":
        """The same when every value is finite (the common case), without the masks."""
        e = cls.__new__(cls)
        e.a, e.b, e.diff = a, b, np.abs(a - b)
        allowed = tol.atol + tol.rtol * np.abs(b)
        e.ok = e.diff <= allowed
        with np.errstate(divide="ignore", invalid="ignore"):
            e.rel = np.divide(e.diff, np.abs(b), out=np.zeros_like(a), where=b != 0)
            e.excess = np.divide(e.diff, allowed, out=np.zeros_like(a), where=e.diff > 0)  # exact: within any
        e.bad = e.inf = None  # none anywhere
        return e


def per_tensor(values: np.ndarray, bounds: list[int], ufunc, dtype=None) -> np.ndarray:
    """``ufunc`` reduced over each tensor's elements, ``values[bounds[i]:bounds[i + 1]]`` (0 for no elements),
    accumulated in ``dtype`` (None: the values' own)."""
    sizes = np.diff(bounds)
    out = np.zeros(len(sizes), dtype=dtype or values.dtype)
    full = sizes > 0
    if full.any():
        out[full] = ufunc.reduceat(values, np.asarray(bounds[:-1])[full], dtype=dtype)
    return out


def worst_per_output(metrics: list[OutputMetrics]) -> dict[str, OutputMetrics]:
    """The worst sample of each output (failures first, then largest excess)."""
    worst: dict[str, OutputMetrics] = {}
    for m in metrics:
        current = worst.get(m.output)
        if current is None or (not m.passed, m.excess) > (not current.passed, current.excess):
            worst[m.output] = m
    return worst


def cosine_of(aa: float, bb: float, ab: float) -> float:
    """The cosine of two vectors from their sums of squares and of products."""
    na, nb = math.sqrt(aa), math.sqrt(bb)
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(ab / (na * nb), -1.0, 1.0))


def _json_float(x: float):
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
