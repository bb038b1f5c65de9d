"""The GPU path records its frames once per batch (PipelineMetrics.add_stage_frames / add_done_frames, SinkTiming):
the same report as recording each frame on its own, and every frame of a run recorded once."""

import random
import time

import pytest

from jetforge.apps.pipeline.gpu_app import GPU_STAGES, SinkTiming, TaskOps
from jetforge.apps.pipeline.metrics import PipelineMetrics
from jetforge.apps.pipeline.streams import BatchOps, StreamRunOptions, run_streams


def _report(metrics):
    d = metrics.to_dict()
    return {k: d[k] for k in ("frames", "latency_ms", "warmup", "model_fps")}


def test_batch_calls_give_the_per_frame_calls_report():
    rng = random.Random(3)
    per_frame = PipelineMetrics(GPU_STAGES, warmup_frames=2, model_stages=("launch", "results"))
    batched = PipelineMetrics(GPU_STAGES, warmup_frames=2, model_stages=("launch", "results"))
    for m in (per_frame, batched):
        m.start()
    for b in range(40):
        frames = list(range(b * 3, b * 3 + rng.randint(1, 6)))  # indices, the first batch's warm-up frames too
        wall, cpu = rng.uniform(1e-4, 3e-3), rng.uniform(1e-5, 1e-3)
        own = [rng.uniform(1e-5, 1e-3) for _ in frames]
        for f in frames:
            per_frame.add_stage("launch", wall, cpu / len(frames), frame=f, batch=len(frames))
            per_frame.add_stage("postprocess", own[frames.index(f)], cpu / len(frames), frame=f)
        batched.add_stage_frames("launch", frames, wall, cpu)
        batched.add_stage_frames("postprocess", frames, 0.0, cpu, walls=own)
        done = [(f % 2, 1.0 + f, 1.0 + f, 1.1 + f, 1.2 + f + own[i], f) for i, f in enumerate(frames)]
        for record in done:
            per_frame.add_done(*record)
        batched.add_done_frames(done)
    for m in (per_frame, batched):
        m.stop()
        m.t_end = m.t_start + 10.0
    a, b = _report(per_frame), _report(batched)
    assert a["frames"] == b["frames"] > 0
    # equal up to float summation order (a batch's CPU share added n times vs its total once): rel 1e-9
    assert _close(a, b)


def _close(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        return all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12)
        return True
    assert a == b
    return True


class _Frame:
    def __init__(self, stream, index):
        self.stream, self.index, self.timestamp, self.captured = stream, index, index / 30.0, time.perf_counter()


class _Ops(BatchOps):
    def launch(self, frames, padded):
        return None

    def finish(self, handle, frames):
        return [{"frame": f.index} for f in frames]


class _Task:
    name = "t"

    def postprocess(self, item):
        return item.output


def test_a_run_records_every_frame_once_through_the_batch_end():
    metrics = PipelineMetrics(GPU_STAGES, warmup_frames=3, model_stages=("launch", "results"))
    ops = TaskOps(_Task(), None, _Ops(), metrics)
    seen = []

    class Sink:
        def __init__(self):
            self.timing, self.batches = SinkTiming(ops), 0

        def __call__(self, stream, frame, event, host):
            t0 = self.timing.begin()
            seen.append((stream, frame.index, event["frame"]))
            self.timing.frame_done(stream, frame, t0)

        def end_batch(self):
            self.batches += 1
            self.timing.end_batch()

    sink = Sink()
    streams, per = 5, 40
    sources = [[_Frame(s, i) for i in range(per)] for s in range(streams)]
    metrics.start()
    result = run_streams(sources, ops, StreamRunOptions(max_batch=4, depth=4), sink=sink)
    metrics.stop()
    assert result.frames == streams * per == len(seen) == metrics.frames
    assert sink.batches == result.batches  # end_batch once per batch
    assert metrics.frames_per_stream == {s: per for s in range(streams)}
    assert ops.t_result == {}  # every frame's result time was taken by its done record
    lat = metrics.to_dict()["latency_ms"]
    counted = streams * (per - 3)  # each stream's first 3 frames are warm-up
    for stage in GPU_STAGES:
        assert lat["stages"][stage]["count"] == counted, stage
    assert lat["end_to_end"]["count"] == counted
