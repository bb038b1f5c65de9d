"""Calibration algorithms against independent references on the same histograms / raw data."""

from collections import Counter

import numpy as np
import pytest

from jetforge.calibrate.algorithms import amax_entropy, amax_mse, amax_percentile, compute_amax
from jetforge.calibrate.histogram import StreamingHistogram


def reference_entropy_amax(hist, edges, num_quantized_bins=128, start_bin=128):
    """The published KL algorithm written out plainly, as pytorch-quantization's loop does it.

    Deliberately independent of jetforge: np.digitize over linspace for the levels, Python
    loops for Q, explicit normalisation and KL, the last argmin, the upper edge of bin i-1.
    """
    bins = np.array(hist, dtype=np.float64)
    bins[0] = bins[1]
    divergences = []
    for i in range(start_bin, len(bins) + 1):
        space = np.linspace(0, i, num=num_quantized_bins + 1)
        digitized = np.digitize(range(i), space) - 1
        digitized[bins[:i] == 0] = -1
        level_mass = np.zeros(num_quantized_bins)
        for j, d in enumerate(digitized):
            if d != -1:
                level_mass[d] += bins[j]
        members = Counter(digitized)
        for d, n in members.items():
            if d != -1:
                level_mass[d] /= n
        q = np.zeros(i)
        for j, d in enumerate(digitized):
            if d != -1:
                q[j] = level_mass[d]
        p = bins[:i].copy()
        p[i - 1] += bins[i:].sum()
        if q.sum() == 0:
            divergences.append(np.inf)
            continue
        p = p / p.sum()
        q = q / q.sum()
        mask = p > 0
        if np.any(q[mask] == 0):
            divergences.append(np.inf)
        else:
            divergences.append(np.sum(p[mask] * np.log(p[mask] / q[mask])))
    divergences = np.array(divergences)
    best = len(divergences) - 1 - np.argmin(divergences[::-1])
    return edges[best + start_bin]


def _distributions():
    rng = np.random.default_rng(1234)
    gauss = rng.standard_normal(200_000)
    laplace = rng.laplace(0.0, 0.7, 200_000)
    relu = np.abs(rng.standard_normal(200_000)) * 2.0
    relu[rng.choice(relu.size, 40, replace=False)] = rng.uniform(20, 60, 40)  # outliers far out
    relu[:50_000] = 0.0  # ReLU zeros
    return {"gaussian": gauss, "laplacian": laplace, "relu_outliers": relu}


DATA = _distributions()


@pytest.mark.parametrize("name", sorted(DATA))
def test_entropy_equals_reference(name):
    h = StreamingHistogram()
    for part in np.array_split(DATA[name], 4):
        h.update(part.astype(np.float32))
    ref = reference_entropy_amax(h.counts, h.edges())
    ours = amax_entropy(h.counts, h.edges())
    assert ours == ref
    assert 0 < ours <= h.edges()[-1]
    if name == "relu_outliers":
        assert ours < 15  # far outliers are clipped, not taken as the range


def test_entropy_on_a_grown_histogram_equals_reference():
    rng = np.random.default_rng(7)
    h = StreamingHistogram()
    h.update(rng.standard_normal(50_000).astype(np.float32))
    h.update((rng.standard_normal(50_000) * 1.5).astype(np.float32))  # range grows past 2048 bins
    assert len(h.counts) > 2048
    assert amax_entropy(h.counts, h.edges()) == reference_entropy_amax(h.counts, h.edges())


@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("pct", [99.0, 99.9, 99.99])
def test_percentile_against_numpy(name, pct):
    x = DATA[name]
    h = StreamingHistogram()
    h.update(x)
    got = compute_amax(h, "percentile", percentile=pct)
    want = np.percentile(np.abs(x), pct)
    assert abs(got - want) <= h.width * 1.0001


@pytest.mark.parametrize("name", sorted(DATA))
def test_max_is_exact(name):
    x = DATA[name].astype(np.float32)
    h = StreamingHistogram()
    for part in np.array_split(x, 3):
        h.update(part)
    assert compute_amax(h, "max") == float(np.abs(x).max())


def test_mse_against_brute_force():
    x = DATA["laplacian"]
    h = StreamingHistogram()
    h.update(x)
    centers = h.centers()
    best, best_err = None, np.inf
    for i in range(128, len(centers)):
        a = centers[i]
        s = 127.0 / a
        q = np.clip(np.round(centers * s), -127, 127) / s
        err = np.mean((q - centers) ** 2 * h.counts)
        if err < best_err:
            best, best_err = a, err
    assert amax_mse(h.counts, h.edges()) == pytest.approx(best, rel=1e-12)
    # the MSE threshold on raw data is near-optimal compared with its neighbours
    assert 0 < best < np.abs(x).max()


