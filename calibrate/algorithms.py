"""Calibration algorithms: histogram -> amax (the clipping threshold; the INT8 scale is amax/127).

* ``entropy`` -- TensorRT's EntropyCalibration2 as pytorch-quantization/ModelOpt implement it
  (``_compute_amax_entropy``, reference §4.4): ``bins[0] = bins[1]``; for every candidate
  ``i`` from ``start_bin`` (128) to ``len(bins)`` step ``stride``, P = first ``i`` bins with the
  tail folded into the last one, Q = those bins merged into 128 levels and spread back over
  each level's non-empty bins; KL(P||Q) as ``scipy.stats.entropy``; the **last** argmin wins
  and amax is the **upper** edge of bin ``i-1``.
* ``percentile`` -- ``edges[searchsorted(cumsum(hist)/total, p/100)]`` (99.99 by default).
* ``mse`` -- the bin centre (from ``start_bin``) minimising the histogram-weighted squared
  error of symmetric narrow-range fake quantisation.
* ``max`` -- the exact running max ``|x|``.
"""

from typing import Dict, Optional, Union

import numpy as np

from jetforge.calibrate.histogram import StreamingHistogram
from jetforge.errors import UnknownNameError

ALGORITHMS = ("entropy", "percentile", "mse", "max")


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """``scipy.stats.entropy(p, q)``: normalise both, sum p*log(p/q); inf where q==0<p."""
    sq = np.sum(q)
    if sq == 0:  # nothing left below the threshold: Q cannot represent P (scipy would give nan)
        return float("inf")
    p = p / np.sum(p)
    q = q / sq
    pos = p > 0
    pp, qq = p[pos], q[pos]
    if np.any(qq == 0):
        return float("inf")
    return float(np.sum(pp * np.log(pp / qq)))


