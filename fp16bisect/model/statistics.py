"""What the low precision does to one tensor's values: ``TensorStats``, its measures and its risk tier.

The FP32 profile records one ``TensorStats`` per float tensor (and per
initializer), its elements counted against the run's precision (``low``); each
gets a risk tier, which the precision defines (``Precision.tier``). For FP16:

    3 overflow    |x| rounds to inf in FP16 (|x| >= 65520)
    2 near        |x| within a factor of 2 of 65504, or nonzero values that
                  flush to zero in FP16 (|x| < ~3e-8)
    1 subnormal   nonzero values below the FP16 normal range (6.1e-5)
    0 fine

BF16 has FP32's range: its tiers are those of values past 3.39e38 (masks) and
nothing else (its risk is relative rounding, ``model/relative_rounding.py``).

``TensorStats.add`` measures a whole tensor; ``add_counts`` takes the same
measures from the counts the instrumented model computes in its run
(``model/instrument.py``); ``merge`` adds one sample's measures, noting the
sample that reached the peak (and the smallest non-zero magnitude): the
headroom the override JSON reports. ``stress_order`` sorts samples most
stressing first from their per-sample peaks: the order the oracle tries them in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fp16bisect.model.precision import FP16, TIERS, Precision

CHUNK = 1 << 22  # elements measured at once
FP32_MIN_NORMAL = float(np.finfo(np.float32).tiny)
FLOAT32_MAX = float(np.finfo(np.float32).max)
__all__ = ["TIERS", "TensorStats", "stress_order"]


@dataclass
class TensorStats:
    name: str
    max_abs: float = 0.0
    min_nonzero: float = float("inf")
    overflow: int = 0  # elements that become inf in ``low``
    flushed: int = 0  # nonzero elements that become 0 in ``low``
    subnormal: int = 0  # nonzero elements below ``low``'s normal range
    size: int = 0
    initializer: bool = False
    peak_sample: int = -1  # the sample whose run reached max_abs (-1: none, or a weight)
    min_sample: int = -1  # the sample whose run reached min_nonzero
    low: Precision = FP16  # the precision the counts are against

    def merge(self, other: TensorStats, sample: int) -> None:
        """Add one sample's measures of this tensor (``other``, measured on that sample alone), noting which
        sample reached the peak and the smallest non-zero magnitude."""
        if other.max_abs > self.max_abs or other.max_abs == self.max_abs and 0 <= sample < self.peak_sample:
            self.peak_sample = sample  # ties go to the first sample, in whatever order the samples are merged
        if other.min_nonzero < self.min_nonzero or (other.min_nonzero == self.min_nonzero
                                                    and 0 <= sample < self.min_sample):
            self.min_sample = sample
        self.size += other.size
        self.max_abs = max(self.max_abs, other.max_abs)
        self.min_nonzero = min(self.min_nonzero, other.min_nonzero)
        self.subnormal += other.subnormal
        self.flushed += other.flushed
        self.overflow += other.overflow

    @property
    def peak_fraction(self) -> float:
        """max |x| as a fraction of ``low``'s largest finite value: above 1 overflows."""
        return self.max_abs / self.low.max

    @property
    def headroom(self) -> float:
        """How many times max |x| could grow before reaching ``low``'s largest finite value (inf for zeros)."""
        return self.low.max / self.max_abs if self.max_abs > 0 else float("inf")

    def add(self, values: np.ndarray) -> None:
        flat = np.asarray(values).reshape(-1)
        if flat.size > CHUNK:  # a weight of 100 MB measured in pieces: a few temporaries of 16 MB, not of 100
            for start in range(0, flat.size, CHUNK):
                self.add(flat[start:start + CHUNK])
            return
        a = np.abs(flat.astype(np.float32, copy=False))
        top = float(a.max()) if a.size else 0.0
        if not np.isfinite(top):  # NaN or inf: counted in the size, measured on the finite values only
            finite = np.isfinite(a)
            self.size += int(a.size - np.count_nonzero(finite))
            a = a[finite]
            top = float(a.max()) if a.size else 0.0
        self.size += int(a.size)
        if top < FP32_MIN_NORMAL:
            return  # nothing but zeros and FP32 denormals
        self.max_abs = max(self.max_abs, top)
        if top >= self.low.overflow_at:
            self.overflow += int(np.count_nonzero(a >= self.low.overflow_at))
        small = a < self.low.smallest_normal
        below = a[small]
        below = below[below >= FP32_MIN_NORMAL]  # FP32 denormals: zeros to a GPU (flush-to-zero), no FP16 risk
        a[small] = np.inf
        self.min_nonzero = min(self.min_nonzero, float(a.min()), float(below.min()) if below.size else float("inf"))
        self.subnormal += int(below.size)
        self.flushed += int(np.count_nonzero(below <= self.low.flushed_at))  # FP16: 2^-25 ties to 0, above: 2^-24

    def add_counts(self, size: int, max_abs: float, min_nonzero: float, subnormal: int, flushed: int,
                   overflow: int = 0) -> None:
        """What ``add`` would do on a tensor whose values are all finite, from its counts: its size, max |x|,
        min |x| over |x| >= 2^-126 (inf if none), how many of its |x| >= 2^-126 are subnormal in ``low`` (FP16:
        below 2^-14) and flushed to 0 in ``low`` (FP16: at most 2^-25), and how many become inf in ``low``
        (FP16: at least 65520)."""
        self.size += int(size)
        if max_abs < FP32_MIN_NORMAL:
            return  # nothing but zeros and FP32 denormals
        self.max_abs = max(self.max_abs, float(max_abs))
        self.min_nonzero = min(self.min_nonzero, float(min_nonzero))
        self.subnormal += int(subnormal)
        self.flushed += int(flushed)
        self.overflow += int(overflow)

    @property
    def sentinel(self) -> bool:
        """Holds float32's largest magnitude exactly (3.4028235e38): a mask value (Hugging Face exports build
        attention masks from ``torch.finfo(float32).min``), not a result that grew past FP16's range. In FP16 it
        is -inf (or, from a constant, -65504 by the writer's rule): what a mask means. Pinning such a node in FP32
        only carries the 3.4e38 on to the FP16 nodes after it, so it is not a suspect (the search still finds it
        where it matters: a fully masked row, say, by the error it causes)."""
        return self.max_abs >= FLOAT32_MAX

    @property
    def tier(self) -> int:
        """The risk tier ``low`` gives this tensor (``Precision.tier``)."""
        return self.low.tier(self)

    @property
    def severity(self) -> float:
        """Orders tensors within a tier: how far past the limit, or how much is lost."""
        return self.low.severity(self)

    def describe(self) -> str:
        return self.low.describe(self)


