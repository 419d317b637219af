"""Per-node errors (``compare``'s and the report's): the metrics of ``tolerance.compare_many`` under
``METRICS_ONLY``, in fewer passes, for rules that judge by their own measure. No verdict of the search depends on
them beyond ``passed`` (no NaN/inf where the reference is finite), which is exact.
"""

from __future__ import annotations

import math

import numpy as np

from fp16bisect.tolerance import OutputMetrics, cosine_of, per_tensor

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
                         cosine=cosine_of(aa, bb, (aa + bb - dd) / 2), mismatch=0.0, nonfinite=0, excess=0.0,
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
    max_abs, max_rel = (per_tensor(v, bounds, np.maximum) for v in (diff, rel))
    aa, bb, ab = _sums(a, b, bounds)
    nonfinite, infinite = (per_tensor(v.astype(np.intp), bounds, np.add) if v is not None
                           else np.zeros(len(pairs), dtype=np.intp) for v in (bad, inf))
    found = []
    for i, (output, _, _) in enumerate(pairs):
        count, elements = int(nonfinite[i]), bounds[i + 1] - bounds[i]
        worst, worst_rel = float(max_abs[i]), float(max_rel[i])
        cosine = cosine_of(float(aa[i]), float(bb[i]), float(ab[i]))
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
    aa, bb, ab = (per_tensor(x, bounds, np.add) for x in (a * a, b * b, a * b))
    return aa, bb, ab
