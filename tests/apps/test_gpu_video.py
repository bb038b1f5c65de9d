"""The GPU video path's logic on the CPU: the NVDEC source around a FakeNvDecoder, NV12 helpers, the stream
batcher, the multi-stream runner with a real ONNX Runtime MobileNetV2, and the CPU encoder pool.

The hardware parts (NVDEC, the NVRTC kernels, CUDA graphs) run in benchmarks/gpu_pipeline/pipeline_gpu.py on a GPU; here the
fake decoder (OpenCV decode + NV12 conversion, with NVDEC's 4-frame output latency and final flush) stands in.
"""

import threading
import time

import numpy as np
import pytest

from jetforge.apps.pipeline.batching import StreamBatcher, bucket_for
from jetforge.apps.pipeline.streams import HostBatchOps, StreamRunOptions, run_streams
from tests.standins.fake_nvdec import FakeNvDecoder
from jetforge.apps.video.sources.gpu.frame import (BT601, BT709, bgr_from_nv12, full_range_from_code,
                                                   matrix_from_code, nv12_from_bgr)
from jetforge.apps.video.sources.gpu.nvdec import NvDecSource, array_plane_pointers, plane_pointers
from jetforge.errors import ConfigError, StreamError

cv2 = pytest.importorskip("cv2")

BIKES_FRAMES = 250  # bikes.mp4: 640x272, 250 frames (its header and a full OpenCV decode agree)


def test_nvdec_source_over_the_fake_decoder_yields_every_frame_once_in_order(bikes_clip):
    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, stream=3) as src:
        frames = list(src)
    assert (src.width, src.height) == (640, 272)
    assert [f.index for f in frames] == list(range(BIKES_FRAMES))  # the 4 held back come out at the flush
    assert all(f.stream == 3 and f.on_host and f.host_nv12().shape == (408, 640) for f in frames)
    assert frames[25].timestamp == pytest.approx(1.0)  # 25 FPS


def test_nvdec_source_loop_and_frame_limit_continue_the_numbering(bikes_clip):
    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, loop=True, max_frames=BIKES_FRAMES + 10) as src:
        src.prime()
        indices = [f.index for f in src]
    assert indices == list(range(BIKES_FRAMES + 10))
    assert src.passes == 2


def test_fake_decoder_frames_are_opencvs_frames_in_nv12(bikes_clip, bikes_frames):
    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=31) as src:
        frame = [f for f in src][30]
    bgr = bgr_from_nv12(cv2, frame.host_nv12())
    # NV12 keeps one chroma sample per 2x2 block: the round trip error is the chroma detail lost plus rounding;
    # on a natural frame the mean absolute error stays a few grey levels (measured 1.5-2.5 on several CPUs).
    err = np.abs(bgr.astype(np.int16) - bikes_frames[30].astype(np.int16))
    assert err.mean() < 4.0
    y_direct = cv2.cvtColor(bikes_frames[30], cv2.COLOR_BGR2YUV_I420)[:272]
    assert np.array_equal(frame.host_nv12()[:272], y_direct)  # luma is not subsampled: identical


def test_nv12_layout_interleaves_u_and_v():
    image = np.zeros((4, 4, 3), np.uint8)
    image[..., 0] = 255  # pure blue: Cb high, Cr low (BT.601: U=240, V=110 in limited range)
    nv12 = nv12_from_bgr(cv2, image)
    assert nv12.shape == (6, 4)
    u, v = nv12[4:, 0::2], nv12[4:, 1::2]
    assert u.min() > 200 and v.max() < 128


def test_plane_pointers_from_per_plane_views_and_from_a_contiguous_frame():
    class View:
        def __init__(self, ptr, shape, strides):
            self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "strides": strides}

    class Decoded:
        def cuda(self):
            return [View(1000, (720, 1280, 1), (1536, 1, 1)), View(9000, (360, 640, 2), (1536, 2, 1))]

    assert plane_pointers(Decoded(), 1280, 720) == (1000, 9000, 1536)

    class OldDecoded:
        def GetPtrToPlane(self, plane):
            return 4096

    assert plane_pointers(OldDecoded(), 1280, 720) == (4096, 4096 + 1280 * 720, 1280)
    host = np.zeros((6, 4), np.uint8)
    y, uv, pitch = array_plane_pointers(host, 4)
    assert (uv - y, pitch) == (16, 4)


@pytest.mark.parametrize("code, height, want", [("ColorSpace.BT_709", 720, BT709), (1, 480, BT709),
                                                ("bt601", 1080, BT601), (6, 720, BT601),
                                                ("unspecified", 720, BT601), ("ColorSpace.UNSPEC", 480, BT601)])