def test_histogram_growth_equals_single_pass():
    rng = np.random.default_rng(3)
    a = rng.standard_normal(30_000).astype(np.float32)
    b = (rng.standard_normal(30_000) * 2).astype(np.float32)
    c = rng.laplace(0, 1, 30_000).astype(np.float32)
    h = StreamingHistogram()
    for part in (a, b, c):
        h.update(part)
    allx = np.concatenate([a, b, c])
    assert h.count == allx.size and h.amax == float(np.abs(allx).max())
    # same grid in one pass: identical counts (equal-width bins appended from 0)
    edges = h.edges()
    absx = np.abs(allx).astype(np.float64)
    floor_ref = np.bincount(np.minimum((absx / h.width).astype(np.int64), len(edges) - 2), minlength=len(edges) - 1)
    # identical except that a batch maximum sitting exactly on the then-last edge stays in the last bin
    assert np.abs(h.counts - floor_ref).sum() <= 2 * 3
    ref, _ = np.histogram(absx, bins=edges)  # edges computed as k*w can differ from floor(x/w) by one ulp
    assert np.abs(h.counts - ref).sum() <= 2e-4 * allx.size
    # a one-pass pytorch-style histogram (2048 bins over the combined range): same thresholds to bin precision
    single = StreamingHistogram()
    single.update(allx)
    for method in ("entropy", "percentile"):
        grown, one = compute_amax(h, method), compute_amax(single, method)
        assert abs(grown - one) <= 2 * max(h.width, single.width), method
    # MSE is flat near its optimum: both thresholds give the same error on the raw data within 1 %
    from jetforge.calibrate.algorithms import fake_quant

    errors = [np.mean((fake_quant(absx, compute_amax(x, "mse")) - absx) ** 2) for x in (h, single)]
    assert errors[0] == pytest.approx(errors[1], rel=0.01)


def test_memory_is_bounded_by_merging():
    rng = np.random.default_rng(5)
    h = StreamingHistogram(num_bins=2048, max_bins=4096)
    h.update(rng.standard_normal(10_000).astype(np.float32))
    h.update(np.array([1e4], dtype=np.float32))  # a huge outlier would need ~5M bins of the first width
    assert len(h.counts) <= 4096 and h.merges >= 1
    assert h.counts.sum() == 10_001 and h.amax == 1e4
    assert compute_amax(h, "percentile", percentile=50) < 10


def test_all_zero_and_empty():
    h = StreamingHistogram()
    assert compute_amax(h, "entropy") is None
    h.update(np.zeros(100, np.float32))
    assert compute_amax(h, "entropy") == 0.0
    h.update(np.array([0.0, 1.0], np.float32))
    assert h.counts[0] == 101 and h.counts.sum() == 102


# ----------------------------------------------------------------- fast paths
def test_bincount_histogram_equals_numpy_histogram():
    """The float32 bincount path gives np.histogram's counts on the same data and edges, values on edges included."""
    rng = np.random.default_rng(11)
    h = StreamingHistogram()
    first = (rng.standard_normal(300_000) * 2).astype(np.float32)
    h.update(first)
    edges = h.edges()
    on_edges = edges[rng.integers(0, len(edges), 5000)].astype(np.float32)  # many sit exactly on an edge
    just_below = np.nextafter(on_edges, np.float32(0))
    later = [rng.laplace(0, 0.5, 200_000).astype(np.float32), on_edges, -just_below,
             np.abs(rng.standard_normal((4, 32, 17, 17))).astype(np.float32)]  # ReLU-like, not flat
    for part in later:
        h.update(part)
    assert len(h.counts) == 2048 and np.array_equal(h.edges(), edges)  # no batch exceeded the first range
    data = np.abs(np.concatenate([first] + [p.reshape(-1) for p in later])).astype(np.float64)
    ref, _ = np.histogram(data, bins=edges)
    assert np.array_equal(h.counts, ref)
    assert h.count == data.size and h.amax == float(data.max())
    assert h.mean == pytest.approx(float(np.concatenate([first] + [p.reshape(-1) for p in later]).astype(np.float64).mean()),
                                   abs=1e-6)


def test_float16_and_float64_inputs_use_the_same_bins():
    rng = np.random.default_rng(12)
    x = (rng.standard_normal(50_000) * 3).astype(np.float16)
    h16, h64 = StreamingHistogram(), StreamingHistogram()
    h16.update(x)
    h64.update(x.astype(np.float64))
    assert np.array_equal(h16.counts, h64.counts) and h16.width == h64.width


def test_nonfinite_values_are_counted_and_ignored():
    h = StreamingHistogram()
    h.update(np.array([1.0, np.nan, -2.0, np.inf, 0.5], np.float32))
    assert h.nonfinite == 2 and h.count == 3 and h.amax == 2.0 and h.min == -2.0 and h.counts.sum() == 3


def _tied_histograms():
    """Histograms where candidates tie exactly or nearly (flat, sparse, few distinct values)."""
    rng = np.random.default_rng(21)
    flat = np.full(2048, 1000, dtype=np.int64)
    sparse = np.zeros(2048, dtype=np.int64)
    sparse[rng.choice(2048, 60, replace=False)] = rng.integers(1, 50, 60)
    sparse[:3] = 5000
    few = np.zeros(2048, dtype=np.int64)
    few[[0, 1, 256, 512, 1024, 2047]] = [9000, 9000, 300, 300, 300, 1]
    return {"flat": flat, "sparse": sparse, "few_values": few}