def entropy_divergences(counts: np.ndarray, num_bits: int = 8, unsigned: bool = False, stride: int = 1,
                        start_bin: int = 128) -> np.ndarray:
    """KL divergence for every candidate ``i`` in ``range(start_bin, len(counts)+1, stride)``."""
    bins = np.array(counts, dtype=np.float64)  # a copy: pytorch-quantization mutates its histogram here
    if len(bins) < 2:
        raise ValueError("the histogram needs at least 2 bins")
    bins[0] = bins[1]
    nbins = 1 << (num_bits - 1 + int(unsigned))
    nonzero = bins != 0
    # prefix sums of mass and of non-empty bins let each level's sums be read in O(1); counts are
    # integers, so these sums are exact and Q equals the one built bin by bin.
    tail = np.concatenate([np.cumsum(bins[::-1])[::-1], [0.0]])  # tail[i] = sum(bins[i:])
    cmass = np.concatenate([[0.0], np.cumsum(np.where(nonzero, bins, 0.0))])
    cnz = np.concatenate([[0], np.cumsum(nonzero)])
    total = float(np.sum(bins))
    out = []
    for i in range(start_bin, len(bins) + 1, stride):
        j = np.arange(i)
        level = (j * nbins) // i                    # == digitize(j, linspace(0, i, nbins+1)) - 1
        starts = -(-(np.arange(nbins + 1) * i) // nbins)  # first bin of each level (ceil), plus the end
        mass = cmass[starts[1:]] - cmass[starts[:-1]]
        nz = cnz[starts[1:]] - cnz[starts[:-1]]
        per_bin = np.divide(mass, nz, out=np.zeros(nbins), where=nz > 0)
        q = np.where(nonzero[:i], per_bin[level], 0.0)
        p = bins[:i].copy()
        p[-1] += tail[i]
        if round(float(np.sum(q)) + tail[i]) != round(total) or round(float(np.sum(p))) != round(total):
            raise RuntimeError("count mismatch in entropy calibration at i=%d" % i)  # pragma: no cover
        out.append(_kl(p, q))
    return np.array(out)


def amax_entropy(counts: np.ndarray, edges: np.ndarray, num_bits: int = 8, unsigned: bool = False,
                 stride: int = 1, start_bin: int = 128) -> float:
    """EntropyCalibration2 threshold (see the module docstring)."""
    if len(counts) < start_bin:
        # fewer bins than the first candidate (a merged or tiny histogram): every bin is a candidate
        start_bin = 1
    div = entropy_divergences(counts, num_bits, unsigned, stride, start_bin)
    last_argmin = len(div) - 1 - int(np.argmin(div[::-1]))
    return float(edges[last_argmin * stride + start_bin])


def amax_percentile(counts: np.ndarray, edges: np.ndarray, percentile: float = 99.99) -> float:
    if not 0 < percentile <= 100:
        raise ValueError("percentile must be in (0, 100], got %r" % percentile)
    total = counts.sum()
    cdf = np.cumsum(counts / total)
    idx = int(np.searchsorted(cdf, percentile / 100.0))
    return float(edges[min(idx, len(edges) - 1)])


def fake_quant(x: np.ndarray, amax: Union[float, np.ndarray], num_bits: int = 8, unsigned: bool = False,
               narrow_range: bool = True) -> np.ndarray:
    """pytorch-quantization's ``fake_tensor_quant``: round-half-even, clamp, rescale."""
    bound = 2.0 ** (num_bits - 1 + int(unsigned)) - 1
    low = 0.0 if unsigned else (-bound if narrow_range else -bound - 1)
    amax = np.asarray(amax, dtype=np.float64)
    scale = bound / amax
    return np.clip(np.round(x * scale), low, bound) / scale


def mse_errors(counts: np.ndarray, edges: np.ndarray, num_bits: int = 8, unsigned: bool = False,
               start_bin: int = 128, chunk: int = 256) -> np.ndarray:
    centers = (edges[1:] + edges[:-1]) / 2.0
    counts = counts.astype(np.float64)
    out = []
    for lo in range(start_bin, len(centers), chunk):
        cand = centers[lo:min(lo + chunk, len(centers))][:, None]
        q = fake_quant(centers[None, :], cand, num_bits, unsigned)
        out.append(np.mean((q - centers[None, :]) ** 2 * counts[None, :], axis=1))
    return np.concatenate(out) if out else np.zeros(0)


def amax_mse(counts: np.ndarray, edges: np.ndarray, num_bits: int = 8, unsigned: bool = False,
             start_bin: int = 128) -> float:
    if len(counts) <= start_bin:
        start_bin = 0
    errors = mse_errors(counts, edges, num_bits, unsigned, start_bin)
    centers = (edges[1:] + edges[:-1]) / 2.0
    return float(centers[start_bin + int(np.argmin(errors))])


def compute_amax(hist: StreamingHistogram, method: str = "entropy", percentile: float = 99.99,
                 num_bits: int = 8, stride: int = 1, start_bin: int = 128) -> Optional[float]:
    """amax of one collected histogram; None when it saw no data, 0.0 when every value was 0."""
    if method not in ALGORITHMS:
        raise UnknownNameError("calibration algorithm", method, ALGORITHMS)
    if hist.empty:
        return None
    if hist.all_zero:
        return 0.0
    if method == "max":
        return float(hist.amax)
    counts, edges = hist.counts, hist.edges()
    if method == "entropy":
        return amax_entropy(counts, edges, num_bits=num_bits, stride=stride, start_bin=start_bin)
    if method == "percentile":
        return amax_percentile(counts, edges, percentile)
    return amax_mse(counts, edges, num_bits=num_bits, start_bin=start_bin)


def compute_all(hists: Dict[str, StreamingHistogram], method: str = "entropy", **kwargs) -> Dict[str, float]:
    """amax for every histogram that saw data (tensors that saw none are left out)."""
    out = {}
    for name, h in hists.items():
        a = compute_amax(h, method, **kwargs)
        if a is not None:
            out[name] = a
    return out
