"""What FP16 does to one tensor's values: ``TensorStats``, its measures and its risk tier.

The FP32 profile records one ``TensorStats`` per float tensor (and per
initializer); each gets a risk tier:

    3 overflow    |x| rounds to inf in FP16 (|x| >= 65520)
    2 near        |x| within a factor of 2 of 65504, or nonzero values that
                  flush to zero in FP16 (|x| < ~3e-8)
    1 subnormal   nonzero values below the FP16 normal range (6.1e-5)
    0 fine

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

FP16_MAX = 65504.0
CHUNK = 1 << 22  # elements measured at once
FP16_MIN_NORMAL = 6.103515625e-05
FP32_MIN_NORMAL = float(np.finfo(np.float32).tiny)
TIERS = {3: "overflow", 2: "near limit", 1: "subnormal", 0: "fine"}
FP16_OVERFLOW = 65520.0  # the smallest float32 that float16 rounds to inf
FP16_FLUSHED = 2.0**-25  # the largest float32 that float16 rounds to 0 (a tie, to even); anything above: 2^-24
FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass
class TensorStats:
    name: str
    max_abs: float = 0.0
    min_nonzero: float = float("inf")
    overflow: int = 0  # elements that become inf in FP16
    flushed: int = 0  # nonzero elements that become 0 in FP16
    subnormal: int = 0  # nonzero elements below the FP16 normal range
    size: int = 0
    initializer: bool = False
    peak_sample: int = -1  # the sample whose run reached max_abs (-1: none, or a weight)
    min_sample: int = -1  # the sample whose run reached min_nonzero

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
        """max |x| as a fraction of FP16's largest finite value (65504): above 1 overflows."""
        return self.max_abs / FP16_MAX

    @property
    def headroom(self) -> float:
        """How many times max |x| could grow before reaching 65504 (inf for a tensor of zeros)."""
        return FP16_MAX / self.max_abs if self.max_abs > 0 else float("inf")

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
        if top >= FP16_OVERFLOW:
            self.overflow += int(np.count_nonzero(a >= FP16_OVERFLOW))
        small = a < FP16_MIN_NORMAL
        below = a[small]
        below = below[below >= FP32_MIN_NORMAL]  # FP32 denormals: zeros to a GPU (flush-to-zero), no FP16 risk
        a[small] = np.inf
        self.min_nonzero = min(self.min_nonzero, float(a.min()), float(below.min()) if below.size else float("inf"))
        self.subnormal += int(below.size)
        self.flushed += int(np.count_nonzero(below <= FP16_FLUSHED))  # 2^-25 ties to 0, above it to 2^-24

    def add_counts(self, size: int, max_abs: float, min_nonzero: float, subnormal: int, flushed: int,
                   overflow: int = 0) -> None:
        """What ``add`` would do on a tensor whose values are all finite, from its counts: its size, max |x|,
        min |x| over |x| >= 2^-126 (inf if none), how many of its |x| >= 2^-126 are below 2^-14 (subnormal in
        FP16) and at most 2^-25 (flushed to 0 in FP16), and how many are at least 65520 (inf in FP16)."""
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
        if self.overflow:
            return 3
        if self.max_abs >= FP16_MAX / 2 or self.flushed:
            return 2
        if self.subnormal:
            return 1
        return 0

    @property
    def severity(self) -> float:
        """Orders tensors within a tier: how far past the limit, or how much is lost."""
        if self.tier >= 2 and self.max_abs >= FP16_MAX / 2:
            return self.max_abs / FP16_MAX
        if self.size:
            return (self.flushed or self.subnormal) / self.size
        return 0.0

    def describe(self) -> str:
        if self.sentinel:
            return (f"holds +-3.4e38 (float32's max: a mask value, -inf in FP16; {self.overflow} element(s)), "
                    "not a suspect")
        if self.overflow:
            return f"max |x| {self.max_abs:.4g} > 65504 ({self.overflow} element(s) become inf)"
        if self.max_abs >= FP16_MAX / 2:
            return f"max |x| {self.max_abs:.4g} within 2x of 65504"
        if self.flushed:
            return f"{self.flushed} nonzero element(s) flush to 0 (min |x| {self.min_nonzero:.3g})"
        if self.subnormal:
            return f"{self.subnormal} element(s) subnormal in FP16 (min |x| {self.min_nonzero:.3g})"
        return f"max |x| {self.max_abs:.4g}"


def stress_order(peaks: np.ndarray, smallest: np.ndarray, tight: int = 8) -> list[int]:
    """Sample indices, most stressing first. ``peaks[s, t]``/``smallest[s, t]``: sample s's max |x| and smallest
    non-zero |x| of tensor t. The risky tensors are the ``tight`` ones closest to 65504 over all samples (and
    those closest to FP16's normal range, for underflow); a sample stresses more when it drives them closer to
    those limits: first by its highest fraction of 65504, then by its lowest minimum against 6.1e-5, then by how
    close it comes to each risky tensor's overall peak on average. Ties keep the given order."""
    count = peaks.shape[0] if peaks.ndim == 2 else 0
    if count <= 1 or peaks.shape[1] == 0:
        return list(range(count))
    overall = peaks.max(axis=0)
    risky = np.argsort(-overall, kind="stable")[:tight]
    over = peaks[:, risky].max(axis=1) / FP16_MAX
    low = np.where(np.isfinite(smallest) & (smallest > 0), smallest, np.inf)
    lowest = low.min(axis=0)
    tiny = np.argsort(lowest, kind="stable")[:tight]
    under = np.where(np.isfinite(low[:, tiny]), FP16_MIN_NORMAL / low[:, tiny], 0.0).max(axis=1)
    closeness = (peaks[:, risky] / np.where(overall[risky] > 0, overall[risky], 1.0)).mean(axis=1)
    keys = [(-(1.0 if over[s] >= 0.5 else 0.0), -over[s], -min(under[s], 1.0), -closeness[s], s) for s in range(count)]
    return [k[-1] for k in sorted(keys)]
