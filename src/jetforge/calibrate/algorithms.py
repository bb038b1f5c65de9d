"""Calibration algorithms: histogram -> amax (the clipping threshold; the INT8 scale is amax/127).

* ``entropy`` -- TensorRT's EntropyCalibration2 as pytorch-quantization/ModelOpt implement it
  (``_compute_amax_entropy``): ``bins[0] = bins[1]``; for every candidate
  ``i`` from ``start_bin`` (128) to ``len(bins)`` step ``stride``, P = first ``i`` bins with the
  tail folded into the last one, Q = those bins merged into 128 levels and spread back over
  each level's non-empty bins; KL(P||Q) as ``scipy.stats.entropy``; the **last** argmin wins
  and amax is the **upper** edge of bin ``i-1``.
* ``percentile`` -- ``edges[searchsorted(cumsum(hist)/total, p/100)]`` (99.99 by default).
* ``mse`` -- the bin centre (from ``start_bin``) minimising the histogram-weighted squared
  error of symmetric narrow-range fake quantisation.
* ``max`` -- the exact running max ``|x|``.
* ``auto`` -- per tensor, the candidate among entropy, percentile 99.9/99.99/99.999, mse and max
  whose threshold gives the smallest quantization MSE on the tensor's histogram (the first one
  in that order on a tie); :func:`auto_choices` says which one each tensor got.  ``mse`` is the
  minimiser over the bin centres, so it wins almost always (every tensor of MobileNetV2) and
  ``auto`` is then ``mse``; another candidate wins only on a tensor whose best range lies below
  ``start_bin``.

The default of :func:`jetforge.calibrate.calibrate_model.calibrate` is ``percentile`` 99.99: on the benchmark
(``benchmarks/int8/int8_accuracy.py``) it has the best top-1 agreement with FP32 on MobileNetV2 and is
within a few samples of mse on EfficientNet-Lite0, while ``entropy`` is the weakest of the four.

The entropy search evaluates every candidate at once from prefix sums (``O(bins * 128)``), then
recomputes the candidates within 1e-9 of the minimum exactly as the per-candidate loop does, so the
threshold (including which of tied candidates wins) is the loop's.
"""

from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from jetforge.calibrate.histogram import StreamingHistogram
from jetforge.registry import Registry

# name -> function(hist, percentile=, num_bits=, stride=, start_bin=) -> amax, called for a histogram that saw
# data other than zeros.  Adding an algorithm: a function here (or in a module imported below) and
# `@ALGORITHMS.register("name", summary=...)` above it; `jetforge calibrate --algorithm` lists it.
ALGORITHMS: Registry[Callable[..., float]] = Registry("calibration algorithm")
DEFAULT_ALGORITHM = "percentile"  # 99.99: the best agreement of the four on MobileNetV2, as cheap as max
AUTO_CANDIDATES = (("entropy", None), ("percentile", 99.9), ("percentile", 99.99), ("percentile", 99.999),
                   ("mse", None), ("max", None))
_TIE = 1e-9  # candidates whose fast KL is this close to the minimum are recomputed exactly


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


def _entropy_bins(counts: np.ndarray) -> np.ndarray:
    bins = np.array(counts, dtype=np.float64)  # a copy: pytorch-quantization mutates its histogram here
    if len(bins) < 2:
        raise ValueError("the histogram needs at least 2 bins")
    bins[0] = bins[1]
    return bins