def test_colour_matrix_from_the_stream(code, height, want):
    assert matrix_from_code(code, height) == want


def test_colour_range_from_the_stream():
    assert full_range_from_code("ColorRange.JPEG") and not full_range_from_code("ColorRange.MPEG")
    assert not full_range_from_code("mpeg") and not full_range_from_code(0)


def test_bucket_for_pads_to_the_next_graph_size():
    assert [bucket_for(n) for n in (1, 2, 3, 5, 9, 16, 17, 26, 32, 40)] == [1, 2, 4, 8, 16, 16, 32, 32, 32, 40]
    assert bucket_for(17, (1, 2, 4, 8, 12, 16, 20, 24, 28, 32)) == 20  # a caller's own buckets
    with pytest.raises(ConfigError):
        bucket_for(0)


def test_batcher_takes_one_frame_per_stream_oldest_first_and_drains():
    b = StreamBatcher(streams=3, max_batch=3, timeout_s=10.0, depth=2)
    for i in range(2):
        for s in range(3):
            b.put(s, (s, i))
    for s in range(3):
        b.close(s)
    assert b.take() == [(0, 0), (1, 0), (2, 0)]
    assert b.take() == [(0, 1), (1, 1), (2, 1)]
    assert b.take() is None


def test_batcher_pushes_a_partial_batch_after_the_timeout():
    b = StreamBatcher(streams=2, max_batch=2, timeout_s=0.05, depth=2)
    b.put(0, "a")  # stream 1 stays silent (a stalled camera)
    t0 = time.perf_counter()
    assert b.take() == ["a"]
    assert time.perf_counter() - t0 >= 0.045
    assert b.timeouts == 1


def test_batcher_round_robin_when_the_batch_is_smaller_than_the_streams():
    b = StreamBatcher(streams=4, max_batch=2, timeout_s=10.0, depth=1)
    for s in range(4):
        b.put(s, s)
    first, second = b.take(), b.take()
    assert sorted(first + second) == [0, 1, 2, 3]


def test_batcher_takes_several_frames_of_a_stream_in_order_when_asked():
    b = StreamBatcher(streams=2, max_batch=4, timeout_s=10.0, depth=3, per_stream=2)
    for i in range(3):
        for s in range(2):
            b.put(s, (s, i))
    assert b.take() == [(0, 0), (0, 1), (1, 0), (1, 1)]  # full: 2 streams x 2 frames, each stream's in order
    b.close(0)
    b.close(1)
    assert b.take() == [(0, 2), (1, 2)]  # closed streams: what is left goes without waiting for the timeout
    assert b.take() is None
    one = StreamBatcher(streams=1, max_batch=2, timeout_s=10.0, depth=2, per_stream=2)
    one.put(0, "f0")
    one.put(0, "f1")
    assert one.take() == ["f0", "f1"] and one.timeouts == 0  # one stream fills a batch of 2 by itself
    with pytest.raises(ConfigError, match="per_stream"):
        StreamBatcher(streams=1, max_batch=2, depth=1, per_stream=2)


def test_batcher_back_pressure_blocks_a_full_stream_until_taken_and_stop_releases():
    b = StreamBatcher(streams=1, max_batch=1, timeout_s=0.0, depth=1)
    b.put(0, 1)
    done = []
    t = threading.Thread(target=lambda: done.append(b.put(0, 2)))
    t.start()
    time.sleep(0.05)
    assert not done  # blocked: one frame waiting is the depth
    assert b.take() == [1]
    t.join(2.0)
    assert done == [True]
    b.stop()
    assert b.put(0, 3) is False and b.take() is None


def test_run_streams_with_onnx_runtime_agrees_with_the_per_frame_cpu_path(bikes_clip, mobilenet_onnx):
    """Two streams batched through one real ORT session give, for every frame, the CPU path's top-1."""
    from jetforge.apps.tasks.classify import resolve_model_contract
    from jetforge.runtime.session import open_session

    session = open_session(mobilenet_onnx, threads=1)
    contract = resolve_model_contract(session)[0]
    fused = contract.fused()
    name = session.inputs[0].name

    def pre(frame):
        return fused(bgr_from_nv12(cv2, frame.host_nv12()))

    def post(out, i, frame):
        return {"top1": int(np.argmax(out[i])), "stream": frame.stream, "frame": frame.index}

    sources = [NvDecSource(bikes_clip, codec_module=FakeNvDecoder, stream=s, max_frames=6) for s in range(2)]
    events = []
    result = run_streams(sources, HostBatchOps(pre, lambda x: session.infer({name: x})[session.outputs[0].name],
                                               post),
                         # a timeout no loaded machine reaches: both streams' frames always meet in a batch
                         StreamRunOptions(batch_timeout_s=30.0), sink=lambda s, f, e, h: events.append(e))
    assert result.frames == 12 and result.per_stream_frames == [6, 6] and result.order_ok
    assert result.mean_batch == pytest.approx(2.0)
    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=6) as src:
        single = [int(np.argmax(session.infer({name: pre(f)[None]})[session.outputs[0].name][0])) for f in src]
    for s in range(2):
        mine = [e for e in events if e["stream"] == s]
        assert [e["frame"] for e in mine] == list(range(6))
        assert [e["top1"] for e in mine] == single
    summary = result.summary()
    assert summary["latency_p99_ms"]["worst_stream"] >= summary["latency_p50_ms"]["median_stream"] > 0