@pytest.mark.parametrize("name", sorted(_tied_histograms()))
def test_vectorized_entropy_equals_reference_on_ties(name):
    counts = _tied_histograms()[name]
    edges = np.arange(len(counts) + 1, dtype=np.float64) * 0.01
    assert amax_entropy(counts, edges) == reference_entropy_amax(counts, edges)


@pytest.mark.parametrize("name", sorted(DATA))
def test_vectorized_divergences_match_the_loop(name):
    from jetforge.calibrate.algorithms import _EntropyTables, _entropy_bins, entropy_divergences

    h = StreamingHistogram()
    h.update(DATA[name].astype(np.float32))
    loop = entropy_divergences(h.counts)
    fast = _EntropyTables(_entropy_bins(h.counts), 128).fast(np.arange(128, len(h.counts) + 1))
    assert np.array_equal(np.isinf(loop), np.isinf(fast))
    finite = np.isfinite(loop)
    assert np.allclose(fast[finite], loop[finite], rtol=1e-9, atol=1e-11)


def _histogram_mse(h, amax):
    """Brute force, written out: fake-quantize every bin centre with amax, weight by the counts."""
    centers = h.centers()
    s = 127.0 / amax
    q = np.clip(np.round(centers * s), -127, 127) / s
    return float(np.mean((q - centers) ** 2 * h.counts))


@pytest.mark.parametrize("name", sorted(DATA))
def test_auto_picks_the_mse_minimising_candidate(name):
    from jetforge.calibrate.algorithms import AUTO_CANDIDATES, amax_auto, auto_candidates

    h = StreamingHistogram()
    h.update(DATA[name].astype(np.float32))
    amaxes = [compute_amax(h, m, percentile=p or 99.99) for m, p in AUTO_CANDIDATES]
    errors = [_histogram_mse(h, a) for a in amaxes]
    best = int(np.argmin(errors))
    label, amax = amax_auto(h)
    assert amax == amaxes[best] and compute_amax(h, "auto") == amax
    cands = auto_candidates(h)
    assert [c[1] for c in cands] == amaxes
    assert np.allclose([c[2] for c in cands], errors, rtol=1e-9)
    assert label == cands[best][0]
    # the choice is at least as good as every single algorithm on this tensor
    for m in ("entropy", "percentile", "max"):
        assert _histogram_mse(h, amax) <= _histogram_mse(h, compute_amax(h, m)) * (1 + 1e-12)


def test_float32_binning_is_exact_near_every_edge_on_grown_and_huge_grids():
    """The binner looks up the edge only for values whose scaled position sits just below an integer (the
    doorstep, wider on grids of more bins): on a grid grown to ~8000 bins, with values on, just below and just
    above edges, and on a grid too large for the shortcut (every value checked), counts equal np.histogram's."""
    from jetforge.calibrate.histogram import _doorstep

    rng = np.random.default_rng(31)
    h = StreamingHistogram()
    first = rng.uniform(-1, 1, 50_000).astype(np.float32)
    h.update(first)
    later = rng.uniform(-3.9, 3.9, 200_000).astype(np.float32)
    h.update(later)  # same width, about 7990 bins
    assert 7900 < len(h.counts) <= 8192 and h.merges == 0
    edges = h.edges()
    on = edges[rng.integers(1, len(edges) - 1, 20_000)].astype(np.float32)
    near = np.concatenate([on, np.nextafter(on, np.float32(0)), np.nextafter(on, np.float32(9))])
    h.update(-near)
    data = np.abs(np.concatenate([first, later, near])).astype(np.float64)
    assert np.array_equal(h.counts, _grown_reference(data, h.edges()))
    # a grid of 2**19 bins: no shortcut, each value compared with its edge
    assert _doorstep(2 ** 19) is None and _doorstep(8192) is not None
    big = StreamingHistogram(num_bins=2048, max_bins=2 ** 20)
    big.update(np.array([2.0 ** -9], np.float32))  # width 2**-20
    x = rng.uniform(0, 1, 100_000).astype(np.float32)
    big.update(x)  # grows to 2**20 bins, no merge
    assert 2 ** 20 - 64 < len(big.counts) <= 2 ** 20 and big.merges == 0 and _doorstep(len(big.counts)) is None
    ref = _grown_reference(np.concatenate([[2.0 ** -9], x.astype(np.float64)]), big.edges())
    assert np.array_equal(big.counts, ref)


def _grown_reference(data, edges, first_bins=2048):
    """np.histogram's counts, except that the first batch's maximum, which sat on the then-last (closed) edge,
    stays in bin ``first_bins - 1`` after the grid grew (as in test_histogram_growth_equals_single_pass)."""
    ref = np.histogram(data, bins=edges)[0]
    on_first_top = int(np.count_nonzero(data == edges[first_bins]))
    ref[first_bins - 1] += min(on_first_top, 1)
    ref[first_bins] -= min(on_first_top, 1)
    return ref
