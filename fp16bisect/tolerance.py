"""Per-output error metrics and the pass rule.

An output passes when, elementwise, ``|a - b| <= atol + rtol * |b|`` (NumPy
``allclose``) holds for all but ``max_mismatch`` of its elements, no element is
NaN or inf where the reference is finite, and, when ``min_cosine`` is set, the
cosine similarity reaches it. All outputs of all samples must pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import math

import numpy as np

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

    def why(self, tol: Tolerance) -> str:
        """Why it failed, with numbers and units."""
        where = f"on output {self.output!r} (sample {self.sample})"
        if self.nonfinite:
            return f"{self.nonfinite} NaN/inf value(s) where the reference is finite {where}"
        if self.mismatch > tol.max_mismatch:
            return (
                f"max abs error {self.max_abs:.3g} exceeds atol {tol.atol:g} + rtol {tol.rtol:g}*|ref| "
                f"({self.excess:.3g}x the allowance) {where}"
            )
        if tol.min_cosine is not None and self.cosine < tol.min_cosine:
            return f"cosine {self.cosine:.6f} < {tol.min_cosine:g} {where}"
        return f"passes {where}"


def compare(actual: np.ndarray, reference: np.ndarray, tol: Tolerance, output: str, sample: int) -> OutputMetrics:
    a = np.asarray(actual, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"output {output!r} has shape {a.shape}, its reference {b.shape}")
    finite_ref = np.isfinite(b)
    nonfinite = int(np.count_nonzero(finite_ref & ~np.isfinite(a)))
    both = finite_ref & np.isfinite(a)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf outside ``both`` is never read
        diff = np.abs(a - b, where=both, out=np.zeros_like(a))
    allowed = tol.atol + tol.rtol * np.abs(np.where(finite_ref, b, 0.0))
    ok = np.where(finite_ref, both & (diff <= allowed), (a == b) | (np.isnan(a) & np.isnan(b)))
    size = max(a.size, 1)
    mismatch = float(np.count_nonzero(~ok)) / size
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(both & (b != 0), diff / np.abs(b), 0.0)
        excess = np.where(both, diff / allowed, 0.0)
    max_abs = float(diff.max()) if a.size else 0.0
    max_rel = float(rel.max()) if a.size else 0.0
    cosine = _cosine(np.where(both, a, 0.0), np.where(both, b, 0.0))
    if nonfinite:  # the error there is unbounded: never 0 and cosine 1 from the finite pairs alone
        max_abs = max_rel = float(np.inf if np.any(finite_ref & np.isinf(a)) else np.nan)
        cosine = float("nan")
    passed = nonfinite == 0 and mismatch <= tol.max_mismatch
    if tol.min_cosine is not None and cosine < tol.min_cosine:
        passed = False
    return OutputMetrics(
        output=output,
        sample=sample,
        max_abs=max_abs,
        max_rel=max_rel,
        cosine=cosine,
        mismatch=mismatch,
        nonfinite=nonfinite,
        excess=float(np.inf if nonfinite else (excess.max() if a.size else 0.0)),
        passed=passed,
    )


def worst_per_output(metrics: list[OutputMetrics]) -> dict[str, OutputMetrics]:
    """The worst sample of each output (failures first, then largest excess)."""
    worst: dict[str, OutputMetrics] = {}
    for m in metrics:
        current = worst.get(m.output)
        if current is None or (not m.passed, m.excess) > (not current.passed, current.excess):
            worst[m.output] = m
    return worst


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    # einsum, not np.dot/np.linalg.norm: BLAS threads spinning on a busy machine made a 64K-element dot 150x
    # slower (13 ms, not 0.09 ms), and the report's per-node errors take thousands of them
    a, b = a.ravel(), b.ravel()
    na, nb = math.sqrt(np.einsum("i,i->", a, a)), math.sqrt(np.einsum("i,i->", b, b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(np.einsum("i,i->", a, b) / (na * nb), -1.0, 1.0))


def _json_float(x: float):
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
