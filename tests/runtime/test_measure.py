"""Latency statistics, stage timers and memory figures."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from jetforge.runtime.measure import (LatencyStats, StageTimer, Stopwatch, fps, latency_stats, memory_info,
                                      percentile, reset_peak_rss)


def test_latency_stats_match_numpy_on_known_values():
    samples = [0.010, 0.012, 0.011, 0.050, 0.009, 0.013, 0.010, 0.011, 0.012, 0.030]
    s = latency_stats(samples)
    assert isinstance(s, LatencyStats)
    assert s.count == 10
    assert s.min == 0.009 and s.max == 0.050
    assert s.mean == pytest.approx(0.0168)
    assert s.total == pytest.approx(0.168)
    for q, value in ((50, s.p50), (90, s.p90), (95, s.p95), (99, s.p99)):
        assert value == pytest.approx(np.percentile(samples, q), abs=1e-12)
    assert s.p50 == pytest.approx(0.0115)
    assert s.fps == pytest.approx(1 / 0.0168)
    d = s.to_dict()
    assert d["p50_ms"] == pytest.approx(11.5) and d["max_ms"] == pytest.approx(50.0) and d["count"] == 10


def test_single_sample_and_bad_input():
    s = latency_stats([0.004])
    assert s.p50 == s.p99 == s.min == s.max == 0.004
    with pytest.raises(ValueError, match="no latency samples"):
        latency_stats([])
    with pytest.raises(ValueError, match="negative"):
        latency_stats([0.1, -0.1])
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_percentile_interpolates_like_numpy():
    values = sorted(np.random.default_rng(0).exponential(size=101).tolist())
    for q in (0, 1, 33.3, 50, 99, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_fps():
    assert fps(250, 2.0) == 125.0
    assert fps(0, 1.0) == 0.0 and fps(10, 0.0) == 0.0


def test_stage_timer_records_each_stage_in_order():
    timer = StageTimer()
    for _ in range(3):
        with timer.stage("decode"):
            time.sleep(0.001)
        timer.add("infer", 0.005)
    assert timer.names == ["decode", "infer"]
    assert len(timer.samples("decode")) == 3
    assert all(v >= 0.001 for v in timer.samples("decode"))
    stats = timer.to_dict()
    assert stats["infer"]["p50_ms"] == pytest.approx(5.0) and stats["infer"]["count"] == 3
    assert timer.samples("missing") == []


def test_stage_timer_records_even_when_the_stage_raises():
    timer = StageTimer()
    with pytest.raises(RuntimeError):
        with timer.stage("infer"):
            raise RuntimeError("boom")
    assert len(timer.samples("infer")) == 1


def test_stopwatch():
    sw = Stopwatch()
    assert sw.elapsed == 0.0
    with sw:
        time.sleep(0.002)
    first = sw.elapsed
    assert first >= 0.002
    time.sleep(0.002)
    assert sw.elapsed == first  # stopped: no longer grows
    with pytest.raises(RuntimeError):
        Stopwatch().stop()


def test_memory_info_sees_a_large_allocation():
    """64 MiB of fresh pages raise RSS and peak RSS by about that much.

    The pages come from an anonymous mmap, not from numpy: in a long test run malloc can hand a large
    array a free chunk of its heap whose pages are already resident (RSS then does not move), and a
    garbage collection triggered by the allocation can free earlier tests' memory in between; both made
    this test fail in full-suite runs only.  mmap pages are new by definition, and the collector is off
    while measuring.
    """
    import gc
    import mmap

    gc.collect()
    gc.disable()
    try:
        before = memory_info()
        assert before.rss > 10 * (1 << 20) and before.peak_rss >= before.rss
        block = mmap.mmap(-1, 64 << 20)
        block.write(b"\x01" * (64 << 20))  # touch every page
        after = memory_info()
        block.close()
    finally:
        gc.enable()
    # 48 of 64 MiB: room for the kernel reclaiming other pages of this process meanwhile on a busy machine
    assert after.peak_rss >= before.rss + (48 << 20)
    assert after.rss >= before.rss + (48 << 20)
    d = after.to_dict()
    assert d["peak_rss_mib"] >= d["rss_mib"] - 1 and d["peak_source"] in ("VmHWM", "ru_maxrss", "peak_wset")


def test_reset_peak_rss_forgets_an_earlier_peak():
    """In a fresh interpreter: after a thousand tests this process's RSS and peak are whatever earlier tests left
    (a whole-suite run saw the peak equal the current RSS of 2.5 GB), which says nothing about one 128 MiB block."""
    code = (
        "import json, mmap\n"
        "from jetforge.runtime.measure import memory_info, reset_peak_rss\n"
        "block = mmap.mmap(-1, 128 << 20)\n"
        "block.write(b'\\x01' * (128 << 20))\n"  # touch every page
        "high = memory_info().peak_rss\n"
        "block.close()\n"  # munmap: the pages leave the RSS at once
        "ok = reset_peak_rss()\n"
        "print(json.dumps({'ok': ok, 'high': high, 'after': memory_info().peak_rss}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    if not result["ok"]:
        pytest.skip("this kernel cannot reset the peak RSS (/proc/self/clear_refs)")
    # the block was 128 MiB of the peak; half of it is room for other pages the interpreter touched meanwhile
    assert result["after"] < result["high"] - (64 << 20)
