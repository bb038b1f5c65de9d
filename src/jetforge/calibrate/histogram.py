"""Streaming histograms of ``|x|`` whose range grows as later batches exceed it.

Semantics follow pytorch-quantization's ``HistogramCalibrator`` (``calib/histogram.py``): the first
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
DEFAULT_MAX_BINS = 4 * DEFAULT_BINS  # the mse search is O(bins^2): 8192 bins take ~0.2 s per tensor
_CHUNK = 1 << 22
_FAST_CHUNK = 1 << 16  # float32 path: buffers stay in L2
_MIN_FAST_WIDTH = 1e-30  # below, 1/width overflows float32: use the float64 path


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
        self._grid_key = None  # cached float32 bin grid (width, bins)
        self._grid = None

    # ----------------------------------------------------------------- update
    def update(self, x: np.ndarray) -> None:
        """Add a batch (any shape).  One pass over it in cache-sized chunks: min/max/sum/sum of squares,
        ``|x|`` once, bin indices by a float32 multiply corrected against the exact edges, ``np.bincount``."""
        a = np.asarray(x)
        if a.size == 0:
            return
        a = a.reshape(-1)
        if a.dtype != np.float32 and a.dtype != np.float64:
            a = a.astype(np.float32)  # float16 (and small ints) convert exactly
        if a.dtype == np.float32 and self.width >= _MIN_FAST_WIDTH and self._update_f32_in_range(a):
            return
        lo, hi = float(a.min()), float(a.max())  # NaN propagates into both; inf shows in one
        if not (math.isfinite(lo) and math.isfinite(hi)):
            finite = np.isfinite(a)
            self.nonfinite += int(a.size - np.count_nonzero(finite))
            a = a[finite]
            if a.size == 0:
                return
            lo, hi = float(a.min()), float(a.max())
        self.count += int(a.size)
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)
        batch_max = max(-lo, hi)
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
        if a.dtype == np.float32 and self.width >= _MIN_FAST_WIDTH:
            self._update_f32(a)
        else:
            self._update_f64(a)

    def _update_f64(self, a: np.ndarray) -> None:
        """float64 data: ``floor(|x| / w)`` in float64 (exact division), in bounded chunks."""
        n = len(self.counts)
        for start in range(0, a.size, _CHUNK):
            part = a[start:start + _CHUNK].astype(np.float64)
            self._sum += float(part.sum())
            self._sumsq += float(np.dot(part, part))
            idx = (np.abs(part) / self.width).astype(np.int64)  # floor for non-negative values
            np.minimum(idx, n - 1, out=idx)
            self.counts += np.bincount(idx, minlength=n)[:n]

    def _update_f32(self, a: np.ndarray) -> None:
        """float32 data, exactly the bins of ``np.histogram(|x|, edges())`` (see :class:`_ChunkBinner`).
        A value on the last edge goes into the last bin (closed, as numpy's)."""
        n = len(self.counts)
        binner = _ChunkBinner(*self._f32_grid(n), n, min(a.size, _FAST_CHUNK))
        for start in range(0, a.size, _FAST_CHUNK):
            binner.add(a[start:start + _FAST_CHUNK], nonnegative=False)
        self._commit(binner, n)

    def _update_f32_in_range(self, a: np.ndarray) -> bool:
        """The common case in one pass over memory: a float32 batch, all finite, within the current bins.

        Each chunk's min and max are taken while it is in cache, before it is binned; the first chunk
        that is not finite or would need more bins abandons the pass (nothing is kept) and :meth:`update`
        takes its general path, so the result is always the same.  A chunk with no negative value skips
        ``abs``.
        """
        n = len(self.counts)
        limit = n * self.width
        binner = _ChunkBinner(*self._f32_grid(n), n, min(a.size, _FAST_CHUNK))
        lo, hi = math.inf, -math.inf
        for start in range(0, a.size, _FAST_CHUNK):
            part = a[start:start + _FAST_CHUNK]
            plo, phi = float(part.min()), float(part.max())
            if not (math.isfinite(plo) and math.isfinite(phi)):
                return False
            if max(-plo, phi) > limit or math.ceil(max(-plo, phi) / self.width) > n:
                return False
            lo, hi = min(lo, plo), max(hi, phi)
            binner.add(part, nonnegative=plo >= 0.0)
        self.count += int(a.size)
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)
        self.amax = max(self.amax, max(-lo, hi))
        self._commit(binner, n)
        return True

    def _commit(self, binner: "_ChunkBinner", n: int) -> None:
        counts = binner.counts
        counts[n - 1] += counts[n]
        self.counts += counts[:n]
        self._sum += binner.total
        self._sumsq += binner.total_sq

    def _f32_grid(self, n: int):
        """(``inv``, upper edges as float32, doorstep threshold) of the current grid, cached per (width, bins).

        ``inv`` is ``1/w`` rounded down far enough that ``q = |x| * inv`` (float32) is below ``|x|/w``, so
        ``floor(q)`` is the right bin or the one below; ``up[i]`` is the smallest float32 >= the float64
        upper edge of bin ``i`` (``x >= up[i]`` exactly when ``x >= (i+1)*w`` in float64).
        """
        key = (self.width, n)
        if self._grid_key != key:
            v = (1.0 / self.width) * (1.0 - 2.0 ** -22)
            inv = np.float32(v)
            if float(inv) > v:
                inv = np.nextafter(inv, np.float32(0))
            edges = np.arange(1, n + 2, dtype=np.float64) * self.width  # upper edge of bins 0..n
            up = edges.astype(np.float32)
            below = up.astype(np.float64) < edges
            up[below] = np.nextafter(up[below], np.float32(np.inf))
            self._grid = (inv, up, _doorstep(n))
            self._grid_key = key
        return self._grid

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


