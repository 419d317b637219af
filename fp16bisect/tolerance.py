"""Per-output error metrics and the pass rule.

An output passes when, elementwise, ``|a - b| <= atol + rtol * |b|`` (NumPy
``allclose``) holds for all but ``max_mismatch`` of its elements, no element is
NaN or inf where the reference is finite, and, when ``min_cosine`` is set, the
cosine similarity reaches it. All outputs of all samples must pass.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass

import numpy as np

from fp16bisect.errors import UsageError

# Defaults a deployment engineer accepts for FP16: its unit roundoff is 4.9e-4,
# and a few dozen rounded layers in a row drift by ~1e-3 relative. 1e-2 on
# both keeps real regressions (inf, NaN, flushed values, wrong ranks) visible.
DEFAULT_ATOL = 1e-2
DEFAULT_RTOL = 1e-2


@dataclass(frozen=True)
class Tolerance:
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    min_cosine: float | None = None
    max_mismatch: float = 0.0  # fraction of elements allowed outside atol + rtol*|ref|

    def __post_init__(self) -> None:
        """Each value checked here, wherever it comes from (a flag, a manifest, the API, an override file): one
        ``UsageError`` naming the field and what to give instead. Values are stored as floats."""
        for name in ("atol", "rtol", "max_mismatch"):
            value = _number(name, getattr(self, name))
            if not (math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} {value:g}: give a finite number >= 0")
            object.__setattr__(self, name, value)
        if self.max_mismatch > 1:
            raise UsageError(f"max_mismatch {self.max_mismatch:g} is a fraction of elements: give a number from "
                             "0 to 1")
        if self.min_cosine is not None:
            value = _number("min_cosine", self.min_cosine)
            if not -1 <= value <= 1:  # NaN fails too
                raise UsageError(f"min_cosine {value:g}: give a cosine similarity from -1 to 1")
            object.__setattr__(self, "min_cosine", value)

    def replace(self, atol: float | None = None, rtol: float | None = None, min_cosine: float | None = None,
                max_mismatch: float | None = None) -> Tolerance:
        """This tolerance with each value given (not None) replaced, checked again."""
        given = {"atol": atol, "rtol": rtol, "min_cosine": min_cosine, "max_mismatch": max_mismatch}
        return Tolerance(**{k: getattr(self, k) if v is None else v for k, v in given.items()})

    def __str__(self) -> str:
        text = f"atol {self.atol:g}, rtol {self.rtol:g}"
        if self.min_cosine is not None:
            text += f", cosine >= {self.min_cosine:g}"
        if self.max_mismatch:
            text += f", up to {self.max_mismatch:.2%} of elements may exceed"
        return text

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GivenTolerance:
    """The tolerance values a caller gave, each None where another source's applies (an override file's
    recorded tolerance, else the defaults): ``over`` fills them in. Checked when made, as a ``Tolerance``."""

    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None
    max_mismatch: float | None = None

    def __post_init__(self) -> None:
        Tolerance().replace(**self.values())  # each given value checked now, not when the check runs

    def values(self) -> dict:
        return {"atol": self.atol, "rtol": self.rtol, "min_cosine": self.min_cosine,
                "max_mismatch": self.max_mismatch}

    @property
    def given(self) -> bool:
        return any(v is not None for v in self.values().values())

    def over(self, base: Tolerance) -> Tolerance:
        """``base`` with the given values in place of its own."""
        return base.replace(**self.values())


def _number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UsageError(f"{name} {value!r} is not a number: give a finite number")
    return float(value)


# For metrics alone (what a comparison measures, not whether it passes): no finite error exceeds it.
METRICS_ONLY = Tolerance(atol=sys.float_info.max, rtol=0.0)


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
    excess: float  # max |a - b| / (atol + rtol*|b|): above 1 fails the elementwise rule
    passed: bool

    def to_json(self) -> dict:
        return {k: _json_float(v) if isinstance(v, float) else v for k, v in asdict(self).items()}

    def ratio(self) -> str:
        """The worst error against its allowance, in words where it is no finite number."""
        if self.nonfinite:
            return "NaN/inf where the reference is finite"
        if math.isinf(self.excess):
            return "where the allowance is 0: atol 0 and rtol*|ref| 0"
        return f"{self.excess:.3g}x the allowance"

    def why(self, tol: Tolerance) -> str:
        """Why it failed, with numbers and units."""
        where = f"on output {self.output!r} (sample {self.sample})"
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
    """``compare`` of each (output, actual, reference) in ``pairs``: their elements in one array, each step one
    NumPy pass over them all and one ``reduceat`` per tensor (the report's per-node errors compare thousands of
    small tensors, where the calls cost, not the elements)."""
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
        aa, bb, ab = (_per_tensor(v, bounds, np.add) for v in (e.a * e.a, e.b * e.b, e.a * e.b))
    nonfinite, wrong, infinite = (_per_tensor(v.astype(np.intp), bounds, np.add) if v is not None
                                  else np.zeros(len(pairs), dtype=np.intp) for v in (e.bad, ~e.ok, e.inf))
    max_abs, max_rel, max_excess = (_per_tensor(v, bounds, np.maximum) for v in (e.diff, e.rel, e.excess))
    found = []
    for i, (output, _, _) in enumerate(pairs):
        bad, size = int(nonfinite[i]), bounds[i + 1] - bounds[i]
        mismatch = float(wrong[i]) / max(size, 1)
        cosine = _cosine(float(aa[i]), float(bb[i]), float(ab[i]))
        worst, worst_rel = float(max_abs[i]), float(max_rel[i])
        if bad:  # the error there is unbounded: never 0 and cosine 1 from the finite pairs alone
            worst = worst_rel = float(np.inf if infinite[i] else np.nan)
            cosine = float("nan")
        passed = bad == 0 and mismatch <= tol.max_mismatch
        if tol.min_cosine is not None and cosine < tol.min_cosine:
            passed = False
        found.append(OutputMetrics(output=output, sample=sample, max_abs=worst, max_rel=worst_rel, cosine=cosine,
                                   mismatch=mismatch, nonfinite=bad,
                                   excess=float(np.inf if bad else max_excess[i]), passed=passed))
    return found


_ALONE = 1 << 15  # a tensor this large is compared on its own, without a copy into a batch


def tensor_errors(pairs, sample: int) -> list[OutputMetrics]:
    """The metrics of ``compare_many`` under ``METRICS_ONLY`` (max |a - b|, max relative error, cosine, NaN/inf where
    the reference is finite), for rules that judge by their own measure (the per-node errors of ``compare`` and of
    the report), in fewer passes: large float32 tensors one at a time in float32 (a difference of two float32 values
    is rounded once, 2^-24 of it; the cosine from float32 dot products as (aa + bb - dd) / 2|a||b|, dd the squared
    differences' sum, which keeps its digits near 1: within 2e-8 of float64's), small ones in one batch in float64.
    No verdict depends on it beyond ``passed`` (no NaN/inf where the reference is finite), which is exact."""
    checked = []
    for output, x, y in pairs:
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            raise ValueError(f"output {output!r} has shape {x.shape}, its reference {y.shape}")
        checked.append((output, x.ravel(), y.ravel()))
    alone = [i for i, (_, x, y) in enumerate(checked) if x.size >= _ALONE and x.dtype == y.dtype == np.float32]
    scratch = np.empty(max((checked[i][1].size for i in alone), default=0), dtype=np.float32)
    found = {i: _alone(*checked[i], sample, scratch) for i in alone}
    rest = [i for i in range(len(checked)) if i not in found]
    found.update(zip(rest, _errors([checked[i] for i in rest], sample)))
    return [found[i] for i in range(len(checked))]


def _alone(output: str, a: np.ndarray, b: np.ndarray, sample: int, scratch: np.ndarray) -> OutputMetrics:
    """``tensor_errors`` of one large float32 tensor (flat), its differences in ``scratch``."""
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return _errors([(output, a, b)], sample)[0]
    diff = np.subtract(a, b, out=scratch[: a.size])
    np.abs(diff, out=diff)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(b)
        np.divide(diff, rel, out=rel)
    rel[b == 0] = 0.0  # where the reference is 0 the relative error is not defined
    worst, worst_rel = float(np.max(diff, initial=0.0)), float(np.max(rel, initial=0.0))
    with np.errstate(over="ignore", invalid="ignore"):
        aa, bb, dd = float(a @ a), float(b @ b), float(diff @ diff)
    if not all(map(math.isfinite, (aa, bb, dd))):  # |x| near 1e19: sums past float32's range
        aa, bb, dd = (float(np.einsum("i,i->", x, x, dtype=np.float64)) for x in (a, b, diff))
    return OutputMetrics(output=output, sample=sample, max_abs=worst, max_rel=worst_rel,
                         cosine=_cosine(aa, bb, (aa + bb - dd) / 2), mismatch=0.0, nonfinite=0, excess=0.0,
                         passed=True)


def _errors(pairs, sample: int) -> list[OutputMetrics]:
    """``tensor_errors`` of flat ``pairs``, in one array."""
    bounds = [0]
    for _, x, _ in pairs:
        bounds.append(bounds[-1] + x.size)
    kind = np.float32 if all(x.dtype == y.dtype == np.float32 for _, x, y in pairs) else np.float64
    a, b = (np.concatenate([p[k] for p in pairs] or [np.zeros(0)], dtype=kind) for k in (1, 2))
    bad = inf = None
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        finite_ref = np.isfinite(b)
        both = finite_ref & np.isfinite(a)
        bad, inf = finite_ref & ~both, finite_ref & np.isinf(a)
        a, b = np.where(both, a, 0), np.where(both, b, 0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        diff = np.subtract(a, b)
        np.abs(diff, out=diff)
        size = np.abs(b)
        rel = diff / size
        rel[size == 0] = 0.0  # where the reference is 0 the relative error is not defined
    max_abs, max_rel = (_per_tensor(v, bounds, np.maximum) for v in (diff, rel))
    aa, bb, ab = _sums(a, b, bounds)
    nonfinite, infinite = (_per_tensor(v.astype(np.intp), bounds, np.add) if v is not None
                           else np.zeros(len(pairs), dtype=np.intp) for v in (bad, inf))
    found = []
    for i, (output, _, _) in enumerate(pairs):
        count, elements = int(nonfinite[i]), bounds[i + 1] - bounds[i]
        worst, worst_rel = float(max_abs[i]), float(max_rel[i])
        cosine = _cosine(float(aa[i]), float(bb[i]), float(ab[i]))
        if count:  # as compare_many: the error there is unbounded
            worst = worst_rel = float(np.inf if infinite[i] else np.nan)
            cosine = float("nan")
        found.append(OutputMetrics(output=output, sample=sample, max_abs=worst, max_rel=worst_rel, cosine=cosine,
                                   mismatch=count / max(elements, 1), nonfinite=count,
                                   excess=float(np.inf if count else 0.0), passed=count == 0))
    return found


def _sums(a: np.ndarray, b: np.ndarray, bounds: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each tensor's sums of a*a, b*b and a*b, in float64."""
    a, b = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    aa, bb, ab = (_per_tensor(x, bounds, np.add) for x in (a * a, b * b, a * b))
    return aa, bb, ab


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


def _per_tensor(values: np.ndarray, bounds: list[int], ufunc, dtype=None) -> np.ndarray:
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


def _cosine(aa: float, bb: float, ab: float) -> float:
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