def _read_video(path):
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, img = cap.read()
        if not ok:
            return frames
        frames.append(img)


def test_encoder_pool_writes_each_stream_in_order(tmp_path):
    from jetforge.apps.video.sinks.encode_pool import EncoderPool

    w, h, n = 64, 48, 12
    levels = [40 + 15 * i for i in range(n)]  # frame i of every stream is a flat grey of its own level
    with EncoderPool(tmp_path, w, h, 10.0, workers=2, slots=2, layout="bgr", segment_frames=5) as pool:
        for i in range(n):
            for s in range(3):
                pool.submit(s, np.full((h, w, 3), levels[i] + s, np.uint8))
        with pytest.raises(StreamError, match="bytes"):
            pool.submit(0, np.zeros((h, w), np.uint8))
        results = pool.close()
    assert sum(r["frames"] for r in results) == 3 * n
    assert sum(r["segments"] for r in results) == 3 * 3  # 12 frames a stream in segments of 5: 5 + 5 + 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stream_0.mpg", "stream_1.mpg", "stream_2.mpg"]
    for s in range(3):
        means = [float(img.mean()) for img in _read_video(tmp_path / ("stream_%d.mpg" % s))]
        # a flat frame survives mp4v within a few grey levels; frames 15 levels apart cannot be confused
        assert len(means) == n
        assert np.allclose(means, [lv + s for lv in levels], atol=4.0)


def test_encoder_pool_spreads_one_stream_over_every_worker_in_order(tmp_path, bikes_clip):
    """One stream, 4 real encoder processes: its segments go round robin to all of them and the file comes back
    with every frame in order, each one the frame that was sent (real NV12 frames of bikes.mp4, annotated)."""
    from jetforge.apps.video.sinks.encode_pool import EncoderPool
    from jetforge.apps.video.sources.gpu.frame import bgr_from_nv12

    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=66) as src:
        sent = [f.host_nv12() for f in src][::3]  # 22 frames, 3 apart: neighbours differ clearly
    with EncoderPool(tmp_path, 640, 272, 25.0, workers=4, slots=2, segment_frames=4) as pool:
        pool.wait_ready()  # all 4 processes up (a benchmark starts its clock here)
        for i, nv12 in enumerate(sent):
            pool.submit(0, nv12, {"label": "frame %d" % i} if i == 21 else None)
        results = pool.close()
    assert [r["segments"] for r in results] == [2, 2, 1, 1]  # 6 segments (5 x 4 + 2 frames), round robin
    assert [r["frames"] for r in results] == [8, 6, 4, 4]
    got = _read_video(tmp_path / "stream_0.mpg")
    assert len(got) == len(sent)
    want = [bgr_from_nv12(cv2, nv12).astype(np.int16) for nv12 in sent]
    dist = np.array([[np.abs(g.astype(np.int16) - r).mean() for r in want] for g in got])
    # mp4v at OpenCV's default quality: a decoded natural frame is 2.4-2.9 grey levels from its source (seen
    # here); the nearest other frame sent is >= 6.4 away, so the nearest source of each decoded frame names it
    assert list(dist.argmin(axis=1)) == list(range(len(sent)))
    assert dist.diagonal()[:21].max() < 4.0
    label_rows = np.abs(got[21][:40].astype(np.int16) - want[21][:40]).mean()
    assert label_rows > dist[21, 21]  # the label drawn on the last frame's top rows


