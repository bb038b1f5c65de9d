"""Streaming histograms of ``|x|`` whose range grows as later batches exceed it.

Semantics follow pytorch-quantization's ``HistogramCalibrator`` (reference §4.4): the first
batch fixes ``num_bins`` (2048) equal-width bins over ``[0, max|x|]``; when a later batch
holds a larger value, bins *of the same width* are appended, so the histogram over all
batches equals a one-pass histogram with that bin width over the combined data.  Unlike
pytorch-quantization, memory is bounded: past ``max_bins`` neighbouring bins are merged
(the width doubles, or more), keeping the bins aligned at 0.
"""

import math
from typing import Dict, Optional

import numpy as np

DEFAULT_BINS = 2048
DEFAULT_MAX_BINS = 4 * DEFAULT_BINS  # entropy is O(bins^2): 8192 bins take ~0.5 s per tensor
_CHUNK = 1 << 22


class StreamingHistogram:
    """Histogram of absolute values with bins ``[k*w, (k+1)*w)``, the last one closed."""

    def __init__(self, num_bins: int = DEFAULT_BINS, max_bins: int = DEFAULT_MAX_BINS) -> None:
        if num_bins < 2 or max_bins < num_bins:
            raise ValueError("need 2 <= num_bins <= max_bins, got %d, %d" % (num_bins, max_bins))
        self.num_bins = int(num_bins)
        self.max_bins = int(max_bins)
        self.counts = np.zeros(0, dtype=np.int64)
        self.width = 0.0
        self.amax = 0.0          # exact running max |x|
        self.min = math.inf      # signed extremes, for reports (a ReLU output has min 0)
        self.max = -math.inf
        self.count = 0
        self.nonfinite = 0
        self._sum = 0.0
        self._sumsq = 0.0
        self._pending_zeros = 0  # values seen while every value so far was 0 (no width yet)
        self.merges = 0

    # ----------------------------------------------------------------- update
    def update(self, x: np.ndarray) -> None:
        a = np.asarray(x)
        if a.size == 0:
            return
        a = a.reshape(-1)
        if a.dtype != np.float32 and a.dtype != np.float64:
            a = a.astype(np.float32)
        finite = np.isfinite(a)
        if not finite.all():
            self.nonfinite += int(a.size - np.count_nonzero(finite))
            a = a[finite]
            if a.size == 0:
                return
        self.count += int(a.size)
        self.min = min(self.min, float(a.min()))
        self.max = max(self.max, float(a.max()))
        a64 = a.astype(np.float64, copy=False)
        self._sum += float(a64.sum())
        self._sumsq += float(np.dot(a64, a64))
        a = np.abs(a)
        batch_max = float(a.max())
        self.amax = max(self.amax, batch_max)
        if self.width == 0.0:
            if batch_max == 0.0:
                self._pending_zeros += int(a.size)
                return
            self.width = batch_max / self.num_bins
            self.counts = np.zeros(self.num_bins, dtype=np.int64)
            self.counts[0] += self._pending_zeros
            self._pending_zeros = 0
        needed = int(math.ceil(batch_max / self.width))
        if needed > len(self.counts):
            self._grow(needed)
        n = len(self.counts)
        for start in range(0, a.size, _CHUNK):  # float64 indices (exact bin edges), in bounded chunks
            part = a[start:start + _CHUNK].astype(np.float64)
            idx = (part / self.width).astype(np.int64)  # floor for non-negative values
            np.minimum(idx, n - 1, out=idx)
            self.counts += np.bincount(idx, minlength=n)[:n]

    def _grow(self, needed: int) -> None:
        if needed > self.max_bins:
            factor = 1
            while math.ceil(needed / factor) > self.max_bins:
                factor *= 2
            self._merge(factor)
            needed = int(math.ceil(needed / factor))
        if needed > len(self.counts):
            self.counts = np.concatenate([self.counts, np.zeros(needed - len(self.counts), dtype=np.int64)])

    def _merge(self, factor: int) -> None:
        n = len(self.counts)
        pad = (-n) % factor
        c = np.concatenate([self.counts, np.zeros(pad, dtype=np.int64)]) if pad else self.counts
        self.counts = c.reshape(-1, factor).sum(axis=1)
        self.width *= factor
        self.merges += 1

    def merge_from(self, other: "StreamingHistogram") -> None:
        """Add another histogram's counts (it is re-binned onto this one's grid when widths differ)."""
        if other.count == 0:
            return
        if self.width == 0.0:
            self.__dict__.update({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in other.__dict__.items()})
            return
        centers = other.centers() if other.width else np.zeros(1)
        counts = other.counts if other.width else np.array([other._pending_zeros])
        needed = int(math.ceil(other.amax / self.width)) if other.amax else 1
        if needed > len(self.counts):
            self._grow(needed)
        idx = np.minimum((centers / self.width).astype(np.int64), len(self.counts) - 1)
        self.counts += np.bincount(idx, weights=counts, minlength=len(self.counts)).astype(np.int64)
        self.amax = max(self.amax, other.amax)
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        self.count += other.count
        self.nonfinite += other.nonfinite
        self._sum += other._sum
        self._sumsq += other._sumsq

    # ----------------------------------------------------------------- views
    @property
    def empty(self) -> bool:
        return self.count == 0

    @property
    def all_zero(self) -> bool:
        return self.count > 0 and self.amax == 0.0

    def edges(self) -> np.ndarray:
        return np.arange(len(self.counts) + 1, dtype=np.float64) * self.width

    def centers(self) -> np.ndarray:
        return (np.arange(len(self.counts), dtype=np.float64) + 0.5) * self.width

    @property
    def mean(self) -> float:
        return self._sum / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        if not self.count:
            return 0.0
        var = self._sumsq / self.count - self.mean ** 2
        return math.sqrt(max(var, 0.0))

    def summary(self) -> Dict[str, object]:
        return {"count": self.count, "bins": int(len(self.counts)), "bin_width": self.width, "amax": self.amax,
                "min": self.min if self.count else None, "max": self.max if self.count else None,
                "mean": self.mean, "std": self.std, "nonfinite": self.nonfinite, "merges": self.merges}

    def nbytes(self) -> int:
        return int(self.counts.nbytes)


def histogram_of(values: np.ndarray, num_bins: int = DEFAULT_BINS, width: Optional[float] = None) -> StreamingHistogram:
    """One-pass histogram (optionally with a fixed bin width), mainly for tests and reports."""
    h = StreamingHistogram(num_bins=num_bins, max_bins=max(DEFAULT_MAX_BINS, num_bins))
    if width is not None:
        a = np.abs(np.asarray(values, dtype=np.float64).reshape(-1))
        h.width = float(width)
        h.counts = np.zeros(max(num_bins, int(math.ceil(a.max() / width)) if a.size else num_bins), dtype=np.int64)
        h.max_bins = max(h.max_bins, len(h.counts))
    h.update(values)
    return h