class _EntropyTables:
    """Prefix sums of mass and of non-empty bins: each level's sums are read in O(1).  Counts are
    integers, so these sums are exact and Q equals the one built bin by bin."""

    def __init__(self, bins: np.ndarray, nbins: int) -> None:
        self.bins, self.nbins = bins, nbins
        self.nonzero = bins != 0
        self.tail = np.concatenate([np.cumsum(bins[::-1])[::-1], [0.0]])  # tail[i] = sum(bins[i:])
        self.cmass = np.concatenate([[0.0], np.cumsum(np.where(self.nonzero, bins, 0.0))])
        self.cnz = np.concatenate([[0], np.cumsum(self.nonzero)])
        self.total = float(np.sum(bins))

    def divergence(self, i: int) -> float:
        """KL(P||Q) of candidate ``i`` built bin by bin (the reference computation)."""
        nbins, bins = self.nbins, self.bins
        j = np.arange(i)
        level = (j * nbins) // i                    # == digitize(j, linspace(0, i, nbins+1)) - 1
        starts = -(-(np.arange(nbins + 1) * i) // nbins)  # first bin of each level (ceil), plus the end
        mass = self.cmass[starts[1:]] - self.cmass[starts[:-1]]
        nz = self.cnz[starts[1:]] - self.cnz[starts[:-1]]
        per_bin = np.divide(mass, nz, out=np.zeros(nbins), where=nz > 0)
        q = np.where(self.nonzero[:i], per_bin[level], 0.0)
        p = bins[:i].copy()
        p[-1] += self.tail[i]
        if round(float(np.sum(q)) + self.tail[i]) != round(self.total) or round(float(np.sum(p))) != round(self.total):
            raise RuntimeError("count mismatch in entropy calibration at i=%d" % i)  # pragma: no cover
        return _kl(p, q)

    def fast(self, cand: np.ndarray, chunk: int = 256) -> np.ndarray:
        """The same divergences for all candidates at once, to rounding (``inf`` exactly where the loop's is).

        KL = (sum p log p - sum p log q) / T - log T + log S with T = sum p, S = sum q; inside a level
        q is constant, so sum p log q = sum over levels of mass * log(mass / nonempty), plus the tail
        folded into the last bin times log q there.
        """
        bins, nbins, T = self.bins, self.nbins, self.total
        with np.errstate(divide="ignore", invalid="ignore"):
            blogb = np.where(bins > 0, bins * np.log(np.where(bins > 0, bins, 1.0)), 0.0)
        cpl = np.concatenate([[0.0], np.cumsum(blogb)])
        out = np.empty(len(cand))
        lv = np.arange(nbins + 1)
        for lo in range(0, len(cand), chunk):
            i = cand[lo:lo + chunk]
            starts = -(-(lv[None, :] * i[:, None]) // nbins)
            mass = self.cmass[starts[:, 1:]] - self.cmass[starts[:, :-1]]
            nz = self.cnz[starts[:, 1:]] - self.cnz[starts[:, :-1]]
            with np.errstate(divide="ignore", invalid="ignore"):
                per = np.where(nz > 0, mass / np.maximum(nz, 1), 0.0)
                term = np.where(mass > 0, mass * np.log(np.where(mass > 0, per, 1.0)), 0.0).sum(axis=1)
                last = i - 1
                b_last, tl = bins[last], self.tail[i]
                q_last = per[np.arange(len(i)), (last * nbins) // i]
                p_last = b_last + tl
                a = cpl[last] + np.where(p_last > 0, p_last * np.log(np.where(p_last > 0, p_last, 1.0)), 0.0)
                b = term + np.where((b_last > 0) & (tl > 0), tl * np.log(np.where(q_last > 0, q_last, 1.0)), 0.0)
                s = self.cmass[i]
                kl = (a - b) / T - np.log(T) + np.log(np.where(s > 0, s, 1.0))
            kl[(s == 0) | ((b_last == 0) & (tl > 0))] = np.inf
            out[lo:lo + len(i)] = kl
        return out


def entropy_divergences(counts: np.ndarray, num_bits: int = 8, unsigned: bool = False, stride: int = 1,
                        start_bin: int = 128) -> np.ndarray:
    """KL divergence for every candidate ``i`` in ``range(start_bin, len(counts)+1, stride)``, each built
    bin by bin (the reference computation; :func:`amax_entropy` uses the vectorized one)."""
    tables = _EntropyTables(_entropy_bins(counts), 1 << (num_bits - 1 + int(unsigned)))
    return np.array([tables.divergence(i) for i in range(start_bin, len(counts) + 1, stride)])


def amax_entropy(counts: np.ndarray, edges: np.ndarray, num_bits: int = 8, unsigned: bool = False,
                 stride: int = 1, start_bin: int = 128) -> float:
    """EntropyCalibration2 threshold (see the module docstring)."""
    if len(counts) < start_bin:
        # fewer bins than the first candidate (a merged or tiny histogram): every bin is a candidate
        start_bin = 1
    tables = _EntropyTables(_entropy_bins(counts), 1 << (num_bits - 1 + int(unsigned)))
    cand = np.arange(start_bin, len(counts) + 1, stride)
    approx = tables.fast(cand)
    finite = np.isfinite(approx)
    if not finite.any():
        best = len(cand) - 1  # every divergence is inf: the loop's last argmin is the last candidate
    else:
        m = float(approx[finite].min())
        near = np.flatnonzero(finite & (approx <= m + _TIE * (1.0 + abs(m))))
        exact = np.array([tables.divergence(int(cand[k])) for k in near])
        best = int(near[len(near) - 1 - int(np.argmin(exact[::-1]))])
    return float(edges[best * stride + start_bin])


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
    """Histogram-weighted mean squared quantization error (over the bin centres) of every centre from
    ``start_bin`` taken as amax.  Empty bins add nothing, so only the others are computed."""
    centers = (edges[1:] + edges[:-1]) / 2.0
    return quant_errors(counts, edges, centers[start_bin:], num_bits, unsigned, chunk)


def quant_errors(counts: np.ndarray, edges: np.ndarray, amaxes: np.ndarray, num_bits: int = 8,
                 unsigned: bool = False, chunk: int = 256) -> np.ndarray:
    """``mean((fake_quant(c, a) - c)**2 * counts)`` over the bin centres ``c``, for each ``a`` in ``amaxes``.

    Only non-empty bins are computed, and in each chunk of (sorted) thresholds the bins that every
    threshold of the chunk clips are summed from suffix sums: they all quantize to ``bound / scale``.
    """
    centers = (edges[1:] + edges[:-1]) / 2.0
    n = len(centers)
    keep = np.flatnonzero(counts)
    c, w = centers[keep], counts[keep].astype(np.float64)
    # suffix sums of w, w*c, w*c^2 for the clipped bins: sum w (A - c)^2 = A^2 W - 2 A WC + WCC
    sw = np.concatenate([np.cumsum(w[::-1])[::-1], [0.0]])
    swc = np.concatenate([np.cumsum((w * c)[::-1])[::-1], [0.0]])
    swcc = np.concatenate([np.cumsum((w * c * c)[::-1])[::-1], [0.0]])
    bound = 2.0 ** (num_bits - 1 + int(unsigned)) - 1
    low = 0.0 if unsigned else -bound
    amaxes = np.asarray(amaxes, dtype=np.float64)
    order = np.argsort(amaxes, kind="stable")
    out = np.empty(len(amaxes))
    for lo in range(0, len(amaxes), chunk):
        idx = order[lo:lo + chunk]
        a = amaxes[idx]
        scale = (bound / a)[:, None]
        # a centre at or above amax * (bound + 1) / bound is clipped by every threshold of the chunk
        cut = int(np.searchsorted(c, float(a.max()) * (bound + 1.0) / bound, side="left"))
        m = c[None, :cut] * scale
        np.round(m, out=m)
        np.clip(m, low, bound, out=m)
        m /= scale
        m -= c[None, :cut]
        m *= m
        top = (bound / scale[:, 0])  # what a clipped value quantizes to
        tail = top * top * sw[cut] - 2.0 * top * swc[cut] + swcc[cut]
        out[idx] = (m @ w[:cut] + tail) / n
    return out


def amax_mse(counts: np.ndarray, edges: np.ndarray, num_bits: int = 8, unsigned: bool = False,
             start_bin: int = 128) -> float:
    if len(counts) <= start_bin:
        start_bin = 0
    errors = mse_errors(counts, edges, num_bits, unsigned, start_bin)
    centers = (edges[1:] + edges[:-1]) / 2.0
    return float(centers[start_bin + int(np.argmin(errors))])


def auto_candidates(hist: StreamingHistogram, num_bits: int = 8, stride: int = 1,
                    start_bin: int = 128) -> List[Tuple[str, float, float]]:
    """``(label, amax, histogram MSE)`` of every ``auto`` candidate, in :data:`AUTO_CANDIDATES` order."""
    counts, edges = hist.counts, hist.edges()
    labels, amaxes = [], []
    for method, pct in AUTO_CANDIDATES:
        labels.append(method if pct is None else "%s %s" % (method, _pct_label(pct)))
        amaxes.append(compute_amax(hist, method, percentile=pct or 99.99, num_bits=num_bits, stride=stride,
                                   start_bin=start_bin))
    errors = quant_errors(counts, edges, np.array(amaxes), num_bits)
    return [(lab, float(a), float(e)) for lab, a, e in zip(labels, amaxes, errors)]


def _pct_label(p: float) -> str:
    return ("%.3f" % p).rstrip("0").rstrip(".")


def amax_auto(hist: StreamingHistogram, num_bits: int = 8, stride: int = 1, start_bin: int = 128) -> Tuple[str, float]:
    """The ``auto`` choice: the candidate with the smallest histogram MSE (the first on a tie)."""
    cands = auto_candidates(hist, num_bits, stride, start_bin)
    best = min(range(len(cands)), key=lambda k: (cands[k][2], k))
    return cands[best][0], cands[best][1]


def compute_amax(hist: StreamingHistogram, method: str = "entropy", percentile: float = 99.99,
                 num_bits: int = 8, stride: int = 1, start_bin: int = 128) -> Optional[float]:
    """amax of one collected histogram; None when it saw no data, 0.0 when every value was 0."""
    algorithm = ALGORITHMS.get(method)  # an unknown name: one error with did-you-mean
    if hist.empty:
        return None
    if hist.all_zero:
        return 0.0
    return algorithm(hist, percentile=percentile, num_bits=num_bits, stride=stride, start_bin=start_bin)


# The summary is the --algorithm help: entropy computes what ModelOpt / pytorch-quantization compute (the same
# thresholds on real MobileNetV2 histograms), and on real images it is the weakest choice, so the help says so.
@ALGORITHMS.register("entropy", summary="TensorRT's EntropyCalibration2: the threshold with the least KL divergence "
                                        "(as ModelOpt computes it); the weakest on real images: top-1 agreement "
                                        "with FP32 0.566 vs 0.760 for percentile on MobileNetV2, 0.819 vs 0.892 on "
                                        "EfficientNet-Lite0 (simulated INT8, benchmarks/int8/README.md)")
def _entropy(hist: StreamingHistogram, num_bits: int, stride: int, start_bin: int, **_: object) -> float:
    return amax_entropy(hist.counts, hist.edges(), num_bits=num_bits, stride=stride, start_bin=start_bin)


@ALGORITHMS.register("percentile", summary="the --percentile of |x| (default 99.99)")
def _percentile(hist: StreamingHistogram, percentile: float, **_: object) -> float:
    return amax_percentile(hist.counts, hist.edges(), percentile)


@ALGORITHMS.register("mse", summary="the threshold with the least quantization MSE on the histogram")
def _mse(hist: StreamingHistogram, num_bits: int, start_bin: int, **_: object) -> float:
    return amax_mse(hist.counts, hist.edges(), num_bits=num_bits, start_bin=start_bin)


@ALGORITHMS.register("max", summary="the largest |x| seen")
def _max(hist: StreamingHistogram, **_: object) -> float:
    return float(hist.amax)


@ALGORITHMS.register("auto", summary="per tensor, the best of entropy, percentiles, mse and max by histogram MSE")
def _auto(hist: StreamingHistogram, num_bits: int, stride: int, start_bin: int, **_: object) -> float:
    return amax_auto(hist, num_bits=num_bits, stride=stride, start_bin=start_bin)[1]


def compute_all(hists: Dict[str, StreamingHistogram], method: str = "entropy", **kwargs) -> Dict[str, float]:
    """amax for every histogram that saw data (tensors that saw none are left out)."""
    out = {}
    for name, h in hists.items():
        a = compute_amax(h, method, **kwargs)
        if a is not None:
            out[name] = a
    return out


def compute_all_with_choices(hists: Dict[str, StreamingHistogram], method: str = "entropy",
                             **kwargs) -> Tuple[Dict[str, float], Dict[str, str]]:
    """:func:`compute_all` plus the algorithm each tensor's amax came from (the candidate ``auto`` chose)."""
    if method != "auto":
        amax = compute_all(hists, method, **kwargs)
        label = "percentile %s" % _pct_label(kwargs.get("percentile", 99.99)) if method == "percentile" else method
        return amax, {n: label for n in amax}
    kwargs.pop("percentile", None)
    amax, choices = {}, {}
    for name, h in hists.items():
        if h.empty:
            continue
        if h.all_zero:
            amax[name], choices[name] = 0.0, "max"
            continue
        choices[name], amax[name] = amax_auto(h, **kwargs)
    return amax, choices


def auto_choices(hists: Dict[str, StreamingHistogram], **kwargs) -> Dict[str, str]:
    """Which candidate ``auto`` picks for each tensor (``max`` for an all-zero one)."""
    return compute_all_with_choices(hists, "auto", **kwargs)[1]