def test_segment_assembler_appends_segments_in_order_whatever_order_they_finish(tmp_path):
    from jetforge.apps.video.sinks.encode_pool import SegmentAssembler

    seg = tmp_path / ".segments"
    seg.mkdir()
    asm = SegmentAssembler(tmp_path, seg)
    for k in (2, 0, 3, 1):  # workers finish out of order
        path = seg / ("s%d" % k)
        path.write_bytes(b"<%d>" % k)
        asm.add(0, k, str(path))
    path = seg / "t0"
    path.write_bytes(b"<t0>")
    asm.add(1, 0, str(path))
    asm.workers = [{"worker": 0}]
    asm.finish({0: 4, 1: 1}, publish=True)
    assert (tmp_path / "stream_0.mpg").read_bytes() == b"<0><1><2><3>"
    assert (tmp_path / "stream_1.mpg").read_bytes() == b"<t0>"
    assert not seg.exists()
    missing = SegmentAssembler(tmp_path / "b", seg)
    (tmp_path / "b").mkdir()
    seg.mkdir()
    (seg / "s1").write_bytes(b"<1>")
    missing.add(0, 1, str(seg / "s1"))  # segment 0 never came
    with pytest.raises(StreamError, match="segments missing"):
        missing.finish({0: 2}, publish=True)
    assert list((tmp_path / "b").iterdir()) == []  # nothing half-written is published


def test_encoder_pool_publishes_nothing_when_the_run_fails(tmp_path):
    from jetforge.apps.video.sinks.encode_pool import EncoderPool

    with pytest.raises(KeyError):
        with EncoderPool(tmp_path, 64, 48, 10.0, workers=1, layout="bgr", segment_frames=2) as pool:
            for i in range(3):
                pool.submit(0, np.full((48, 64, 3), 50, np.uint8))
            raise KeyError("the pipeline failed")
    assert list(tmp_path.iterdir()) == []


def test_gpu_source_choice_by_uri_and_decode_option(bikes_clip, monkeypatch):
    from jetforge.apps.video.sources import SOURCES, open_gpu_source, parse_source_uri
    from jetforge.apps.video.sources.gpu.open import CpuGpuFrames

    assert parse_source_uri("nvdec:///data/clip.mp4").kind == "nvdec"
    assert parse_source_uri("nvdec:///data/clip.mp4").location == "/data/clip.mp4"
    assert parse_source_uri("jetson://csi://0").location == "csi://0"
    assert {"nvdec", "jetson"} <= set(SOURCES)
    with _closing(open_gpu_source(str(bikes_clip), decode="cpu", max_frames=3)) as src:
        frames = list(src)
    assert isinstance(src, CpuGpuFrames) and [f.layout for f in frames] == ["bgr"] * 3
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    with _closing(open_gpu_source("nvdec://" + str(bikes_clip), codec_module=FakeNvDecoder, max_frames=2)) as src:
        assert isinstance(src, NvThreadedSource) and len(list(src)) == 2  # decode in the library's own thread
    with pytest.raises(ConfigError, match="not v4l2 sources"):
        open_gpu_source("v4l2:///dev/video0")


def test_nvdec_uri_in_the_cpu_apps_gives_bgr_frames_copied_back(bikes_clip, bikes_frames):
    from jetforge.apps.video.sources.gpu.open import HostFrames

    src = HostFrames(NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=6))
    frames = list(src)
    src.close()
    assert [f.index for f in frames] == list(range(6)) and frames[5].image.shape == (272, 640, 3)
    # NV12 round trip of OpenCV's own frame (see the NV12 test above for the bound)
    assert np.abs(frames[5].image.astype(np.int16) - bikes_frames[5].astype(np.int16)).mean() < 4.0


class _closing:
    def __init__(self, src):
        self.src = src

    def __enter__(self):
        return self.src

    def __exit__(self, *exc):
        self.src.close()


class FakeNvEncoder:
    """Stands in for PyNvVideoCodec's encoder (the H200 has no NVENC): records its input planes, returns one
    packet per frame with a one-frame delay (as an encoder with look-ahead does), the rest at EndEncode."""

    class NV_ENC_PIC_PARAMS:  # noqa: N801 (the real API's name)
        inputTimeStamp = 0

    def __init__(self):
        self.created = None
        self.seen = []

    def CreateEncoder(self, width, height, fmt, cpu_input, **options):  # noqa: N802
        self.created = (width, height, fmt, cpu_input, options)
        held = []
        fake = self

        class Encoder:
            def Encode(self, frame, pic):  # noqa: N802
                y, uv = (v.__cuda_array_interface__ for v in frame.cuda())
                fake.seen.append((y["data"][0], y["shape"], y["strides"], uv["data"][0], uv["shape"]))
                held.append({"data": b"F%d;" % pic.inputTimeStamp})
                return [held.pop(0)] if len(held) > 1 else []

            def EndEncode(self):  # noqa: N802
                out = list(held)
                held.clear()
                return out

        return Encoder()


