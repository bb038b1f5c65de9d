"""The MP4 output is H.264 a browser plays: decoded again by two independent readers (PyAV and OpenCV's FFmpeg),
checked for codec, pixel format, frame count, frame content and order, and ``moov`` before ``mdat``.

The PSNR bound, derived: libx264 at CRF 23 codes these frames at QP <= 27 (CRF 23 is the P-frame target; I frames
go lower, B frames at most ~4 higher).  H.264's quantiser step is Qstep = 0.625 * 2^(QP/6), 14.1 at QP 27; a
uniform quantiser's error has RMS Qstep/sqrt(12) = 4.1 levels, so PSNR >= 20*log10(255/4.1) = 35.9 dB; the 8-bit
BGR <-> limited-range YUV round trip adds about 1 level RMS in quadrature (35.6 dB).  The frames' colour edges sit
on even pixels, so 4:2:0 chroma subsampling loses nothing extra.  Bound: 35 dB per frame.  A frame compared with
its neighbour must fall below it (the moving square shifts 6 px a frame, about 28 dB), so the check also proves
the order.
"""

import struct
from pathlib import Path
from typing import List

import numpy as np
import pytest

from jetforge.apps.video.sinks import h264
from jetforge.apps.video.sinks.h264 import choose_encoder, gst_file_pipeline, open_mp4
from jetforge.errors import ConfigError

av = pytest.importorskip("av", reason="PyAV (pip install av==12.3.0) writes and reads the H.264 MP4")
cv2 = pytest.importorskip("cv2")

PSNR_BOUND_DB = 35.0
FPS = 25.0


def make_frames(n: int = 40, w: int = 176, h: int = 144) -> List[np.ndarray]:
    """Gradients (blue across, green down), red = frame number, and an orange square moving 6 px a frame."""
    yy, xx = np.mgrid[0:h, 0:w]
    frames = []
    for i in range(n):
        image = np.empty((h, w, 3), np.uint8)
        image[..., 0], image[..., 1], image[..., 2] = xx * 255 // w, yy * 255 // h, (i * 9) % 256
        x = (i * 6) % (w - 40)
        image[40:80, x:x + 40] = (30, 200, 250)
        frames.append(image)
    return frames


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 10.0 * np.log10(255.0 ** 2 / max(mse, 1e-12))


def top_level_boxes(path: Path) -> List[str]:
    """The MP4's top-level box types in file order (ISO BMFF: 32-bit size, 4-char type; size 1 = 64-bit size)."""
    data = path.read_bytes()
    boxes, pos = [], 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8:pos + 16])[0]
        boxes.append(kind.decode("ascii", "replace"))
        if size < 8:
            break
        pos += size
    return boxes


def write(path: Path, frames: List[np.ndarray]) -> object:
    sink = open_mp4(path, FPS)
    for f in frames:
        sink.write(f)
    sink.close()
    return sink


def test_h264_mp4_decodes_to_the_same_frames_in_order(tmp_path):
    frames = make_frames()
    sink = write(tmp_path / "out.mp4", frames)
    assert sink.encoder == "pyav-libx264" and sink.frames == len(frames)
    with av.open(str(tmp_path / "out.mp4")) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        assert stream.codec_context.pix_fmt == "yuv420p"  # what browsers decode
        assert (stream.width, stream.height) == (176, 144)
        assert abs(float(stream.average_rate) - FPS) < 1e-6
        decoded = [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]
    assert len(decoded) == len(frames)
    same = [psnr(a, b) for a, b in zip(frames, decoded)]
    shifted = [psnr(frames[i], decoded[i + 1]) for i in range(len(frames) - 1)]
    assert min(same) >= PSNR_BOUND_DB, same
    assert max(shifted) < PSNR_BOUND_DB, shifted
    # an independent reader: OpenCV's own FFmpeg counts the same frames
    cap = cv2.VideoCapture(str(tmp_path / "out.mp4"))
    count = 0
    while cap.read()[0]:
        count += 1
    cap.release()
    assert count == len(frames)
    boxes = top_level_boxes(tmp_path / "out.mp4")
    assert "moov" in boxes and "mdat" in boxes and boxes.index("moov") < boxes.index("mdat"), boxes  # faststart


def test_odd_sizes_are_padded_and_other_sizes_letterboxed(tmp_path):
    first = np.full((101, 151, 3), 200, np.uint8)
    other = np.full((60, 60, 3), 50, np.uint8)
    sink = open_mp4(tmp_path / "odd.mp4", FPS)
    for image in (first, other, first):
        sink.write(image)
    sink.close()
    assert sink.letterboxed == 1 and sink.size == (151, 101)
    with av.open(str(tmp_path / "odd.mp4")) as container:
        frames = [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]
    assert frames[0].shape == (102, 152, 3) and len(frames) == 3
    assert psnr(frames[0][:101, :151], first) >= PSNR_BOUND_DB  # the padding is a replicated edge, not content


def test_an_aborted_write_leaves_nothing(tmp_path):
    sink = open_mp4(tmp_path / "gone.mp4", FPS)
    sink.write(make_frames(1)[0])
    sink.abort(RuntimeError("stopped"))
    assert list(tmp_path.iterdir()) == []


def test_the_fallback_is_opencv_mp4v_and_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(h264, "is_available", lambda name: False)
    monkeypatch.setattr(h264, "is_jetson", lambda: False)
    assert choose_encoder() == "opencv-mp4v"
    sink = write(tmp_path / "old.mp4", make_frames(3))
    assert sink.encoder == "opencv-mp4v"
    assert any("mp4v fallback" in r.getMessage() for r in caplog.records)
    with av.open(str(tmp_path / "old.mp4")) as container:
        assert container.streams.video[0].codec_context.name == "mpeg4"


def test_jetson_pipeline_is_hardware_h264_with_faststart():
    pipeline = gst_file_pipeline("/data/out.mp4")  # NOT EXECUTED HERE: no Jetson; the string is what runs there
    assert pipeline.startswith("appsrc ! ")
    assert "nvv4l2h264enc" in pipeline and "qtmux faststart=true" in pipeline
    assert pipeline.endswith('filesink location="/data/out.mp4"')
    with pytest.raises(ConfigError, match="GStreamer pipeline"):
        gst_file_pipeline("/data/a!b.mp4")
    with pytest.raises(ConfigError, match="unknown MP4 encoder"):
        choose_encoder("x265")
