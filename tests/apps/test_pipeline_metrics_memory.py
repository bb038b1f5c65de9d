"""A long app run keeps constant memory for its metrics (the soak benchmark's finding), and the bounded
statistics still say what the exact ones said."""

import random
import tracemalloc

import numpy as np
import pytest

from jetforge.apps.pipeline.metrics import MAX_BINS, MAX_SAMPLES, STAGES, PipelineMetrics, Samples


def _feed(metrics, first, count, fps=10.0):
    """``count`` frames as the runner reports them: one duration per stage, then the finished frame."""
    rng = random.Random(first)
    for i in range(first, first + count):
        for stage in STAGES:
            metrics.add_stage(stage, rng.uniform(0.001, 0.02), rng.uniform(0.0005, 0.01))
        metrics.add_batch(1)
        t = metrics.t_start + i / fps
        metrics.add_done(0, t - 0.05, t - 0.04, t - 0.01, t)


def test_pipeline_metrics_memory_stays_flat_over_a_long_run():
    # Before: 13 Python floats per frame in lists (about 0.5 KB), 9.8 MB more per 20 000 frames, forever.
    metrics = PipelineMetrics()
    metrics.start()
    _feed(metrics, 0, MAX_SAMPLES + 1)  # every bounded series is full from here on
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    _feed(metrics, MAX_SAMPLES + 1, 20000)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    # what may still grow is capped: RSS samples (MAX_BINS tuples, ~120 B each) and FPS bins (MAX_BINS ints)
    assert grown < MAX_BINS * 200, grown
    frames = MAX_SAMPLES + 1 + 20000
    metrics.stop()
    metrics.t_end = metrics.t_start + frames / 10.0  # the simulated run's end
    report = metrics.to_dict()
    assert report["frames"] == frames and report["latency_ms"]["stages"]["infer"]["count"] == frames
    assert len(report["memory"]["rss_samples_mib"]) <= MAX_BINS + 1
    # 30 001 frames at 10 fps = 3000 s: more than MAX_BINS one-second bins, so they were merged to 2 s
    assert report["fps_bin_s"] == 2 and report["fps_over_time"][0] == [1.0, 10.0]
    assert sum(f * report["fps_bin_s"] for _, f in report["fps_over_time"]) == pytest.approx(frames, abs=20)


def test_bounded_samples_keep_exact_count_mean_min_max_and_close_percentiles():
    values = np.random.default_rng(7).lognormal(mean=-4.0, sigma=0.6, size=3 * MAX_SAMPLES)
    samples = Samples()
    for v in values:
        samples.append(v)
    stats = samples.stats()
    assert stats.count == values.size and len(samples.values) == MAX_SAMPLES
    assert stats.mean == pytest.approx(values.mean(), rel=1e-12)
    assert stats.min == values.min() and stats.max == values.max()
    # a uniform sample of n = 10 000: the rank of an estimated p-th percentile has standard error
    # sqrt(p(1-p)/n) <= 0.005, i.e. 0.5 percentile points; allow 5 standard errors at p99 (0.5 points)
    for p, est in ((50, stats.p50), (95, stats.p95), (99, stats.p99)):
        rank = 100.0 * np.mean(values <= est)
        assert abs(rank - p) < 5 * 100 * np.sqrt(p / 100 * (1 - p / 100) / MAX_SAMPLES), (p, rank)


def test_short_runs_keep_every_sample_so_their_statistics_are_exact():
    from jetforge.runtime.measure import latency_stats

    values = [0.001 * (i % 37 + 1) for i in range(500)]
    samples = Samples()
    for v in values:
        samples.append(v)
    assert samples.stats() == latency_stats(values)


def test_recording_a_frame_builds_no_new_series(monkeypatch):
    # Each Samples seeds its own Random (~25 us); a ``setdefault(stage, Samples())`` built one per call for every
    # frame and stage, on the thread that launches the GPU path's batches.  After each stage's first frame (and its
    # first warm-up frame), recording builds nothing.
    metrics = PipelineMetrics(warmup_frames=2)
    metrics.start()
    built = []
    real_init = Samples.__init__

    def counting_init(self, *args, **kwargs):
        built.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(Samples, "__init__", counting_init)
    for stage in STAGES:
        metrics.add_stage(stage, 0.01, 0.001, frame=0)  # a warm-up frame: its series is made once
    first = len(built)
    assert first == len(STAGES)  # the warm-up series only: the per-stage ones exist from the start
    for frame in range(1, 50):
        for stage in STAGES:
            metrics.add_stage(stage, 0.01, 0.001, frame=frame, batch=4)
    assert len(built) == first
    stats = metrics.to_dict()["latency_ms"]["stages"]
    assert stats["infer"]["count"] == 48 and metrics.busy["infer"][0] == 50


def test_reservoir_keeps_every_value_with_the_same_probability():
    # Algorithm L draws which value is kept next instead of a random number per value.  Every one of n values
    # must be kept with probability k/n: over 300 reservoirs (seeds 0..299) of k = 64 out of n = 4096 values, the
    # values kept per tenth of the stream are 300 * 64 / 10 = 1920 each in expectation; a chi-square statistic
    # over the 10 tenths (9 degrees of freedom) above 27.9 has probability 0.001 for a uniform sampler.  A sampler
    # that favours early or late values (a wrong skip, W not updated) gives hundreds.
    k, n, reps = 64, 4096, 300
    counts = np.zeros(10)
    for seed in range(reps):
        samples = Samples(capacity=k, seed=seed)
        for i in range(n):
            samples.append(float(i))
        assert len(samples.values) == k and samples.count == n
        counts += np.bincount((np.asarray(samples.values) * 10 // n).astype(int), minlength=10)
    expected = reps * k / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.9, (chi2, counts)


def test_extend_keeps_what_appending_one_by_one_keeps():
    # Samples.extend is append in a loop, with the loop's Python steps skipped for the values not kept: the same
    # values kept in the same slots (same seed), the same count, sum, extremes and last value, across the
    # reservoir's filling and chunks of any size.
    rng = np.random.default_rng(11)
    values = rng.lognormal(-4.0, 0.7, size=9000).tolist()
    one, many = Samples(capacity=300, seed=5), Samples(capacity=300, seed=5)
    for v in values:
        one.append(v)
    i = 0
    for size in [1, 7, 250, 42, 1, 3000, 33] * 40:
        if i >= len(values):
            break
        many.extend(values[i:i + size])
        i += size
    assert i >= len(values)
    assert many.values == one.values and many.count == one.count == len(values)
    assert (many.min, many.max, many.last) == (one.min, one.max, one.last)
    assert many.total == pytest.approx(one.total, rel=1e-12)