def test_nvenc_sink_feeds_nv12_planes_and_writes_every_packet_in_order(tmp_path):
    from jetforge.apps.video.sinks.nvenc import NvencSink
    from jetforge.apps.video.sources.gpu.frame import GpuFrame

    fake = FakeNvEncoder()
    out = tmp_path / "s0.h264"
    with NvencSink(out, 64, 48, fps=25, module=fake) as sink:
        for i in range(3):
            sink.write(GpuFrame(i, 0.0, 64, 48, None, y_ptr=1000 * (i + 1), uv_ptr=1000 * (i + 1) + 64 * 48,
                                pitch=64))
        assert not out.exists()  # published only when closed
    assert fake.created == (64, 48, "NV12", False, {"codec": "h264", "fps": 25, "gpu_id": 0})
    assert fake.seen[1] == (2000, (48, 64, 1), (64, 1, 1), 2000 + 64 * 48, (24, 32, 2))
    assert out.read_bytes() == b"F0;F1;F2;"


def test_device_pool_shares_batches_and_results_come_back_in_submission_order():
    from jetforge.apps.pipeline.devices import DevicePool

    # A GPU and two slower DLA cores stand in as functions; 20 batches queued at once. Their speeds are a scripted
    # schedule, not sleeps (timed sleeps let a loaded machine starve a thread, and then a device gets no batch):
    # each device's first batch waits until all three hold one, and the DLA cores then wait until the GPU has run
    # GPU_AHEAD more. So each device runs >= 1 batch, the GPU >= GPU_AHEAD + 1 = 11 and a DLA core <= 1 + (20 - 13) = 8.
    all_started, gpu_is_ahead = threading.Barrier(3, timeout=60.0), threading.Event()
    gpu_batches = []
    GPU_AHEAD = 10

    def gpu(batch):
        if not gpu_batches:
            all_started.wait()
        gpu_batches.append(batch)  # only the GPU's worker thread runs this function
        if len(gpu_batches) > GPU_AHEAD:
            gpu_is_ahead.set()
        return ("g", batch)

    def dla(tag):
        mine = []  # this core's batches: only its own worker thread runs this function

        def run(batch):
            if not mine:
                all_started.wait()
                assert gpu_is_ahead.wait(60.0)
            mine.append(batch)
            return (tag, batch)
        return run

    with DevicePool([gpu, dla("d0"), dla("d1")], ["gpu", "dla0", "dla1"]) as pool:
        futures = [pool.submit(i) for i in range(20)]
        results = [f.result() for f in futures]
    assert [r[0][1] for r in results] == list(range(20))  # every batch's own result, in order
    share = pool.share()
    assert sum(share.values()) == 20 and all(n >= 1 for n in share.values())
    assert share["gpu"] > share["dla0"]  # the fast device took more


def test_device_pool_with_onnx_runtime_sessions_as_devices_matches_one_session(bikes_clip, mobilenet_onnx):
    """Three ORT sessions stand in for a Jetson's GPU + 2 DLA cores: every frame gets one session's answer."""
    from jetforge.apps.pipeline.devices import DevicePool, PooledBatchOps
    from jetforge.apps.tasks.classify import resolve_model_contract
    from jetforge.runtime.session import open_session

    sessions = [open_session(mobilenet_onnx, threads=1) for _ in range(3)]
    name, out = sessions[0].inputs[0].name, sessions[0].outputs[0].name
    fused = resolve_model_contract(sessions[0])[0].fused()

    def pre(frame):
        return fused(bgr_from_nv12(cv2, frame.host_nv12()))

    def post(outputs, i, frame):
        return {"top1": int(np.argmax(outputs[i])), "stream": frame.stream, "frame": frame.index}

    events = []
    with DevicePool([lambda x, s=s: s.infer({name: x})[out] for s in sessions], ["gpu", "dla0", "dla1"]) as pool:
        sources = [NvDecSource(bikes_clip, codec_module=FakeNvDecoder, stream=s, max_frames=4) for s in range(2)]
        result = run_streams(sources, PooledBatchOps(pre, pool, post),
                             StreamRunOptions(max_batch=1, in_flight=3, batch_timeout_s=0.0),
                             sink=lambda s, f, e, h: events.append(e))
    assert result.order_ok and result.frames == 8 and sum(pool.share().values()) == 8
    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=4) as src:
        single = [int(np.argmax(sessions[0].infer({name: pre(f)[None]})[out][0])) for f in src]
    for s in range(2):
        assert [e["top1"] for e in events if e["stream"] == s] == single


def test_decode_option_turns_video_files_into_gpu_decoder_uris(bikes_clip, monkeypatch):
    from jetforge.apps.video.sources.gpu import open as gpu

    path = str(bikes_clip)
    assert gpu.uri_for_decode(path, "cpu") == path
    assert gpu.uri_for_decode("rtsp://cam/1", "auto") == "rtsp://cam/1"
    monkeypatch.setattr(gpu, "choose_decoder", lambda wanted, have=None: "nvdec")
    assert gpu.uri_for_decode(path, "gpu") == "nvdec://" + path
    monkeypatch.setattr(gpu, "choose_decoder", lambda wanted, have=None: "opencv")
    assert gpu.uri_for_decode(path, "auto") == path