def _doorstep(n: int) -> Optional[np.float32]:
    """The fraction of ``q`` from which ``floor(q)`` may be one bin short, on a grid of ``n`` bins (None: too
    many bins for the shortcut; every value is checked against its edge).

    For a value in bin ``k`` (``k <= n``), ``q`` lies in ``[k - k*2**-21, k + 1)`` (``inv`` is ``1/w`` lowered
    by ``2**-22`` and by float32 rounding, the product by one more rounding), so ``floor(q) == k - 1`` only
    when ``q - floor(q) >= 1 - k*2**-21``; twice that margin, ``(n + 1) * 2**-20``, catches every such value.
    """
    margin = (n + 1) * 2.0 ** -20
    return None if margin >= 0.25 else np.float32(1.0 - margin)


class _ChunkBinner:
    """Bin counts of ``|x|`` for cache-sized float32 chunks on a fixed grid, exactly ``np.histogram``'s.

    ``q = |x| * inv``: ``floor(q)`` is the bin or the one below (:meth:`StreamingHistogram._f32_grid`).
    Only a value whose ``q`` sits within :func:`_doorstep` of the next integer can be one short; those few
    (about ``n * 2**-20`` of the values) are compared with the float32 upper edge of their bin and moved
    up where they reach it, so the other values need no look-up (gathering every value's edge and
    comparing it cost as much as the rest of the pass).  Buffers are reused across chunks.
    """

    def __init__(self, inv, upper: np.ndarray, doorstep: Optional[np.float32], n: int, size: int) -> None:
        self.inv, self.upper, self.doorstep, self.n = inv, upper, doorstep, n
        self.counts = np.zeros(n + 1, dtype=np.int64)
        self.total, self.total_sq = 0.0, 0.0
        self._abs = np.empty(size, dtype=np.float32)
        self._q = np.empty(size, dtype=np.float32)
        self._floor = np.empty(size, dtype=np.float32)
        self._idx = np.empty(size, dtype=np.intp)
        self._mask = np.empty(size, dtype=bool)

    def add(self, part: np.ndarray, nonnegative: bool) -> None:
        k = part.size
        qv, fv, iv, mv = self._q[:k], self._floor[:k], self._idx[:k], self._mask[:k]
        self.total += float(part.sum())                    # float32 pairwise within a chunk
        if nonnegative:
            av = part
        else:
            av = self._abs[:k]
            np.abs(part, out=av)
        self.total_sq += float(np.dot(av, av))
        np.multiply(av, self.inv, out=qv)
        np.floor(qv, out=fv)
        np.copyto(iv, fv, casting="unsafe")                # floor(q): the bin or the one below
        if self.doorstep is None:
            near = np.arange(k)
        else:
            np.subtract(qv, fv, out=qv)                    # q - floor(q), exact in float32
            np.greater_equal(qv, self.doorstep, out=mv)
            near = np.flatnonzero(mv) if mv.any() else None
        if near is not None:                               # the few that may be one short: their own edge
            low = iv[near]
            iv[near] = low + (av[near] >= self.upper[low])
        c = np.bincount(iv, minlength=self.n + 1)
        if len(c) > self.n + 1:  # pragma: no cover - only past the last edge, which batch_max rules out
            c[self.n] += c[self.n + 1:].sum()
        self.counts += c[:self.n + 1]