def stress_order(peaks: np.ndarray, smallest: np.ndarray, tight: int = 8, low: Precision = FP16) -> list[int]:
    """Sample indices, most stressing first. ``peaks[s, t]``/``smallest[s, t]``: sample s's max |x| and smallest
    non-zero |x| of tensor t. The risky tensors are the ``tight`` ones closest to ``low``'s largest finite
    value over all samples (and those closest to its normal range, for underflow); a sample stresses more when
    it drives them closer to those limits: first by its highest fraction of the largest finite value, then by
    its lowest minimum against the smallest normal, then by how close it comes to each risky tensor's overall
    peak on average. Ties keep the given order."""
    count = peaks.shape[0] if peaks.ndim == 2 else 0
    if count <= 1 or peaks.shape[1] == 0:
        return list(range(count))
    overall = peaks.max(axis=0)
    risky = np.argsort(-overall, kind="stable")[:tight]
    over = peaks[:, risky].max(axis=1) / low.max
    least = np.where(np.isfinite(smallest) & (smallest > 0), smallest, np.inf)
    lowest = least.min(axis=0)
    tiny = np.argsort(lowest, kind="stable")[:tight]
    under = np.where(np.isfinite(least[:, tiny]), low.smallest_normal / least[:, tiny], 0.0).max(axis=1)
    closeness = (peaks[:, risky] / np.where(overall[risky] > 0, overall[risky], 1.0)).mean(axis=1)
    keys = [(-(1.0 if over[s] >= 0.5 else 0.0), -over[s], -min(under[s], 1.0), -closeness[s], s) for s in range(count)]
    return [k[-1] for k in sorted(keys)]