def test_cli_decode_gpu_without_a_gpu_decoder_is_one_line_and_exit_1(capsys, monkeypatch):
    from jetforge.apps.video.sources.gpu import open as gpu
    from jetforge.cli.main import main

    monkeypatch.setattr(gpu, "choose_decoder", lambda wanted, have=None: (_ for _ in ()).throw(
        ConfigError("--decode gpu: no GPU decoder here (PyNvVideoCodec or jetson-utils)", hint="install one")))
    assert main(["app", "classify", "--decode", "gpu", "--max-frames", "1", "--out", "/tmp/unused"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no GPU decoder" in err[0]


# -- the GPU path behind `jetforge app ... --decode gpu` -------------------------------------------------------------
def _use_fake_nvdec(monkeypatch, module=FakeNvDecoder):
    """PyNvVideoCodec replaced by the named CPU stand-in: the CLI's own NVDEC choice, source and pipeline run."""
    from jetforge.apps.video.sources.gpu import open as gpu, nvdec

    monkeypatch.setattr(gpu, "choose_decoder", lambda wanted, have=None: "nvdec")
    monkeypatch.setattr(nvdec, "load_pynvvideocodec", lambda: module)


def test_cli_decode_gpu_runs_the_gpu_path_and_agrees_with_the_cpu_path(tmp_path, monkeypatch, capsys, bikes_clip,
                                                                       mobilenet_onnx):
    """`jetforge app classify --decode gpu` over 2 streams: NVDEC source (FakeNvDecoder) -> batcher -> the model's
    contract -> ORT -> the task's postprocess -> events; every frame's top-1 equals the CPU app's on that frame."""
    import json

    from jetforge.apps.tasks.classify import ClassifyTask
    from jetforge.cli.main import main
    from jetforge.runtime.session import open_session

    _use_fake_nvdec(monkeypatch)
    out = tmp_path / "gpu"
    rc = main(["app", "classify", "--decode", "gpu", "--model", str(mobilenet_onnx), "--source", str(bikes_clip),
               "--source", str(bikes_clip), "--max-frames", "10", "--no-video", "--no-plots", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "GPU path" in printed and "host frames" in printed
    records = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["pipeline"]["path"] == "gpu" and metrics["status"] == "finished" and metrics["frames"] == 20
    assert metrics["pipeline"]["order_ok"] and metrics["batch"]["mean_size"] > 1.0  # the two streams were batched
    with open_session(mobilenet_onnx) as session:
        task = ClassifyTask(session)
        with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=10) as src:
            frames = list(src)
        from jetforge.apps.video.sources.gpu.frame import bgr_from_nv12

        # the CPU app's preprocessing on OpenCV's own frames (no NV12 in between)
        cap = cv2.VideoCapture(str(bikes_clip))
        cpu = [task.head(task.infer([task.preprocess(_Img(cap.read()[1]))])[0][task.output_name])[0].index
               for _ in frames]
        via_nv12 = [task.head(task.infer([task.preprocess(_Img(bgr_from_nv12(cv2, f.host_nv12())))])[0]
                              [task.output_name])[0].index for f in frames]
    for s in range(2):
        mine = [r for r in records if r["stream"] == s]
        assert [r["frame"] for r in mine] == list(range(10))
        assert [r["top"][0]["index"] for r in mine] == via_nv12  # the same arithmetic on the same NV12 frames
        # against the CPU app (OpenCV BGR, no NV12 round trip): the bar is >= 99 % of frames
        agree = np.mean([a == b for a, b in zip(via_nv12, cpu)])
        assert agree >= 0.99


class _Img:
    def __init__(self, image):
        self.image = image


def test_gpu_app_render_on_writes_every_stream_through_the_encoder_pool(tmp_path, monkeypatch, bikes_clip,
                                                                        mobilenet_onnx):
    from jetforge.apps.pipeline.gpu_app import GpuAppOptions, open_gpu_sources, run_gpu_app
    from jetforge.apps.tasks.classify import ClassifyTask
    from jetforge.runtime.session import open_session

    _use_fake_nvdec(monkeypatch)
    sources = open_gpu_sources([str(bikes_clip)] * 2, max_frames=6)
    with open_session(mobilenet_onnx) as session:
        result = run_gpu_app(ClassifyTask(session), sources, tmp_path, GpuAppOptions(encoders=2))
    for s in sources:
        s.close()
    assert result.metrics["encoders"]["frames"] == 12
    for s in range(2):
        video = _read_video(tmp_path / ("stream_%d.mpg" % s))
        assert len(video) == 6 and video[0].shape == (272, 640, 3)


class FakeDeviceFrames(FakeNvDecoder):
    """FakeNvDecoder whose frames claim to be in GPU memory, as PyNvVideoCodec's are: the path must then want CUDA."""

    @classmethod
    def CreateDecoder(cls, gpuid=0, codec=None, usedevicememory=True, **_):  # noqa: N802
        inner = FakeNvDecoder.CreateDecoder(gpuid, codec, usedevicememory)

        class Decoder:
            def Decode(self, packet):  # noqa: N802
                frames = inner.Decode(packet)
                for f in frames:
                    f.on_host = False
                return frames

        return Decoder()

    class ThreadedDecoder(FakeNvDecoder.ThreadedDecoder):
        def get_batch_frames(self, batch_size):
            frames = super().get_batch_frames(batch_size)
            for f in frames:
                f.on_host = False
            return frames


def test_cli_decode_gpu_without_cuda_for_device_frames_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys,
                                                                            bikes_clip, mobilenet_onnx):
    from jetforge.cli.main import main

    _use_fake_nvdec(monkeypatch, FakeDeviceFrames)
    rc = main(["app", "classify", "--decode", "gpu", "--model", str(mobilenet_onnx), "--source", str(bikes_clip),
               "--max-frames", "3", "--no-video", "--out", str(tmp_path / "o")])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("CUDA" in err[0] or "cuda" in err[0]), err


def test_gpu_path_refuses_a_task_it_cannot_run_before_writing_anything(tmp_path):
    """A task whose gpu_model() hook says None (HOG has no model to feed; the base Task's default) fails before any
    output is opened (tiles run on the GPU path: tests/apps/test_gpu_tiles.py)."""
    from jetforge.apps.pipeline.gpu_app import run_gpu_app
    from jetforge.apps.pipeline.stages import Task
    from jetforge.apps.tasks.people import PeopleTask
    from jetforge.vision.hog import HogPeopleDetector

    with pytest.raises(ConfigError, match="HOG people detector"):
        run_gpu_app(PeopleTask(HogPeopleDetector()), [object()], tmp_path / "o")
    assert not (tmp_path / "o").exists()

    with pytest.raises(ConfigError, match="the task app with .* has no GPU path"):
        run_gpu_app(Task(), [object()], tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_device_frame_ring_keeps_an_owned_copy_and_describes_it_for_cuda():
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing, OwnedNv12

    from tests.standins.fake_nvdec import FakeDecodedFrame

    ring = DeviceFrameRing(slots=4)
    frame = FakeDecodedFrame(np.arange(6 * 4, dtype=np.uint8).reshape(6, 4), 0)  # a CPU stand-in: host copy
    kept = ring(frame, 4, 4)
    frame.nv12[:] = 0  # the decoder reuses its surface
    assert kept.sum() == np.arange(24).sum()  # the kept frame did not change
    cai = OwnedNv12(0x1000, 1280, 720).__cuda_array_interface__
    assert cai["shape"] == (1080, 1280) and cai["strides"] == (1280, 1) and cai["data"] == (0x1000, False)
    y, uv, pitch = array_plane_pointers(OwnedNv12(0x1000, 1280, 720), 720)
    assert (y, uv, pitch) == (0x1000, 0x1000 + 1280 * 720, 1280)  # what the preprocessing kernel is given
    with pytest.raises(ConfigError):
        DeviceFrameRing(slots=1)


def test_threaded_nvdec_source_over_the_fake_yields_every_frame_once_in_order_and_loops(bikes_clip):
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    with NvThreadedSource(bikes_clip, codec_module=FakeNvDecoder, stream=2, keep=DeviceFrameRing(), loop=True,
                          max_frames=BIKES_FRAMES + 7, options=ThreadedDecodeOptions(fetch=4)) as src:
        src.prime()
        frames = list(src)
    assert [f.index for f in frames] == list(range(BIKES_FRAMES + 7)) and src.passes == 2
    assert all(f.stream == 2 and f.host_nv12().shape == (408, 640) for f in frames)
    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=7) as ref:
        want = [f.host_nv12() for f in ref]
    assert all(np.array_equal(a.host_nv12(), b) for a, b in zip(frames[BIKES_FRAMES:], want))  # second pass = first


def test_gpu_path_people_app_detections_agree_with_the_cpu_detector(tmp_path, monkeypatch):
    """The people app's CNN detector on the GPU path (batched over 2 streams, raw outputs -> boxes in frame pixels
    by gpu_ops) against the CPU detector on the same NV12-converted frames: same people, boxes within 2 px.
    (The GPU path preprocesses with the contract's fused path, the CPU detector with its reference path: they may
    differ by a grey level's rounding, which moves an SSD box by a fraction of a pixel and a score by < 0.01.)"""
    import json

    from jetforge.apps.pipeline.gpu_app import GpuAppOptions, open_gpu_sources, run_gpu_app
    from jetforge.vision.ssd_detector import SsdPeopleDetector
    from jetforge.apps.tasks.people import PeopleTask
    from jetforge.apps.video.sources.gpu.frame import bgr_from_nv12
    from jetforge.assets import asset_path
    from jetforge.workflow import model_refs

    _use_fake_nvdec(monkeypatch)
    clip = asset_path("opencv_samples", "vtest.avi")
    detector = SsdPeopleDetector(model_refs.ensure_person_detector()[0], score_threshold=0.3)
    try:
        sources = open_gpu_sources([str(clip)] * 2, max_frames=5)
        run_gpu_app(PeopleTask(detector, streams=2), sources, tmp_path, GpuAppOptions())
        for s in sources:
            s.close()
        events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
        with NvDecSource(clip, codec_module=FakeNvDecoder, max_frames=5) as src:
            cpu = [detector.detect_batch([bgr_from_nv12(cv2, f.host_nv12())])[0] for f in src]
    finally:
        detector.close()
    for s in range(2):
        mine = [e for e in events if e.get("stream") == s and "detections" in e]
        assert [e["frame"] for e in mine] == list(range(5))
        for e, want in zip(mine, cpu):
            got = np.asarray(e["detections"], np.float32).reshape(-1, 5)[:, :4]  # x1, y1, x2, y2, score
            assert len(got) == len(want.boxes) >= 1
            assert np.abs(np.sort(got, axis=0) - np.sort(want.boxes, axis=0)).max() <= 2.0


def test_render_per_stream_copies_back_only_the_frames_an_output_wants(bikes_clip):
    """``render`` as a callable (the GPU app passes its outputs' ``wants_frames``): only the wanted streams' frames
    are copied back to the host, each exactly once, and they are the decoder's pixels; the others reach the sink
    without a host copy."""
    copied = []

    class CountingOps(HostBatchOps):
        def host_frames(self, handle, frames):
            copied.extend((f.stream, f.index) for f in frames)
            return super().host_frames(handle, frames)

    ops = CountingOps(lambda f: f.host_nv12()[:2, :2].astype(np.float32), lambda x: x, lambda out, i, f: {})
    sources = [NvDecSource(bikes_clip, codec_module=FakeNvDecoder, stream=s, max_frames=4) for s in range(2)]
    seen = []
    result = run_streams(sources, ops, StreamRunOptions(batch_timeout_s=30.0),
                         sink=lambda s, f, e, h: seen.append((s, f.index, None if h is None else h.copy())),
                         render=lambda stream: stream == 1)
    assert result.frames == 8
    assert sorted(copied) == [(1, i) for i in range(4)]
    with NvDecSource(bikes_clip, codec_module=FakeNvDecoder, max_frames=4) as src:
        reference = [f.host_nv12().copy() for f in src]
    for stream, index, host in seen:
        if stream == 0:
            assert host is None
        else:
            np.testing.assert_array_equal(host, reference[index])


def test_threaded_nvdec_source_splits_its_reader_time_into_decode_and_copy_waits(bikes_clip):
    """NvThreadedSource counts its fetches and the time spent in them: ``decode_wait_s`` around get_batch_frames,
    ``copy_wait_s`` around the keep hook's once-a-fetch ``flush`` (the benchmark's per-stage split of the feeder).
    The flush here sleeps a known time, so the copy wait must be at least that much per fetch, and a keep hook
    without flush adds no copy wait."""
    import time as _time

    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    class SlowFlush:
        flushes = 0

        def __call__(self, decoded, width, height):
            return np.asarray(decoded).copy()

        def flush(self):
            SlowFlush.flushes += 1
            _time.sleep(0.002)

    with NvThreadedSource(bikes_clip, codec_module=FakeNvDecoder, keep=SlowFlush(), max_frames=12,
                          options=ThreadedDecodeOptions(fetch=4)) as src:
        frames = list(src)
    assert len(frames) == 12 and src.fetches == SlowFlush.flushes == 3  # 12 frames, 4 a fetch
    assert src.copy_wait_s >= 3 * 0.002 and src.decode_wait_s > 0.0
    with NvThreadedSource(bikes_clip, codec_module=FakeNvDecoder, keep=lambda d, w, h: np.asarray(d).copy(),
                          max_frames=8, options=ThreadedDecodeOptions(fetch=4)) as plain:
        assert len(list(plain)) == 8
    assert plain.fetches == 2 and plain.copy_wait_s == 0.0
